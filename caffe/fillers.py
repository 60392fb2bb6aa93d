"""Weight fillers (FillerParameter.type): constant, uniform, gaussian (with sparse),
positive_unitball, xavier, msra, bilinear.

Values are drawn on the CPU from torch's global generator (straight into a CPU blob's memory,
through a temporary for a CUDA blob), so a given random seed fills identical weights on CPU
and CUDA. Inside a net's build, fills wait for the net's parameter buffer (Note [deferred
fills]).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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


def filler_values(
    param: caffe_pb2.FillerParameter, shape: tuple[int, ...], out: torch.Tensor | None = None
) -> torch.Tensor:
    """A CPU float32 tensor of `shape` filled as `param` says: `out` (contiguous, CPU, float32,
    of that shape) written in place when given, which draws the same values."""
    kind = param.type or "constant"
    if out is None:
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
        return out.copy_(_bilinear(shape))
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


# Note [deferred fills]
# A net fills each weight as its layer is set up, but the weights' final memory, the net's
# flat parameter buffer (caffe/net.py), exists only once every layer is set up. Filled where
# they were made, the weights were resident twice while they moved, and building VGG19 peaked
# at 2.4x torch.nn (issue 24). So inside a net's build (`deferred_fills`) `fill` records what
# to draw, and the net draws it into the buffer, in the recorded order, once allocated: the
# same values as drawing at once, because nothing else draws from torch's global generator
# in between. Whatever does draw during a build calls `flush_fills()` first: the data
# layers' `seeded_generator`, WindowData's seed, and the net before the setup of a user's
# layer (a Python layer, a class registered from outside the project: Net._set_up); the net
# checks every built-in layer's setup (the generator's state across it, with fills pending)
# and names one that drew unannounced. Reading a pending blob's data early (a
# layer that reads its weights at setup) draws every fill pending up to it first.
_builds = threading.local()  # .pending: one list of (blob, filler) per net being built


def _pending_lists() -> list[list[tuple[Blob, caffe_pb2.FillerParameter]]]:
    if not hasattr(_builds, "pending"):
        _builds.pending = []
    return _builds.pending


@contextmanager
def deferred_fills() -> Iterator[list[tuple[Blob, caffe_pb2.FillerParameter]]]:
    """Defer `fill` until the block ends, then draw everything recorded, in order; an error
    leaves nothing drawn. Yields the list of fills pending (Note [deferred fills])."""
    flush_fills()  # an enclosing build's fills come first
    pending: list[tuple[Blob, caffe_pb2.FillerParameter]] = []
    lists = _pending_lists()
    lists.append(pending)
    try:
        yield pending
    except BaseException:
        for blob, _ in pending:
            blob.await_fill(None)
        pending.clear()
        raise
    finally:
        popped = lists.pop()  # builds nest within a thread: the innermost ends first
        assert popped is pending, "deferred fill scopes ended out of order"
    _draw_all(pending)


def flush_fills() -> None:
    """Draw every deferred fill now, in order: call before drawing anything else from torch's
    global generator while a net is being built (Note [deferred fills])."""
    for pending in _pending_lists():
        _draw_all(pending)


def _draw_all(pending: list[tuple[Blob, caffe_pb2.FillerParameter]]) -> None:
    while pending:
        blob, param = pending.pop(0)
        blob.await_fill(None)
        _draw(blob, param)


def _draw(blob: Blob, param: caffe_pb2.FillerParameter) -> None:
    if blob.device.type == "cpu":
        filler_values(param, blob.shape_tuple, out=blob.data_tensor)
    else:
        blob.data_tensor.copy_(filler_values(param, blob.shape_tuple))


def fill(blob: Blob, param: caffe_pb2.FillerParameter | None) -> None:
    """Fill blob.data; an unset filler message means constant 0, as in Caffe. Inside a net's
    build, deferred until the net's parameter memory exists (Note [deferred fills])."""
    if shapes_only(blob.device):
        return  # Note [shapes only] (caffe/common.py): nothing to fill, nothing to draw
    param = param if param is not None else FillerParameter()
    lists = _pending_lists()
    if lists:
        lists[-1].append((blob, param))
        blob.await_fill(flush_fills)
    else:
        _draw(blob, param)
