"""Helpers for solver tests: a tiny softmax-regression net, solver files written to a
temporary directory, a log recorder, and the update rules and gradients re-derived in
numpy from the formulas (the independent reference every solver is checked against).

The net is Input(data N×D, label N) → InnerProduct(C outputs) → SoftmaxWithLoss, whose
gradient is closed form: p = softmax(X·Wᵀ + b), dlogits = (p − onehot(y)) / N,
dW = dlogitsᵀ·X, db = Σ dlogits.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from pathlib import Path

import numpy as np

import caffe

N, D, C = 4, 3, 2
# Inputs for the tiny net: fixed, so every run is deterministic.
X = np.array([[1.0, 2.0, -1.0], [0.5, -1.0, 0.0], [-1.5, 0.3, 2.0], [0.2, 0.1, -0.4]], np.float32)
Y = np.array([0, 1, 1, 0], np.float32)
# Starting weights for tests that set them by hand.
W0 = np.array([[0.3, -0.2, 0.1], [-0.4, 0.25, 0.05]], np.float32)
B0 = np.array([0.1, -0.1], np.float32)


def net_text(
    batch: int = N,
    name: str = "tiny",
    param_specs: str = "param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }",
    extra_layers: str = "",
    loss_weight: float | None = None,
) -> str:
    """The tiny net as prototxt; by default weight lr_mult 1/decay 1, bias lr_mult 2/decay 0."""
    weight = "" if loss_weight is None else f"loss_weight: {loss_weight}"
    return f"""
name: "{name}"
layer {{ name: "data" type: "Input" top: "data" top: "label"
         input_param {{ shape {{ dim: {batch} dim: {D} }} shape {{ dim: {batch} }} }} }}
layer {{ name: "ip" type: "InnerProduct" bottom: "data" top: "ip" {param_specs}
         inner_product_param {{ num_output: {C}
           weight_filler {{ type: "gaussian" std: 0.5 }}
           bias_filler {{ type: "uniform" min: -0.5 max: 0.5 }} }} }}
{extra_layers}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" {weight} }}
"""


def write_solver(directory: Path, solver_text: str, net: str | None = None) -> str:
    """Write net.prototxt (unless `net` is None and the solver names its own) and
    solver.prototxt into `directory`; returns the solver path."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [solver_text]
    if net is not None:
        (directory / "net.prototxt").write_text(net)
        lines.insert(0, f'net: "{directory / "net.prototxt"}"')
    path = directory / "solver.prototxt"
    path.write_text("\n".join(lines))
    return str(path)


def make_solver(
    directory: Path, solver_text: str, net: str | None = None, type_name: str | None = None
):
    """get_solver on a solver file with the tiny net (or `net`); a batch-N net gets X, Y."""
    text = solver_text if type_name is None else f'type: "{type_name}"\n{solver_text}'
    solver = caffe.get_solver(write_solver(directory, text, net if net else net_text()))
    if solver.net.blobs["data"].shape == list(X.shape):
        fill_inputs(solver.net)
        for test_net in solver.test_nets:
            fill_inputs(test_net)
    return solver


def make_solver_at_w0(
    directory: Path, solver_text: str, net: str | None = None, type_name: str | None = None
):
    """make_solver, with the net's weight and bias set to the starting values W0, B0."""
    solver = make_solver(directory, solver_text, net, type_name)
    set_weights(solver.net, [W0, B0])
    return solver


def fill_inputs(net, x: np.ndarray = X, y: np.ndarray = Y) -> None:
    net.blobs["data"].data[...] = x
    net.blobs["label"].data[...] = y


def weights(net) -> list[np.ndarray]:
    """Copies of the learnable parameters (W, b)."""
    return [blob.data.copy() for blob in net.learnable_params]


def set_weights(net, values: list[np.ndarray]) -> None:
    for blob, value in zip(net.learnable_params, values):
        blob.data[...] = value


