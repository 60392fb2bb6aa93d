"""caffe.draw: the DOT text read back node by node and edge by edge, the pydot graph, and
rendering through `dot` (a stand-in script when Graphviz is not installed)."""

import graphlib
import re
import shutil
import sys
from pathlib import Path

import pytest
from google.protobuf import text_format

import caffe
from caffe import draw
from caffe import layers as L
from caffe import params as P
from caffe.errors import CaffeError
from caffe.formats.proto_io import read_net_param
from caffe.proto import caffe_pb2

LENET = Path(__file__).resolve().parents[2] / "models" / "lenet" / "train_val.prototxt"

_NODE = re.compile(r"^  (\w+) \[(.*)\];$")
_EDGE = re.compile(r"^  (\w+) -> (\w+)(?: \[(.*)\])?;$")
_ATTR = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _unquote(value):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


class Drawing:
    """net_to_dot's text read back: nodes id -> attrs, edges (src, dst, attrs)."""

    def __init__(self, text):
        self.text = text
        self.nodes, self.edges = {}, []
        for line in text.splitlines():
            if match := _EDGE.match(line):
                attrs = dict(_ATTR.findall(match.group(3) or ""))
                self.edges.append((match.group(1), match.group(2), _decoded(attrs)))
            elif (match := _NODE.match(line)) and match.group(1) != "graph":
                self.nodes[match.group(1)] = _decoded(dict(_ATTR.findall(match.group(2))))

    def labels(self, prefix):
        return {i: a["label"] for i, a in self.nodes.items() if i.startswith(prefix)}

    def layer(self, name):
        (found,) = [i for i, label in self.labels("layer").items() if label.split("\n")[0] == name]
        return found

    def blobs(self, name):
        return [i for i, label in self.labels("blob").items() if label == name]

    def layer_names(self):
        return [label.split("\n")[0] for label in self.labels("layer").values()]

    def pairs(self):
        return {(src, dst) for src, dst, _ in self.edges}


def _decoded(attrs):
    return {key: _unquote(value) for key, value in attrs.items()}


def lenet():
    return read_net_param(str(LENET))


def drawing(net, **kwargs):
    return Drawing(draw.net_to_dot(net, **kwargs))


def test_lenet_has_a_box_per_layer_with_its_type():
    d = drawing(lenet())
    expected = [(layer.name, layer.type) for layer in lenet().layer]
    assert len(expected) == 11
    shown = [tuple(label.split("\n")[:2]) for label in d.labels("layer").values()]
    assert shown == [(name, f"({kind})") for name, kind in expected]
    assert all(d.nodes[i]["shape"] == "box" for i in d.labels("layer"))
    assert all(d.nodes[i]["shape"] == "octagon" for i in d.labels("blob"))
    assert d.text.startswith('digraph "LeNet" {\n  graph [rankdir=LR];')


def test_edges_run_bottom_blob_to_layer_to_top_blob():
    d = drawing(lenet())
    (data,) = d.blobs("data")  # the TRAIN and TEST data layers share their tops' nodes
    (conv1,) = d.blobs("conv1")
    (label,) = d.blobs("label")
    assert (data, d.layer("conv1")) in d.pairs() and (d.layer("conv1"), conv1) in d.pairs()
    assert (conv1, d.layer("pool1")) in d.pairs()
    producers = [src for src, dst in d.pairs() if dst == data]
    assert sorted(d.labels("layer")[p].split("\n")[0] for p in producers) == ["mnist", "mnist"]
    assert {src for src, dst in d.pairs() if dst == d.layer("loss")} == {d.blobs("ip2")[0], label}
    for src, dst, attrs in d.edges:  # bipartite, and each edge names its blob
        assert src.startswith("blob") != dst.startswith("blob")
        blob = src if src.startswith("blob") else dst
        assert attrs["label"] == d.nodes[blob]["label"]


def test_phase_keeps_the_layers_that_phase_builds():
    train = drawing(lenet(), phase=caffe.TRAIN)
    test = drawing(lenet(), phase=caffe.TEST)
    assert "accuracy" not in train.layer_names() and "accuracy" in test.layer_names()
    assert train.layer_names().count("mnist") == test.layer_names().count("mnist") == 1
    assert len(train.layer_names()) == 9 and len(test.layer_names()) == 10
    assert train.blobs("accuracy") == [] and len(test.blobs("accuracy")) == 1
    with pytest.raises(ValueError, match="phase"):
        draw.net_to_dot(lenet(), phase=7)


