"""What `poseidon plan` prints is the plan the job runs (docs/design.md §4), for every zoo
model and for the cases where a second derivation used to disagree: iter_size > 1, shared
weights, frozen layers and InnerProduct over axis 2.

The job's plan is what the coordinator makes (`_C.make_plan`, with the cluster's scheme) of
the specs PoseidonSync declares. For the small nets a real Solver and PoseidonSync declare
them to a stand-in worker; for the zoo models (too large for a solver each) they are
poseidon.plan.layer_specs of the fully built train net, the call PoseidonSync makes. The
plan command builds the same net shapes-only, so the zoo rows also check that the
shapes-only net gives exactly the specs of a real one."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import caffe
from caffe.formats.proto_io import read_solver_param
from caffe.parallel import PoseidonSync
from caffe.parallel.layout import sync_layout
from caffe.solvers.nets import build_train_net
from poseidon import _C, Config
from poseidon.cli import main
from poseidon.commands.plan_net import plan_net
from poseidon.plan import format_plan, layer_specs, scheme_choice
from poseidon.sync.client import SyncClient
from poseidon.sync.job import Session
from tests.models.zoo import MODEL_NAMES, ZOO_BY_NAME, read_net

WORKERS, SERVERS = 8, 4


def spec_fields(spec) -> tuple:
    return (spec.layer_id, spec.name, spec.kind, spec.m, spec.n, spec.k, spec.num_floats,
            spec.force)  # fmt: skip


class PlanningWorker:
    """Stands in for `_C.Worker`: the coordinator's make_plan over the declared specs."""

    def __init__(self, scheme: str = "auto") -> None:
        self.num_workers, self.rank, self.scheme = WORKERS, 1, scheme
        self.declared: list = []

    def plan(self, specs):
        self.declared = list(specs)
        return _C.make_plan(specs, WORKERS, SERVERS, force=scheme_choice(self.scheme))

    def register_layer(self, index, array) -> None:
        pass

    def register_sfb_layer(self, index, reserved, max_floats=0) -> None:
        pass


def attach(solver, worker: PlanningWorker, sync: str = "poseidon", **options) -> PoseidonSync:
    """A PoseidonSync of `solver` whose client talks to `worker` (no job behind it)."""
    client = SyncClient(Session(Config(), worker), solver.net.device)
    return PoseidonSync(solver, client, sync, **options)


