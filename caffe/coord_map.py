"""Spatial geometry of net_spec graphs (pycaffe's caffe.coord_map): which Crop aligns a top
with another, as FCNs crop their upsampled scores to the input.

A coordinate map `(axis, a, b)` says x_top = a * x_bottom + b on the spatial axes, where
x is the position of a pixel's centre in index units. `axis` is the last axis *before* the
spatial ones (the channel axis, 1 for N×C×H×W), so a Crop that acts on the spatial axes
starts at `axis + 1`; None means the layer keeps every coordinate (ReLU, Eltwise, ...).
This is pycaffe's convention, which `crop()` relies on.

    Convolution, Pooling, Im2col  a = 1/s, b = (p - (k_e - 1)/2) / s, k_e = d(k - 1) + 1
    Deconvolution                 the inverse: a = s, b = (k_e - 1)/2 - p
    Crop                          axis = crop_param.axis - 1, a = 1, b = -offset
    pass-through types            (None, 1, 0)

A window of a convolution (or pooling) output y starts at input s*y - p and spans k_e
pixels, so its centre is x = s*y - p + (k_e - 1)/2; solving for y gives the row above.

`a` and `b` are floats when every spatial axis maps alike, and otherwise numpy arrays with
one entry per spatial axis (a 3x5 kernel, pad_h != pad_w, 3-D pads [0, 1, 2]), both of
the same length; pycaffe always returns arrays, which compare and index the same way where
its tests look. Any type not listed raises UndefinedMapException.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from caffe.conv_geometry import declared_values
from caffe.errors import CaffeError, LayerError
from caffe.net_spec import Function, L, Top

__all__ = [
    "AxisMismatchException",
    "CropError",
    "UndefinedMapException",
    "compose",
    "coord_map",
    "coord_map_from_to",
    "crop",
    "inverse",
]

Scale = float | np.ndarray  # one value for every spatial axis, or one per axis
CoordMap = tuple[int | None, Scale, Scale]
IDENTITY: CoordMap = (None, 1.0, 0.0)

# Layers whose top pixel (c, y, x) is computed at bottom pixel (·, y, x): elementwise,
# per-channel or across-channel only. Softmax keeps the shape whatever its axis.
PASS_THROUGH_TYPES = frozenset(
    {"AbsVal", "BatchNorm", "Bias", "BNLL", "Clip", "Concat", "Dropout", "ELU", "Eltwise"}
    | {"Exp", "Log", "LRN", "MVN", "Power", "PReLU", "ReLU", "Scale", "Sigmoid", "Silence"}
    | {"Softmax", "Split", "Swish", "TanH", "Threshold"}
)
WINDOW_TYPES = frozenset({"Convolution", "Im2col", "Pooling"})


class UndefinedMapException(RuntimeError):
    """The layer type has no coordinate map (InnerProduct, Reshape, global pooling, ...).

    A RuntimeError, so that `coord_map_from_to` between tops that no chain of spatial layers
    connects raises one exception type whichever the reason, as pycaffe's does."""


class AxisMismatchException(Exception):
    """Two maps act on different spatial axes and cannot be composed."""


class CropError(ValueError, AssertionError):
    """`crop()` found no Crop that aligns the tops. Also an AssertionError, because pycaffe's
    crop() states these conditions as asserts and its callers catch that."""


def _describe(fn: Function) -> str:
    name = fn.params.get("name")
    return f"{fn.type_name} layer '{name}'" if name else f"{fn.type_name} layer"


def _simplify(axis: int | None, a: object, b: object) -> CoordMap:
    """The map with `a` and `b` as floats when all spatial axes agree, else as arrays of one
    common length (a single value stands for every axis)."""
    a_axes = np.atleast_1d(np.asarray(a, dtype=np.float64))
    b_axes = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if np.all(a_axes == a_axes[0]) and np.all(b_axes == b_axes[0]):
        return axis, float(a_axes[0]), float(b_axes[0])
    if len(a_axes) != len(b_axes) and 1 not in (len(a_axes), len(b_axes)):
        raise AxisMismatchException(
            f"a map over {len(a_axes)} spatial axes meets one over {len(b_axes)}"
        )
    a_axes, b_axes = np.broadcast_arrays(a_axes, b_axes)
    return axis, a_axes.copy(), b_axes.copy()


