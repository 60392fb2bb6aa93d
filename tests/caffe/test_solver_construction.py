"""Solver construction (docs/caffe_format.md §4.1): which nets, their states, seeds, weights,
checks, mode."""

import os

import numpy as np
import pytest

import caffe
import caffe.common
from caffe.errors import SolverError
from caffe.formats.proto_io import parse_net_text, parse_solver_text
from caffe.proto import caffe_pb2
from caffe.solvers import solver_type_list
from tests.caffe.solver_harness import make_solver, net_text, recorded_log, weights, write_solver

STAGED_LAYERS = """
layer { name: "only_s1" type: "ReLU" bottom: "ip" top: "ip" include { stage: "s1" } }
layer { name: "only_s2" type: "ReLU" bottom: "ip" top: "ip" include { stage: "s2" } }
layer { name: "only_train" type: "ReLU" bottom: "ip" top: "ip" include { phase: TRAIN } }
layer { name: "only_test" type: "ReLU" bottom: "ip" top: "ip" include { phase: TEST } }
layer { name: "level_2" type: "ReLU" bottom: "ip" top: "ip" include { min_level: 2 } }
"""


def layer_names(net) -> set[str]:
    return set(net._layer_names)


def test_train_and_test_nets_from_one_net_with_states(tmp_path):
    text = (
        "base_lr: 0.1\nlr_policy: 'fixed'\ntest_iter: 1\ntest_iter: 2\ntest_interval: 5\n"
        "train_state { stage: 's1' }\ntest_state { stage: 's1' }\ntest_state { stage: 's2' }\n"
    )
    solver = make_solver(tmp_path, text, net_text(extra_layers=STAGED_LAYERS))
    assert solver.net.phase == caffe.TRAIN
    assert {"only_s1", "only_train"} <= layer_names(solver.net)
    assert not {"only_s2", "only_test", "level_2"} & layer_names(solver.net)
    first, second = solver.test_nets
    assert first.phase == second.phase == caffe.TEST
    assert "only_s1" in layer_names(first) and "only_s2" not in layer_names(first)
    assert "only_s2" in layer_names(second) and "only_s1" not in layer_names(second)
    assert "only_test" in layer_names(first) and "only_train" not in layer_names(first)


def test_net_state_merges_the_nets_own_state(tmp_path):
    # The net file's own state (level 2, stage s2) is merged under TRAIN / TEST, then
    # train_state adds stage s1 (stages append).
    net = net_text(extra_layers=STAGED_LAYERS) + "\nstate { level: 2 stage: 's2' }\n"
    text = "base_lr: 0.1\nlr_policy: 'fixed'\ntest_iter: 1\ntest_interval: 1\n"
    text += "train_state { stage: 's1' }\n"
    solver = make_solver(tmp_path, text, net)
    assert {"only_s1", "only_s2", "level_2", "only_train"} <= layer_names(solver.net)
    (test_net,) = solver.test_nets
    assert {"only_s2", "level_2", "only_test"} <= layer_names(test_net)
    assert "only_s1" not in layer_names(test_net)


def test_inline_train_and_test_net_params():
    net = parse_net_text(net_text(extra_layers=STAGED_LAYERS))
    param = parse_solver_text("base_lr: 0.1\nlr_policy: 'fixed'\ntest_iter: 3\ntest_interval: 2")
    param.train_net_param.CopyFrom(net)
    param.test_net_param.add().CopyFrom(net)
    solver = caffe.SGDSolver(param)
    assert "only_train" in layer_names(solver.net)
    assert ["only_test" in layer_names(n) for n in solver.test_nets] == [True]


def test_paths_are_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "train.prototxt").write_text(net_text(name="train_side"))
    (tmp_path / "test.prototxt").write_text(net_text(name="test_side"))
    (tmp_path / "solver.prototxt").write_text(
        'train_net: "train.prototxt"\ntest_net: "test.prototxt"\ntest_iter: 1\n'
        "test_interval: 1\nbase_lr: 0.1\nlr_policy: 'fixed'\n"
    )
    monkeypatch.chdir(tmp_path)
    solver = caffe.SGDSolver("solver.prototxt")
    assert solver.net.name == "train_side"
    assert [n.name for n in solver.test_nets] == ["test_side"]
    assert solver.param.snapshot_prefix == "solver"  # the file stem, as Caffe's fix-up