def printed_plan(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(["plan", "--workers", str(WORKERS), "--servers", str(SERVERS), *args]) == 0
    return capsys.readouterr().out.rstrip("\n")


def write_solver(path: Path, net: Path, iter_size: int = 1) -> Path:
    path.write_text(f'net: "{net}" base_lr: 0.01 lr_policy: "fixed" max_iter: 1 '
                    f'iter_size: {iter_size} snapshot_prefix: "{path.parent}/s"\n')  # fmt: skip
    return path


# ----- the small nets ------------------------------------------------------------------------
DATA = """name: "{name}"
layer {{ name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param {{ shape {{ dim: 4 dim: 3 dim: 6 dim: 6 }} shape {{ dim: 4 }} }} }}
"""
CLASSIFIER = """
layer { name: "fc1" type: "InnerProduct" bottom: "conv1" top: "fc1"
  inner_product_param { num_output: 300 weight_filler { type: "xavier" } } }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" top: "loss" }
"""
CONV = """layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1" {params}
  convolution_param {{ num_output: 8 kernel_size: 3 weight_filler {{ type: "xavier" }} }} }}
"""
FROZEN = "param { lr_mult: 0 } param { lr_mult: 0 }"
# Two classifiers on one input sharing their weights by name (a Siamese pair): the owner's
# gradient is final only after the sharer's backward, so it is synced late, as a plain tensor.
SHARED = """
layer { name: "fc_a" type: "InnerProduct" bottom: "conv1" top: "fc_a"
  param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 300 weight_filler { type: "xavier" } } }
layer { name: "fc_b" type: "InnerProduct" bottom: "conv1" top: "fc_b"
  param { name: "w" } param { name: "b" }
  inner_product_param { num_output: 300 weight_filler { type: "xavier" } } }
layer { name: "both" type: "Eltwise" bottom: "fc_a" bottom: "fc_b" top: "both" }
layer { name: "fc2" type: "InnerProduct" bottom: "both" top: "fc2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" top: "loss" }
"""
# A sequence model's per-step classifier: 4 sequences × 5 steps of 6 features, InnerProduct
# over axis 2, so its GEMM has 20 rows per pass, not 4.
AXIS2 = """name: "axis2"
layer { name: "data" type: "DummyData" top: "data" top: "target"
  dummy_data_param { shape { dim: 4 dim: 5 dim: 6 } shape { dim: 4 dim: 5 dim: 7 } } }
layer { name: "fc1" type: "InnerProduct" bottom: "data" top: "fc1"
  inner_product_param { num_output: 400 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "fc2" type: "InnerProduct" bottom: "fc1" top: "fc2"
  inner_product_param { num_output: 7 axis: 2 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "fc2" bottom: "target" top: "loss" }
"""
CASES = {
    # name: (net, iter_size, sync mode, POSEIDON_SCHEME, POSEIDON_LAYER_SCHEMES)
    "iter_size": (DATA.format(name="iter") + CONV.format(params="") + CLASSIFIER, 3,
                  "poseidon", "auto", ""),
    "shared": (DATA.format(name="shared") + CONV.format(params="") + SHARED, 1,
               "poseidon", "auto", ""),
    "frozen": (DATA.format(name="frozen") + CONV.format(params=FROZEN) + CLASSIFIER, 2,
               "wfbp", "auto", ""),
    "axis2": (AXIS2, 1, "poseidon", "sfb", "fc2=ps"),
}  # fmt: skip
# What a second derivation got wrong, in the specs the job declares (by layer name).
MISSED = {
    "iter_size": lambda specs: specs["fc1"].k == 4 * 3,  # K: the samples of all 3 passes
    "shared": lambda specs: specs["fc_a"].kind == _C.LayerKind.OTHER and "fc_b" not in specs,
    "frozen": lambda specs: "conv1" not in specs,
    "axis2": lambda specs: specs["fc1"].k == 4 * 5,  # K: the GEMM's rows
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_small_net_plan_is_the_jobs(case, tmp_path, capsys):
    text, iter_size, sync, scheme, schemes = CASES[case]
    net = tmp_path / "net.prototxt"
    net.write_text(text)
    solver_path = write_solver(tmp_path / "solver.prototxt", net, iter_size)
    solver = caffe.get_solver(str(solver_path))
    worker = PlanningWorker(scheme)
    forced = dict(pair.split("=") for pair in schemes.split(",") if pair)
    attach(solver, worker, sync, force_scheme=scheme, layer_schemes=forced)
    printed = printed_plan(capsys, "--solver", str(solver_path), "--sync", sync,
                           "--scheme", scheme, "--layer-schemes", schemes)  # fmt: skip
    assert printed == format_plan(worker.plan(worker.declared))
    assert MISSED[case]({s.name: s for s in worker.declared})


def test_the_job_declares_layer_specs_of_its_layout(tmp_path):
    """PoseidonSync's specs are poseidon.plan.layer_specs of sync_layout(net): the call the
    zoo rows below make for nets too large for a solver each."""
    text, iter_size, *_ = CASES["iter_size"]
    net = tmp_path / "net.prototxt"
    net.write_text(text)
    solver = caffe.get_solver(str(write_solver(tmp_path / "solver.prototxt", net, iter_size)))
    worker = PlanningWorker()
    attach(solver, worker, "poseidon", layer_schemes={"fc2": "sfb"})
    expected = layer_specs(sync_layout(solver.net), iter_size, "poseidon", "auto", {"fc2": "sfb"})
    assert [spec_fields(s) for s in worker.declared] == [spec_fields(s) for s in expected]


# ----- the zoo -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_zoo_plan_is_the_jobs(name, zoo_data_root, tmp_path, monkeypatch, capsys):
    chw = ZOO_BY_NAME[name].input_chw
    monkeypatch.chdir(zoo_data_root)  # the LMDB paths are relative, as in Caffe's examples
    # The zoo's solver with a batch of 2 (the architecture is under test, not the batch).
    param = read_net(name)
    for layer in param.layer:
        if layer.type == "Data":
            layer.data_param.batch_size = 2
    net_path = tmp_path / "train_val.prototxt"
    net_path.write_text(str(param))
    solver_path = write_solver(tmp_path / "solver.prototxt", net_path, iter_size=2)
    printed = printed_plan(capsys, "--solver", str(solver_path))
    real = build_train_net(read_solver_param(str(solver_path)))  # what the job's solver builds
    specs = layer_specs(sync_layout(real), 2)
    assert printed == format_plan(_C.make_plan(specs, WORKERS, SERVERS))
    shapes_only = plan_net(solver=str(solver_path)).net
    assert [spec_fields(s) for s in layer_specs(sync_layout(shapes_only), 2)] == [
        spec_fields(s) for s in specs
    ]
    assert {n: b.shape for n, b in shapes_only.blobs.items()} == {
        n: b.shape for n, b in real.blobs.items()
    }
    del real
    gc.collect()
    # Where the data is not: a Data layer's crop_size says its shape, else --input-shape.
    monkeypatch.chdir(tmp_path)
    crops = {layer.transform_param.crop_size for layer in param.layer if layer.type == "Data"}
    given = [] if 0 not in crops else ["--input-shape", f"data=2,{','.join(map(str, chw))}"]
    assert printed_plan(capsys, "--solver", str(solver_path), *given) == printed
