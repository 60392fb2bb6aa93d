import gc
import threading
import time

import pytest
import torch

from caffe.data.prefetch import BatchLoader, Prefetcher
from caffe.errors import CaffeError, LayerError


class CountingLoader(BatchLoader):
    """Batch i is tensor([i]); fails with `error` at batch `fail_at`."""

    def __init__(self, fail_at=None, error=None):
        super().__init__("Layer 'counter' (type Test)")
        self.produced = 0
        self.fail_at, self.failure = fail_at, error
        self.closed = threading.Event()

    def load_batch(self):
        if self.produced == self.fail_at:
            raise self.failure
        self.produced += 1
        return [torch.tensor([self.produced - 1])]

    def close(self):
        self.closed.set()


def wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_batches_arrive_in_order_and_the_queue_is_bounded():
    loader = CountingLoader()
    prefetcher = Prefetcher(loader, depth=3, pin_memory=False, name="test")
    assert wait_until(lambda: loader.produced >= 4)
    time.sleep(0.2)
    assert loader.produced == 4, "3 queued batches plus the one waiting to be queued"
    assert [int(prefetcher.next_batch()[0]) for _ in range(6)] == list(range(6))
    prefetcher.close()
    assert not prefetcher.thread.is_alive() and loader.closed.is_set()


def test_caffe_errors_pass_through_and_others_are_wrapped():
    failing = Prefetcher(CountingLoader(1, CaffeError("record 'x' is bad")), 2, False, "t")
    assert int(failing.next_batch()[0]) == 0
    for _ in range(2):  # the failure is reported again, not replaced by a hang
        with pytest.raises(CaffeError, match="record 'x' is bad"):
            failing.next_batch()
    crashing = Prefetcher(CountingLoader(0, ZeroDivisionError("boom")), 2, False, "t")
    with pytest.raises(LayerError, match=r"'counter'.*ZeroDivisionError") as info:
        crashing.next_batch()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_garbage_collection_stops_a_thread_blocked_on_a_full_queue():
    loader = CountingLoader()
    prefetcher = Prefetcher(loader, depth=1, pin_memory=False, name="test")
    thread = prefetcher.thread
    assert wait_until(lambda: loader.produced == 2)
    del prefetcher
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive() and loader.closed.is_set()
