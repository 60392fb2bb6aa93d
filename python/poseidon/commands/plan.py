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
from collections.abc import Callable
from typing import Any

HELP = "print each layer's bytes per iteration under every scheme, the chosen one, and why"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from poseidon.config import DEFAULT_POWERSGD_RANK, PLAN_SYNC_MODES, SCHEMES

    p.add_argument("--solver", help="the job's solver prototxt: its train net and iter_size")
    p.add_argument("--model", help="net prototxt (instead of the solver's net)")
    p.add_argument("--torch", metavar="MODULE:FUNCTION", help="a torch.nn model's factory")
    p.add_argument("--torch-input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="the torch model's input (one per argument of its forward)")  # fmt: skip
    p.add_argument("--workers", type=int, required=True, help="P1, number of workers")
    p.add_argument("--servers", type=int,
                   help="P2, number of shards (default: P1, or one per machine)")  # fmt: skip
    p.add_argument("--workers-per-host", type=int, default=1, metavar="G",
                   help="G workers per machine, summed inside it first (local aggregation; "
                   "POSEIDON_WORKERS_PER_HOST)")  # fmt: skip
    p.add_argument("--local-rate", default="0",
                   help="bandwidth between a machine's workers, e.g. 100gbit "
                   "(POSEIDON_LOCAL_RATE)")  # fmt: skip
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
        help="per-layer choices over the cost model's, e.g. fc7=ps,fc8=powersgd "
        "(POSEIDON_LAYER_SCHEMES)",
    )
    p.add_argument("--compression", default="none",
                   help="lossy schemes the cost model may pick: none, bf16, powersgd[:R], "
                   "auto[:R] (POSEIDON_COMPRESSION)")  # fmt: skip
    p.add_argument("--powersgd-rank", type=int, default=DEFAULT_POWERSGD_RANK,
                   help="PowerSGD's rank (POSEIDON_POWERSGD_RANK)")  # fmt: skip
    p.add_argument("--bandwidth", default="0",
                   help="the link's goodput (e.g. 100mbit, 10gbit): rank schemes by predicted "
                   "time and print it; default unknown: by bytes (POSEIDON_LINK_RATE)")  # fmt: skip
    p.add_argument("--gemm-rate", default="0",
                   help="FLOP/s of the device's GEMMs, for the compute a scheme adds "
                   "(POSEIDON_GEMM_RATE; `poseidon profile --rates` measures it)")  # fmt: skip
    p.add_argument(
        "--memory-rate", default="0", help="bytes/s of the device's memory (POSEIDON_MEMORY_RATE)"
    )


def run(args: argparse.Namespace) -> int:
    from caffe.errors import CaffeError, InputShapeError
    from caffe.parallel.layout import broadcast_unit_specs, sync_layout
    from poseidon.commands._common import fail
    from poseidon.commands.plan_net import parse_input_shapes, plan_net
    from poseidon.config import SettingError, parse_layer_schemes
    from poseidon.plan import BROADCAST_NAME, format_plan, plan_layout

    if args.workers_per_host < 1 or args.workers % args.workers_per_host:
        return fail("plan", f"--workers-per-host {args.workers_per_host}: want a divisor of "
                            f"--workers {args.workers}")  # fmt: skip
    servers = args.servers or args.workers // args.workers_per_host
    if args.torch and (args.model or args.solver):
        return fail("plan", "give a Caffe net (--solver/--model) or a --torch model, not both")
    if not (args.model or args.solver or args.torch):
        return fail("plan", "give the job's --solver, a --model or a --torch model")
    if args.workers < 1 or servers < 1:
        return fail("plan", "--workers and --servers must be >= 1")
    for flag, value in (("--batch", args.batch), ("--iter-size", args.iter_size),
                        ("--powersgd-rank", args.powersgd_rank)):  # fmt: skip
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
        layout = sync_layout(target.net)
        extra = broadcast_unit_specs(target.net, layout, args.sync, args.compression, forced)
        plan = plan_layout(layout, args.workers, servers, target.iter_size, args.sync,
                           args.scheme, forced, what="--layer-schemes", extra_specs=extra,
                           **_allowance(args))  # fmt: skip
    except ValueError as e:
        return fail("plan", e)
    print(format_plan(plan, skip_names=(BROADCAST_NAME,)))
    return 0


def _allowance(args: argparse.Namespace) -> dict[str, Any]:
    """plan_layout's compression, powersgd_rank and rates from the command's options, checked
    as the job's settings are (ValueError naming the option)."""
    from poseidon.config import Config, parse_compression, parse_link_rate, parse_rate

    config = Config(compression=parse_compression(args.compression, "--compression"),
                    powersgd_rank=args.powersgd_rank,
                    link_rate=parse_link_rate(args.bandwidth, "--bandwidth"),
                    gemm_rate=parse_rate(args.gemm_rate, "--gemm-rate"),
                    memory_rate=parse_rate(args.memory_rate, "--memory-rate"),
                    local_rate=parse_link_rate(args.local_rate, "--local-rate"))  # fmt: skip
    config.check()
    kind, rank = config.allowance()
    return {"compression": kind, "powersgd_rank": rank, "rates": config.rates(),
            "workers_per_host": args.workers_per_host}  # fmt: skip


def _plan_torch(args: argparse.Namespace, servers: int, forced: dict[str, str]) -> int:
    """The plan poseidon.torch.DistributedDataParallel(model) makes when its first forward
    gets the example inputs: K from a copy of the model, as there."""
    from poseidon.commands._common import fail
    from poseidon.plan import plan_layout
    from poseidon.torch.plan import broadcast_spec, format_torch_plan, model_and_inputs
    from poseidon.torch.timing import measure_unit_backward
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
        allowance = _allowance(args)
        measure = None
        if allowance["rates"].link_bytes_per_s > 0 and args.sync == "poseidon":
            backward_s = measure_unit_backward(model, units, inputs, {})
            measure = _measure_here(args, allowance, backward_s)
        plan = plan_layout(unit_layout(units, rows), args.workers, servers, args.iter_size or 1,
                           args.sync, args.scheme, forced, what="layer_schemes",
                           extra_specs=[broadcast_spec(model, units)], measure=measure,
                           **allowance)  # fmt: skip
    except (ValueError, ImportError, OSError, RowsUnknownError) as e:
        return fail("plan", e)
    print(format_torch_plan(plan))
    return 0


def _measure_here(args: argparse.Namespace, allowance: dict[str, Any],
                  backward_s: dict[int, float]) -> Callable[[list[Any]], None]:  # fmt: skip
    """What a job's workers do before declaring their layers when the plan is ranked by time
    (poseidon/sync/measure.py), done by this one process on its CPU: the printed plan is the
    job's when the job's workers see this machine's speed."""
    import torch

    from poseidon.config import compression_of
    from poseidon.sync.measure import measure_scheme_costs

    compression = compression_of(allowance["compression"])

    def measure(specs: list[Any]) -> None:
        measure_scheme_costs(specs, args.workers, compression, allowance["powersgd_rank"],
                             torch.device("cpu"), backward_s)  # fmt: skip

    return measure
