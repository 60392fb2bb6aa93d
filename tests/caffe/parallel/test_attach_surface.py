"""Every syncer uses the engine's attach surface and nothing else (caffe/training_hooks.py,
ATTACH_SURFACE): each runs a real job of one worker here on a Solver, a Net, Layers and
Blobs seen through stand-ins that have exactly the listed attributes; one step outside the
surface fails with the attribute's name. Closing a syncer takes off every callback and hook
it attached, so the Solver trains on alone afterwards."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import torch.distributed as dist

import caffe.training_hooks
from caffe.parallel import AllreduceSync, join
from caffe.solvers import get_solver
from caffe.training_hooks import ATTACH_SURFACE
from poseidon import Config
from poseidon.rendezvous import free_port
from tests.caffe.parallel.job import BATCH, write_solver

ITERS = 3
WRAPPED = {  # kind -> {attribute: kind of what it holds}
    "Solver": {"net": "Net"},
    "Net": {"layers": "Layer", "learnable_params": "Blob"},
}


class Surface:
    """`target` as a syncer may see it: the attributes ATTACH_SURFACE[kind] lists, read and
    (for slots) written through; a Solver's net, a Net's layers and learnable blobs are
    Surfaces too. Anything else raises AttributeError naming it."""

    def __init__(self, target: Any, kind: str) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_kind", kind)

    def _allowed(self, name: str) -> None:
        if name not in ATTACH_SURFACE[self._kind]:
            raise AttributeError(f"{self._kind}.{name} is not on the attach surface")

    def __getattr__(self, name: str) -> Any:
        self._allowed(name)
        value = getattr(self._target, name)
        wrapped = WRAPPED.get(self._kind, {}).get(name)
        if wrapped is None:
            return value
        if isinstance(value, (list, tuple)):
            return [Surface(v, wrapped) for v in value]
        return Surface(value, wrapped)

    def __setattr__(self, name: str, value: Any) -> None:
        self._allowed(name)
        setattr(self._target, name, value)


def callbacks_of(solver: Any) -> list[int]:
    net = solver.net
    return [len(solver._callbacks), len(net._before_forward), len(net._after_forward),
            len(net._before_backward), len(net._after_backward)]  # fmt: skip


def slots_of(solver: Any) -> list[Any]:
    layers = [layer.sufficient_factor_sink for layer in solver.net.layers
              if hasattr(type(layer), "sufficient_factor_sink")]  # fmt: skip
    return [solver.update_hook, solver.flush_hook, solver.action_hook,
            solver.net.clear_param_diffs_hook, *layers]  # fmt: skip


def job_of_one(tmp_path, **settings: Any) -> Config:
    return Config(num_workers=1, num_servers=1, coordinator=f"127.0.0.1:{free_port()}",
                  token=secrets.token_hex(16), colocate=True,
                  timeline=str(tmp_path / "trace.json"), **settings)  # fmt: skip


def new_solver(tmp_path) -> Any:
    return get_solver(write_solver(str(tmp_path), BATCH, 2 * ITERS))


@pytest.mark.parametrize("sync", ["poseidon", "wfbp", "ps-nooverlap"])
def test_poseidon_sync_stays_on_the_surface_and_leaves_nothing_behind(tmp_path, sync):
    solver = new_solver(tmp_path)
    before = callbacks_of(solver)
    config = job_of_one(tmp_path, sync=sync, layer_schemes={"ip1": "sfb"} if sync ==
                        "poseidon" else {})  # fmt: skip
    syncer = join(Surface(solver, "Solver"), config, host_coordinator=True)
    assert callbacks_of(solver) != before
    if sync == "poseidon":
        assert {r.name: r.scheme for r in syncer.rounds}["ip1"] == "SFB"
    try:
        solver.step(ITERS)
    except BaseException as e:
        syncer.close(e)
        raise
    syncer.close()
    assert callbacks_of(solver) == before
    assert all(slot is None for slot in slots_of(solver))
    solver.step(ITERS)  # alone again: nothing of the closed syncer runs
    assert solver.iter == 2 * ITERS


def test_the_callers_hooks_flow_stays_on_the_surface(tmp_path):
    """caffe.NCCL's way (Note [caller's hooks] in caffe/parallel/syncer.py): the script
    registers the syncer's callbacks itself."""
    solver = new_solver(tmp_path)
    before = callbacks_of(solver)
    config = job_of_one(tmp_path, sync="wfbp", scheme="ps")
    syncer = join(Surface(solver, "Solver"), config, broadcast_weights=False, hooks=False,
                  host_coordinator=True)  # fmt: skip
    syncer.bcast()
    handles = [solver.add_callback(syncer.on_start, syncer.on_gradients_ready),
               solver.net.after_backward(syncer.after_backward)]  # fmt: skip
    solver.step(ITERS)
    for handle in handles:
        handle.remove()
    syncer.close()
    assert callbacks_of(solver) == before


def test_allreduce_sync_stays_on_the_surface_and_leaves_nothing_behind(tmp_path):
    solver = new_solver(tmp_path)
    before = callbacks_of(solver)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        syncer = AllreduceSync(Surface(solver, "Solver"), first_bucket_bytes=256,
                               bucket_cap_bytes=1024)  # fmt: skip
        solver.step(ITERS)
        syncer.close()
    finally:
        dist.destroy_process_group()
    assert callbacks_of(solver) == before
    solver.step(ITERS)
    assert solver.iter == 2 * ITERS


def test_a_step_off_the_surface_is_named():
    surface = Surface(object(), "Net")
    with pytest.raises(AttributeError, match=r"Net\.top_vecs is not on the attach surface"):
        _ = surface.top_vecs


def test_the_surface_is_the_documented_one():
    """Every name of ATTACH_SURFACE is in the module's list of the surface, under its kind."""
    text = caffe.training_hooks.__doc__ or ""
    missing = [f"{kind}.{name}" for kind, names in ATTACH_SURFACE.items() for name in names
               if name not in text]  # fmt: skip
    assert not missing, missing