@pytest.mark.parametrize(
    "fields, message",
    [
        ("", "solver.prototxt: the solver names no net to train"),
        ('train_net: "a.prototxt"\nnet: "b.prototxt"', "given: train_net, net"),
        ('net: "n.prototxt"\nnet_param { name: "x" }', "given: net_param, net"),
    ],
)
def test_exactly_one_train_net(tmp_path, fields, message):
    path = write_solver(tmp_path, f"base_lr: 0.1\nlr_policy: 'fixed'\n{fields}")
    with pytest.raises(SolverError, match=message):
        caffe.SGDSolver(path)


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_solver_file_says_it_names_no_net(tmp_path, text):
    # Before: "Unknown learning rate policy: ''" (lr_policy has no default).
    path = tmp_path / "empty_solver.prototxt"
    path.write_text(text)
    expected = f"{path}: the solver file is empty; it names no net to train (set one of: net,"
    for build in (caffe.get_solver, caffe.SGDSolver):
        with pytest.raises(SolverError) as error:
            build(str(path))
        assert str(error.value).startswith(expected)


def test_a_solver_parameter_without_a_net_says_so():
    with pytest.raises(SolverError, match=r"^The solver names no net to train"):
        caffe.SGDSolver(caffe_pb2.SolverParameter(base_lr=0.1))


@pytest.mark.parametrize(
    "fields, message",
    [
        ("test_state { stage: 'a' }\ntest_iter: 1\ntest_interval: 1\ntest_iter: 1\n"
         "test_state { stage: 'b' }\ntest_state { stage: 'c' }", "test_state must be"),
        ("test_iter: 1", "test_interval must be > 0"),
        ("average_loss: 0", "average_loss"),
        ("iter_size: 0", "iter_size"),
        ("weight_decay: 0.1\nregularization_type: 'L3'", "Unknown regularization type: 'L3'"),
    ],
)  # fmt: skip
def test_bad_settings_fail_before_training(tmp_path, fields, message):
    with pytest.raises(SolverError, match=message):
        make_solver(tmp_path, f"base_lr: 0.1\nlr_policy: 'fixed'\n{fields}")


def test_test_iter_must_match_test_nets(tmp_path):
    (tmp_path / "t.prototxt").write_text(net_text())
    text = f'train_net: "{tmp_path / "t.prototxt"}"\ntest_net: "{tmp_path / "t.prototxt"}"\n'
    path = write_solver(tmp_path, text + "base_lr: 0.1\nlr_policy: 'fixed'\ntest_interval: 1")
    with pytest.raises(SolverError, match="test_iter must be specified for each test network"):
        caffe.SGDSolver(path)


def test_momentum_and_rms_decay_checks(tmp_path):
    base = "base_lr: 0.1\nlr_policy: 'fixed'\n"
    with pytest.raises(SolverError, match="Momentum cannot be used with AdaGrad"):
        make_solver(tmp_path, base + "momentum: 0.9", type_name="AdaGrad")
    with pytest.raises(SolverError, match="Momentum cannot be used with RMSProp"):
        make_solver(tmp_path, base + "momentum: 0.9", type_name="RMSProp")
    with pytest.raises(SolverError, match="rms_decay should lie between 0 and 1"):
        make_solver(tmp_path, base + "rms_decay: 1.0", type_name="RMSProp")


def test_get_solver_builds_by_type_and_lists_known_types(tmp_path):
    assert solver_type_list() == ["AdaDelta", "AdaGrad", "Adam", "Nesterov", "RMSProp", "SGD"]
    solver = make_solver(tmp_path, "base_lr: 0.1\nlr_policy: 'fixed'\nmomentum: 0.9",
                         type_name="Nesterov")  # fmt: skip
    assert isinstance(solver, caffe.NesterovSolver) and solver.type == "Nesterov"
    with pytest.raises(
        SolverError,
        match=r"Unknown solver type: 'Lion'.*AdaDelta, AdaGrad, Adam, Nesterov, RMSProp, SGD",
    ):
        make_solver(tmp_path, "base_lr: 0.1\nlr_policy: 'fixed'", type_name="Lion")
    # The deprecated solver_type enum is upgraded to `type` when the file is read.
    path = write_solver(tmp_path, "base_lr: 0.1\nlr_policy: 'fixed'\nsolver_type: ADAM", net_text())
    assert isinstance(caffe.get_solver(path), caffe.AdamSolver)


