"""pycaffe's net_spec: write Caffe nets as Python expressions (docs/caffe_format.md §5.7).

    from caffe import layers as L, params as P
    n = caffe.NetSpec()
    n.data, n.label = L.Data(source="train_lmdb", backend=P.Data.LMDB, batch_size=64, ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20)
    n.relu1 = L.ReLU(n.conv1, in_place=True)
    print(n.to_proto())

`L.<Type>(*bottoms, **kwargs)` records one layer; nothing is built until `to_proto()`
walks the graph back from the requested tops and emits one LayerParameter per layer, in
dependency order. Keyword routing follows pycaffe exactly: keys ending in "param" go to
the LayerParameter itself; any other key goes to the type's own `<type>_param` message
(found by message class name: ConvolutionParameter <=> Convolution, or, for the types
that borrow another type's message, from SHARED_PARAM_NAMES: Deconvolution and Im2col take
convolution_param, LSTM and RNN recurrent_param), and falls back to
the LayerParameter when that message has no such field (`loss_weight`, `include`,
`name`, ...). Lists are repeated fields, dicts sub-messages, and a scalar given for a
repeated field is wrapped in a list.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from caffe.proto import caffe_pb2

__all__ = [
    "SHARED_PARAM_NAMES",
    "Function",
    "L",
    "NetSpec",
    "P",
    "Top",
    "layers",
    "params",
    "to_proto",
]


def param_name_dict() -> dict[str, str]:
    """Layer type -> prefix of its parameter field, by message class name.

    `convolution_param` holds a ConvolutionParameter, so "Convolution" -> "convolution".
    Types that share another type's message (Deconvolution) have no entry here, as in
    pycaffe; SHARED_PARAM_NAMES adds them for keyword routing.
    """
    names = {}
    for field in caffe_pb2.LayerParameter.DESCRIPTOR.fields:
        if not field.name.endswith("_param") or field.message_type is None:
            continue
        type_name = field.message_type.name
        if type_name.endswith("Parameter"):
            names[type_name[: -len("Parameter")]] = field.name[: -len("_param")]
    return names


# Layer types with no message of their own, and the type whose message they read. pycaffe
# has no such table, so its L.Deconvolution(x, num_output=...) fails in to_proto; with it the
# flat form writes convolution_param, as pycaffe's coord_map already reads it.
SHARED_PARAM_NAMES = {
    "Deconvolution": "convolution",
    "Im2col": "convolution",
    "LSTM": "recurrent",
    "RNN": "recurrent",
}
_PARAM_NAMES = param_name_dict() | SHARED_PARAM_NAMES


def _coerce_scalar(message: Any, name: str, value: Any) -> Any:
    """Accept enum fields given by name (`pool="MAX"`) as well as by number."""
    field = message.DESCRIPTOR.fields_by_name.get(name)
    if (
        field is not None
        and field.type == FieldDescriptor.TYPE_ENUM
        and isinstance(value, str)
        and value in field.enum_type.values_by_name
    ):
        return field.enum_type.values_by_name[value].number
    return value


class UnknownFieldError(AttributeError):
    """The message has no field of that name (an AttributeError, as in pycaffe)."""


def _is_repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED  # protobuf < 5.28


def assign_proto(proto: Any, name: str, value: Any) -> None:
    """Set field `name` of message `proto` from a Python value (pycaffe's assign_proto).

    Raises UnknownFieldError when `proto` (or a nested message) has no field `name`.
    """
    if name not in proto.DESCRIPTOR.fields_by_name:
        raise UnknownFieldError(f"{proto.DESCRIPTOR.name} has no field named '{name}'")
    field = proto.DESCRIPTOR.fields_by_name[name]
    repeated = _is_repeated(field)
    if repeated and not isinstance(value, list | tuple):
        value = [value]
    if isinstance(value, list | tuple):
        container = getattr(proto, name)
        for item in value:
            if isinstance(item, dict):
                element = container.add()
                for key, sub_value in item.items():
                    assign_proto(element, key, sub_value)
            elif field.message_type is not None:
                container.add().CopyFrom(item)
            else:
                container.append(_coerce_scalar(proto, name, item))
    elif isinstance(value, dict):
        for key, sub_value in value.items():
            assign_proto(getattr(proto, name), key, sub_value)
    elif field.message_type is not None:
        getattr(proto, name).CopyFrom(value)
    else:
        setattr(proto, name, _coerce_scalar(proto, name, value))


class Top:
    """One output of a layer: the `n`-th top of Function `fn`."""

    def __init__(self, fn: Function, n: int) -> None:
        self.fn = fn
        self.n = n

    def to_proto(self) -> caffe_pb2.NetParameter:
        """A NetParameter holding this top and everything it depends on."""
        return to_proto(self)

    def _update(self, params: dict[str, Any]) -> None:
        self.fn._update(params)

    def _to_proto(self, layers: dict, names: dict, autonames: Counter) -> None:
        self.fn._to_proto(layers, names, autonames)


class Function:
    """One layer: its type, its bottoms (Tops) and its keyword parameters."""

    def __init__(self, type_name: str, inputs: tuple, params: dict[str, Any]) -> None:
        self.type_name = type_name
        for index, item in enumerate(inputs):
            if not isinstance(item, Top):
                raise TypeError(f"{type_name} input {index} is not a Top (type is {type(item)})")
        self.inputs = inputs
        self.params = dict(params)
        self.ntop = self.params.pop("ntop", 1)
        self.in_place = self.params.pop("in_place", False)
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def _get_name(self, names: dict, autonames: Counter) -> str:
        """The layer's name: its first top's name, or `<Type><k>` for top-less layers."""
        if self not in names and self.ntop > 0:
            names[self] = self._get_top_name(self.tops[0], names, autonames)
        elif self not in names:
            autonames[self.type_name] += 1
            names[self] = f"{self.type_name}{autonames[self.type_name]}"
        return names[self]

    def _get_top_name(self, top: Top, names: dict, autonames: Counter) -> str:
        if top not in names:
            autonames[top.fn.type_name] += 1
            names[top] = f"{top.fn.type_name}{autonames[top.fn.type_name]}"
        return names[top]

    def _update(self, params: dict[str, Any]) -> None:
        self.params.update(params)

    def to_layer_param(self) -> caffe_pb2.LayerParameter:
        """This layer's type, its `name=` if given, and its parameters routed as `to_proto`
        routes them; no bottoms or tops: what tools reading a layer's settings need."""
        layer = caffe_pb2.LayerParameter(type=self.type_name, name=self.params.get("name", ""))
        for key, value in self.params.items():
            self._assign(layer, key, value)
        return layer

    def _to_proto(self, layers: dict, names: dict, autonames: Counter) -> None:
        if self in layers:
            return
        bottom_names = []
        for item in self.inputs:
            item._to_proto(layers, names, autonames)
            bottom_names.append(layers[item.fn].top[item.n])
        layer = caffe_pb2.LayerParameter()
        layer.type = self.type_name
        layer.bottom.extend(bottom_names)
        if self.in_place:
            layer.top.extend(layer.bottom)
        else:
            for top in self.tops:
                layer.top.append(self._get_top_name(top, names, autonames))
        layer.name = self._get_name(names, autonames)
        for key, value in self.params.items():
            self._assign(layer, key, value)
        layers[self] = layer

    def _assign(self, layer: caffe_pb2.LayerParameter, key: str, value: Any) -> None:
        target = layer
        prefix = _PARAM_NAMES.get(self.type_name)
        if not key.endswith("param") and prefix is not None:
            type_param = getattr(layer, prefix + "_param")
            if key in type_param.DESCRIPTOR.fields_by_name:
                target = type_param
        # Keys ending in "param", and keys the type's message lacks, belong to the layer.
        try:
            assign_proto(target, key, value)
        except UnknownFieldError as e:
            raise UnknownFieldError(f"{self.type_name} layer '{layer.name}': {e}") from None


class NetSpec:
    """Holds named Tops; `to_proto()` names each layer and top after its attribute."""

    def __init__(self) -> None:
        super().__setattr__("tops", OrderedDict())

    def __setattr__(self, name: str, value: Top) -> None:
        self.tops[name] = value

    def __getattr__(self, name: str) -> Top:
        try:
            return self.tops[name]
        except KeyError:
            raise AttributeError(f"NetSpec has no top named '{name}'") from None

    def __delattr__(self, name: str) -> None:
        del self.tops[name]

    def __setitem__(self, name: str, value: Top) -> None:
        self.tops[name] = value

    def __getitem__(self, name: str) -> Top:
        return self.tops[name]

    def __delitem__(self, name: str) -> None:
        del self.tops[name]

    def keys(self) -> list[str]:
        return list(self.tops.keys())

    def to_proto(self) -> caffe_pb2.NetParameter:
        names = {top: name for name, top in self.tops.items()}
        autonames: Counter = Counter()
        layers: OrderedDict = OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers, names, autonames)
        net = caffe_pb2.NetParameter()
        net.layer.extend(layers.values())
        return net


def to_proto(*tops: Top) -> caffe_pb2.NetParameter:
    """A NetParameter with the given tops and their ancestors, named `<Type><k>`."""
    layers: OrderedDict = OrderedDict()
    autonames: Counter = Counter()
    for top in tops:
        top.fn._to_proto(layers, {}, autonames)
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers.values())
    return net


class Layers:
    """`L.<Type>(*bottoms, **params)`: one Top, a tuple of Tops (ntop > 1), or the
    Function itself (ntop == 0, e.g. Silence)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def layer_fn(*args: Top, **kwargs: Any):
            fn = Function(name, args, kwargs)
            if fn.ntop == 0:
                return fn
            if fn.ntop == 1:
                return fn.tops[0]
            return fn.tops

        layer_fn.__name__ = name
        return layer_fn


class Parameters:
    """`P.<Type>.<ENUM_VALUE>`: an enum value of caffe_pb2.<Type>Parameter."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        message = getattr(caffe_pb2, name + "Parameter", None)
        if message is None:
            raise AttributeError(f"caffe_pb2 has no message {name}Parameter")

        class Param:
            def __getattr__(self, param_name: str) -> int:
                return getattr(message, param_name)

        return Param()


layers = Layers()
params = Parameters()
L = layers
P = params
