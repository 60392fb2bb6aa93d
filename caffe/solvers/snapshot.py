"""Snapshots and restore (docs/caffe_format.md §4.5): the trained net plus the solver's state.

    BINARYPROTO: <prefix>_iter_<N>.caffemodel    + <prefix>_iter_<N>.solverstate
    HDF5:        <prefix>_iter_<N>.caffemodel.h5 + <prefix>_iter_<N>.solverstate.h5

The solver state holds iter, current_step, learned_net (the model file written with it)
and the history blobs in learnable-parameter order (two sets for AdaDelta and Adam).
Binary files are written by caffe.formats.weights_io (the bytes protobuf would serialize) and
every file is written to a temporary name and renamed, so a crash never leaves a
half-written snapshot. Restore reads HDF5 iff the name ends in ".h5".

HDF5 solver state layout: int32 datasets `iter` and `current_step` (one element each),
string dataset `learned_net`, group `history` with float datasets "0", "1", ...
"""

from __future__ import annotations

import logging
import os
import re

import numpy as np
import torch

from caffe.common import root_solver
from caffe.errors import SolverError, WeightsError
from caffe.formats.atomic_write import parse_temp_name, replacing
from caffe.formats.blob_proto import BlobArray, shape_equals
from caffe.formats.weights_io import read_solverstate, write_solverstate
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")


def _info(message: str, *args: object) -> None:
    if root_solver():
        _log.info(message, *args, stacklevel=2)


class SolverSnapshotMixin:
    """Mixed into caffe.solvers.solver.Solver (uses param, iter, current_step, net, history,
    divergence). `last_snapshot` is the solver state written last (or restored from)."""

    last_snapshot: str | None = None

    def snapshot_filename(self, extension: str) -> str:
        return f"{self.param.snapshot_prefix}_iter_{self.iter}{extension}"

    def snapshot_state_filename(self) -> str:
        """The solver state a snapshot of this iteration writes (.solverstate[.h5])."""
        hdf5 = self.param.snapshot_format == caffe_pb2.SolverParameter.HDF5
        return self.snapshot_filename(".solverstate.h5" if hdf5 else ".solverstate")

    def check_snapshot_write_permissions(self) -> None:
        """Fail at start-up, not after hours of training, if snapshots cannot be written."""
        if not (root_solver() and self.param.snapshot):
            return
        if not self.param.HasField("snapshot_prefix"):
            raise SolverError("In solver params, snapshot is specified but snapshot_prefix is not")
        probe = self.snapshot_filename(".tempfile")
        try:
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError as e:
            directory = os.path.dirname(os.path.abspath(probe))
            raise SolverError(
                f"Cannot write to snapshot prefix '{self.param.snapshot_prefix}' ({e.strerror}). "
                f"Make sure that the directory {directory} exists and is writable."
            ) from None

    def sweep_stale_snapshot_files(self) -> None:
        """Remove the temporary files that a killed run of this host left in the snapshot
        prefix's directory; report (and keep) those whose writer may still be running.

        Only our own names are touched: `<prefix>_iter_<N>.<caffemodel|solverstate>[.h5]`
        followed by caffe/formats/atomic_write.py's temporary suffix (or an older version's plain
        `.tmp`, which names no writer and is therefore only reported).
        """
        if not (root_solver() and self.param.snapshot_prefix):
            return
        directory, base = os.path.split(self.param.snapshot_prefix)
        ours = re.compile(rf"{re.escape(base)}_iter_\d+\.(caffemodel|solverstate)(\.h5)?")
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError:
            return  # a missing directory is check_snapshot_write_permissions' to report
        for name in names:
            temp = parse_temp_name(name)
            if temp is None or not ours.fullmatch(temp.target):
                continue
            path = os.path.join(directory, name)
            if temp.abandoned():
                try:
                    os.remove(path)
                except OSError as e:
                    _log.warning("Could not remove stale snapshot file %s: %s", path, e.strerror)
                    continue
                _log.warning(
                    "Removed %s: an unfinished snapshot file of process %d, which is gone",
                    path, temp.pid,
                )  # fmt: skip
            else:
                writer = f"process {temp.pid} on {temp.host}" if temp.pid else "an older run"
                _log.warning(
                    "%s looks like an unfinished snapshot file (written by %s); not removed: "
                    "delete it if no other run uses snapshot prefix %s",
                    path, writer, self.param.snapshot_prefix,
                )  # fmt: skip

    # ----- writing ------------------------------------------------------------------------
    def snapshot(self) -> None:
        """Write the net and the solver state for the current iteration.

        Weights that are not finite are not written (a warning names the kept snapshot), so
        a diverged run never buries its last good snapshot under a NaN one. A failed write
        (a full disk) raises WeightsError naming the file, the reason and the kept snapshot;
        every file is written to a temporary name and renamed, so nothing partial remains.
        """
        self._flush()
        problem = self.divergence.nonfinite_weights()
        if problem is not None:
            _log.warning("Iteration %d: not snapshotting: %s; %s", self.iter, problem, self._kept())
            return
        hdf5 = self.param.snapshot_format == caffe_pb2.SolverParameter.HDF5
        try:
            if hdf5:
                model_filename = self.snapshot_filename(".caffemodel.h5")
                _info("Snapshotting to HDF5 file %s", model_filename)
                self.net.save_hdf5(model_filename, write_diff=self.param.snapshot_diff)
                state_filename = self._write_state_hdf5(model_filename)
            else:
                model_filename = self.snapshot_filename(".caffemodel")
                _info("Snapshotting to binary proto file %s", model_filename)
                self.net.save(model_filename, write_diff=self.param.snapshot_diff)
                state_filename = self._write_state_binary(model_filename)
        except WeightsError as e:
            raise WeightsError(
                f"Snapshot at iteration {self.iter} failed: {e}; {self._kept()}"
            ) from None
        self.last_snapshot = state_filename

    def _kept(self) -> str:
        if self.last_snapshot is None:
            return "this run has written no earlier snapshot"
        return f"the last snapshot, {self.last_snapshot}, is kept"

    def _history_arrays(self) -> list[np.ndarray]:
        return [h.detach().cpu().numpy() for h in self.history]

    def _write_state_binary(self, model_filename: str) -> str:
        filename = self.snapshot_filename(".solverstate")
        _info("Snapshotting solver state to binary proto file %s", filename)
        write_solverstate(
            filename, self.iter, self.current_step, model_filename, self._history_arrays()
        )
        return filename

    def _write_state_hdf5(self, model_filename: str) -> str:
        import h5py

        filename = self.snapshot_filename(".solverstate.h5")
        _info("Snapshotting solver state to HDF5 file %s", filename)
        with replacing(filename, WeightsError) as tmp, h5py.File(tmp, "x") as f:
            f.create_dataset("iter", data=np.array([self.iter], np.int32))
            f.create_dataset("learned_net", data=np.bytes_(model_filename.encode()))
            f.create_dataset("current_step", data=np.array([self.current_step], np.int32))
            history = f.create_group("history")
            for i, array in enumerate(self._history_arrays()):
                history.create_dataset(str(i), data=array)
        return filename

    # ----- reading ------------------------------------------------------------------------
    def restore(self, state_file: str) -> None:
        """Resume from a .solverstate (or .solverstate.h5): iter, current_step, weights, history.

        Everything is read and checked before anything changes, so a bad file leaves the
        solver as it was.
        """
        state_file = os.fspath(state_file)
        _info("Restoring previous solver status from %s", state_file)
        if state_file.endswith(".h5"):
            iteration, current_step, learned_net, history = _read_state_hdf5(state_file)
        else:
            state, history = read_solverstate(state_file)
            iteration, current_step = state.iter, state.current_step
            learned_net = state.learned_net if state.HasField("learned_net") else None
        self._check_history(state_file, history)
        if learned_net:
            self.net.copy_from(_find_learned_net(state_file, learned_net))
        for target, blob in zip(self.history, history):
            values = np.array(blob.data, dtype=np.float32).reshape(tuple(target.shape))
            target.copy_(torch.from_numpy(values))
        self.iter = iteration
        self.current_step = current_step
        self.last_snapshot = state_file
        # The train net's data layers continue where the interrupted run was: iter *
        # iter_size batches into their (sharded) sources, so the resumed run sees the
        # batches the uninterrupted one would have. (Test nets do not change the weights.)
        passes = iteration * max(1, self.param.iter_size)
        for layer in self.net.layers:
            if hasattr(layer, "fast_forward"):
                layer.fast_forward(passes)
        if self.restore_hook is not None:  # a distributed worker's own state
            self.restore_hook(state_file)

    def _check_history(self, state_file: str, history: list[BlobArray]) -> None:
        if len(history) != len(self.history):
            raise SolverError(
                f"{state_file}: Incorrect length of history blobs: the file has {len(history)}, "
                f"a {self.type} solver for net '{self.net.name}' keeps {len(self.history)} "
                f"({self.history_sets} per learnable parameter)"
            )
        for i, (target, blob) in enumerate(zip(self.history, history)):
            if not shape_equals(blob, tuple(target.shape)):
                raise SolverError(
                    f"{state_file}: history blob {i} has shape {list(blob.shape)}, the solver "
                    f"expects {list(target.shape)} (learnable parameter "
                    f"{i % max(1, len(self.net.learnable_params))})"
                )


