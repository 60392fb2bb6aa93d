"""The engine's attach surface for distributed training (caffe/training_hooks.py): single
slots refuse a second attacher, callbacks come off with their handles, the read-only views
cannot change a Net, and only the distributed-training package imports poseidon."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from google.protobuf import text_format

import caffe
from caffe.errors import CaffeError
from caffe.proto import caffe_pb2
from caffe.solvers import get_solver

CAFFE_DIR = Path(caffe.__file__).resolve().parent
# The engine's distributed front end, caffe/parallel/, alone may import poseidon
# (docs/design.md §1). caffe.common's has_nccl() only probes whether the communication core
# is built, inside a try.
IMPORTERS = "parallel/"
PROBES = {"common.py"}

NET = """
name: "hooks"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
                     data_filler { type: "gaussian" } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
  param { name: "shared" } inner_product_param { num_output: 3 } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param { name: "shared" } inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""


def poseidon_imports(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    lines = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        if any(name == "poseidon" or name.startswith("poseidon.") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_distributed_training_module_imports_poseidon():
    found = {}
    for path in sorted(CAFFE_DIR.rglob("*.py")):
        lines = poseidon_imports(path)
        if lines:
            found[str(path.relative_to(CAFFE_DIR))] = lines
    outside = {path for path in set(found) - PROBES if not path.startswith(IMPORTERS)}
    assert not outside, found
    assert any(path.startswith(IMPORTERS) for path in found)  # the rule is not vacuous
    for probe in PROBES & set(found):
        source = (CAFFE_DIR / probe).read_text().splitlines()
        for line in found[probe]:
            assert "import poseidon._C" in source[line - 1], (probe, line)


def solver() -> object:
    param = caffe_pb2.SolverParameter()
    text_format.Parse('base_lr: 0.1 lr_policy: "fixed" max_iter: 1 random_seed: 1', param)
    param.net_param.CopyFrom(text_format.Parse(NET, caffe_pb2.NetParameter()))
    return get_solver(param)


class Syncer:
    def update(self, rate: float) -> None:
        pass

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("slot", ["update_hook", "flush_hook", "action_hook"])
def test_a_solver_slot_refuses_a_second_attacher(slot):
    s = solver()
    first, second = Syncer(), Syncer()
    setattr(s, slot, first.flush)
    setattr(s, slot, first.flush)  # the same hook again: fine
    with pytest.raises(CaffeError, match=rf"Solver.{slot} already has Syncer.flush of Syncer"):
        setattr(s, slot, second.flush)
    assert getattr(s, slot) == first.flush  # the first one is kept
    setattr(s, slot, None)  # detached: now the second may attach
    setattr(s, slot, second.flush)
    assert getattr(s, slot) == second.flush


def test_net_and_layer_slots_refuse_a_second_attacher():
    s = solver()
    s.net.clear_param_diffs_hook = Syncer().flush
    with pytest.raises(CaffeError, match=r"Net\.clear_param_diffs_hook already has"):
        s.net.clear_param_diffs_hook = Syncer().flush
    ip1 = s.net.layer_by_name("ip1")
    ip1.sufficient_factor_sink = print
    with pytest.raises(CaffeError, match=r"InnerProductLayer\.sufficient_factor_sink already"):
        ip1.sufficient_factor_sink = repr
    # Slots are per object: the other layer's is free.
    s.net.layer_by_name("ip2").sufficient_factor_sink = repr


def test_the_read_only_views_describe_the_net_and_cannot_change_it():
    net = solver().net
    names = list(net._layer_names)
    assert net.layer_names == tuple(names)
    ip1, ip2 = names.index("ip1"), names.index("ip2")
    assert net.param_layer_indices == ((ip1, 0), (ip1, 1), (ip2, 0), (ip2, 1))
    assert net.param_owners == (-1, -1, 0, -1)  # ip2's weight shares ip1's
    assert net.learnable_param_ids == (0, 1, 0, 2)
    assert [b.shape for b in net.bottom_vecs[ip2]] == [[4, 3]]
    assert len(net.top_vecs) == len(names) == len(net.layer_need_backward)
    assert isinstance(net.bottom_vecs, tuple) and isinstance(net.bottom_need_backward[ip2], tuple)
    with pytest.raises(AttributeError):
        net.layer_names = ()  # type: ignore[misc]


def test_callbacks_come_off_with_their_handles():
    s = solver()
    calls: list[str] = []
    handles = [
        s.net.before_forward(lambda i: calls.append(f"before_forward {i}")),
        s.net.after_backward(lambda i: calls.append(f"after_backward {i}")),
        s.add_callback(lambda: calls.append("on_start"), lambda: calls.append("ready")),
    ]
    s.step(1)
    assert {"before_forward 0", "after_backward 0", "on_start", "ready"} <= set(calls)
    for handle in handles:
        handle.remove()
        handle.remove()  # a second remove is a no-op
    calls.clear()
    s.param.max_iter = 2
    s.step(1)
    assert calls == []


def test_a_callback_removed_during_a_pass_skips_no_neighbour():
    """A pass keeps the callbacks it began with (copy on write): one that removes itself
    runs to the end of that pass, its neighbour is never skipped, the next pass is without
    it."""
    net = solver().net
    seen: list[str] = []
    handles: list = []
    handles.append(net.before_forward(lambda i: (seen.append("a"), handles[0].remove())))
    net.before_forward(lambda i: seen.append("b"))
    net.forward()
    layers = len(net.layers)
    assert seen == ["a", "b"] * layers
    seen.clear()
    net.forward()
    assert seen == ["b"] * layers