def _window(fn: Function, param: object, dilated: bool) -> tuple[np.ndarray, ...]:
    """(effective kernel, stride, pad) of a convolution or pooling window, each with one
    entry for every spatial axis or one per axis."""
    values = {}
    for name, default in (("kernel_size", None), ("stride", 1), ("pad", 0), ("dilation", 1)):
        if name == "dilation" and not dilated:
            values[name] = (1,)
            continue
        values[name] = declared_values(param, name, default)
        if not values[name]:
            raise LayerError(f"{_describe(fn)}: {name} must be specified")
    counts = {len(v) for v in values.values()} - {1}
    if len(counts) > 1:
        given = ", ".join(f"{name} {list(v)}" for name, v in values.items() if len(v) > 1)
        raise LayerError(f"{_describe(fn)}: {given} give different numbers of spatial axes")
    kernel, stride, pad, dilation = (np.asarray(v, dtype=np.float64) for v in values.values())
    return dilation * (kernel - 1) + 1, stride, pad


def _pass_through(fn: Function) -> CoordMap:
    if fn.type_name == "Concat":
        param = fn.to_layer_param().concat_param
        axis = param.concat_dim if param.HasField("concat_dim") else param.axis
        if axis not in (0, 1):  # joining along a spatial axis shifts the second bottom
            raise UndefinedMapException(f"{_describe(fn)}: Concat along axis {axis} has no map")
    return IDENTITY


def coord_map(fn: Function) -> CoordMap:
    """The map from the coordinates of `fn`'s bottom to those of its top."""
    kind = fn.type_name
    if kind in PASS_THROUGH_TYPES:
        return _pass_through(fn)
    layer = fn.to_layer_param()
    if kind in ("Convolution", "Im2col", "Deconvolution"):
        param = layer.convolution_param
        extent, stride, pad = _window(fn, param, dilated=True)
        if kind == "Deconvolution":
            return _simplify(param.axis, stride, (extent - 1) / 2 - pad)
        return _simplify(param.axis, 1 / stride, (pad - (extent - 1) / 2) / stride)
    if kind == "Pooling":
        if layer.pooling_param.global_pooling:
            raise UndefinedMapException(f"{_describe(fn)}: global pooling has no map")
        extent, stride, pad = _window(fn, layer.pooling_param, dilated=False)
        return _simplify(1, 1 / stride, (pad - (extent - 1) / 2) / stride)
    if kind == "Crop":
        param = layer.crop_param
        if param.axis < 1:
            raise LayerError(f"{_describe(fn)}: coord_map needs crop axis >= 1, not {param.axis}")
        offsets = list(param.offset) or [0]
        return _simplify(param.axis - 1, 1.0, -np.asarray(offsets, dtype=np.float64))
    raise UndefinedMapException(f"no coordinate map for layer type {kind}")


def compose(base_map: CoordMap, next_map: CoordMap) -> CoordMap:
    """base_map after next_map: x -> base(next(x)). Walking a net from a top towards its
    inputs, `base_map` is what has been composed so far and `next_map` the layer below."""
    axis_base, a_base, b_base = base_map
    axis_next, a_next, b_next = next_map
    if axis_base is not None and axis_next is not None and axis_base != axis_next:
        raise AxisMismatchException(
            f"cannot compose a map on spatial axes after {axis_next} with one after {axis_base}"
        )
    axis = axis_next if axis_base is None else axis_base
    a_base, b_base, a_next, b_next = (np.asarray(v) for v in (a_base, b_base, a_next, b_next))
    lengths = {v.size for v in (a_base, b_base, a_next, b_next)} - {1}
    if len(lengths) > 1:
        raise AxisMismatchException(
            f"cannot compose maps over {' and '.join(map(str, sorted(lengths)))} spatial axes"
        )
    return _simplify(axis, a_base * a_next, a_base * b_next + b_base)


def inverse(coord_map: CoordMap) -> CoordMap:
    """x_bottom as a function of x_top."""
    axis, a, b = coord_map
    a, b = np.asarray(a), np.asarray(b)
    return _simplify(axis, 1 / a, -b / a)