def test_display_lrm_lists_each_param():
    plain = drawing(lenet()).nodes[drawing(lenet()).layer("conv1")]["label"]
    assert "lr_mult" not in plain
    d = drawing(lenet(), display_lrm=True)
    lines = d.nodes[d.layer("conv1")]["label"].split("\n")
    assert lines[-2:] == ["param 0: lr_mult 1, decay_mult 1", "param 1: lr_mult 2, decay_mult 1"]
    assert "lr_mult" not in d.nodes[d.layer("relu1")]["label"]


def test_in_place_layer_writes_a_new_version_of_its_blob():
    d = drawing(lenet())
    before, after = d.blobs("ip1")  # ip1 as InnerProduct wrote it, then as ReLU rewrote it
    relu = d.layer("relu1")
    assert (d.layer("ip1"), before) in d.pairs()
    assert (before, relu) in d.pairs() and (relu, after) in d.pairs()
    assert (after, d.layer("ip2")) in d.pairs() and (before, d.layer("ip2")) not in d.pairs()
    assert all(src != dst for src, dst in d.pairs())
    sorter = graphlib.TopologicalSorter()
    for src, dst in d.pairs():
        sorter.add(dst, src)
    list(sorter.static_order())  # raises CycleError if any


def geometry_net():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 3, 32, 32]))
    n.conv = L.Convolution(n.data, kernel_size=[3, 5], stride=2, pad=1, dilation=2, num_output=8)
    n.hw = L.Convolution(n.conv, kernel_h=1, kernel_w=3, pad_h=0, pad_w=1, num_output=8)
    n.up = L.Deconvolution(n.hw, convolution_param=dict(kernel_size=4, stride=2, num_output=8))
    n.pool = L.Pooling(n.up, pool=P.Pooling.AVE, kernel_size=3, stride=2)
    n.gpool = L.Pooling(n.pool, pool=P.Pooling.MAX, global_pooling=True)
    n.relu = L.ReLU(n.gpool, in_place=True)
    n.ip = L.InnerProduct(n.relu, num_output=10)
    return n.to_proto()


def test_labels_show_geometry_method_and_outputs():
    d = drawing(geometry_net())

    def details(name):
        return d.nodes[d.layer(name)]["label"].split("\n")[2:]

    assert details("conv") == ["kernel size: 3x5", "stride: 2", "pad: 1", "dilation: 2"]
    assert details("hw") == ["kernel size: 1x3", "stride: 1", "pad: 0x1"]
    assert details("up") == ["kernel size: 4", "stride: 2", "pad: 0"]
    assert details("pool") == ["pool: AVE", "kernel size: 3", "stride: 2", "pad: 0"]
    assert details("gpool") == ["pool: MAX", "global pooling"]
    assert details("ip") == ["num_output: 10"]
    assert details("relu") == []


def test_colours_by_layer_kind():
    d = drawing(geometry_net())
    colour = {name: d.nodes[d.layer(name)]["fillcolor"] for name in d.layer_names()}
    assert colour["conv"] == colour["hw"] == colour["up"]
    assert colour["pool"] == colour["gpool"]
    assert colour["ip"] == colour["data"]
    assert len({colour["conv"], colour["pool"], colour["relu"], colour["ip"]}) == 4
    assert draw.layer_kind("Sigmoid") == "neuron" and draw.layer_kind("Eltwise") == "other"


def test_label_edges_off_and_rankdir():
    d = drawing(lenet(), label_edges=False, rankdir="TB")
    assert d.edges and all(attrs == {} for _, _, attrs in d.edges)
    assert "graph [rankdir=TB];" in d.text
    with pytest.raises(ValueError, match="rankdir"):
        draw.net_to_dot(lenet(), rankdir="XY")


def test_names_are_escaped():
    net = caffe_pb2.NetParameter(name='say "hi"')
    net.layer.add(name='a "quoted" \\ name', type="Input", top=["x"])
    d = drawing(net)
    assert d.nodes["layer0"]["label"] == 'a "quoted" \\ name\n(Input)'
    assert d.text.startswith('digraph "say \\"hi\\"" {')


