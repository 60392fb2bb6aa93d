"""Pictures of nets (pycaffe's caffe.draw): a NetParameter as a Graphviz graph.

    net_to_dot(net, rankdir="LR") -> str          DOT text, written by this module alone
    get_pydot_graph(net, rankdir) -> pydot.Dot    the same graph as pydot objects (needs pydot)
    draw_net(net, rankdir, ext="png") -> bytes    rendered by Graphviz's `dot -T<ext>`
    draw_net_to_file(net, filename)               format from the extension; .dot/.gv is the
                                                  DOT text itself and needs no Graphviz

One box per layer (its name, type, and the settings that shape its output), one octagon
per blob, edges bottom blob -> layer -> top blob. An in-place layer (top == bottom) writes
a new version of its blob, drawn as a second node with the same name, so the graph stays
acyclic and shows the order in which the blob is rewritten: conv1 -> relu1 -> conv1 ->
pool1. A top that is not in place but names an existing blob (the TRAIN and the TEST data
layer when every phase is drawn) shares that blob's node.

`phase` keeps the layers a Net of that phase would build (caffe/net_filter.py, level 0, no
stages); None draws every layer.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

from caffe.conv_geometry import declared_values
from caffe.errors import CaffeError
from caffe.formats.atomic_write import write_atomically
from caffe.formats.upgrade import upgrade_net_param
from caffe.net_filter import filter_net
from caffe.proto import caffe_pb2

__all__ = ["draw_net", "draw_net_to_file", "get_pydot_graph", "net_to_dot", "render_dot"]

RANKDIRS = ("LR", "RL", "TB", "BT")
DOT_EXTENSIONS = ("dot", "gv")  # written as our DOT text, without Graphviz

# Fill colours by layer kind; blobs are grey so that layers stand out.
CONVOLUTION_TYPES = frozenset({"Convolution", "Deconvolution", "Im2col"})
POOLING_TYPES = frozenset({"Pooling", "SPP"})
NEURON_TYPES = frozenset(
    {"AbsVal", "BNLL", "Clip", "Dropout", "ELU", "Exp", "Log", "Power", "PReLU", "ReLU"}
    | {"Sigmoid", "Swish", "TanH", "Threshold"}
)
_COLOURS = {"convolution": "#FF5050", "pooling": "#FF9900", "neuron": "#90EE90"}
_OTHER_COLOUR = "#6495ED"
_BLOB_COLOUR = "#E0E0E0"


def layer_kind(layer_type: str) -> str:
    """The kind that picks a layer's colour: convolution, pooling, neuron or other."""
    if layer_type in CONVOLUTION_TYPES:
        return "convolution"
    if layer_type in POOLING_TYPES:
        return "pooling"
    if layer_type in NEURON_TYPES:
        return "neuron"
    return "other"


def layer_colour(layer_type: str) -> str:
    return _COLOURS.get(layer_kind(layer_type), _OTHER_COLOUR)


@dataclass
class Graph:
    """Nodes and edges with raw (unquoted) attribute values; both writers read this."""

    name: str
    rankdir: str
    nodes: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)


def _geometry_lines(param: Any, with_dilation: bool) -> list[str]:
    def shown(values: tuple[int, ...]) -> str:
        return "x".join(str(v) for v in values) if len(set(values)) > 1 else str(values[0])

    kernel = declared_values(param, "kernel_size", None)
    lines = [f"kernel size: {shown(kernel)}"] if kernel else []
    lines.append(f"stride: {shown(declared_values(param, 'stride', 1))}")
    lines.append(f"pad: {shown(declared_values(param, 'pad', 0))}")
    if with_dilation and declared_values(param, "dilation", 1) != (1,):
        lines.append(f"dilation: {shown(declared_values(param, 'dilation', 1))}")
    return lines


def layer_label(layer: caffe_pb2.LayerParameter, display_lrm: bool = False) -> str:
    """The box text: name, (type), then geometry / pooling method / num_output, and with
    `display_lrm` one line per ParamSpec."""
    lines = [layer.name, f"({layer.type})"]
    if layer.type in CONVOLUTION_TYPES:
        lines += _geometry_lines(layer.convolution_param, with_dilation=True)
    elif layer.type == "Pooling":
        param = layer.pooling_param
        lines.append(f"pool: {caffe_pb2.PoolingParameter.PoolMethod.Name(param.pool)}")
        if param.global_pooling:
            lines.append("global pooling")
        else:
            lines += _geometry_lines(param, with_dilation=False)
    elif layer.type == "InnerProduct":
        lines.append(f"num_output: {layer.inner_product_param.num_output}")
    if display_lrm:
        for index, spec in enumerate(layer.param):
            lines.append(f"param {index}: lr_mult {spec.lr_mult:g}, decay_mult {spec.decay_mult:g}")
    return "\n".join(lines)


def _layers(caffe_net: caffe_pb2.NetParameter, phase: int | None) -> list:
    net = caffe_net
    if net.layers:  # a V1 file parsed without read_net_param: draw its upgraded form
        net = caffe_pb2.NetParameter()
        net.CopyFrom(caffe_net)
        upgrade_net_param(net, net.name or "<net>")
    if phase is None:
        return list(net.layer)
    if phase not in (caffe_pb2.TRAIN, caffe_pb2.TEST):
        raise ValueError(f"phase must be caffe.TRAIN, caffe.TEST or None, not {phase!r}")
    return list(filter_net(net, caffe_pb2.NetState(phase=phase)).layer)


