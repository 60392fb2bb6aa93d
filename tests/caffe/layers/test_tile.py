import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def tile_text(tiles, axis=None):
    return f'type: "Tile" tile_param {{ tiles: {tiles} {"" if axis is None else f"axis: {axis}"} }}'


# (bottom shape, tiles, axis; numpy axis)
CASES = [((2, 3, 2), 3, None, 1), ((2, 3), 2, 0, 0), ((1, 2, 3), 2, -1, 2), ((3,), 1, 0, 0)]


@pytest.mark.parametrize("shape,tiles,axis,np_axis", CASES)
def test_forward_matches_numpy_tile_and_gradient(shape, tiles, axis, np_axis):
    x = np.random.default_rng(tiles).standard_normal(shape).astype(np.float32)
    layer, bottom, top = make_layer(tile_text(tiles, axis), [x])
    (y,) = run_forward(layer, bottom, top)
    reps = [1] * len(shape)
    reps[np_axis] = tiles
    np.testing.assert_array_equal(y, np.tile(x, reps))
    check_gradient(layer, bottom, top)


@pytest.mark.parametrize("text,match", [(tile_text(0), "must be positive"),
                                        (tile_text(2, 3), "tile_param.axis")])  # fmt: skip
def test_invalid_parameters_name_the_layer(text, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(text, [np.zeros((2, 3), np.float32)])


@needs_cuda
def test_cuda_matches_cpu():
    x = np.random.default_rng(3).standard_normal((2, 3, 2)).astype(np.float32)
    assert_cuda_matches_cpu(tile_text(3), [x])
