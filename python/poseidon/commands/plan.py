"""Print the communication plan of a job: for every synchronised layer its M×N weight and K,
the bytes one node sends and receives per iteration under the parameter server (PS) and
under sufficient-factor broadcasting (SFB), and the scheme (docs/paper.md §4; only FC layers can
use SFB). It is the plan the job runs, by construction: the specs come from
poseidon.plan.layer_specs, which PoseidonSync declares too, and the plan from _C.make_plan,
which the coordinator runs on them.

A torch.nn model instead of a Caffe net: --torch MODULE:FUNCTION (or FILE.py:FUNCTION), a
function that returns the model or a (model, example_inputs) pair; --torch-input gives the
input's shape instead (N,C,H,W, or N,T:int64 for token ids). It prints the plan
poseidon.torch.DistributedDataParallel makes for that model (docs/pytorch.md)."""

from __future__ import annotations

import argparse

HELP = "print PS vs SFB bytes per iteration and the chosen scheme for each layer"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from poseidon.config import PLAN_SYNC_MODES, SCHEMES

    p.add_argument("--solver", help="the job's solver prototxt: its train net and iter_size")
    p.add_argument("--model", help="net prototxt (instead of the solver's net)")
    p.add_argument("--torch", metavar="MODULE:FUNCTION", help="a torch.nn model's factory")
    p.add_argument("--torch-input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="the torch model's input (one per argument of its forward)")  # fmt: skip
    p.add_argument("--workers", type=int, required=True, help="P1, number of workers")
    p.add_argument("--servers", type=int, help="P2, number of shards (default: P1)")
    p.add_argument("--batch", type=int, help="batch size of every data layer (default: the net's)")
    p.add_argument(
        "--iter-size", type=int, help="passes per iteration (default: the solver's, else 1)"
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="TOP=N,C,H,W",
        help="shape of a data layer's top, instead of reading its data (repeatable; the "
        "layer's other tops, labels, are N)",
    )
    p.add_argument("--sync", choices=PLAN_SYNC_MODES, default="poseidon", help="POSEIDON_SYNC")
    p.add_argument("--scheme", choices=SCHEMES, default="auto", help="POSEIDON_SCHEME")
    p.add_argument(
        "--layer-schemes",
        default="",
        help="per-layer choices over BestScheme's, e.g. fc7=ps,fc8=ps (POSEIDON_LAYER_SCHEMES)",
    )


def run(args: argparse.Namespace) -> int:
    from caffe.errors import CaffeError, InputShapeError
    from caffe.parallel.layout import sync_layout
    from poseidon.commands._common import fail
    from poseidon.commands.plan_net import parse_input_shapes, plan_net
    from poseidon.config import SettingError, parse_layer_schemes
    from poseidon.plan import format_plan, plan_layout

    servers = args.servers or args.workers
    if args.torch and (args.model or args.solver):
        return fail("plan", "give a Caffe net (--solver/--model) or a --torch model, not both")
    if not (args.model or args.solver or args.torch):
        return fail("plan", "give the job's --solver, a --model or a --torch model")
    if args.workers < 1 or servers < 1:
        return fail("plan", "--workers and --servers must be >= 1")
    for flag, value in (("--batch", args.batch), ("--iter-size", args.iter_size)):
        if value is not None and value < 1:
            return fail("plan", f"{flag} must be >= 1")
    try:
        forced = parse_layer_schemes(args.layer_schemes, "--layer-schemes")
        shapes = parse_input_shapes(args.input_shape)
    except (SettingError, ValueError) as e:
        return fail("plan", e)
    if args.torch:
        return _plan_torch(args, servers, forced)
    what = args.model or args.solver
    try:
        target = plan_net(args.model, args.solver, args.batch, shapes, args.iter_size)
    except InputShapeError as e:
        return fail("plan", f"cannot load {what}: {e} (give it: --input-shape "
                            f"{e.tops[0]}=N,C,H,W)")  # fmt: skip
    except (OSError, ValueError, CaffeError) as e:
        return fail("plan", f"cannot load {what}: {e}")
    try:
        plan = plan_layout(sync_layout(target.net), args.workers, servers, target.iter_size,
                           args.sync, args.scheme, forced, what="--layer-schemes")  # fmt: skip
    except ValueError as e:
        return fail("plan", e)
    print(format_plan(plan))
    return 0


def _plan_torch(args: argparse.Namespace, servers: int, forced: dict[str, str]) -> int:
    """The plan poseidon.torch.DistributedDataParallel(model) makes when its first forward
    gets the example inputs: K from a copy of the model, as there."""
    from poseidon.commands._common import fail
    from poseidon.plan import plan_layout
    from poseidon.torch.plan import broadcast_spec, format_torch_plan, model_and_inputs
    from poseidon.torch.units import (
        RowsUnknownError,
        measure_linear_rows,
        sync_units,
        unit_layout,
    )

    try:
        model, inputs = model_and_inputs(args.torch, args.torch_input, args.batch)
        units = sync_units(model)
        rows = measure_linear_rows(model, units, inputs, {})
        plan = plan_layout(unit_layout(units, rows), args.workers, servers, args.iter_size or 1,
                           args.sync, args.scheme, forced, what="layer_schemes",
                           extra_specs=[broadcast_spec(model, units)])  # fmt: skip
    except (ValueError, ImportError, OSError, RowsUnknownError) as e:
        return fail("plan", e)
    print(format_torch_plan(plan))
    return 0
