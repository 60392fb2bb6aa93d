"""Batches loaded on a background thread (Caffe's BasePrefetchingDataLayer and InternalThread).

A `BatchLoader` knows how to produce one batch (a list of CPU tensors, one per top); a
`Prefetcher` runs it on a daemon thread that keeps a queue of up to `prefetch` ready batches;
`PrefetchingDataLayer` is the layer base that starts one at setup and, at every forward, takes
the next batch, reshapes its tops to it and publishes it on the layer's device. On CUDA the
thread pins each batch, so the copy to the device is a non-blocking DMA that overlaps compute.

Note [prefetch thread lifetime]: the thread must never keep a net alive nor outlive it, and
must never hang a test or the process at exit. So the thread holds only the loader, the queue
and a stop event - never the layer or the Prefetcher. When the Prefetcher is garbage-collected
(its layer and net gone) or closed, or the interpreter exits, a `weakref.finalize` sets the stop
event; the thread notices within _STOP_POLL_S (it waits on the full queue with that timeout) and
exits after at most the batch it is loading. The thread is a daemon as a last resort.

Note [errors on the thread]: an exception raised by the loader is queued in place of a batch
and re-raised by the next `next_batch()` on the net's thread, so a corrupt record surfaces in
`forward` with the layer's name instead of dying silently in the background.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Sequence

import torch

from caffe.blob import Blob
from caffe.common import root_solver, shapes_only
from caffe.data.threads import single_threaded_kernels
from caffe.errors import CaffeError, InputShapeError, LayerError
from caffe.layer import Layer

_log = logging.getLogger("caffe")
_STOP_POLL_S = 0.1
_JOIN_TIMEOUT_S = 5.0
_WAIT_LOG_INTERVAL_S = 60.0


class SpareBatches:
    """Batch tensors that the layer has copied into its tops, for the loader to fill again.

    Note [spare batches]. A fresh 40 MB batch costs its first touch (page faults and the
    kernel's zeroing: a third of the time of a raw-uint8 batch) and, pinned for a GPU, a
    cudaHostAlloc; so tensors go round: the loader fills one; on CPU the layer's top adopts
    it as its memory and gives back the batch it held before (BVLC's prefetch_free_ queue);
    on CUDA the layer copies it into its top asynchronously and gives it back with the
    copy's event, which the next filler waits for. At most `limit` wait here; a tensor of
    another shape is simply dropped later.
    Thread-safe: the layer gives on the net's thread, the loader takes on the prefetch one."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._free: list[tuple[torch.Tensor, torch.cuda.Event | None]] = []

    def give(self, tensors: Sequence[torch.Tensor], copied: torch.cuda.Event | None) -> None:
        with self._lock:
            for tensor in tensors:
                if len(self._free) < self.limit:
                    self._free.append((tensor, copied))

    def take(self, shape: Sequence[int], dtype: torch.dtype, pinned: bool) -> torch.Tensor:
        """A tensor of that shape (a spare one once its copy is done, else a new one)."""
        found = None
        with self._lock:
            for k, (tensor, _) in enumerate(self._free):
                if tensor.shape == tuple(shape) and tensor.dtype == dtype:
                    found = self._free.pop(k)
                    break
        if found is None:
            return torch.empty(tuple(shape), dtype=dtype, pin_memory=pinned)
        tensor, copied = found
        if copied is not None:
            copied.synchronize()
        return tensor


class BatchLoader:
    """Produces batches on the prefetch thread. Must hold no reference to its layer."""

    def __init__(self, where: str) -> None:
        self.where = where  # "Layer 'data' (type Data)", for error messages
        # Set by the Prefetcher: whether batches go to a GPU (then allocate them in pinned
        # memory), and where the tensors the layer is done with come back (SpareBatches).
        self.pin_memory = False
        self.spare = SpareBatches(0)

    def new_tensor(self, shape: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """An uninitialised tensor for a batch (a recycled one when it can)."""
        return self.spare.take(shape, dtype, self.pin_memory)

    def error(self, message: str) -> LayerError:
        return LayerError(f"{self.where}: {message}")

    def load_batch(self) -> list[torch.Tensor]:
        """The next batch: one CPU tensor per top."""
        raise NotImplementedError

    def skip_batches(self, count: int) -> None:
        """Pass over `count` batches (resuming a run). Default: load and drop them;
        loaders that can move without decoding override it."""
        for _ in range(count):
            self.load_batch()

    def close(self) -> None:
        """Release files and cursors; called on the prefetch thread when it ends."""


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _put(batches: queue.Queue, item: object, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            batches.put(item, timeout=_STOP_POLL_S)
            return
        except queue.Full:
            continue


def _prefetch_loop(
    loader: BatchLoader,
    batches: queue.Queue,
    stop: threading.Event,
    pin_memory: bool,
    skip_batches: int,
) -> None:
    single_threaded_kernels()  # this thread's share of the work is small (caffe/data/threads.py)
    try:
        loader.skip_batches(skip_batches)
        while not stop.is_set():
            batch = loader.load_batch()
            if pin_memory:
                batch = [t if t.is_pinned() else t.pin_memory() for t in batch]
            _put(batches, batch, stop)
    except Exception as e:  # see Note [errors on the thread]
        _put(batches, _Failure(e), stop)
    finally:
        loader.close()


def _shutdown(stop: threading.Event, thread: threading.Thread) -> None:
    stop.set()
    if thread is not threading.current_thread() and thread.is_alive():
        thread.join(timeout=_JOIN_TIMEOUT_S)


class Prefetcher:
    """Runs `loader.load_batch` on a daemon thread, keeping up to `depth` batches ready."""

    def __init__(
        self, loader: BatchLoader, depth: int, pin_memory: bool, name: str, skip_batches: int = 0
    ) -> None:
        self.where = loader.where
        self._batches: queue.Queue = queue.Queue(maxsize=max(1, int(depth)))
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self.waited_s = 0.0  # how long the last next_batch waited for the thread
        self.total_waited_s = 0.0
        self.waits = 0
        self.batches_taken = 0
        self._logged_at = -_WAIT_LOG_INTERVAL_S
        loader.pin_memory = pin_memory
        self.spare = loader.spare = SpareBatches(limit=2 * (max(1, int(depth)) + 2))
        self.thread = threading.Thread(
            target=_prefetch_loop,
            args=(loader, self._batches, self._stop, pin_memory, skip_batches),
            name=name,
            daemon=True,
        )
        self.thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self.thread)

    def next_batch(self) -> list[torch.Tensor]:
        """The next batch in load order; blocks until the thread has produced it. A wait is
        logged as BVLC does ("Waiting for data"), at most once a minute, and timed
        (`waited_s`: the last wait; `total_waited_s`, `waits`: all of them but the first
        batch's, which waits for the pipeline to start)."""
        first, self.batches_taken = self.batches_taken == 0, self.batches_taken + 1
        if self._failure is None and self._stop.is_set():
            raise LayerError(f"{self.where}: the prefetch thread has stopped")
        try:
            item = self._batches.get_nowait()
        except queue.Empty:
            started = time.perf_counter()
            try:
                return self._wait_for_batch()
            finally:
                self.waited_s = time.perf_counter() - started
                if not first:
                    self._note_wait()
        self.waited_s = 0.0
        return self._unpack(item)

    def _note_wait(self) -> None:
        self.waits += 1
        self.total_waited_s += self.waited_s
        now = time.monotonic()
        if now - self._logged_at >= _WAIT_LOG_INTERVAL_S and root_solver():
            self._logged_at = now
            _log.info("%s: Waiting for data (the prefetch queue was empty %d time(s), %.1f s in "
                      "all): the data pipeline is slower than the net; more decode threads "
                      "(CAFFE_DATA_THREADS) or a larger data_param.prefetch may help", self.where,
                      self.waits, self.total_waited_s)  # fmt: skip

    def _wait_for_batch(self) -> list[torch.Tensor]:
        stopped = LayerError(f"{self.where}: the prefetch thread has stopped")
        while self._failure is None:
            if self._stop.is_set():
                raise stopped  # closed: queued batches are not handed out any more
            try:
                item = self._batches.get(timeout=_STOP_POLL_S)
            except queue.Empty:
                if self.thread.is_alive():
                    continue
                try:  # the thread may have queued its last item (a failure) just before ending
                    item = self._batches.get_nowait()
                except queue.Empty:
                    raise stopped from None
            return self._unpack(item)
        return self._unpack(_Failure(self._failure))

    def _unpack(self, item: object) -> list[torch.Tensor]:
        if isinstance(item, _Failure):
            self._failure = item.error
        if self._failure is None:
            return item  # type: ignore[return-value]
        if isinstance(self._failure, CaffeError):
            raise self._failure
        raise LayerError(f"{self.where}: loading a batch failed: {self._failure!r}") from (
            self._failure
        )

    def close(self) -> None:
        """Stop the thread and wait for it (at most a few seconds); idempotent."""
        self._finalizer()


class PrefetchingDataLayer(Layer):
    """Base of data layers fed by a Prefetcher; subclasses write `make_loader(top)`."""

    exact_num_bottom = 0
    prefetcher: Prefetcher | None = None

    def make_loader(self, top: Sequence[Blob]) -> BatchLoader:
        """Open the source, reshape the tops to the first batch, return the batch loader."""
        raise NotImplementedError(f"{type(self).__name__}.make_loader")

    def setup(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        if shapes_only(self.device):
            self.reshape_tops(top)  # Note [shapes only] (caffe/common.py): no batches, no thread
            return
        self._start(top, skip_batches=0)

    def reshape_tops(self, top: Sequence[Blob]) -> None:
        """Shapes only (Note [shapes only] in caffe/common.py): the tops' shapes, as setup gives
        them, and nothing loaded. By default `make_loader`'s, which reads the first item; a
        source that cannot be read raises InputShapeError."""
        try:
            self.make_loader(top).close()
        except CaffeError as e:
            raise InputShapeError(str(e), list(self.layer_param.top)) from None

    def _start(self, top: Sequence[Blob], skip_batches: int) -> None:
        self._tops = list(top)
        loader = self.make_loader(top)
        depth = self.layer_param.data_param.prefetch  # 4 unless set (also for ImageData)
        self.prefetcher = Prefetcher(
            loader,
            depth,
            pin_memory=self.device.type == "cuda",
            name=f"prefetch:{self.name}",
            skip_batches=skip_batches,
        )

    def fast_forward(self, batches: int) -> None:
        """Restart reading as if `batches` batches had been consumed since setup, so that a
        run resumed from a snapshot reads the batches the uninterrupted run would have."""
        self.close()
        self._start(self._tops, skip_batches=batches)

    def reshape(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        """Tops take each batch's shape in forward."""

    def forward(self, bottom: Sequence[Blob], top: Sequence[Blob]) -> None:
        if self.prefetcher is None:
            raise self.error("forward before setup")
        batch = self.prefetcher.next_batch()
        if self.device.type == "cpu":
            # The batch becomes the tops' memory (Caffe's set_cpu_data: no copy); the
            # memory it replaces, the batch before, goes back to the loader.
            spent = []
            for blob, tensor in zip(top, batch):
                blob.reshape(tensor.shape)
                old = blob.adopt_data(tensor)
                if old is not None:
                    spent.append(old)
            self.prefetcher.spare.give(spent, None)  # Note [spare batches]
            return
        for blob, tensor in zip(top, batch):
            blob.reshape(tensor.shape)
            # Straight into the top's memory, from pinned memory: an asynchronous copy.
            blob.data_tensor.copy_(tensor, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        self.prefetcher.spare.give(batch, copied)  # Note [spare batches]

    def close(self) -> None:
        """Stop the prefetch thread now (it also stops when the layer is garbage-collected)."""
        if self.prefetcher is not None:
            self.prefetcher.close()

    def batch_wait_s(self) -> float | None:
        return self.prefetcher.waited_s if self.prefetcher is not None else 0.0


def layer_label(layer: Layer) -> str:
    """How errors name a layer: "Layer 'data' (type Data)"."""
    return f"Layer '{layer.name}' (type {layer.type})"
