"""Small-net overhead: the engine vs the same net in plain torch.nn + torch.optim.SGD, CPU.

On nets of a few tiny layers the kernels take microseconds, so what a step costs is the
Python around them: the Net's per-layer bookkeeping, the blobs' accessors, the solver's
learning-rate policy, regularization and momentum update, the data layer's copy, the test
passes. Two nets, batch 10, as in BVLC's brewing-logreg notebook:

  mlp     Input → InnerProduct(40) → ReLU (in place) → InnerProduct(2) → SoftmaxWithLoss
          (the notebook's "nonlinear" net with the data fed as net inputs, 4 features)
  logreg  HDF5Data → InnerProduct(2) → Accuracy + SoftmaxWithLoss, train and test nets
          (the notebook's logreg_auto_train/test.prototxt on 7,500/2,500 synthetic rows)

and three measures, each engine vs torch, in milliseconds per training iteration:

  fwd+bwd   engine: net.clear_param_diffs(); net.forward_backward()
            torch:  model.zero_grad(set_to_none=False); loss.backward()
            (logreg: both read the next batch, the engine through its HDF5Data layer)
  step      engine: solver.step(n) with no test and no display
            torch:  zero_grad, forward, loss (and accuracy for logreg), backward,
                    SGD(momentum 0.9, weight_decay 5e-4).step(), StepLR.step(), loss.item()
                    (logreg: the batch is the next 10 rows of the in-memory dataset, as the
                    HDF5Data layer walks it)
  notebook  (logreg) the notebook's loop per iteration: solver.step(10000) with
            test_interval 1000, test_iter 250 (test passes at 0, 1000, ..., 9000), display
            1000; torch does the same tests (forward, loss, accuracy, 250 batches, no_grad)

and, engine only, the notebook's whole timed cell (get_solver, solve, 250 test forwards),
best of --cell-rounds, beside the 0.195 s BVLC recorded for it with C++ Caffe.

Both sides do the same work with the same weights; before timing, the bench checks that
they compute the same loss and gradients and, after a few solver steps with a fixed rate,
the same weights. Rounds alternate engine and torch so that machine noise hits both;
reported: median ms per iteration and ratio = engine ms / torch ms (≤ 1.00: the engine is
no slower than plain PyTorch). Note the ratio is the inverse of bench/engine_vs_torch.py's.

    .venv/bin/python bench/small_net_overhead.py [--rounds 7] [--iters 2000] [--ops]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import h5py
import numpy as np
import torch
from torch import nn

os.environ.setdefault("GLOG_minloglevel", "2")
from google.protobuf import text_format

import caffe
from caffe.proto import caffe_pb2

BATCH = 10
FEATURES = 4
SOLVER = """
base_lr: 0.01  lr_policy: "step"  gamma: 0.1  stepsize: 5000
momentum: 0.9  weight_decay: 0.0005  max_iter: 10000  solver_mode: CPU  random_seed: 1
"""
MLP = f"""
layer {{ name: "data" type: "Input" top: "data"
        input_param {{ shape {{ dim: {BATCH} dim: {FEATURES} }} }} }}
