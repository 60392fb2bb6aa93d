"""`caffe train`: train or finetune a model from a solver prototxt (Caffe's tools/caffe.cpp).

    caffe train --solver S [--snapshot F.solverstate | --weights A.caffemodel[,B...]]
                [--gpu ids|all] [--level N] [--stage a,b] [--sigint_effect E] [--sighup_effect E]
                [--nonfinite_limit N]

Order of events: read the solver (upgraded), put --level/--stage into its train_state,
choose the device, build the solver of its `type`, let a distributed job attach to it,
restore --snapshot, log "Starting Optimization" and solve. Ctrl-C and SIGHUP become solver
actions (caffe/tools/signals.py), and so does SIGTERM. A run stopped early by either
(`--sigint_effect stop`, the default) has written its final snapshot and exits with status
0, as Caffe's does, so `set -e` scripts such as cifar10's train_quick.sh go on to their
next step. In a Poseidon job every worker stops at the same agreed iteration and exits 0
too (caffe/parallel/syncer.py, Note [agreed actions]).
"""

from __future__ import annotations

import logging

from caffe.errors import CaffeError
from caffe.formats.proto_io import read_solver_param
from caffe.proto import caffe_pb2
from caffe.solvers.divergence import check_nonfinite_limit
from caffe.solvers.nets import require_train_net
from caffe.tools.devices import choose_devices, log_gpu_names
from caffe.tools.flags import Flags
from caffe.tools.progress import attach_progress_bar
from caffe.tools.signals import SignalHandler, check_effect

_log = logging.getLogger("caffe")
# A Ctrl-C that interrupted at once (see caffe/tools/cli.py).
EXIT_INTERRUPTED = 130


def train(flags: Flags) -> int:
    if not flags.solver:
        raise CaffeError("Need a solver definition to train (--solver).")
    if flags.snapshot and flags.weights:
        raise CaffeError(
            "Give a snapshot to resume training or weights to finetune but not both "
            "(--snapshot and --weights)."
        )
    check_effect("sigint_effect", flags.sigint_effect)
    check_effect("sighup_effect", flags.sighup_effect)
    check_nonfinite_limit(flags.nonfinite_limit, "--nonfinite_limit")
    param = read_solver_param(flags.solver)
    require_train_net(param, flags.solver)
    param.train_state.level = flags.level
    param.train_state.stage.extend(flags.stages)
    distributed = _poseidon_worker_rank()
    gpus = _choose_devices(flags, param, distributed)
    if flags.snapshot:
        param.ClearField("weights")
    elif flags.weights:
        param.ClearField("weights")
        param.weights.append(flags.weights)
    with SignalHandler(flags.sigint_effect, flags.sighup_effect) as signals:
        solver = _build_solver(param)
        solver.nonfinite_limit = flags.nonfinite_limit
        solver.set_action_function(signals.action)
        sync = _attach_distributed(solver) if distributed is not None else None
        progress = attach_progress_bar(solver)
        failure: BaseException | None = None
        try:
            if flags.snapshot:
                _log.info("Resuming from %s", flags.snapshot)
                solver.restore(flags.snapshot)
            _log.info("Starting Optimization")
            if len(gpus) > 1:
                _log.warning(
                    "caffe train runs one solver per process: training on GPU %d only. For "
                    "data-parallel training start one worker per GPU with `poseidon launch`.",
                    gpus[0],
                )
            solver.solve()
        except BaseException as e:
            failure = e
            raise
        finally:
            if progress is not None:
                progress.close()
            if sync is not None:
                sync.close(failure)
    return 0  # also after "Optimization stopped early.", as Caffe's train()


def _choose_devices(
    flags: Flags, param: caffe_pb2.SolverParameter, local_rank: int | None = None
) -> list[int]:
    """--gpu wins; without it, a solver that says `solver_mode: GPU` uses its device_id
    (a worker of a Poseidon job: the GPU of its local rank, one GPU per worker)."""
    gpu_flag, requested_by = flags.gpu, "--gpu"
    solver_wants_gpu = (
        param.HasField("solver_mode") and param.solver_mode == caffe_pb2.SolverParameter.GPU
    )
    if not gpu_flag and solver_wants_gpu:
        device = param.device_id if local_rank is None else _gpu_of_local_rank(local_rank)
        gpu_flag, requested_by = str(device), f"solver_mode GPU ({flags.solver})"
    gpus = choose_devices(gpu_flag, requested_by)
    if not gpus:
        _log.info("Use CPU.")
        return gpus
    _log.info("Using GPUs %s", ", ".join(map(str, gpus)))
    log_gpu_names(gpus)
    param.device_id = gpus[0]
    return gpus


def _build_solver(param: caffe_pb2.SolverParameter):  # type: ignore[no-untyped-def]
    from caffe.solvers import get_solver

    return get_solver(param)


def _poseidon_worker_rank() -> int | None:
    """For a worker of a Poseidon job (POSEIDON_ROLE=worker, set by `poseidon launch` or a
    cluster spec): set the solver rank and count before any net is built (data layers
    shard by them; the seed is offset by the rank) and return the worker's local rank
    (its GPU). None for a plain single-process `caffe train`."""
    import os

    if os.environ.get("POSEIDON_ROLE") != "worker":
        return None
    from caffe.parallel import prepare_worker

    return prepare_worker()


def _gpu_of_local_rank(local_rank: int) -> int:
    import torch

    count = torch.cuda.device_count()
    return local_rank % count if count else 0


def _attach_distributed(solver):  # type: ignore[no-untyped-def]
    """Join the Poseidon job and attach caffe.parallel to the solver (between building the
    solver and solving): per-layer syncers on the net's after-backward hooks, deferred
    per-layer updates, rank 0's weights broadcast at the first step."""
    from caffe.parallel import attach_from_environment

    return attach_from_environment(solver)
