"""Built-in layer types, one module per registered type (InnerProduct -> inner_product.py).

Importing this package imports every module in it, which registers each type.

This package is also pycaffe's `caffe.layers` of net_spec (`from caffe import layers
as L; L.Convolution(...)`): attribute names that are not modules here (layer types are
CamelCase, modules snake_case) resolve to net_spec layer factories, so both meanings of
`caffe.layers` keep working.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    from caffe.net_spec import layers as _net_spec_layers

    return getattr(_net_spec_layers, name)
