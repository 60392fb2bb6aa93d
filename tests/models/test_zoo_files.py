"""The zoo's files: present, up to date with the generator, solvers with Caffe's values."""

import pytest

from caffe.formats.proto_io import parse_solver_text
from caffe.proto import caffe_pb2
from models.generate import generated_files, stale_files
from tests.models.zoo import MODEL_NAMES, MODELS_DIR, REPO_ROOT, model_file, read_net

NET_FILES = ["train_val.prototxt", "deploy.prototxt", "train_val_dummy.prototxt"]


def read_solver(name: str, file: str = "solver.prototxt") -> caffe_pb2.SolverParameter:
    return parse_solver_text(model_file(name, file).read_text(), source=file)


def test_the_zoo_holds_the_twelve_models():
    assert MODEL_NAMES == [
        "lenet",
        "cifar10_quick",
        "cifar10_full",
        "alexnet",
        "caffenet",
        "googlenet",
        "vgg16",
        "vgg19",
        "vgg19_22k",
        "resnet50",
        "resnet152",
        "inception_v3",
    ]


def test_regenerating_gives_the_committed_files():
    files = generated_files()
    assert len(files) == 30  # 9 generated models x (train_val, deploy) + 12 dummy variants
    assert stale_files(files) == [], "run `python -m models.generate` and commit the result"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_has_its_files(name):
    for file in [*NET_FILES, "solver.prototxt"]:
        assert model_file(name, file).is_file(), file
    solver = read_solver(name)
    # Paths in solvers are relative to the repository root, where Caffe's run.
    assert solver.net == f"models/{name}/train_val.prototxt"
    assert (REPO_ROOT / solver.net).is_file()
    assert solver.snapshot_prefix.startswith(f"models/{name}/")
    assert solver.solver_mode == caffe_pb2.SolverParameter.GPU  # as upstream
    assert sum(solver.test_iter) > 0 and solver.test_interval > 0 and solver.max_iter > 0


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_train_val_reads_lmdbs_named_like_caffes_examples(name):
    data = [layer for layer in read_net(name).layer if layer.type == "Data"]
    assert [layer.include[0].phase for layer in data] == [caffe_pb2.TRAIN, caffe_pb2.TEST]
    for layer in data:
        assert layer.data_param.backend == caffe_pb2.DataParameter.LMDB
        assert layer.data_param.source.startswith("examples/")
        assert layer.data_param.source.endswith("_lmdb")
    deploy = read_net(name, "deploy.prototxt")
    assert deploy.layer[0].type == "Input" and deploy.layer[-1].type == "Softmax"
    assert not any(layer.type in ("Data", "SoftmaxWithLoss", "Accuracy") for layer in deploy.layer)


# (model, solver file): the values of Caffe's example solvers (docs/caffe_format.md §4.6).
CANONICAL_SOLVERS = {
    ("lenet", "solver.prototxt"): dict(
        type="SGD",
        lr_policy="inv",
        base_lr=0.01,
        momentum=0.9,
        weight_decay=5e-4,
        gamma=1e-4,
        power=0.75,
        test_iter=[100],
        test_interval=500,
        display=100,
        max_iter=10000,
        snapshot=5000,
    ),
    ("cifar10_quick", "solver.prototxt"): dict(
        lr_policy="fixed",
        base_lr=1e-3,
        weight_decay=0.004,
        max_iter=4000,
    ),
    ("cifar10_quick", "solver_lr1.prototxt"): dict(lr_policy="fixed", base_lr=1e-4, max_iter=5000),
    ("cifar10_full", "solver.prototxt"): dict(
        lr_policy="fixed",
        base_lr=1e-3,
        max_iter=60000,
        snapshot_format=caffe_pb2.SolverParameter.HDF5,
    ),
    ("cifar10_full", "solver_lr1.prototxt"): dict(base_lr=1e-4, max_iter=65000),
    ("cifar10_full", "solver_lr2.prototxt"): dict(base_lr=1e-5, max_iter=70000),
    ("caffenet", "solver.prototxt"): dict(
        lr_policy="step",
        base_lr=0.01,
        gamma=0.1,
        stepsize=100000,
        max_iter=450000,
        test_iter=[1000],
        test_interval=1000,
        display=20,
    ),
    ("alexnet", "solver.prototxt"): dict(
        lr_policy="step",
        base_lr=0.01,
        gamma=0.1,
        stepsize=100000,
        max_iter=450000,
    ),
    ("googlenet", "solver.prototxt"): dict(
        lr_policy="step",
        base_lr=0.01,
        gamma=0.96,
        stepsize=320000,
        average_loss=40,
        display=40,
        test_initialization=False,
        weight_decay=2e-4,
    ),
}


@pytest.mark.parametrize("name,file", sorted(CANONICAL_SOLVERS))
def test_canonical_solver_values(name, file):
    solver = read_solver(name, file)
    for field, expected in CANONICAL_SOLVERS[(name, file)].items():
        value = getattr(solver, field)
        if isinstance(expected, float):
            assert value == pytest.approx(expected, rel=1e-6), field
        elif isinstance(expected, list):
            assert list(value) == expected, field
        else:
            assert value == expected, field


def test_lenet_digits_demo_files_use_relative_paths():
    solver = read_solver("lenet", "lenet_digits_solver.prototxt")
    assert solver.net == "lenet_digits_train_test.prototxt"
    assert solver.snapshot_prefix == "lenet_digits"
    net = read_net("lenet", "lenet_digits_train_test.prototxt")
    sources = [layer.data_param.source for layer in net.layer if layer.type == "Data"]
    assert sources == ["digits_train_lmdb", "digits_test_lmdb"]
    test_batch = net.layer[1].data_param.batch_size
    assert solver.test_iter[0] * test_batch == 360  # the whole digits test set
    # Apart from the data, the same LeNet as the zoo's.
    assert list(net.layer)[2:] == list(read_net("lenet").layer)[2:]


def test_no_stray_files_in_model_directories():
    for name in MODEL_NAMES:
        for path in (MODELS_DIR / name).iterdir():
            assert path.suffix == ".prototxt", path