def test_snapshot_probe_names_an_unwritable_directory(tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    text = f'base_lr: 0.1\nlr_policy: "fixed"\nsnapshot: 10\nsnapshot_prefix: "{missing}/x"\n'
    with pytest.raises(SolverError, match=f"Make sure that the directory {missing} exists"):
        make_solver(tmp_path, text)
    # A writable prefix leaves no probe file behind.
    text = f'base_lr: 0.1\nlr_policy: "fixed"\nsnapshot: 10\nsnapshot_prefix: "{tmp_path}/ok"\n'
    make_solver(tmp_path, text)
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tempfile")]


def test_random_seed_plus_rank_seeds_before_the_nets_are_built(tmp_path):
    def initial(seed, rank=0):
        caffe.set_solver_rank(rank)
        try:
            text = f"base_lr: 0.1\nlr_policy: 'fixed'\nrandom_seed: {seed}\n"
            return weights(make_solver(tmp_path / f"s{seed}_{rank}", text).net)
        finally:
            caffe.set_solver_rank(0)

    a, b, c, d = initial(5), initial(5), initial(6), initial(5, rank=1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    for x, y in zip(c, d):  # seed 5 on rank 1 draws what seed 6 draws on rank 0
        np.testing.assert_array_equal(x, y)


def test_non_root_solvers_build_no_test_nets(tmp_path):
    caffe.set_solver_rank(1)
    try:
        text = "base_lr: 0.1\nlr_policy: 'fixed'\ntest_iter: 1\ntest_interval: 1\n"
        assert make_solver(tmp_path, text).test_nets == []
    finally:
        caffe.set_solver_rank(0)


def test_weights_comma_lists_load_into_train_and_test_nets(tmp_path):
    def saved(value):
        net_param = parse_net_text(net_text())
        net_param.state.phase = caffe.TEST
        net = caffe.Net(net_param)
        for blob in net.learnable_params:
            blob.data[...] = value
        path = tmp_path / f"w{value}.caffemodel"
        net.save(str(path))
        return path

    first, second = saved(1.0), saved(2.0)
    text = (
        f'base_lr: 0.1\nlr_policy: "fixed"\ntest_iter: 1\ntest_interval: 1\n'
        f'weights: "{first}"\nweights: "{second},{first}"\n'
    )
    solver = make_solver(tmp_path, text)
    for net in [solver.net, *solver.test_nets]:
        for blob in net.learnable_params:
            np.testing.assert_array_equal(blob.data, 1.0)  # files applied in order: last wins


def test_solver_mode_gpu_without_a_gpu_falls_back_with_one_warning(tmp_path, monkeypatch):
    if caffe.common.gpu_available():
        pytest.skip("a CUDA device is present")
    monkeypatch.setattr(caffe.common._state, "mode_chosen", False)
    monkeypatch.setattr(caffe.common._state, "warned_no_gpu", False)
    warnings = []
    monkeypatch.setattr(caffe.common._log, "warning", lambda *a, **k: warnings.append(a))
    text = "base_lr: 0.1\nlr_policy: 'fixed'\ntest_iter: 1\ntest_interval: 1\nsolver_mode: GPU"
    solver = make_solver(tmp_path, text)
    assert solver.net.device.type == "cpu"
    assert len(warnings) == 1


def test_an_explicit_mode_choice_wins_over_solver_mode(tmp_path, monkeypatch):
    warnings = []
    monkeypatch.setattr(caffe.common._log, "warning", lambda *a, **k: warnings.append(a))
    monkeypatch.setattr(caffe.common._state, "warned_no_gpu", False)
    caffe.set_mode_cpu()  # what the `caffe` command does for "Use CPU."
    make_solver(tmp_path, "base_lr: 0.1\nlr_policy: 'fixed'\nsolver_mode: GPU")
    assert caffe.common.mode() == "CPU" and warnings == []
    # The constructor keyword forces a mode too.
    monkeypatch.setattr(caffe.common._state, "mode_chosen", False)
    path = write_solver(tmp_path, "base_lr: 0.1\nlr_policy: 'fixed'\nsolver_mode: GPU", net_text())
    solver = caffe.SGDSolver(path, mode="CPU")
    assert caffe.common.mode() == "CPU" and warnings == []
    assert solver.param.solver_mode == caffe_pb2.SolverParameter.GPU


def test_a_negative_base_lr_is_warned_about(tmp_path):
    with recorded_log() as log:
        make_solver(tmp_path, "base_lr: -0.01\nlr_policy: 'fixed'\n")
    assert (
        "base_lr is negative (-0.01): every update will climb the loss instead of descending it"
        in log
    )
    with recorded_log() as log:
        make_solver(tmp_path / "ok", "base_lr: 0.01\nlr_policy: 'fixed'\n")
    assert not any("base_lr is negative" in m for m in log)
