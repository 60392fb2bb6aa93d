import numpy as np
import pytest

from caffe.errors import LayerError
from tests.caffe.layer_harness import check_gradient, make_layer, run_forward
from tests.caffe.layers.cuda_compare import assert_cuda_matches_cpu, needs_cuda


def crop_text(axis=None, offsets=()):
    fields = (f"axis: {axis} " if axis is not None else "") + " ".join(
        f"offset: {o}" for o in offsets
    )
    return f'type: "Crop" crop_param {{ {fields} }}'


# (source shape, reference shape, axis, offsets, expected slices)
CASES = [
    ((2, 3, 6, 5), (1, 1, 4, 3), None, (), (slice(None), slice(None), slice(0, 4), slice(0, 3))),
    ((2, 3, 6, 5), (1, 1, 4, 3), 2, (1,), (slice(None), slice(None), slice(1, 5), slice(1, 4))),
    (
        (2, 3, 6, 5),
        (9, 2, 3, 4),
        1,
        (1, 2, 0),
        (slice(None), slice(1, 3), slice(2, 5), slice(0, 4)),
    ),
    ((1, 4, 5), (1, 4, 2), -1, (3,), (slice(None), slice(None), slice(3, 5))),
    ((3, 4), (2, 2), 0, (1, 2), (slice(1, 3), slice(2, 4))),
]


@pytest.mark.parametrize("source,reference,axis,offsets,window", CASES)
def test_forward_is_the_slice_and_gradient_the_padded_diff(
    source, reference, axis, offsets, window
):
    rng = np.random.default_rng(len(source))
    x = rng.standard_normal(source).astype(np.float32)
    ref_blob = np.zeros(reference, np.float32)
    layer, bottom, top = make_layer(crop_text(axis, offsets), [x, ref_blob])
    (y,) = run_forward(layer, bottom, top)
    np.testing.assert_array_equal(y, x[window])
    check_gradient(layer, bottom, top, check_bottom=[0])
    top[0].diff[...] = 1
    layer.run_backward(top, [True, True], bottom)
    expected = np.zeros(source, np.float32)
    expected[window] = 1
    np.testing.assert_array_equal(bottom[0].diff, expected)
    assert not bottom[1].diff.any()


@pytest.mark.parametrize(
    "reference,axis,offsets,match",
    [
        ((1, 1, 4, 3), 2, (1, 2, 3), "number of offset values"),
        ((1, 1, 4, 3), 2, (3,), "invalid crop parameters in dimension 2"),
        ((1, 1, 7, 3), 2, (), "invalid crop parameters in dimension 2"),
        ((1, 1, 4), 2, (), "same number of axes"),
        ((1, 1, 4, 3), 4, (), "axis"),
    ],
)
def test_invalid_crops_name_the_layer(reference, axis, offsets, match):
    with pytest.raises(LayerError, match=rf"under_test.*{match}"):
        make_layer(crop_text(axis, offsets), [np.zeros((2, 3, 6, 5)), np.zeros(reference)])


@needs_cuda
def test_cuda_matches_cpu():
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 5)).astype(np.float32)
    assert_cuda_matches_cpu(crop_text(1, (1, 2, 0)), [x, np.zeros((9, 2, 3, 4), np.float32)],
                            propagate=[True, False])  # fmt: skip
