import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward

REFERENCE = {
    "SUM": lambda rows: rows.sum(1),
    "ASUM": lambda rows: np.abs(rows).sum(1),
    "SUMSQ": lambda rows: (rows**2).sum(1),
    "MEAN": lambda rows: rows.mean(1),
}


@pytest.mark.parametrize(
    "shape,axis",
    [((1,), 0), ((2, 3), 0), ((2, 3), 1), ((2, 3, 4), 1), ((3, 1, 2, 2), -1), ((2, 3, 2), 2)],
)
@pytest.mark.parametrize("operation", list(REFERENCE))
def test_forward_matches_numpy_and_gradient(shape, axis, operation):
    x = np.random.default_rng(77).normal(0, 1, shape).astype(np.float32)
    text = (
        f'type: "Reduction" reduction_param {{ operation: {operation} axis: {axis} coeff: -1.5 }}'
    )
    layer, bottom, top = make_layer(text, [x])
    (y,) = run_forward(layer, bottom, top)
    lead = shape[: axis % len(shape)]
    assert y.shape == lead
    rows = x.astype(np.float64).reshape(int(np.prod(lead)), -1)
    np.testing.assert_allclose(y.reshape(-1), -1.5 * REFERENCE[operation](rows), rtol=1e-5)
    check_gradient(layer, bottom, top, kink=0.0, kink_range=0.02 if operation == "ASUM" else -1)


def test_bad_axis_names_the_layer():
    with pytest.raises(LayerError, match=r"under_test.*axis"):
        make_layer('type: "Reduction" reduction_param { axis: 2 }', [np.ones((2, 3))])
