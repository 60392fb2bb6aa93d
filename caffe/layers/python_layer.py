"""Python layers (`type: "Python"`): a class the user writes against pycaffe's caffe.Layer.

python_param names the module (imported with the normal import system, so it must be on
sys.path) and the class; the class is constructed with the LayerParameter, as pycaffe
does, and gets `param_str` and `phase` before its setup runs. From then on it is an
ordinary layer: its learnable blobs (`self.blobs.add_blob(...)`) are saved, loaded and
shared like any parameter, and exceptions raised in user code reach the caller with their
original type, nothing wrapped.
"""

from __future__ import annotations

import importlib

import torch

from caffe.errors import NetError
from caffe.layer import BlobVec, Layer, register_layer
from caffe.proto import caffe_pb2


@register_layer("Python")
class PythonLayer(Layer):
    """The registry entry for "Python": `create` returns an instance of the user's class."""

    @classmethod
    def create(cls, param: caffe_pb2.LayerParameter, device: torch.device | None) -> Layer:
        where = f"Layer '{param.name}' (type Python)"
        spec = param.python_param
        if not spec.module or not spec.layer:
            raise NetError(f"{where}: python_param.module and python_param.layer are required")
        module = importlib.import_module(spec.module)
        user_class = getattr(module, spec.layer, None)
        if user_class is None:
            raise AttributeError(
                f"{where}: module '{spec.module}' ({module.__file__}) has no attribute "
                f"'{spec.layer}'"
            )
        if not (isinstance(user_class, type) and issubclass(user_class, Layer)):
            raise NetError(f"{where}: {spec.module}.{spec.layer} is not a subclass of caffe.Layer")
        # pycaffe constructs the class with the LayerParameter alone; user __init__ methods
        # are written for that signature.
        layer = user_class(param)
        if device is not None and layer.device != device:
            layer.device = device
            if not layer.blobs:
                layer.blobs = BlobVec(device)
        layer.param_str = spec.param_str
        layer.phase = int(param.phase)
        return layer
