"""upgrade_net_proto_text / _binary and upgrade_solver_proto_text rewrite legacy files."""

from google.protobuf import text_format

from caffe.proto import caffe_pb2
from caffe.tools import upgrade_net_proto_binary, upgrade_net_proto_text, upgrade_solver_proto_text
from tests.caffe.tools.cli_helpers import captured_log

V1_NET = """
name: "legacy"
input: "data"
input_dim: 2 input_dim: 3 input_dim: 8 input_dim: 8
layers {
  name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param { num_output: 4 kernel_size: 3 }
}
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
"""


def test_text_net_upgrade(tmp_path):
    old, new = tmp_path / "old.prototxt", tmp_path / "new.prototxt"
    old.write_text(V1_NET)
    with captured_log() as log:
        assert upgrade_net_proto_text.main([str(old), str(new)]) == 0
    assert f"Wrote upgraded NetParameter text proto to {new}" in log.getvalue()
    net = text_format.Parse(new.read_text(), caffe_pb2.NetParameter())
    assert [(layer.name, layer.type) for layer in net.layer] == [
        ("input", "Input"),
        ("conv", "Convolution"),
        ("relu", "ReLU"),
    ]
    assert list(net.layer[0].input_param.shape[0].dim) == [2, 3, 8, 8]
    conv = net.layer[1]
    assert [(p.lr_mult, p.decay_mult) for p in conv.param] == [(1, 1), (2, 0)]
    assert not net.layers and not net.input

    # Upgrading the result again changes nothing and says so.
    again = tmp_path / "again.prototxt"
    with captured_log() as log:
        assert upgrade_net_proto_text.main([str(new), str(again)]) == 0
    assert "File already in latest proto format" in log.getvalue()
    assert again.read_text() == new.read_text()


def test_text_net_upgrade_errors(tmp_path):
    with captured_log() as log:
        assert upgrade_net_proto_text.main(["only_one_argument"]) == 1
    assert "Usage: upgrade_net_proto_text" in log.getvalue()
    bad = tmp_path / "bad.prototxt"
    bad.write_text("layers { nme: 'x' }\n")
    with captured_log() as log:
        assert upgrade_net_proto_text.main([str(bad), str(tmp_path / "out")]) == 1
    assert f"{bad}:1:10:" in log.getvalue()
    assert not (tmp_path / "out").exists()


def test_solver_upgrade(tmp_path):
    old, new = tmp_path / "old_solver.prototxt", tmp_path / "solver.prototxt"
    old.write_text('net: "n.prototxt"\nbase_lr: 0.1\nsolver_type: NESTEROV\n')
    assert upgrade_solver_proto_text.main([str(old), str(new)]) == 0
    solver = text_format.Parse(new.read_text(), caffe_pb2.SolverParameter())
    assert solver.type == "Nesterov"
    assert not solver.HasField("solver_type")
    # The read-time snapshot_prefix rule is not baked into the file.
    assert not solver.HasField("snapshot_prefix")


def test_binary_net_upgrade_keeps_the_weights(tmp_path):
    legacy = caffe_pb2.NetParameter(name="legacy")
    v1 = legacy.layers.add(name="ip", type=caffe_pb2.V1LayerParameter.INNER_PRODUCT)
    v1.bottom.append("data")
    v1.top.append("ip")
    v1.blobs.add(num=1, channels=1, height=2, width=3, data=[1, 2, 3, 4, 5, 6])
    old, new = tmp_path / "old.caffemodel", tmp_path / "new.caffemodel"
    old.write_bytes(legacy.SerializeToString())
    assert upgrade_net_proto_binary.main([str(old), str(new)]) == 0
    net = caffe_pb2.NetParameter.FromString(new.read_bytes())
    assert [(layer.name, layer.type) for layer in net.layer] == [("ip", "InnerProduct")]
    assert list(net.layer[0].blobs[0].data) == [1, 2, 3, 4, 5, 6]
    assert net.layer[0].blobs[0].width == 3


def test_binary_net_upgrade_rejects_garbage(tmp_path):
    old = tmp_path / "garbage.caffemodel"
    old.write_bytes(b"\x0a\xff\xff\xff\x0f")
    with captured_log() as log:
        assert upgrade_net_proto_binary.main([str(old), str(tmp_path / "new")]) == 1
    assert "not a binary NetParameter" in log.getvalue()