def _read_state_hdf5(path: str) -> tuple[int, int, str | None, list[BlobArray]]:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            for name in ("iter", "current_step", "history"):
                if name not in f:
                    raise WeightsError(f"{path}: no '{name}' in this HDF5 solver state")
            iteration = int(np.asarray(f["iter"]).reshape(-1)[0])
            current_step = int(np.asarray(f["current_step"]).reshape(-1)[0])
            learned_net = None
            if "learned_net" in f:
                raw = f["learned_net"][()]
                raw = raw if isinstance(raw, bytes) else np.asarray(raw).reshape(-1)[0]
                learned_net = raw.decode() if isinstance(raw, bytes) else str(raw)
                learned_net = learned_net.rstrip("\0")
            group = f["history"]
            history = []
            for i in range(len(group)):
                if str(i) not in group:
                    raise WeightsError(f"{path}: history dataset {i} is missing")
                history.append(BlobArray.from_array(np.asarray(group[str(i)], np.float32)))
    except OSError as e:
        raise WeightsError(f"Could not read HDF5 solver state {path}: {e}") from None
    return iteration, current_step, learned_net, history


def _find_learned_net(state_file: str, learned_net: str) -> str:
    """The model file named in a solver state: as written, else beside the state file."""
    state_dir = os.path.dirname(state_file)
    candidates = [
        learned_net,
        os.path.join(state_dir, learned_net),
        os.path.join(state_dir, os.path.basename(learned_net)),
    ]
    for path in candidates:
        if os.path.exists(path):
            return path
    raise WeightsError(
        f"{state_file}: its learned_net '{learned_net}' was found neither as given nor in "
        f"{state_dir or '.'}"
    )