layer {{ name: "label" type: "Input" top: "label" input_param {{ shape {{ dim: {BATCH} }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param {{ num_output: 40 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param {{ num_output: 2 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""
LOGREG = """
layer {{ name: "data" type: "HDF5Data" top: "data" top: "label"
        hdf5_data_param {{ source: "{source}" batch_size: {batch} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param {{ num_output: 2 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy" }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }}
"""


# ----- the nets ---------------------------------------------------------------------------
def synthetic_data(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two informative features, two noise features, two classes (make_classification-like)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, rows)
    x = rng.standard_normal((rows, FEATURES))
    x[:, :2] += np.where(y[:, None] == 1, 1.0, -1.0)
    return x.astype(np.float32), y.astype(np.float32)


def write_hdf5(directory: str, name: str, x: np.ndarray, y: np.ndarray) -> str:
    path = os.path.join(directory, f"{name}.h5")
    with h5py.File(path, "w") as f:
        f["data"] = x
        f["label"] = y
    listing = os.path.join(directory, f"{name}.txt")
    with open(listing, "w") as f:
        f.write(path + "\n")
    return listing


def solver_param(net: str, test_net: str | None = None, **fields: int) -> str:
    param = caffe_pb2.SolverParameter()
    text_format.Merge(SOLVER, param)
    text_format.Merge(net, param.train_net_param)
    if test_net is not None:
        text_format.Merge(test_net, param.test_net_param.add())
    for name, value in fields.items():
        setattr(param, name, value)
    return param


def torch_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 40), nn.ReLU(), nn.Linear(40, 2))


def torch_logreg() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 2))


def copy_weights(net: caffe.Net, model: nn.Module) -> None:
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    blobs = list(net.params.values())
    assert len(linears) == len(blobs), (len(linears), len(blobs))
    with torch.no_grad():
        for module, (weight, bias) in zip(linears, blobs):
            module.weight.copy_(weight.data_tensor)
            module.bias.copy_(bias.data_tensor)


def torch_optimizer(model: nn.Module) -> tuple[torch.optim.Optimizer, object]:
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    return sgd, torch.optim.lr_scheduler.StepLR(sgd, step_size=5000, gamma=0.1)


class Rows:
    """The torch side's data: the next `BATCH` rows of an in-memory dataset, wrapping."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        self.x, self.y, self.row = x, y, 0

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.row + BATCH > len(self.x):
            self.row = 0
        i = self.row
        self.row += BATCH
        return torch.from_numpy(self.x[i : i + BATCH]), torch.from_numpy(self.y[i : i + BATCH])


class Case:
    """One net on both sides: an engine solver and a torch model + optimizer."""

    def __init__(self, name: str, workdir: str, notebook: bool = False) -> None:
        self.name = name
        caffe.set_random_seed(1)
        if name == "mlp":
            self.solver = caffe.SGDSolver(solver_param(MLP))
            self.model = torch_mlp()
            x, y = synthetic_data(BATCH, 3)
            self.solver.net.blobs["data"].data[...] = x
            self.solver.net.blobs["label"].data[...] = y
            self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
            self.rows = self.test_rows = None
        else:
            x, y = synthetic_data(7500, 4)
            xt, yt = synthetic_data(2500, 5)
            train = LOGREG.format(source=write_hdf5(workdir, "train", x, y), batch=BATCH)
            test = LOGREG.format(source=write_hdf5(workdir, "test", xt, yt), batch=BATCH)
            # Without the notebook's tests the test net is built but never run (as Caffe,
            # the solver insists on a test_interval when it has test nets).
            fields = (
                {"test_interval": 1000, "display": 1000}
                if notebook
                else {"test_interval": 10**9, "test_initialization": False}
            )
            param = solver_param(train, test, **fields)
            param.test_iter.append(250)
            self.solver = caffe.SGDSolver(param)
            self.model = torch_logreg()
            self.rows, self.test_rows = Rows(x, y), Rows(xt, yt)
        copy_weights(self.solver.net, self.model)
        self.optimizer, self.scheduler = torch_optimizer(self.model)

    # ----- torch side -----------------------------------------------------------------------
    def torch_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rows is None:
            return self.x, self.y
        x, y = self.rows.batch()
        return x, y.long()

    def torch_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        if self.rows is not None:
            (out.argmax(1) == y).float().mean()  # the train net's Accuracy layer
        return nn.functional.cross_entropy(out, y)

    def torch_fwd_bwd(self, iters: int) -> float:
        start = time.perf_counter()
        for _ in range(iters):
            self.model.zero_grad(set_to_none=False)
            self.torch_loss(*self.torch_batch()).backward()
        return (time.perf_counter() - start) * 1000 / iters

    def torch_steps(self, iters: int, test_interval: int = 0, test_iter: int = 0) -> float:
        optimizer, scheduler = self.optimizer, self.scheduler
        start = time.perf_counter()
        for it in range(iters):
            if test_interval and it % test_interval == 0:
                self.torch_test(test_iter)
            optimizer.zero_grad(set_to_none=False)
            loss = self.torch_loss(*self.torch_batch())
            loss.backward()
            optimizer.step()
            scheduler.step()
            loss.item()
        return (time.perf_counter() - start) * 1000 / iters

    def torch_test(self, test_iter: int) -> tuple[float, float]:
        loss = accuracy = 0.0
        with torch.no_grad():
            for _ in range(test_iter):
                x, y = self.test_rows.batch()
                y = y.long()
                out = self.model(x)
                accuracy += (out.argmax(1) == y).float().mean().item()
                loss += nn.functional.cross_entropy(out, y).item()
        return loss / test_iter, accuracy / test_iter

    # ----- engine side -----------------------------------------------------------------------
    def engine_fwd_bwd(self, iters: int) -> float:
        net = self.solver.net
        start = time.perf_counter()
        for _ in range(iters):
            net.clear_param_diffs()
            net.forward_backward()
        return (time.perf_counter() - start) * 1000 / iters

    def engine_steps(self, iters: int) -> float:
        start = time.perf_counter()
        self.solver.step(iters)
        return (time.perf_counter() - start) * 1000 / iters


# ----- checks ---------------------------------------------------------------------------------
def check_same(workdir: str) -> None:
    """Same loss and gradients, and the same weights after steps at a fixed rate (with a
    constant rate Caffe's h = m·h + lr·g and torch's b = m·b + g, w -= lr·b, coincide)."""
    for name in ("mlp", "logreg"):
        case = Case(name, workdir)
        net = case.solver.net
        net.clear_param_diffs()
        loss = net.forward_backward()
        if case.rows is not None:  # the HDF5 layer read rows 0..9: the torch side does too
            case.rows.row = 0
        x, y = case.torch_batch()
        case.model.zero_grad()
        ref = case.torch_loss(x, y)
        ref.backward()
        assert abs(loss - ref.item()) <= 1e-5, (name, loss, ref.item())
        first = next(m for m in case.model.modules() if isinstance(m, nn.Linear))
        ours = next(iter(net.params.values()))[0].diff
        np.testing.assert_allclose(ours, first.weight.grad.numpy(), rtol=1e-4, atol=1e-6)
        # Steps: both sides start again from the same weights and rows.
        case = Case(name, workdir)
        case.solver.step(20)
        case.torch_steps(20)
        for module, blobs in zip(
            [m for m in case.model.modules() if isinstance(m, nn.Linear)],
            case.solver.net.params.values(),
        ):
            np.testing.assert_allclose(blobs[0].data, module.weight.detach().numpy(),
                                       rtol=1e-4, atol=1e-6)  # fmt: skip
            np.testing.assert_allclose(blobs[1].data, module.bias.detach().numpy(),
                                       rtol=1e-4, atol=1e-6)  # fmt: skip


# ----- timing ---------------------------------------------------------------------------------
def interleaved(engine, reference, rounds: int) -> tuple[float, float]:
    engine()  # warm-up both
    reference()
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(engine())
        theirs.append(reference())
    return statistics.median(ours), statistics.median(theirs)


def notebook_cell(workdir: str) -> tuple[float, float]:
    """The notebook's timed cell as written there: get_solver on its logreg solver file,
    solve() (10,000 iterations, 11 test passes, a snapshot), then 250 pycaffe forwards of
    the test net for the accuracy. Returns (seconds, accuracy)."""
    x, y = synthetic_data(7500, 4)
    xt, yt = synthetic_data(2500, 5)
    paths = {}
    for name, (a, b) in (("train", (x, y)), ("test", (xt, yt))):
        paths[name] = os.path.join(workdir, f"logreg_auto_{name}.prototxt")
        with open(paths[name], "w") as f:
            f.write(LOGREG.format(source=write_hdf5(workdir, name, a, b), batch=BATCH))
    solver_path = os.path.join(workdir, "logreg_solver.prototxt")
    with open(solver_path, "w") as f:
        f.write(f"""train_net: "{paths["train"]}" test_net: "{paths["test"]}" test_iter: 250
            test_interval: 1000 base_lr: 0.01 display: 1000 max_iter: 10000
            lr_policy: "step" gamma: 0.1 momentum: 0.9 weight_decay: 0.0005
            stepsize: 5000 snapshot: 10000 snapshot_prefix: "{workdir}/train"
            solver_mode: CPU""")
    start = time.perf_counter()
    caffe.set_mode_cpu()
    solver = caffe.get_solver(solver_path)
    solver.solve()
    accuracy = 0.0
    batch_size = solver.test_nets[0].blobs["data"].num
    test_iters = int(len(xt) / batch_size)
    for _ in range(test_iters):
        solver.test_nets[0].forward()
        accuracy += float(solver.test_nets[0].blobs["accuracy"].data)
    return time.perf_counter() - start, accuracy / test_iters


def count_ops(case: Case) -> list[tuple[str, int, int]]:
    """ATen ops per iteration, engine and torch, for fwd+bwd and step (a dispatch-mode count:
    each is one call from Python into the torch library, or one inside autograd)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Count.calls += 1
            return func(*args, **(kwargs or {}))

    def count(run) -> int:  # type: ignore[no-untyped-def]
        run(2)  # warm: first passes derive shapes and views once
        Count.calls = 0
        with Count():
            run(1)
        return Count.calls

    return [
        ("fwd+bwd", count(case.engine_fwd_bwd), count(case.torch_fwd_bwd)),
        ("step", count(case.engine_steps), count(case.torch_steps)),
    ]


def measure_case(case: Case, iters: int, rounds: int) -> list[tuple[str, str, float, float]]:
    fwd_bwd = interleaved(
        lambda: case.engine_fwd_bwd(iters), lambda: case.torch_fwd_bwd(iters), rounds
    )
    step = interleaved(lambda: case.engine_steps(iters), lambda: case.torch_steps(iters), rounds)
    return [(case.name, "fwd+bwd", *fwd_bwd), (case.name, "step", *step)]


# ----- the ATen floor ---------------------------------------------------------------------------
def logreg_step_ops(x, label, w, b, w_diff, b_diff, w_hist, b_hist, out, minus_ones, lr: float):  # type: ignore[no-untyped-def]
    """The logreg step as bare ATen ops, no engine: forward, loss, gradients, weight decay,
    momentum and the update, 26 ATen calls on the notebook's 10x4 batch and 2x4 weights."""
    torch.addmm(b, x, w.t(), out=out)
    log_prob = torch.log_softmax(out, 1)
    loss = -log_prob.gather(1, label.unsqueeze(1)).clamp_min(-87.3).sum() / 10
    grad = torch.exp(log_prob)
    grad.scatter_add_(1, label.unsqueeze(1), minus_ones)
    grad.mul_(0.1)
    w_diff.addmm_(grad.t(), x)
    b_diff.add_(grad.sum(0))
    w_diff.add_(w, alpha=5e-4)
    w_hist.mul_(0.9).add_(w_diff, alpha=lr)
    b_hist.mul_(0.9).add_(b_diff, alpha=lr)
    w.sub_(w_hist)
    b.sub_(b_hist)
    w_diff.zero_()
    b_diff.zero_()
    return loss


def aten_floor(iters: int = 20000) -> None:
    """What the step's ATen ops cost with no engine around them: one op from Python, the
    26-call step in eager PyTorch, and the same step compiled by TorchScript (its interpreter
    runs the ops from C++, no Python between them)."""
    import timeit
    import warnings

    tensors = [torch.randn(10, 4), torch.randint(0, 2, (10,)), torch.randn(2, 4), torch.zeros(2),
               torch.zeros(2, 4), torch.zeros(2), torch.zeros(2, 4), torch.zeros(2),
               torch.empty(10, 2), torch.full((10, 1), -1.0)]  # fmt: skip
    args = (*tensors, 0.01)
    small = torch.randn(10, 2)

    def best_us(call) -> float:  # type: ignore[no-untyped-def]
        return min(timeit.repeat(call, number=iters, repeat=5)) / iters * 1e6

    for label, call in (("x.sum()", small.sum), ("torch.exp(x)", lambda: torch.exp(small)),
                        ("x.mul_(1.0)", lambda: small.mul_(1.0))):  # fmt: skip
        print(f"one op from Python, {label:<14} {best_us(call):6.2f} us")
    eager = best_us(lambda: logreg_step_ops(*args))
    print(f"logreg step, 26 ATen calls, eager       {eager:6.2f} us")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TorchScript's deprecation notice
        scripted = torch.jit.script(logreg_step_ops)
    for _ in range(20):
        scripted(*args)
    print(f"logreg step, 26 ATen calls, TorchScript {best_us(lambda: scripted(*args)):6.2f} us")
    print("BVLC's C++ caffe train, same solver (its notebook's log): 12.7 us per iteration")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iters", type=int, default=2000, help="iterations per round")
    parser.add_argument("--notebook-rounds", type=int, default=3,
                        help="rounds of the 10,000-iteration notebook loop (0: skip)")  # fmt: skip
    parser.add_argument("--cell-rounds", type=int, default=3,
                        help="runs of the notebook cell, best reported (0: skip)")  # fmt: skip
    parser.add_argument("--ops", action="store_true",
                        help="also print the ATen ops per iteration of each side")  # fmt: skip
    parser.add_argument("--floor", action="store_true",
                        help="only time the logreg step as bare ATen ops")  # fmt: skip
    args = parser.parse_args(argv)
    if args.floor:
        aten_floor()
        return 0
    caffe.set_mode_cpu()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, numpy "
          f"{np.__version__}, python {sys.version.split()[0]}, batch {BATCH}")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        check_same(workdir)
        if args.ops:
            print(f"{'net':<8}{'measure':<10}{'engine ops':>11}{'torch ops':>11}")
            for name in ("mlp", "logreg"):
                for measure, ours, theirs in count_ops(Case(name, workdir)):
                    print(f"{name:<8}{measure:<10}{ours:>11}{theirs:>11}")
        for name in ("mlp", "logreg"):
            rows += measure_case(Case(name, workdir), args.iters, args.rounds)
        if args.notebook_rounds:
            case = Case("logreg", workdir, notebook=True)

            def engine() -> float:
                case.solver.iter = 0  # the same 10 test passes every round
                return case.engine_steps(10000)

            def reference() -> float:
                return case.torch_steps(10000, test_interval=1000, test_iter=250)

            ours, theirs = interleaved(engine, reference, args.notebook_rounds)
            rows.append(("logreg", "notebook", ours, theirs))
        cells = [notebook_cell(workdir) for _ in range(args.cell_rounds)]
    print(f"{'net':<8}{'measure':<10}{'engine ms':>11}{'torch ms':>11}{'engine/torch':>14}")
    worst = 0.0
    for name, measure, ours, theirs in rows:
        ratio = ours / theirs
        worst = max(worst, ratio)
        print(f"{name:<8}{measure:<10}{ours:>11.4f}{theirs:>11.4f}{ratio:>13.2f}x")
    print(f"worst engine/torch {worst:.2f}x (target <= 1.00x)")
    if cells:
        seconds, accuracy = min(cells)
        print(f"notebook cell (get_solver, solve, 250 test forwards): best of {len(cells)} "
              f"{seconds:.3f} s, accuracy {accuracy:.3f}; BVLC's C++ Caffe recorded 0.195 s "
              f"on its machine")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
