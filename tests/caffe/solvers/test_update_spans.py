"""apply_update updates runs of parameters with equal multipliers as one span each; that
must give exactly - bit for bit - what Caffe's parameter-by-parameter update gives (the
reference path: update_param for each parameter, which the distributed syncers use)."""

import numpy as np
import pytest

from tests.caffe.solver_harness import D, fill_inputs, make_solver
from tests.caffe.solvers.test_update_rules import HYPER

SPECS = {
    # no param specs: every parameter lr_mult 1, decay_mult 1 -> one span of all four
    "uniform": ("", "", 1),
    # ip1 W, ip1 b, ip2 W share (1, 1); ip2 b is (2, 0) -> two spans
    "mixed": ("", "param { lr_mult: 1 } param { lr_mult: 2 decay_mult: 0 }", 2),
}


def two_layer_net(specs1: str, specs2: str) -> str:
    return f"""
layer {{ name: "data" type: "Input" top: "data" top: "label"
         input_param {{ shape {{ dim: 4 dim: {D} }} shape {{ dim: 4 }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1" {specs1}
         inner_product_param {{ num_output: 5 weight_filler {{ type: "gaussian" std: 0.5 }}
                                bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
layer {{ name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" {specs2}
         inner_product_param {{ num_output: 2 weight_filler {{ type: "gaussian" std: 0.5 }}
                                bias_filler {{ type: "gaussian" std: 0.5 }} }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }}
"""


def solver_pair(tmp_path, kind, specs, extra):
    fields = "\n".join(f"{k}: {v}" for k, v in HYPER[kind].items())
    text = f'{fields}\nlr_policy: "fixed"\nrandom_seed: 3\nmax_iter: 100\n{extra}'
    net = two_layer_net(*SPECS[specs][:2])
    spans = make_solver(tmp_path / "spans", text, net, kind)
    each = make_solver(tmp_path / "each", text, net, kind)
    for solver in (spans, each):
        fill_inputs(solver.net)

    def per_parameter(rate):
        for param_id in range(len(each.net.learnable_params)):
            each.update_param(param_id, rate)
        each.net.update()

    each.update_hook = per_parameter
    return spans, each


@pytest.mark.parametrize("kind", list(HYPER))
@pytest.mark.parametrize("specs", list(SPECS))
@pytest.mark.parametrize("extra", ["", "iter_size: 2\nregularization_type: 'L1'\n"])
def test_spans_update_bit_for_bit_as_parameter_by_parameter(tmp_path, kind, specs, extra):
    spans, each = solver_pair(tmp_path, kind, specs, extra)
    assert len(spans.update_spans()) == SPECS[specs][2]
    for a, b in zip(spans.net.learnable_params, each.net.learnable_params):
        np.testing.assert_array_equal(a.data, b.data)  # the same start
    spans.step(3)
    each.step(3)
    for a, b in zip(spans.net.learnable_params, each.net.learnable_params):
        np.testing.assert_array_equal(a.data, b.data)
        np.testing.assert_array_equal(a.diff, b.diff)
    for a, b in zip(spans.history, each.history):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(spans.history[0].numpy(), 0)  # the rule did run


def test_a_replaced_update_param_is_called_for_every_parameter(tmp_path):
    spans, _ = solver_pair(tmp_path, "SGD", "uniform", "")
    calls = []
    spans.update_param = lambda param_id, rate: calls.append(param_id)
    spans.step(1)
    assert calls == [0, 1, 2, 3]
