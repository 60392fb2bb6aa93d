"""The DDP-style baseline (caffe/parallel/allreduce.py, `--sync allreduce`).

Bucket layout without processes (order, caps, first bucket, contiguity, gaps, late
layers); then real jobs on 127.0.0.1 through `poseidon launch --sync allreduce`: P1 ∈ {2, 3}
workers × 20 iterations give the single process's weights on the global batch (rtol 1e-4,
as test_equivalence.py) and identical bytes on every worker, also with iter_size 2, with
several buckets and with parameters shared with a later layer (a late bucket); the
timeline shows buckets launched during backward; a peer that never arrives, stalls or dies
is a clear error within the timeout; `caffe train` under the launcher end to end.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from caffe.parallel.layout import sync_layout
from poseidon.launch import Child, Host, JobSpec, Launcher
from poseidon.sync.buckets import Bucket, bucket_layout
from poseidon.sync.layout import CommShape, SyncLayer
from tests.caffe.net_fixtures import build_net
from tests.caffe.parallel.job import BATCH, NET, SOLVER, reference_weights, write_dataset
from tests.caffe.parallel.test_equivalence import assert_matches

ITERS = 20
LAUNCH = [sys.executable, "-m", "poseidon.cli", "launch"]
CAFFE = [sys.executable, "-m", "caffe.tools.cli"]

# One worker of a test job: `caffe train`'s library path through caffe.parallel, or, with
# TEST_BUCKET_CAPS="first,cap", caffe.parallel.allreduce directly from torchrun's variables (with
# a timeline). TEST_STALL / TEST_DIE="rank,iteration": that worker sleeps 6 s / exits at
# the start of that iteration. Saves the worker's parameters and bucket layout.
WORKER = r"""
import os, sys, time
import numpy as np
import torch

torch.set_num_threads(1)
from caffe.solvers import get_solver

solver_path, iterations, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
caps = os.environ.get("TEST_BUCKET_CAPS")
if caps:
    from caffe.parallel.allreduce import attach_allreduce, prepare_allreduce_worker
    from poseidon.sync.allreduce import Rendezvous
    from poseidon.timeline import Timeline

    rendezvous = Rendezvous.from_env(timeout_s=int(os.environ["POSEIDON_TIMEOUT_MS"]) / 1000)
    prepare_allreduce_worker(rendezvous)
    solver = get_solver(solver_path)
    first, cap = (int(x) for x in caps.split(","))
    timeline = Timeline(os.path.join(out_dir, "trace.{rank}.json"), rendezvous.rank)
    sync = attach_allreduce(
        solver, rendezvous, timeline, first_bucket_bytes=first, bucket_cap_bytes=cap)
else:
    from caffe.parallel import attach_from_environment, prepare_worker

    prepare_worker()
    solver = get_solver(solver_path)
    sync = attach_from_environment(solver)
for name, act in (("TEST_STALL", lambda: time.sleep(6)), ("TEST_DIE", lambda: os._exit(3))):
    if os.environ.get(name):
        rank, iteration = (int(x) for x in os.environ[name].split(","))
        if rank == sync.rank:
            solver.add_callback(lambda a=act, i=iteration: solver.iter == i and a(),
                                lambda: None)
try:
    solver.step(iterations)
except BaseException as e:
    sync.close(e)
    raise
sync.close()
arrays = {f"{n}/{i}": b.data for n, blobs in solver.net.params.items()
          for i, b in enumerate(blobs)}
