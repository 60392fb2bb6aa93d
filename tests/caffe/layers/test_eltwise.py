import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def eltwise_text(op, extra=""):
    return f'type: "Eltwise" eltwise_param {{ operation: {op} {extra} }}'


def inputs(shape, count, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(count)]


def distinct_inputs(shape, count, seed=0):
    """No ties between bottoms, values 0.05 apart: argmax stable under ±0.01 steps."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    values = rng.permutation(size * count).reshape(count, *shape) * 0.05 - size * count * 0.025
    return [v.astype(np.float32) for v in values]


SHAPES = [(2, 3, 4, 2), (1, 5), (3,)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("coeff", [None, (1.0, -0.5, 2.0)])
def test_sum_with_coefficients(shape, coeff):
    xs = inputs(shape, 3, seed=len(shape))
    extra = " ".join(f"coeff: {c}" for c in coeff) if coeff else ""
    layer, bottom, top = make_layer(eltwise_text("SUM", extra), xs)
    (y,) = run_forward(layer, bottom, top)
    c = coeff or (1.0, 1.0, 1.0)
    np.testing.assert_allclose(y, c[0] * xs[0] + c[1] * xs[1] + c[2] * xs[2], rtol=1e-6)
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("stable", ["true", "false"])
@pytest.mark.parametrize("count", [2, 3])
def test_prod(shape, stable, count):
    xs = inputs(shape, count, seed=count)
    # The unstable gradient divides by the bottom: keep inputs away from 0.
    xs = [np.where(np.abs(x) < 0.2, 0.5, x).astype(np.float32) for x in xs]
    layer, bottom, top = make_layer(eltwise_text("PROD", f"stable_prod_grad: {stable}"), xs)
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_allclose(y, np.prod(xs, axis=0), rtol=1e-6)
    check_gradient(layer, bottom, top)


def test_stable_prod_gradient_survives_a_zero_bottom():
    xs = [np.array([0.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)]
    layer, bottom, top = make_layer(eltwise_text("PROD"), xs)
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True, True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [3.0, 4.0])
    np.testing.assert_array_equal(bottom[1].diff, [0.0, 2.0])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("count", [2, 3])
def test_max_routes_the_gradient_to_the_winner(shape, count):
    xs = distinct_inputs(shape, count, seed=count)
    layer, bottom, top = make_layer(eltwise_text("MAX"), xs)
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, np.max(xs, axis=0))
    check_gradient(layer, bottom, top)


def test_max_ties_go_where_caffe_sends_them():
    a = np.array([1.0, 1.0], np.float32)
    layer, bottom, top = make_layer(eltwise_text("MAX"), [a, a.copy(), a.copy()])
    run_forward(layer, bottom, top)
    top[0].diff[...] = 1
    layer.run_backward(top, [True] * 3, bottom)
    # Bottoms 0 and 1 tie: bottom 1 wins; bottom 2 only wins when strictly greater.
    assert [b.diff.tolist() for b in bottom] == [[0, 0], [1, 1], [0, 0]]


@pytest.mark.parametrize(
    "op,extra,match",
    [
        ("PROD", "coeff: 1 coeff: 2", "only takes coefficients for summation"),
        ("SUM", "coeff: 1", "one coefficient per bottom"),
    ],
)
def test_invalid_parameters_name_the_layer(op, extra, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(eltwise_text(op, extra), inputs((2, 2), 2))


def test_shape_mismatch_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*bottom\[1\] has shape \[2, 3\]"):
        make_layer(eltwise_text("SUM"), [np.zeros((2, 2), np.float32), np.zeros((2, 3))])


@needs_cuda
@pytest.mark.parametrize("op", ["SUM", "PROD", "MAX"])
def test_cuda_matches_cpu(op):
    assert_cuda_matches_cpu(eltwise_text(op), distinct_inputs((2, 3, 4), 3))
