"""A small distributed job for tests: a synthetic LMDB, a net with convolutions and two
InnerProduct layers, an SGD-with-momentum solver, and `poseidon launch` running
`worker.py` (the library path of `caffe train`: prepare_worker, get_solver,
attach_from_environment, step, close) on 127.0.0.1.

The dataset has a multiple of 6·K items, so for P1 ∈ {1, 2, 3} the union of the P1
workers' shards at iteration t is exactly the single process's batch t of P1·K items.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from caffe.data.db import open_db_writer
from caffe.io import array_to_datum

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
BATCH = 4  # per worker
ITEMS = 6 * BATCH * 2
CLASSES = 4

NET = """
name: "tiny"
layer {{ name: "data" type: "Data" top: "data" top: "label"
  transform_param {{ scale: 0.0078125 }}
  data_param {{ source: "{source}" batch_size: {batch} backend: LMDB }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param {{ num_output: 4 kernel_size: 3 weight_filler {{ type: "xavier" }}
                      bias_filler {{ type: "constant" value: 0.1 }} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }}
layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param {{ num_output: 6 kernel_size: 2 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "conv2" top: "ip1"
  inner_product_param {{ num_output: 24 weight_filler {{ type: "xavier" }}
                        bias_filler {{ type: "constant" value: 0.05 }} }} }}
layer {{ name: "relu2" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param {{ num_output: {classes} weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""

SOLVER = """
net: "{net}"
base_lr: 0.05
momentum: 0.9
weight_decay: 0.0005
lr_policy: "step"
gamma: 0.5
stepsize: 7
max_iter: {iters}
random_seed: 1701
solver_mode: {mode}
{extra}
"""


def write_dataset(directory: str, items: int = ITEMS, seed: int = 0) -> str:
    """Class-dependent 1×10×10 uint8 images; keys %08d in item order."""
    rng = np.random.default_rng(seed)
    path = os.path.join(directory, "train_lmdb")
    writer = open_db_writer(path, "lmdb", overwrite=True)
    for i in range(items):
        label = i % CLASSES
        image = rng.integers(0, 128, (1, 10, 10)) + 30 * label
        writer.put(f"{i:08d}".encode(), array_to_datum(image.astype(np.uint8), label)
                   .SerializeToString())  # fmt: skip
    writer.close()
    return path


NO_SNAPSHOTS = "display: 0\nsnapshot: 0\nsnapshot_after_train: false"


def write_solver(
    directory: str,
    batch: int,
    iters: int,
    extra: str = "",
    name: str = "solver",
    snapshots: str = NO_SNAPSHOTS,
    mode: str = "CPU",
) -> str:
    source = os.path.join(directory, "train_lmdb")
    if not os.path.exists(source):
        write_dataset(directory)
    net = os.path.join(directory, f"{name}_net.prototxt")
    with open(net, "w") as f:
        f.write(NET.format(source=source, batch=batch, classes=CLASSES))
    solver = os.path.join(directory, f"{name}.prototxt")
    with open(solver, "w") as f:
        f.write(SOLVER.format(net=net, iters=iters, mode=mode, extra=f"{extra}\n{snapshots}"))
    return solver


def run_job(
    directory: str,
    workers: int,
    servers: int,
    sync: str = "poseidon",
    scheme: str = "auto",
    iters: int = 20,
    extra: str = "",
    timeline: str = "",
    timeout_s: float = 120.0,
    colocate: bool = True,
    mode: str = "CPU",
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
) -> tuple[list[dict[str, np.ndarray]], str]:
    """Launch the job; returns each rank's saved arrays and the launcher's output.
    `mode` is the solver_mode (GPU: every worker on CUDA device 0); `env` is added to
    the launcher's environment, `extra_args` to `poseidon launch`'s flags."""
    solver = write_solver(directory, BATCH, iters, extra, name=f"solver_{workers}", mode=mode)
    out_dir = os.path.join(directory, f"out_{sync}_{scheme}_{workers}_{servers}")
    os.makedirs(out_dir, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "poseidon.cli",
        "launch",
        "-n",
        str(workers),
        "-s",
        str(servers),
        "--sync",
        sync,
        "--scheme",
        scheme,
        "--timeout-ms",
        "20000",
    ]
    if timeline:
        command += ["--timeline", timeline]
    if not colocate:
        command.append("--no-colocate")
    command += extra_args or []
    command += ["--", sys.executable, WORKER, solver, str(iters), out_dir]  # fmt: skip
    env = {**os.environ, "GLOG_minloglevel": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                            cwd=directory)  # fmt: skip
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"job failed with status {result.returncode}:\n{output[-6000:]}")
    arrays = []
    for rank in range(workers):
        with np.load(os.path.join(out_dir, f"rank{rank}.npz")) as data:
            arrays.append(dict(data))
    return arrays, output


def reference_weights(directory: str, workers: int, iters: int = 20, extra: str = ""):
    """One process, batch P1·K, the plain solver: its parameters after `iters` steps."""
    import caffe
    from caffe.solvers import get_solver

    solver_path = write_solver(directory, BATCH * workers, iters, extra, name=f"ref_{workers}")
    caffe.set_solver_count(1)
    caffe.set_solver_rank(0)
    solver = get_solver(solver_path)
    solver.step(iters)
    return {f"{name}/{i}": blob.data.copy() for name, blobs in solver.net.params.items()
            for i, blob in enumerate(blobs)}  # fmt: skip
