"""pycaffe's `caffe.NCCL`: BVLC's multi-GPU Python flow (python/train.py), one process per
solver, data-parallel over Poseidon's communication core instead of NVIDIA's NCCL.

    uid = caffe.NCCL.new_uid()               # in the parent, before starting the processes
    # in each process r of P:
    caffe.set_solver_count(P); caffe.set_solver_rank(r); caffe.set_multiprocess(True)
    solver = caffe.SGDSolver(proto)
    nccl = caffe.NCCL(solver, uid)           # rendezvous (rank 0 runs the coordinator)
    nccl.bcast()                             # every solver starts from rank 0's weights
    solver.add_callback(nccl)                # on_start / on_gradients_ready
    if solver.param.layer_wise_reduce:
        solver.net.after_backward(nccl)      # send each layer as its backward ends
    solver.step(solver.param.max_iter)

The arithmetic is Caffe's NCCL::on_gradients_ready: each gradient is summed over the P
solvers (through KV-store shards, one per process) and scaled by 1/P before the update, so
P processes at batch K train like one at batch P·K. The devices are whatever the process
chose (set_mode_gpu + set_device, or set_mode_cpu; GPU mode without CUDA computes on CPU),
so BVLC's train.py `--gpus 0 1` runs two CPU processes on a machine without a GPU.

The job ends with the processes: at exit (multiprocessing's finalizers, which its children
also run, or atexit) each one shuts down cleanly, waiting for the others; a process that
exits with an exception (or Ctrl-C), or in the middle of an iteration, aborts the job
instead, so the others fail at once with its name and reason rather than waiting out
POSEIDON_TIMEOUT_MS. `nccl.close()` leaves the job earlier.
"""

from __future__ import annotations

import logging
import multiprocessing.util
import sys

from caffe.common import set_multiprocess, solver_count, solver_rank
from caffe.errors import DistributedError
from caffe.parallel.attach import join_uid, new_uid
from caffe.parallel.syncer import PoseidonSync

_log = logging.getLogger("caffe")
_EXIT_PRIORITY = 50  # before multiprocessing's own teardown (priority 0 and below)


class _Session:
    """What the exit hook needs, without a reference back to the NCCL object."""

    def __init__(self, sync: PoseidonSync) -> None:
        self.sync = sync
        self.iteration_open = False  # on_start seen, on_gradients_ready not completed
        self.error: BaseException | None = None
        self.closed = False

    def close(self, error: BaseException | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        error = error or self.error
        if error is None and self.iteration_open:
            error = RuntimeError(f"exited during iteration {self.sync.solver.iter}")
        try:
            self.sync.close(error)
        except DistributedError as e:
            if error is None:
                raise
            _log.error("caffe.NCCL rank %d: %s", self.sync.rank, e)

    def close_at_exit(self) -> None:
        try:
            self.close(_exiting_exception())
        except DistributedError as e:  # nothing to raise to at exit: say it
            _log.error("caffe.NCCL rank %d: %s", self.sync.rank, e)


def _exiting_exception() -> BaseException | None:
    """The exception that ends the process, if any. multiprocessing runs its finalizers in
    a `finally` around the process's target, where sys.exc_info() still holds it; at
    interpreter exit, an uncaught exception was left in sys.last_value when printed."""
    error = sys.exc_info()[1] or getattr(sys, "last_value", None)
    if isinstance(error, SystemExit) and error.code in (None, 0):
        return None
    return error


class NCCL:
    """NCCL(solver, uid): join the job of `uid` as solver caffe.solver_rank() of
    caffe.solver_count(). Blocks until every process has joined (POSEIDON_TIMEOUT_MS)."""

    def __init__(self, solver, uid: bytes) -> None:  # type: ignore[no-untyped-def]
        set_multiprocess(True)
        self.solver = solver
        sync = join_uid(solver, uid, solver_rank(), solver_count())
        self._session = _Session(sync)
        multiprocessing.util.Finalize(
            self, self._session.close_at_exit, exitpriority=_EXIT_PRIORITY
        )

    @staticmethod
    def new_uid() -> bytes:
        """A fresh job identity for the processes of one run (bytes, as pycaffe's)."""
        return new_uid()

    @property
    def rank(self) -> int:
        return self._session.sync.rank

    def bcast(self) -> None:
        """Every solver's parameters := rank 0's (Caffe's NCCL::Broadcast)."""
        self._guard(self._session.sync.bcast)

    # ----- the solver's callback (solver.add_callback(nccl)) ---------------------------------
    def on_start(self) -> None:
        self._session.iteration_open = True
        self._guard(self._session.sync.on_start)

    def on_gradients_ready(self) -> None:
        """Every gradient := the mean over the solvers (sum, then scale by 1/P)."""
        self._guard(self._session.sync.on_gradients_ready)
        self._session.iteration_open = False

    # ----- the net's after_backward callback (solver.net.after_backward(nccl)) ---------------
    def __call__(self, layer_index: int) -> None:
        self._guard(lambda: self._session.sync.after_backward(layer_index))

    def close(self) -> None:
        """Leave the job now (also done at exit): waits until every process has left."""
        self._session.close()

    def _guard(self, action) -> None:  # type: ignore[no-untyped-def]
        try:
            action()
        except DistributedError as e:
            self._session.error = e
            raise