def build_graph(
    caffe_net: caffe_pb2.NetParameter,
    rankdir: str = "LR",
    label_edges: bool = True,
    phase: int | None = None,
    display_lrm: bool = False,
) -> Graph:
    """The drawing as plain data: node ids are `layer<i>` and `blob<j>`, safe in DOT
    unquoted; names only appear in labels."""
    if rankdir not in RANKDIRS:
        raise ValueError(f"rankdir must be one of {', '.join(RANKDIRS)}, not {rankdir!r}")
    graph = Graph(caffe_net.name or "net", rankdir)
    current: dict[str, str] = {}  # blob name -> node id of its latest version
    blob_numbers = itertools.count()

    def new_blob(name: str) -> str:
        node_id = f"blob{next(blob_numbers)}"
        attrs = dict(label=name, shape="octagon", style="filled", fillcolor=_BLOB_COLOUR)
        graph.nodes.append((node_id, attrs))
        current[name] = node_id
        return node_id

    def edge(src: str, dst: str, blob: str) -> None:
        graph.edges.append((src, dst, dict(label=blob) if label_edges else {}))

    for index, layer in enumerate(_layers(caffe_net, phase)):
        layer_id = f"layer{index}"
        attrs = dict(
            label=layer_label(layer, display_lrm),
            shape="box",
            style="filled",
            fillcolor=layer_colour(layer.type),
        )
        graph.nodes.append((layer_id, attrs))
        for bottom in layer.bottom:
            edge(current.get(bottom) or new_blob(bottom), layer_id, bottom)
        for top in layer.top:
            in_place = top in layer.bottom
            top_id = new_blob(top) if in_place or top not in current else current[top]
            edge(layer_id, top_id, top)
    return graph


def quote(text: str) -> str:
    """A DOT string literal; newlines become Graphviz's centred line break `\\n`."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n") + '"'


def _attr_list(attrs: dict[str, str]) -> str:
    if not attrs:
        return ""
    return " [" + ", ".join(f"{key}={quote(value)}" for key, value in attrs.items()) + "]"


def net_to_dot(
    caffe_net: caffe_pb2.NetParameter,
    rankdir: str = "LR",
    label_edges: bool = True,
    phase: int | None = None,
    display_lrm: bool = False,
) -> str:
    """The net as DOT text (Graphviz's language), without any dependency."""
    graph = build_graph(caffe_net, rankdir, label_edges, phase, display_lrm)
    lines = [f"digraph {quote(graph.name)} {{", f"  graph [rankdir={graph.rankdir}];"]
    lines += [f"  {node_id}{_attr_list(attrs)};" for node_id, attrs in graph.nodes]
    lines += [f"  {src} -> {dst}{_attr_list(attrs)};" for src, dst, attrs in graph.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


def get_pydot_graph(
    caffe_net: caffe_pb2.NetParameter,
    rankdir: str,
    label_edges: bool = True,
    phase: int | None = None,
    display_lrm: bool = False,
) -> Any:
    """The net as a pydot.Dot (pycaffe's API); the same graph net_to_dot writes."""
    try:
        import pydot
    except ImportError:
        raise ImportError(
            "caffe.draw.get_pydot_graph needs pydot: pip install pydot "
            "(or pip install 'poseidon-caffe[draw]')"
        ) from None
    graph = build_graph(caffe_net, rankdir, label_edges, phase, display_lrm)
    dot = pydot.Dot(quote(graph.name), graph_type="digraph", rankdir=graph.rankdir)
    # Values go in already quoted: pydot leaves a quoted string as it is.
    for node_id, attrs in graph.nodes:
        dot.add_node(pydot.Node(node_id, **{k: quote(v) for k, v in attrs.items()}))
    for src, dst, attrs in graph.edges:
        dot.add_edge(pydot.Edge(src, dst, **{k: quote(v) for k, v in attrs.items()}))
    return dot


def render_dot(dot_text: str, ext: str) -> bytes:
    """DOT text rendered by Graphviz's `dot -T<ext>` (png, svg, pdf, ...)."""
    program = shutil.which("dot")
    if program is None:
        raise CaffeError(
            f"drawing a .{ext} image needs Graphviz's `dot` program: install graphviz "
            "(Debian/Ubuntu: apt-get install graphviz), or write a .dot/.gv file instead"
        )
    result = subprocess.run(
        [program, f"-T{ext}"], input=dot_text.encode("utf-8"), capture_output=True, check=False
    )
    if result.returncode != 0:
        message = result.stderr.decode("utf-8", errors="replace").strip()
        raise CaffeError(f"dot -T{ext} failed (exit {result.returncode}): {message}")
    return result.stdout


def draw_net(
    caffe_net: caffe_pb2.NetParameter,
    rankdir: str,
    ext: str = "png",
    phase: int | None = None,
    display_lrm: bool = False,
) -> bytes:
    """The drawing in format `ext`: DOT text for dot/gv, otherwise rendered by Graphviz."""
    text = net_to_dot(caffe_net, rankdir, phase=phase, display_lrm=display_lrm)
    if ext.lower() in DOT_EXTENSIONS:
        return text.encode("utf-8")
    return render_dot(text, ext)


def draw_net_to_file(
    caffe_net: caffe_pb2.NetParameter,
    filename: str,
    rankdir: str = "LR",
    phase: int | None = None,
    display_lrm: bool = False,
) -> None:
    """Write the drawing to `filename`, in the format its extension names."""
    ext = os.path.splitext(filename)[1][1:]
    if not ext:
        raise CaffeError(
            f"{filename}: no extension to choose the format from (.png, .svg, .pdf, .dot, ...)"
        )
    data = draw_net(caffe_net, rankdir, ext, phase=phase, display_lrm=display_lrm)
    write_atomically(filename, [data], CaffeError)