def test_v1_layers_are_drawn_upgraded():
    net = text_format.Parse(
        'layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y" '
        "inner_product_param { num_output: 2 } }",
        caffe_pb2.NetParameter(),
    )
    d = drawing(net)
    assert list(d.labels("layer").values()) == ["ip\n(InnerProduct)\nnum_output: 2"]
    assert d.pairs() == {(d.blobs("x")[0], "layer0"), ("layer0", d.blobs("y")[0])}


# pydot's DOT parser still calls pyparsing names that pyparsing 3.3 deprecates.
@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")
def test_pydot_graph_is_the_same_graph():
    pydot = pytest.importorskip("pydot")
    d = drawing(lenet(), phase=caffe.TEST, display_lrm=True)
    graph = draw.get_pydot_graph(lenet(), "TB", phase=caffe.TEST, display_lrm=True)
    assert isinstance(graph, pydot.Dot) and graph.get_rankdir() == "TB"
    labels = {n.get_name(): _unquote(n.get("label").strip('"')) for n in graph.get_nodes()}
    assert labels == {i: a["label"] for i, a in d.nodes.items()}
    edges = [(e.get_source(), e.get_destination(), e.get("label")) for e in graph.get_edges()]
    assert edges == [(s, t, f'"{a["label"]}"') for s, t, a in d.edges]
    # Graphviz's own syntax: pydot parses our DOT text back into the same nodes.
    (parsed,) = pydot.graph_from_dot_data(d.text)
    assert {n.get_name() for n in parsed.get_nodes()} >= set(d.nodes)
    assert len(parsed.get_edges()) == len(d.edges)


def test_missing_pydot_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydot", None)
    with pytest.raises(ImportError, match="pip install pydot"):
        draw.get_pydot_graph(lenet(), "LR")
    assert draw.draw_net(lenet(), "LR", ext="dot")  # DOT output needs no pydot


def test_dot_and_gv_files_are_the_dot_text(tmp_path):
    text = draw.net_to_dot(lenet(), "BT", phase=caffe.TRAIN)
    assert draw.draw_net(lenet(), "BT", ext="dot", phase=caffe.TRAIN) == text.encode()
    draw.draw_net_to_file(lenet(), str(tmp_path / "net.gv"), "BT", phase=caffe.TRAIN)
    assert (tmp_path / "net.gv").read_text() == text
    with pytest.raises(CaffeError, match="no extension"):
        draw.draw_net_to_file(lenet(), str(tmp_path / "net"))


def test_missing_graphviz_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(CaffeError, match="apt-get install graphviz"):
        draw.draw_net_to_file(lenet(), str(tmp_path / "net.png"))
    assert not (tmp_path / "net.png").exists()


def fake_dot(tmp_path, script):
    path = tmp_path / "dot"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return str(path)


def test_images_come_from_dot_reading_our_text(monkeypatch, tmp_path):
    program = fake_dot(tmp_path, 'echo "$1"; cat\n')  # echoes -T<ext>, then stdin
    monkeypatch.setattr(shutil, "which", lambda name: program if name == "dot" else None)
    draw.draw_net_to_file(lenet(), str(tmp_path / "net.svg"), "TB", display_lrm=True)
    expected = "-Tsvg\n" + draw.net_to_dot(lenet(), "TB", display_lrm=True)
    assert (tmp_path / "net.svg").read_text() == expected


def test_dot_failure_is_reported(monkeypatch, tmp_path):
    program = fake_dot(tmp_path, 'echo "Format: \\"xyz\\" not recognized" >&2; exit 1\n')
    monkeypatch.setattr(shutil, "which", lambda name: program)
    with pytest.raises(CaffeError, match=r'dot -Txyz failed \(exit 1\): Format: "xyz"'):
        draw.draw_net(lenet(), "LR", ext="xyz")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_real_graphviz_renders_png_and_svg(tmp_path):
    assert draw.draw_net(lenet(), "LR", ext="png").startswith(b"\x89PNG\r\n\x1a\n")
    draw.draw_net_to_file(lenet(), str(tmp_path / "lenet.svg"), phase=caffe.TEST)
    svg = (tmp_path / "lenet.svg").read_text()
    assert "<svg" in svg and "accuracy" in svg and "SoftmaxWithLoss" in svg
