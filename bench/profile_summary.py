"""Sum a compute profile by layer type: the net without its data layer, the convolutions (and
the rate they ran at), BatchNorm + Scale — the rows of docs/experiments.md §1's table of
measured GPU profiles.

"net" is the profile's iteration less its DummyData layers' time (the refill that a real
data layer prefetches); a type's time is its layers' forward + backward; a rate is the
layers' forward + backward FLOPs over that time.

    .venv/bin/python bench/profile_summary.py docs/results/h200/*.json
"""

from __future__ import annotations

import argparse
import json
import sys

GROUPS = {"convolutions": ("Convolution",), "BatchNorm + Scale": ("BatchNorm", "Scale")}
RATED = {"convolutions"}  # the others are memory- or host-bound: a FLOP rate says nothing


def summary(path: str) -> list[str]:
    with open(path) as f:
        profile = json.load(f)
    layers = profile["layers"]

    def seconds(layer: dict) -> float:
        return layer.get("forward_s", 0.0) + layer.get("backward_s", 0.0)

    data = sum(seconds(x) for x in layers if x["type"] == "DummyData")
    tf32 = profile.get("software", {}).get("tf32")
    math_mode = "" if tf32 is None else (", TF32" if tf32 else ", FP32")
    lines = [f"{path}: {profile['model']}, batch {profile['batch']}, "
             f"{profile['device']['name']}{math_mode}",
             f"  net (iteration less DummyData)   {(profile['iteration_s'] - data) * 1e3:8.1f} ms",
             f"  DummyData                        {data * 1e3:8.1f} ms"]  # fmt: skip
    for label, types in GROUPS.items():
        group = [x for x in layers if x["type"] in types]
        if not group:
            continue
        spent = sum(seconds(x) for x in group)
        flops = sum(x.get("flops_forward", 0.0) + x.get("flops_backward", 0.0) for x in group)
        rate = f", {flops / spent / 1e12:.0f} TFLOP/s" if label in RATED and spent else ""
        lines.append(f"  {label:<32} {spent * 1e3:8.1f} ms ({len(group)} layers{rate})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profiles", nargs="+", help="profile JSON files")
    for path in parser.parse_args(argv).profiles:
        print("\n".join(summary(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
