"""Measure a net's per-layer forward and backward times on this machine, or derive a GPU
profile from a measured one, and write it as a profile JSON (poseidon-profile/1).

    poseidon profile --model vgg19_22k --batch 32 -o models/profiles/vgg19_22k.cpu.json
    poseidon profile --derive titanx-maxwell --from models/profiles/vgg19_22k.cpu.json \\
        -o models/profiles/vgg19_22k.titanx-maxwell.json

--model is a prototxt, or a zoo name (models/<name>/train_val_dummy.prototxt). Times are
medians over --iterations after --warmup untimed iterations, layer by layer as in
`caffe time`; --copies C measures with C processes at once (C emulated nodes sharing this
machine). A derived profile keeps the base's layers and batch and takes its total from a
published single-GPU time (python/poseidon/experiments/profile_derive.py says which).

    poseidon profile --rates [--device cuda] [--powersgd-rank 4]

prints the device rates the time-based cost model takes (POSEIDON_GEMM_RATE at PowerSGD's
products, POSEIDON_MEMORY_RATE; python/poseidon/experiments/rates.py), for a job's
environment.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

HELP = "measure per-layer compute times of a net (or derive a GPU profile) as a JSON profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--model", help="network prototxt, or a zoo name such as vgg19_22k")
    p.add_argument("--batch", type=int, help="samples per pass (default: the net's own)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    p.add_argument("--iterations", type=int, default=5, help="timed iterations (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first (default 1)")
    p.add_argument("--threads", type=int, help="torch threads per process (default: torch's)")
    p.add_argument("--copies", type=int, default=1, help="processes measuring at once (default 1)")
    p.add_argument("-o", "--output", help="where to write the profile JSON")
    p.add_argument(
        "--rates",
        action="store_true",
        help="print the device's GEMM and memory rates for the cost model instead",
    )
    p.add_argument(
        "--powersgd-rank",
        type=int,
        default=4,
        help="with --rates: the PowerSGD rank to time the products at (default 4)",
    )
    p.add_argument("--derive", metavar="TARGET", help="derive a profile for TARGET instead")
    p.add_argument("--from", dest="base", metavar="BASE.json", help="the profile to derive from")


def run(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail

    if args.rates:
        return _rates(args)
    problem = _check_arguments(args)
    if problem:
        return fail("profile", problem)
    if args.derive:
        profile = _derive(args)
    else:
        profile = _measure(args)
    if isinstance(profile, int):
        return profile
    try:
        profile.save(args.output)
    except OSError as e:
        return fail("profile", f"cannot write {args.output}: {e.strerror}")
    print(format_profile(profile))
    print(f"wrote {args.output}")
    return 0


def _rates(args: argparse.Namespace) -> int:
    from poseidon.commands._common import fail
    from poseidon.experiments.rates import measure_rates

    if args.model or args.derive or args.output:
        return fail("profile", "--rates measures the device alone: no --model, --derive or -o")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    try:
        rates = measure_rates(args.device, args.powersgd_rank)
    except ValueError as e:
        return fail("profile", e)
    print(f"{rates.device}: PowerSGD rank-{args.powersgd_rank} products at "
          f"{rates.gemm_flops_per_s / 1e9:.3g} GFLOP/s, memory at "
          f"{rates.memory_bytes_per_s / 1e9:.3g} GB/s; for the job's environment:")  # fmt: skip
    print("\n".join(rates.settings()))
    return 0


def _check_arguments(args: argparse.Namespace) -> str:
    if args.derive and args.model:
        return "give --model (measure) or --derive TARGET --from BASE.json, not both"
    if args.derive and not args.base:
        return "--derive needs --from BASE.json (a measured profile at the target's batch)"
    if args.base and not args.derive:
        return "--from needs --derive TARGET"
    if not args.derive and not args.model:
        return "--model is required (or --derive TARGET --from BASE.json, or --rates)"
    if not args.output:
        return "-o/--output is required: where to write the profile"
    for flag, value, least in (("--batch", args.batch, 1), ("--iterations", args.iterations, 1),
                               ("--warmup", args.warmup, 0), ("--threads", args.threads, 1),
                               ("--copies", args.copies, 1)):  # fmt: skip
        if value is not None and value < least:
            return f"{flag} must be >= {least} (got {value})"
    directory = os.path.dirname(args.output) or "."
    if not os.path.isdir(directory):
        return f"cannot write {args.output}: no directory {directory}"
    return ""


def _measure(args: argparse.Namespace) -> Any:
    from caffe.errors import CaffeError
    from poseidon.commands._common import fail
    from poseidon.experiments.measure import measure_profile
    from poseidon.experiments.resolve import resolve_model

    try:
        path = resolve_model(args.model)[1]
    except ValueError as e:
        return fail("profile", e)
    if not os.path.isfile(path):
        return fail("profile", f"cannot read {path}: no such file")
    try:
        return measure_profile(path, batch=args.batch, device=args.device,
                               iterations=args.iterations, warmup=args.warmup,
                               threads=args.threads, copies=args.copies)  # fmt: skip
    except (CaffeError, ValueError, OSError) as e:
        return fail("profile", _naming(path, e))
    except RuntimeError as e:  # a measuring process died or failed: not the input's fault
        return fail("profile", _naming(path, e), 1)


def _derive(args: argparse.Namespace) -> Any:
    from poseidon.commands._common import fail
    from poseidon.experiments.profile import ProfileError, load_profile
    from poseidon.experiments.profile_derive import derive_profile

    try:
        return derive_profile(load_profile(args.base), args.derive)
    except (ProfileError, ValueError) as e:
        return fail("profile", _one_line(e))


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _naming(path: str, error: BaseException) -> str:
    """The error on one line, naming the file unless it already does."""
    message = _one_line(error)
    return message if path in message else f"{path}: {message}"


def format_profile(profile: Any) -> str:
    """Per-layer milliseconds and the totals, for the terminal."""
    rows = [(layer.name, layer.type, f"{layer.forward_s * 1e3:.3f}",
             f"{layer.backward_s * 1e3:.3f}",
             f"{(layer.flops_forward + layer.flops_backward) / 1e9:.3f}")
            for layer in profile.layers]  # fmt: skip
    header = ("layer", "type", "forward ms", "backward ms", "GFLOP")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()  # fmt: skip

    device = profile.device.get("name", profile.device_tag())
    return "\n".join([
        f"{profile.model} ({profile.method}), batch {profile.batch}, on {device}",
        line(header),
        line(tuple("-" * w for w in widths)),
        *(line(row) for row in rows),
        f"total: forward {profile.forward_s * 1e3:.3f} ms, backward "
        f"{profile.backward_s * 1e3:.3f} ms; iteration {profile.iteration_s * 1e3:.3f} ms"
        + (f"; host work {profile.host_s * 1e3:.3f} ms an iteration" if profile.host_s else ""),
    ])  # fmt: skip
