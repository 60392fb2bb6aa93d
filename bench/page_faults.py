"""Minor page faults per training step: the engine beside the same net in torch.nn, in one
process, with glibc's malloc as caffe/heap.py sets it (CAFFE_MALLOC=keep, the default) or
left alone (system), and the engine's convolution outputs adopted by the blob (Note [taking
fresh tensors] in caffe/blob.py) or copied into it.

Wall time on this shared 2-core machine moves ±10% from one process to the next, and much of
that was malloc: whether a multi-MB buffer is recycled or mapped afresh (and faulted in, a
page at a time) depends on the process's allocation history. Fault counts are repeatable
where times are not, so this bench counts them: each (malloc, outputs, model) runs in
--processes fresh processes; each process warms up, then counts getrusage's minor faults
over --steps forward+backward passes of the engine and of torch.nn (bench/engine_vs_torch.py's
nets). CAFFE_MALLOC applies to the whole process, torch.nn's side included.

    .venv/bin/python bench/page_faults.py [--models lenet,cifar10_quick] [--steps 50]
        [--processes 3] [--malloc system,keep] [--outputs adopt,copy]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child(mode: str, name: str, steps: int) -> None:
    """One process: print 'engine FAULTS MS' and 'torch FAULTS MS' per step."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.path.insert(0, HERE)
    import engine_vs_torch as nets
    import torch

    from caffe.blob import Blob

    if mode == "copy":  # what the layers did before Note [taking fresh tensors]
        Blob.take_data, Blob.take_diff = Blob.set_data, Blob.set_diff
    net, model, tx, ty = nets.training_pair(name, nets.MODELS[name][1], torch.device("cpu"))

    def engine_step() -> None:
        net.clear_param_diffs()
        net.forward_backward()

    def torch_step() -> None:
        model.zero_grad(set_to_none=False)
        torch.nn.functional.cross_entropy(model(tx), ty).backward()

    for step in (engine_step, torch_step):
        for _ in range(10):
            step()
    for label, step in (("engine", engine_step), ("torch", torch_step)):
        before, start = faults(), time.perf_counter()
        for _ in range(steps):
            step()
        ms = (time.perf_counter() - start) * 1000 / steps
        print(f"{label} {(faults() - before) / steps:.1f} {ms:.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="lenet,cifar10_quick")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--malloc", default="system,keep", help="CAFFE_MALLOC values")
    parser.add_argument("--outputs", default="adopt,copy", help="engine conv outputs")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child, args.steps)
        return 0
    print(f"minor faults per step (ms per step), {args.steps} steps after warm-up, "
          f"{args.processes} fresh processes each")  # fmt: skip
    print(f"{'model':<15}{'malloc':<8}{'outputs':<9}{'engine':>8}{'torch':>8}")
    for name in args.models.split(","):
        for malloc in args.malloc.split(","):
            for mode in args.outputs.split(","):
                for _ in range(args.processes):
                    command = [sys.executable, __file__, "--child", mode, name]
                    out = subprocess.run(
                        [*command, "--steps", str(args.steps)], capture_output=True, text=True,
                        check=True, env={**os.environ, "CAFFE_MALLOC": malloc},
                    ).stdout  # fmt: skip
                    rows = dict(line.split(" ", 1) for line in out.splitlines())
                    engine, torch_ = (rows[k].split() for k in ("engine", "torch"))
                    print(f"{name:<15}{malloc:<8}{mode:<9}{engine[0]:>8}{torch_[0]:>8}"
                          f"   ({engine[1]} / {torch_[1]} ms)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