@contextmanager
def recorded_log():
    """Collect the 'caffe' logger's messages (INFO and up) into a list while active."""
    logger = logging.getLogger("caffe")
    messages: list[str] = []

    class _Recorder(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = _Recorder(logging.INFO)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


# --------------------------------------------------------------------------- numpy reference


def softmax_gradients(
    w: np.ndarray, b: np.ndarray, x: np.ndarray = X, y: np.ndarray = Y
) -> tuple[float, np.ndarray, np.ndarray]:
    """(mean cross-entropy loss, dL/dW, dL/db) of the tiny net, in float64."""
    w, b, x = (np.asarray(a, np.float64) for a in (w, b, x))
    logits = x @ w.T + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    onehot = np.eye(w.shape[0])[np.asarray(y, int)]
    loss = -np.log(p[np.arange(len(y)), np.asarray(y, int)]).mean()
    dlogits = (p - onehot) / len(y)
    return float(loss), dlogits.T @ x, dlogits.sum(axis=0)


class ReferenceSolver:
    """One solver type's update written out in numpy (float64) from docs/caffe_format.md §4.4.

    `step(grads, weights, rate)` applies regularization (weight_decay·decay_mult, L2 or
    L1), the rule with lr = rate·lr_mult, and w -= step; it returns the new weights.
    """

    def __init__(self, kind: str, hyper: dict, lr_mults, decay_mults, num_params: int) -> None:
        self.kind = kind
        self.hyper = {
            "momentum": 0.0, "momentum2": 0.999, "delta": 1e-8, "rms_decay": 0.99,
            "weight_decay": 0.0, "regularization_type": "L2", "iter_size": 1, **hyper,
        }  # fmt: skip
        self.lr_mults = lr_mults
        self.decay_mults = decay_mults
        self.history: list = [None] * num_params
        self.history2: list = [None] * num_params
        self.iter = 0

    def step(self, grads, weights, rate: float) -> list[np.ndarray]:
        h = self.hyper
        out = []
        for i, (g, w) in enumerate(zip(grads, weights)):
            g = np.asarray(g, np.float64) / h["iter_size"]
            w = np.asarray(w, np.float64)
            decay = h["weight_decay"] * self.decay_mults[i]
            if h["regularization_type"] == "L2":
                g = g + decay * w
            else:
                g = g + decay * np.sign(w)
            lr = rate * self.lr_mults[i]
            out.append(w - self._rule(i, g, lr))
        self.iter += 1
        return out

    def _rule(self, i: int, g: np.ndarray, lr: float) -> np.ndarray:
        h, kind = self.hyper, self.kind
        hist = self.history[i] if self.history[i] is not None else np.zeros_like(g)
        hist2 = self.history2[i] if self.history2[i] is not None else np.zeros_like(g)
        m, delta = h["momentum"], h["delta"]
        if kind == "SGD":
            hist = m * hist + lr * g
            update = hist
        elif kind == "Nesterov":
            new = m * hist + lr * g
            update = (1 + m) * new - m * hist
            hist = new
        elif kind == "AdaGrad":
            hist = hist + g * g
            update = lr * g / (np.sqrt(hist) + delta)
        elif kind == "RMSProp":
            d = h["rms_decay"]
            hist = d * hist + (1 - d) * g * g
            update = lr * g / (np.sqrt(hist) + delta)
        elif kind == "AdaDelta":
            hist = m * hist + (1 - m) * g * g
            u = g * np.sqrt((hist2 + delta) / (hist + delta))
            hist2 = m * hist2 + (1 - m) * u * u
            update = lr * u
        elif kind == "Adam":
            b1, b2, t = m, h["momentum2"], self.iter + 1
            hist = b1 * hist + (1 - b1) * g
            hist2 = b2 * hist2 + (1 - b2) * g * g
            update = lr * math.sqrt(1 - b2**t) / (1 - b1**t) * hist / (np.sqrt(hist2) + delta)
        else:
            raise ValueError(kind)
        self.history[i], self.history2[i] = hist, hist2
        return update

    def history_arrays(self) -> list[np.ndarray]:
        """History in the solver's layout: [h of every param] (+ [h2 of every param])."""
        first = list(self.history)
        if self.kind in ("AdaDelta", "Adam"):
            return first + list(self.history2)
        return first