arrays["buckets"] = np.array([b.describe() for b in sync.buckets])
np.savez(os.path.join(out_dir, f"rank{sync.rank}.npz"), **arrays)
"""

# conv1 → ip0 → ipa → ipb → ip2, where ipb shares ipa's weight and bias (ipa is late).
SHARED_NET = """
name: "shared"
layer {{ name: "data" type: "Data" top: "data" top: "label"
  transform_param {{ scale: 0.0078125 }}
  data_param {{ source: "{source}" batch_size: {batch} backend: LMDB }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param {{ num_output: 4 kernel_size: 3 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param {{ pool: MAX kernel_size: 2 stride: 2 }} }}
layer {{ name: "ip0" type: "InnerProduct" bottom: "pool1" top: "ip0"
  inner_product_param {{ num_output: 16 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "relu0" type: "ReLU" bottom: "ip0" top: "ip0" }}
layer {{ name: "ipa" type: "InnerProduct" bottom: "ip0" top: "ipa"
  param {{ name: "sw" }} param {{ name: "sb" }}
  inner_product_param {{ num_output: 16 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "relua" type: "ReLU" bottom: "ipa" top: "ipa" }}
layer {{ name: "ipb" type: "InnerProduct" bottom: "ipa" top: "ipb"
  param {{ name: "sw" }} param {{ name: "sb" }}
  inner_product_param {{ num_output: 16 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ipb" top: "ip2"
  inner_product_param {{ num_output: {classes} weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""


# ----- bucket layout, no processes ---------------------------------------------------------
def layer(index: int, start: int, floats: int, late: bool = False) -> SyncLayer:
    return SyncLayer(index, f"l{index}", start, start + floats, (), late,
                     CommShape("other", floats, 1, 1))  # fmt: skip


def check_invariants(buckets: list[Bucket], layers: list[SyncLayer], first: int, cap: int):
    """Every synced layer in exactly one bucket; each bucket one contiguous range of its own
    layers, in reverse layer order, within its cap unless it holds one layer; late last."""
    assert sorted(x.index for b in buckets for x in b.layers) == sorted(x.index for x in layers)
    assert [b.index for b in buckets] == list(range(len(buckets)))
    for b in buckets:
        assert [x.index for x in b.layers] == sorted((x.index for x in b.layers), reverse=True)
        assert b.end - b.start == sum(x.num_floats for x in b.layers), b.describe()
        for upper, lower in zip(b.layers, b.layers[1:]):
            assert lower.end == upper.start, b.describe()
        limit = first if b.index == 0 and not b.late else cap
        assert b.num_bytes <= limit or len(b.layers) == 1, b.describe()
        assert all(x.late == b.late for x in b.layers)
    lates = [b.late for b in buckets]
    assert lates == sorted(lates)  # late buckets come last


def test_buckets_reverse_order_first_bucket_and_caps():
    # floats: 10, 20, 300, 30, 40, 50 → bytes 40, 80, 1200, 120, 160, 200
    sizes = [10, 20, 300, 30, 40, 50]
    layers, start = [], 0
    for i, floats in enumerate(sizes):
        layers.append(layer(2 * i + 1, start, floats))  # parameterless layers in between
        start += floats
    buckets = bucket_layout(layers, first_bucket_bytes=250, bucket_cap_bytes=400)
    check_invariants(buckets, layers, 250, 400)
    # First bucket (cap 250): the last layer (200 B) alone, 160 more would not fit; then
    # cap 400: 160 + 120; the 1200-byte layer alone; 80 + 40.
    assert [[x.index for x in b.layers] for b in buckets] == [[11], [9, 7], [5], [3, 1]]
    assert (buckets[0].start, buckets[0].end) == (400, 450)
    assert (buckets[-1].start, buckets[-1].end) == (0, 30)


def test_gaps_and_late_layers_break_runs():
    # l1 [0,10) | gap (frozen) [10,20) | l5 [20,30) late | l7 [30,40) | l9 [40,50)
    layers = [layer(1, 0, 10), layer(5, 20, 10, late=True), layer(7, 30, 10), layer(9, 40, 10)]
    buckets = bucket_layout(layers)  # DDP's caps: everything would fit in one bucket
    check_invariants(buckets, layers, 1 << 20, 25 << 20)
    assert [([x.index for x in b.layers], b.late) for b in buckets] == [
        ([9, 7], False), ([1], False), ([5], True)]  # fmt: skip


@pytest.mark.parametrize("seed", range(20))
def test_random_layouts_keep_the_invariants(seed):
    rng = np.random.default_rng(seed)
    layers, start = [], 0
    for index in range(int(rng.integers(1, 12))):
        start += int(rng.integers(0, 2)) * int(rng.integers(1, 50))  # a frozen layer: a gap
        floats = int(rng.integers(1, 200))
        layers.append(layer(index, start, floats, late=bool(rng.random() < 0.2)))
        start += floats
    first, cap = int(rng.integers(4, 400)), int(rng.integers(4, 800))
    check_invariants(bucket_layout(layers, first, cap), layers, first, cap)


def test_layout_of_a_real_net_skips_frozen_layers_and_shared_owners_go_last():
    net = build_net("""
        layer { name: "input" type: "Input" top: "data" top: "label"
                input_param { shape { dim: 2 dim: 5 } shape { dim: 2 } } }
        layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
                inner_product_param { num_output: 6 } }
        layer { name: "frozen" type: "InnerProduct" bottom: "ip1" top: "frozen"
                param { lr_mult: 0 } param { lr_mult: 0 } inner_product_param { num_output: 6 } }
        layer { name: "ipa" type: "InnerProduct" bottom: "frozen" top: "ipa"
                param { name: "w" } inner_product_param { num_output: 6 bias_term: false } }
        layer { name: "ipb" type: "InnerProduct" bottom: "ipa" top: "ipb"
                param { name: "w" } inner_product_param { num_output: 6 bias_term: false } }
        layer { name: "ip3" type: "InnerProduct" bottom: "ipb" top: "ip3"
                inner_product_param { num_output: 3 } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip3" bottom: "label" top: "loss" }
    """)  # fmt: skip
    layers = sync_layout(net)
    buckets = bucket_layout(layers)
    check_invariants(buckets, layers, 1 << 20, 25 << 20)
    assert [b.describe() for b in buckets] == [
        "bucket 0 (layers ip3)", "bucket 1 (layers ip1)", "bucket 2 (layers ipa)"]  # fmt: skip
    assert [b.late for b in buckets] == [False, False, True]
    frozen = net.layer_param_range[net.layer_index("frozen")]
    assert not any(b.start < frozen[1] and frozen[0] < b.end for b in buckets)


# ----- jobs -------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_case(directory: str, batch: int, extra: str = "", net: str = NET,
               name: str = "solver", snapshots: str = "") -> str:  # fmt: skip
    """Dataset, net and solver (job.py's SGD with momentum, step policy, weight decay)."""
    source = os.path.join(directory, "train_lmdb")
    if not os.path.exists(source):
        write_dataset(directory)
    net_path = os.path.join(directory, f"{name}_net.prototxt")
    with open(net_path, "w") as f:
        f.write(net.format(source=source, batch=batch, classes=4))
    solver = os.path.join(directory, f"{name}.prototxt")
    snapshots = snapshots or "display: 0\nsnapshot: 0\nsnapshot_after_train: false"
    with open(solver, "w") as f:
        f.write(SOLVER.format(net=net_path, iters=ITERS, mode="CPU",
                              extra=f"{extra}\n{snapshots}"))  # fmt: skip
    return solver


def launch(
    directory: str,
    workers: int,
    command: list[str],
    env: dict[str, str] | None = None,
    timeout_ms: int = 20000,
    timeout_s: float = 120,
) -> subprocess.CompletedProcess:
    args = [*LAUNCH, "-n", str(workers), "--sync", "allreduce", "--port", str(free_port()),
            "--timeout-ms", str(timeout_ms), "--", *command]  # fmt: skip
    env = {**os.environ, "GLOG_minloglevel": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, env=env,
                          cwd=directory)  # fmt: skip


def run_workers(directory: str, workers: int, solver: str, env: dict[str, str] | None = None):
    """Each rank's saved arrays, after a job that must succeed."""
    out = os.path.join(directory, f"out{workers}")
    os.makedirs(out, exist_ok=True)
    result = launch(directory, workers, [sys.executable, "-c", WORKER, solver, str(ITERS), out],
                    env)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"status {result.returncode}:\n{output[-6000:]}"
    assert "[coordinator]" not in output and "[server" not in output
    ranks = []
    for rank in range(workers):
        with np.load(os.path.join(out, f"rank{rank}.npz")) as data:
            ranks.append(dict(data))
    return ranks, out


def reference(directory: str, batch: int, extra: str = "", net: str = NET) -> dict:
    """One process on the global batch, the plain solver."""
    import caffe
    from caffe.solvers import get_solver

    caffe.set_solver_count(1)
    caffe.set_solver_rank(0)
    solver = get_solver(write_case(directory, batch, extra, net, name="ref"))
    solver.step(ITERS)
    return {f"{name}/{i}": blob.data.copy() for name, blobs in solver.net.params.items()
            for i, blob in enumerate(blobs)}  # fmt: skip


def test_two_workers_equal_one_process(tmp_path):
    ranks, _ = run_workers(str(tmp_path), 2, write_case(str(tmp_path), BATCH))
    assert_matches(ranks, reference_weights(str(tmp_path), 2, ITERS))
    assert list(ranks[0]["buckets"]) == ["bucket 0 (layers ip2, ip1, conv2, conv1)"]


# Caps (first 512 B, then 1 KiB) that cut the job's net (conv1 160 B, conv2 408 B,
# ip1 5280 B, ip2 400 B) into three buckets: ip2 | ip1 (larger than the cap: alone) | conv2+conv1.
SMALL_CAPS = {"TEST_BUCKET_CAPS": "512,1024"}
THREE_BUCKETS = ["bucket 0 (layers ip2)", "bucket 1 (layers ip1)",
                 "bucket 2 (layers conv2, conv1)"]  # fmt: skip


def backward_spans(events: list[dict]) -> dict[tuple[int, str], tuple[float, float]]:
    """(iteration, layer name) -> (start, end) of that layer's backward."""
    spans = [e for e in events if e["cat"] == "compute" and e["name"].startswith("backward ")]
    return {(e["args"]["iteration"], e["name"].split()[1]): (e["ts"], e["ts"] + e["dur"])
            for e in spans}  # fmt: skip


def test_three_workers_several_buckets_overlap_backward(tmp_path):
    ranks, out = run_workers(str(tmp_path), 3, write_case(str(tmp_path), BATCH), SMALL_CAPS)
    assert_matches(ranks, reference_weights(str(tmp_path), 3, ITERS))
    assert list(ranks[0]["buckets"]) == THREE_BUCKETS
    for rank in range(3):
        with open(os.path.join(out, f"trace.{rank}.json")) as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        backward = backward_spans(events)
        syncs = [e for e in events if e["cat"] == "sync"]
        assert len(syncs) == 3 * ITERS
        for e in syncs:
            iteration, lowest = e["args"]["iteration"], e["args"]["layers"][-1]
            # Launched once its last layer's backward has begun (it ends right after the
            # launch: the compute span is recorded by a later callback) ...
            assert e["ts"] >= backward[(iteration, lowest)][0], e
            # ... and, for the first two buckets, while backward is still going on.
            if e["name"] != "bucket 2":
                assert e["ts"] < backward[(iteration, "conv1")][1], e


def test_iter_size_two(tmp_path):
    extra = "iter_size: 2"
    ranks, _ = run_workers(str(tmp_path), 2, write_case(str(tmp_path), BATCH, extra), SMALL_CAPS)
    assert_matches(ranks, reference_weights(str(tmp_path), 2, ITERS, extra))


def test_shared_parameters_go_in_a_late_bucket(tmp_path):
    ranks, _ = run_workers(str(tmp_path), 2, write_case(str(tmp_path), BATCH, net=SHARED_NET))
    assert_matches(ranks, reference(str(tmp_path), 2 * BATCH, net=SHARED_NET))
    # ipa's range lies between ip0's and ip2's: the ordinary run breaks around it.
    assert list(ranks[0]["buckets"]) == ["bucket 0 (layers ip2)", "bucket 1 (layers ip0, conv1)",
                                         "bucket 2 (layers ipa)"]  # fmt: skip


# ----- faults ----------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [0, 1])
def test_peer_that_never_arrives_is_a_clear_error_within_the_timeout(tmp_path, rank):
    solver = write_case(str(tmp_path), BATCH)
    port = free_port()
    env = {**os.environ, "POSEIDON_ROLE": "worker", "POSEIDON_SYNC": "allreduce",
           "POSEIDON_TIMEOUT_MS": "2000", "RANK": str(rank), "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    started = time.monotonic()
    result = subprocess.run([*CAFFE, "train", "--solver", solver], capture_output=True,
                            text=True, timeout=60, env=env, cwd=str(tmp_path))  # fmt: skip
    elapsed = time.monotonic() - started
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    fatal = [line for line in output.splitlines() if line.startswith("F")]
    assert fatal, output[-3000:]
    assert re.search(rf"worker {rank} of 2 could not join the all-reduce group at "
                     rf"127\.0\.0\.1:{port} within 2s: .*(clients joined|timed out)",
                     fatal[0]), fatal[0]  # fmt: skip
    assert "Traceback" not in output
    assert elapsed < 30, f"{elapsed:.1f}s"  # 2s timeout plus start-up on a busy machine


def job_failure(tmp_path, env: dict[str, str], timeout_ms: int = 20000):
    out = str(tmp_path / "out")
    os.makedirs(out)
    command = [sys.executable, "-c", WORKER, write_case(str(tmp_path), BATCH), "100", out]
    started = time.monotonic()
    result = launch(str(tmp_path), 2, command, env, timeout_ms=timeout_ms, timeout_s=90)
    return result, result.stdout + result.stderr, time.monotonic() - started


def test_stalled_peer_times_out_naming_rank_bucket_layers_and_iteration(tmp_path):
    result, output, elapsed = job_failure(tmp_path, {"TEST_STALL": "1,3"}, timeout_ms=3000)
    assert result.returncode == 1, output[-3000:]
    assert re.search(r"DistributedError: worker 0 of 2: all-reduce of bucket 0 \(layers ip2, "
                     r"ip1, conv2, conv1\) at iteration 3 failed: timed out after 3s", output), \
        output[-3000:]  # fmt: skip
    assert "[launch] job failed: worker 0 exited with status 1" in output
    assert elapsed < 40, f"{elapsed:.1f}s"


def test_dead_peer_fails_the_others_at_once(tmp_path):
    result, output, elapsed = job_failure(tmp_path, {"TEST_DIE": "1,3"})
    assert result.returncode == 3, output[-3000:]
    assert "[launch] job failed: worker 1 exited with status 3" in output
    assert re.search(r"worker 0 of 2: all-reduce of bucket 0 .* at iteration 3 failed: ",
                     output), output[-3000:]  # fmt: skip
    assert elapsed < 40, f"{elapsed:.1f}s"  # far below the 20 s timeout plus start-up


# ----- the launcher --------------------------------------------------------------------------
class RecordingLauncher(Launcher):
    """Records what it would start instead of starting it."""

    def _spawn(self, label, argv, env, host, is_worker):  # type: ignore[no-untyped-def]
        child = Child(label, SimpleNamespace(pid=0), is_worker)  # type: ignore[arg-type]
        child.env, child.host = env, host  # type: ignore[attr-defined]
        self.children.append(child)
        return child

    def _start_pump(self, child, first_line=None):  # type: ignore[no-untyped-def]
        pass


@pytest.mark.parametrize("hosts,port,master,master_port", [
    ([], 0, "127.0.0.1", "29500"),
    ([Host("node1", 2), Host("node2", 2)], 29600, "node1", "29600"),
])  # fmt: skip
def test_launcher_starts_only_workers_with_torchrun_variables(hosts, port, master, master_port):
    spec = JobSpec(["caffe", "train"], num_workers=3, num_servers=2, sync="allreduce",
                   coordinator_port=port, hosts=hosts)  # fmt: skip
    launcher = RecordingLauncher(spec, out=io.StringIO())
    launcher.start()
    assert [c.label for c in launcher.children] == ["worker 0", "worker 1", "worker 2"]
    for rank, child in enumerate(launcher.children):
        env = child.env
        assert (env["RANK"], env["WORLD_SIZE"], env["POSEIDON_RANK"]) == (str(rank), "3", str(rank))
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == (master, master_port)
        assert env["POSEIDON_SYNC"] == "allreduce" and env["POSEIDON_ROLE"] == "worker"
        assert "POSEIDON_COORDINATOR" not in env
    assert [c.env["LOCAL_RANK"] for c in launcher.children] == (["0", "1", "0"] if hosts
                                                                else ["0", "1", "2"])  # fmt: skip


# ----- end to end: poseidon launch -- caffe train ---------------------------------------------
def test_launch_caffe_train_end_to_end(tmp_path):
    prefix = str(tmp_path / "snap")
    snapshots = f'display: 5\nsnapshot: 0\nsnapshot_prefix: "{prefix}"'
    solver = write_case(str(tmp_path), BATCH, snapshots=snapshots)
    result = launch(str(tmp_path), 2, [*CAFFE, "train", "--solver", solver],
                    {"GLOG_minloglevel": "0"})  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "[coordinator]" not in output and "[server" not in output
    assert re.search(r"\[worker 0\] I.* All-reduce: 2 workers, gloo backend", output)
    assert re.search(r"\[worker 0\] I.* bucket 0 +6248 bytes  ip2, ip1, conv2, conv1\n", output)
    assert "[worker 0] I" in output and "Optimization Done." in output
    assert not re.search(r"\[worker 1\] I.*Iteration \d+, loss", output)  # rank 0 displays
    from caffe.formats.weights_io import read_caffemodel

    model = read_caffemodel(f"{prefix}_iter_{ITERS}.caffemodel")
    saved = {f"{layer.name}/{i}": np.array(blob.data, np.float32)
             for layer in model.layers for i, blob in enumerate(layer.blobs)}  # fmt: skip
    expected = reference_weights(str(tmp_path), 2, ITERS)
    for name, value in expected.items():
        atol = 1e-4 * float(np.abs(value).max())
        np.testing.assert_allclose(saved[name].reshape(value.shape), value, rtol=1e-4,
                                   atol=atol, err_msg=name)  # fmt: skip
