"""Spatial geometry shared by Convolution, Deconvolution and Pooling.

Caffe states a spatial parameter (kernel, stride, pad, dilation) in one of two forms:
a repeated field (one value for every spatial axis, or one value per axis) or, for
2-D only, a pair of scalar fields `<name>_h`/`<name>_w`. The two forms are exclusive.
`spatial_values` reads either form and validates it the way Caffe does, raising
through the caller's `error` factory so that the message names the layer.
`declared_values` reads either form as written, for tools that see a layer without its
input shapes (caffe.draw, caffe.coord_map).

Output sizes follow Caffe's formulas exactly (they differ from PyTorch's in corners,
see `pooled_sizes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from caffe.errors import LayerError

ErrorFactory = Callable[[str], LayerError]


def spatial_values(
    param: object,
    repeated: str,
    pair: tuple[str, str] | None,
    num_spatial: int,
    default: int | None,
    error: ErrorFactory,
) -> tuple[int, ...]:
    """One value per spatial axis from `param.<repeated>` or `param.<pair[0]>/<pair[1]>`.

    `default` is used when neither form is given; None means the value is required.
    """
    values = list(getattr(param, repeated))
    if pair is not None and (param.HasField(pair[0]) or param.HasField(pair[1])):
        if num_spatial != 2:
            raise error(
                f"{pair[0]} & {pair[1]} can only be used for 2D convolution "
                f"(the input has {num_spatial} spatial axes)"
            )
        if values:
            raise error(f"Either {repeated} or {pair[0]}/{pair[1]} should be specified; not both.")
        return (getattr(param, pair[0]), getattr(param, pair[1]))
    if not values:
        if default is None:
            raise error(f"{repeated} must be specified")
        return (default,) * num_spatial
    if len(values) == 1:
        return (values[0],) * num_spatial
    if len(values) != num_spatial:
        raise error(
            f"{repeated} must be specified once, or once per spatial dimension "
            f"({repeated} specified {len(values)} times; {num_spatial} spatial dims)"
        )
    return tuple(values)


def conv_axes(
    blob: object, param: object, error: ErrorFactory, max_spatial: int | None = None
) -> tuple[int, int]:
    """(channel axis, number of spatial axes after it) of `blob` under a
    ConvolutionParameter's `axis`: at least one spatial axis, at most `max_spatial`."""
    try:
        channel_axis = blob.canonical_axis(param.axis)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise error(f"convolution_param.axis: {exc}") from None
    shape = blob.shape  # type: ignore[attr-defined]
    num_spatial = len(shape) - channel_axis - 1
    if num_spatial < 1 or (max_spatial is not None and num_spatial > max_spatial):
        upto = f" (at most {max_spatial})" if max_spatial is not None else ""
        raise error(
            f"needs at least one spatial axis{upto} after the channel axis {channel_axis}; "
            f"bottom {list(shape)} has {num_spatial} spatial axes"
        )
    return channel_axis, num_spatial


def conv_window(
    param: object, num_spatial: int, error: ErrorFactory
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """A ConvolutionParameter's kernel, stride, pad and dilation, one value per spatial
    axis, checked as Caffe checks them (Convolution, Deconvolution and Im2col share them)."""
    kernel = spatial_values(param, "kernel_size", ("kernel_h", "kernel_w"), num_spatial, None,
                            error)  # fmt: skip
    stride = spatial_values(param, "stride", ("stride_h", "stride_w"), num_spatial, 1, error)
    pad = spatial_values(param, "pad", ("pad_h", "pad_w"), num_spatial, 0, error)
    dilation = spatial_values(param, "dilation", None, num_spatial, 1, error)
    for name, values in (("Filter", kernel), ("Stride", stride), ("Dilation", dilation)):
        if min(values) <= 0:
            raise error(f"{name} dimensions must be nonzero (got {list(values)})")
    return kernel, stride, pad, dilation


def declared_values(param: object, name: str, default: int | None) -> tuple[int, ...]:
    """A spatial parameter as written, before the number of spatial axes is known (drawing
    a net, net_spec geometry): `(<p>_h, <p>_w)` when either is set (`kernel_size` pairs
    with kernel_h/kernel_w), else the field itself (repeated in ConvolutionParameter,
    scalar in PoolingParameter), else `(default,)`, or `()` when `default` is None.
    """
    fields = param.DESCRIPTOR.fields_by_name
    prefix = name.split("_")[0]
    pair = (f"{prefix}_h", f"{prefix}_w")
    if pair[0] in fields and (param.HasField(pair[0]) or param.HasField(pair[1])):
        return (getattr(param, pair[0]), getattr(param, pair[1]))
    value = getattr(param, name)
    if isinstance(value, int):
        values: tuple[int, ...] = (value,) if param.HasField(name) else ()
    else:
        values = tuple(value)
    if values:
        return values
    return () if default is None else (default,)


def kernel_extent(kernel: int, dilation: int) -> int:
    """Span of a dilated kernel: d(k-1)+1."""
    return dilation * (kernel - 1) + 1


def conv_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Convolution: floor((in + 2p - (d(k-1)+1)) / s) + 1."""
    return (size + 2 * pad - kernel_extent(kernel, dilation)) // stride + 1


def deconv_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Deconvolution (transposed convolution): s(in-1) + d(k-1)+1 - 2p."""
    return stride * (size - 1) + kernel_extent(kernel, dilation) - 2 * pad


def pooled_sizes(
    sizes: Sequence[int],
    kernels: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    ceil_mode: bool,
) -> tuple[int, ...]:
    """Caffe's pooling output sizes.

    out = ceil((in + 2p - k) / s) + 1 (floor in FLOOR mode). If any axis is padded, the
    last window of every axis must start strictly inside the image plus its leading
    pad: a window starting at >= in + p is dropped. Unlike PyTorch's ceil mode, nothing
    is dropped when there is no padding at all.
    """
    out = [
        (-(-(n + 2 * p - k) // s) if ceil_mode else (n + 2 * p - k) // s) + 1
        for n, k, s, p in zip(sizes, kernels, strides, pads)
    ]
    if any(pads):
        out = [
            o - 1 if (o - 1) * s >= n + p else o for o, n, s, p in zip(out, sizes, strides, pads)
        ]
    return tuple(out)
