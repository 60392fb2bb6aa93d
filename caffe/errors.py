"""Errors a user can cause. Each message names the file, line, layer or blob at fault.

A user error must never surface as a traceback from deep inside PyTorch: code that
validates input raises one of these, and the `caffe` command prints only the message.
"""

from __future__ import annotations


class CaffeError(RuntimeError):
    """Base of every error caused by bad input. A RuntimeError, as pycaffe raises for them."""


class PrototxtError(CaffeError):
    """A prototxt that does not parse or breaks a schema rule: names file:line:column."""


class WeightsError(CaffeError):
    """A .caffemodel / .solverstate / .binaryproto that is truncated, corrupt or mismatched."""


class NetError(CaffeError):
    """A net that cannot be built: unknown layer type, unknown bottom, bad blob counts."""


class LayerError(CaffeError):
    """A layer's parameters or input shapes are invalid; the message names the layer."""


class InputShapeError(LayerError):
    """A shapes-only net (Note [shapes only] in caffe/common.py) cannot tell a data layer's top
    shapes without its data, and its data is not there. `tops` are the layer's top names, for
    a caller that can give their shapes another way."""

    def __init__(self, message: str, tops: list[str]) -> None:
        super().__init__(message)
        self.tops = tops


class SolverError(CaffeError):
    """A solver definition that cannot run (missing net, bad lr_policy, unwritable prefix)."""


class DistributedError(CaffeError):
    """A distributed job failed: a peer died, timed out, or broke the protocol. The message
    names the peer, the layer and the iteration."""