def coordinate_bottoms(top: Top) -> tuple[Top, ...]:
    """The bottoms that share `top`'s coordinates: every bottom of Eltwise and Concat, the
    paired bottom of a layer with one top per bottom, otherwise the first bottom (Crop's
    second bottom only lends its shape, Scale's a per-channel factor)."""
    fn = top.fn
    if fn.type_name in ("Eltwise", "Concat"):
        return tuple(fn.inputs)
    if len(fn.inputs) == fn.ntop > 1:
        return (fn.inputs[top.n],)
    return tuple(fn.inputs[:1])


_Found = CoordMap | Exception


def _maps_to(start: Top) -> dict[Top, _Found]:
    """For each ancestor t of `start` (nearest first), the map x_start = M(x_t). An ancestor
    reachable only through a layer without a map holds that layer's exception instead: it
    matters only if no better common ancestor is found."""
    found: dict[Top, _Found] = {start: IDENTITY}
    queue = deque([start])
    while queue:
        top = queue.popleft()
        here = found[top]
        bottoms = coordinate_bottoms(top)
        if bottoms and not isinstance(here, Exception):
            try:
                here = compose(here, coord_map(top.fn))
            except (UndefinedMapException, AxisMismatchException, CaffeError) as e:
                here = e
        for bottom in bottoms:
            if bottom not in found or (
                isinstance(found[bottom], Exception) and not isinstance(here, Exception)
            ):
                found[bottom] = here
                queue.append(bottom)
    return found


def _describe_top(top: Top) -> str:
    return f"top {top.n} of {_describe(top.fn)}"


def coord_map_from_to(top_from: Top, top_to: Top) -> CoordMap:
    """The map x_to = a * x_from + b between two tops, through their nearest common
    ancestor c: x_to = M_to(x_c) and x_from = M_from(x_c), so M_to ∘ M_from⁻¹."""
    from_maps = _maps_to(top_from)
    to_maps = _maps_to(top_to)
    common = [top for top in to_maps if top in from_maps]
    if not common:
        raise RuntimeError(
            f"{_describe_top(top_from)} and {_describe_top(top_to)} have no common ancestor"
        )
    for top in common:
        map_from, map_to = from_maps[top], to_maps[top]
        if not isinstance(map_from, Exception) and not isinstance(map_to, Exception):
            return compose(map_to, inverse(map_from))
    nearest = common[0]
    failure = from_maps[nearest]
    raise failure if isinstance(failure, Exception) else to_maps[nearest]


_TOLERANCE = 1e-9


def _format(value: Scale) -> str:
    if np.ndim(value) == 0:
        return f"{float(value):g}"
    return "[" + ", ".join(f"{v:g}" for v in value) + "]"


def crop(top_from: Top, top_to: Top) -> Top:
    """The Crop of `top_from` to `top_to`'s shape that puts each pixel of `top_from` on the
    pixel of `top_to` it corresponds to (pycaffe's crop): needs a == 1 and an integral
    b <= 0 on every spatial axis, the offset being -b (one offset when all axes agree, else
    one per axis). Raises CropError (a ValueError and an AssertionError) otherwise."""
    axis, a, b = coord_map_from_to(top_from, top_to)
    if np.ndim(b) == 0:
        relation = f"x_to = {_format(a)} * x_from {'-' if b < 0 else '+'} {abs(b):g}"
    else:
        relation = f"x_to = {_format(a)} * x_from + {_format(b)}"
    if not np.allclose(a, 1.0, rtol=0.0, atol=_TOLERANCE):
        raise CropError(f"crop: {relation}; the tops differ in scale, no crop aligns them")
    offsets = np.atleast_1d(np.round(-np.asarray(b)))
    if np.any(offsets < 0) or not np.allclose(offsets, -np.asarray(b), rtol=0.0, atol=_TOLERANCE):
        raise CropError(
            f"crop: {relation}; cropping needs an integral b <= 0 (top_from must cover top_to)"
        )
    first_spatial = (1 if axis is None else axis) + 1
    return L.Crop(
        top_from, top_to, crop_param=dict(axis=first_spatial, offset=[int(o) for o in offsets])
    )
