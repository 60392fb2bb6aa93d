"""Weight fillers (FillerParameter.type): constant, uniform, gaussian (with sparse),
positive_unitball, xavier, msra, bilinear.

Values are drawn on the CPU from torch's global generator and then copied to the
blob's device, so a given random seed fills identical weights on CPU and CUDA.
"""

from __future__ import annotations

import math

import torch

from caffe.blob import Blob
from caffe.common import shapes_only
from caffe.errors import LayerError
from caffe.proto import caffe_pb2

FillerParameter = caffe_pb2.FillerParameter


def _fans(shape: tuple[int, ...]) -> tuple[float, float]:
    count = math.prod(shape)
    fan_in = count / shape[0] if len(shape) >= 1 and shape[0] else count
    fan_out = count / shape[1] if len(shape) >= 2 and shape[1] else count
    return fan_in, fan_out


def _scale_n(param: caffe_pb2.FillerParameter, shape: tuple[int, ...]) -> float:
    fan_in, fan_out = _fans(shape)
    if param.variance_norm == FillerParameter.AVERAGE:
        return (fan_in + fan_out) / 2.0
    if param.variance_norm == FillerParameter.FAN_OUT:
        return fan_out
    return fan_in


def filler_values(param: caffe_pb2.FillerParameter, shape: tuple[int, ...]) -> torch.Tensor:
    """A CPU float32 tensor of `shape` filled as `param` says."""
    kind = param.type or "constant"
    out = torch.empty(shape, dtype=torch.float32)
    if out.numel() == 0:
        return out
    if kind == "constant":
        return out.fill_(param.value)
    if kind == "uniform":
        return out.uniform_(param.min, param.max)
    if kind == "gaussian":
        out.normal_(param.mean, param.std)
        if param.sparse >= 0:
            # Keep each weight with probability sparse / num_outputs (Caffe's sparse gaussian).
            if len(shape) < 2:
                raise LayerError("sparse gaussian filler needs a blob with at least 2 axes")
            keep = min(1.0, param.sparse / shape[0])
            out *= torch.bernoulli(torch.full(shape, keep))
        return out
    if kind == "positive_unitball":
        out.uniform_(0.0, 1.0)
        rows = out.view(shape[0], -1)
        rows /= rows.sum(dim=1, keepdim=True)
        return out
    if kind == "xavier":
        bound = math.sqrt(3.0 / _scale_n(param, shape))
        return out.uniform_(-bound, bound)
    if kind == "msra":
        return out.normal_(0.0, math.sqrt(2.0 / _scale_n(param, shape)))
    if kind == "bilinear":
        return _bilinear(shape)
    raise LayerError(
        f"Unknown filler type '{kind}'. Known: bilinear, constant, gaussian, msra, "
        "positive_unitball, uniform, xavier"
    )


def _bilinear(shape: tuple[int, ...]) -> torch.Tensor:
    if len(shape) != 4 or shape[2] != shape[3]:
        raise LayerError(f"bilinear filler needs a 4-D blob with square kernels, got {shape}")
    k = shape[3]
    f = math.ceil(k / 2.0)
    c = (k - 1) / (2.0 * f)
    axis = 1.0 - torch.abs(torch.arange(k, dtype=torch.float32) / f - c)
    kernel = axis[:, None] * axis[None, :]
    return kernel.expand(shape).contiguous()


def fill(blob: Blob, param: caffe_pb2.FillerParameter | None) -> None:
    """Fill blob.data; an unset filler message means constant 0, as in Caffe."""
    if shapes_only(blob.device):
        return  # Note [shapes only] (caffe/common.py): nothing to fill, nothing to draw
    values = filler_values(param if param is not None else FillerParameter(), blob.shape_tuple)
    blob.data_tensor.copy_(values)
