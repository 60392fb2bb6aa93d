"""Caffe-compatible engine on PyTorch tensors (pycaffe's `import caffe`).

Heavier parts (solvers, io, net_spec, classifier...) load on first use, so
`import caffe` stays light and each module can be read on its own.
"""

from __future__ import annotations

import importlib

from caffe.common import (
    has_nccl,
    set_device,
    set_mode_cpu,
    set_mode_gpu,
    set_multiprocess,
    set_random_seed,
    set_solver_count,
    set_solver_rank,
    solver_count,
    solver_rank,
)
from caffe.data.threads import set_data_threads
from caffe.layer import Layer, layer_type_list
from caffe.log import init_log, log
from caffe.net import Net
from caffe.proto import caffe_pb2

__version__ = "1.0.0"
TRAIN: int = caffe_pb2.TRAIN
TEST: int = caffe_pb2.TEST

# name -> module that defines it; resolved on first attribute access.
_LAZY = {
    "SGDSolver": "caffe.solvers",
    "NesterovSolver": "caffe.solvers",
    "AdaGradSolver": "caffe.solvers",
    "RMSPropSolver": "caffe.solvers",
    "AdaDeltaSolver": "caffe.solvers",
    "AdamSolver": "caffe.solvers",
    "get_solver": "caffe.solvers",
    "Timer": "caffe.timer",
    "NetSpec": "caffe.net_spec",
    "to_proto": "caffe.net_spec",
    "params": "caffe.net_spec",
    "Classifier": "caffe.classifier",
    "Detector": "caffe.detector",
    "NCCL": "caffe.parallel.nccl",
}
_SUBMODULES = {"io", "net_spec", "draw", "coord_map", "proto", "layers", "solvers", "parallel"}

init_log()


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"caffe.{name}")
    raise AttributeError(f"module 'caffe' has no attribute '{name}'")


__all__ = [
    "TEST",
    "TRAIN",
    "Layer",
    "Net",
    "__version__",
    "caffe_pb2",
    "has_nccl",
    "init_log",
    "layer_type_list",
    "log",
    "set_device",
    "set_mode_cpu",
    "set_mode_gpu",
    "set_multiprocess",
    "set_data_threads",
    "set_random_seed",
    "set_solver_count",
    "set_solver_rank",
    "solver_count",
    "solver_rank",
    *_LAZY,
]
