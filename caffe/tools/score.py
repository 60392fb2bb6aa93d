"""`caffe test`: score a trained model (Caffe's tools/caffe.cpp `test`).

    caffe test --model M --weights W.caffemodel[,more] [--iterations 50] [--gpu id]
               [--level N] [--stage a,b]

Builds the net in the TEST phase, runs --iterations forward passes and logs every output
element per batch (`Batch i, <output> = v`), then the mean loss (`Loss: L`) and each
output's mean (`<output> = v`, with ` (* w = x loss)` for weighted outputs).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from caffe.errors import CaffeError
from caffe.formats.proto_io import read_net_param
from caffe.net import Net
from caffe.proto import caffe_pb2
from caffe.solvers.log import cpp_float, loss_suffix
from caffe.tools.devices import choose_devices
from caffe.tools.flags import Flags

_log = logging.getLogger("caffe")


def log_device(gpus: list[int]) -> None:
    if gpus:
        _log.info("Use GPU with device ID %d", gpus[0])
    else:
        _log.info("Use CPU.")


def build_net(flags: Flags, phase: int) -> Net:
    """The --model net in `phase` with --level and --stage applied."""
    param = read_net_param(flags.model)
    param.state.phase = phase
    param.state.level = flags.level
    param.state.stage.extend(flags.stages)
    return Net(param)


def score(flags: Flags) -> int:
    if not flags.model:
        raise CaffeError("Need a model definition to score (--model).")
    if not flags.weights:
        raise CaffeError("Need model weights to score (--weights).")
    if flags.iterations < 1:
        raise CaffeError(f"--iterations must be at least 1 (got {flags.iterations}).")
    log_device(choose_devices(flags.gpu))
    net = build_net(flags, caffe_pb2.TEST)
    for path in flags.weight_files:
        net.copy_from(path)
    _log.info("Running for %d iterations.", flags.iterations)
    outputs = net._outputs
    sums: list[np.ndarray] = []
    loss = np.float32(0)
    for i in range(flags.iterations):
        with torch.no_grad():
            loss += np.float32(net.forward_prefilled())
        for j, blob_id in enumerate(outputs):
            values = net._blobs[blob_id].data.astype(np.float32).reshape(-1)
            if i == 0:
                sums.append(values.copy())
            else:
                sums[j] += values
            name = net._blob_names[blob_id]
            for value in values:
                _log.info("Batch %d, %s = %s", i, name, cpp_float(value))
    _log.info("Loss: %s", cpp_float(loss / np.float32(flags.iterations)))
    for blob_id, total in zip(outputs, sums):
        name = net._blob_names[blob_id]
        weight = net._blob_loss_weights[blob_id]
        for value in total / np.float32(flags.iterations):
            _log.info("%s = %s%s", name, cpp_float(value), loss_suffix(weight, value))
    return 0
