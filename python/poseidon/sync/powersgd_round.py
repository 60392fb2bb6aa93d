"""A PowerSGD layer's round through the comm core: two sums, one after the other.

The codec (powersgd.py) says what goes on the wire; the comm core's plan (plan.h, Note [plan
parts]) registers the layer's wire buffer of `r·m + rest + r·n` floats and sums it in two
parts, each a push-pull of its own at the same iteration:

    submit     (training thread)   encode_p: part 0 = [P | rest]; push_pull(part 0)
    continue   (continuation)      wait part 0's sum; encode_q: part 1 = Q; push_pull(part 1)
    finish     (training thread)   wait part 1's sum; decode into the layer's gradient range

The middle step runs on the client's continuation thread (one for the job, in submission
order), so the training thread never waits for part 0: backward goes on, and a layer's Q
round starts the moment its P sum is back, as WFBP wants. The sums are SUMS; decode leaves
the MEAN in the gradient range, so `finish` does not scale again.

The matrix is the cost model's M × N (M outputs). A weight stored N × M (Caffe's
InnerProduct with transpose: true) goes through a scratch copy in M × N order, so that the
parts' sizes are the plan's.

Note [PowerSGD on CUDA]. Encoding runs on the compute stream in the training thread (it is
queued work, no wait); the wire's parts cross to and from pinned host memory on the side
stream, ordered by events; encode_q runs on the side stream in the continuation thread; the
decode at `finish` runs on the side stream after part 1 is back, and the compute stream waits
for it before the layer's next use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from poseidon.sync.layout import SyncLayer
from poseidon.sync.powersgd import PowerSGDLayer


class PowerSGDExchange:
    """The PowerSGD round of `layer` (plan entry `planned`, a `_C.LayerPlan`) of a connected
    `worker`, whose gradient range is `diff` (float32, flat). `seed_draw` seeds its first Q
    (the same on every worker); `continuation` is the client's continuation thread."""

    def __init__(self, worker: Any, layer: SyncLayer, planned: Any, diff: torch.Tensor, *,
                 seed_draw: int, continuation: ThreadPoolExecutor,
                 side_stream: torch.cuda.Stream | None = None,
                 comm_thread: ThreadPoolExecutor | None = None) -> None:  # fmt: skip
        m, n = layer.shape.m, layer.shape.n
        if m * n > diff.numel():
            raise ValueError(f"layer {layer.name!r}: a {m}x{n} weight does not fit its "
                             f"{diff.numel()} gradient floats")  # fmt: skip
        self.worker, self.layer, self.diff = worker, layer, diff
        self.continuation, self.side_stream = continuation, side_stream
        self.comm_thread = comm_thread
        self.codec = PowerSGDLayer(m, n, max(1, planned.rank), rest=diff.numel() - m * n,
                                   seed_draw=seed_draw, device=diff.device)  # fmt: skip
        if self.codec.wire_floats != planned.wire_floats:
            raise ValueError(f"layer {layer.name!r}: PowerSGD's wire is {self.codec.wire_floats} "
                             f"floats, the plan's {planned.wire_floats}")  # fmt: skip
        self.on_cuda = diff.device.type == "cuda"
        # The gradient in M x N order: the range itself, or a scratch copy (Note above).
        self.grad = torch.empty_like(diff) if layer.transposed else diff
        self.wire = torch.zeros(self.codec.wire_floats, dtype=torch.float32, device=diff.device)
        self.host = torch.zeros(self.wire.numel(), dtype=torch.float32).pin_memory() \
            if self.on_cuda else self.wire  # fmt: skip
        self.part0, self.part1 = (slice(p.offset, p.offset + p.num_floats) for p in planned.parts)
        worker.register_layer(layer.index, self.host.numpy())

    # ----- the three steps -----------------------------------------------------------------
    def submit(self, iteration: int) -> Future:
        """Encode P and start part 0's sum; the continuation starts part 1's. Returns a future
        of part 1's handle."""
        if self.layer.transposed:
            self._reorder(self.diff, self.grad, to_plan=True)
        self.codec.encode_p(self.grad, self.wire)
        copied = self._to_host(self.part0)
        index = self.layer.index

        def send_p() -> Any:
            if copied is not None:
                copied.synchronize()
            return self.worker.push_pull(index, iteration, 0)

        if self.comm_thread is None:
            handle = send_p()
            first: Callable[[], Any] = lambda: handle  # noqa: E731
        else:  # CUDA: the submit thread waits for the copy, not the training thread
            first = self.comm_thread.submit(send_p).result
        return self.continuation.submit(self._continue, first, iteration)

    def _continue(self, first: Callable[[], Any], iteration: int) -> Any:
        handle = first()
        handle.wait()  # part 0's sum: the comm core's timeout and peer errors apply
        with self._side():
            self._to_device(self.part0)
            self.codec.encode_q(self.wire)
            copied = self._to_host(self.part1)
        if copied is not None:
            copied.synchronize()
        return self.worker.push_pull(self.layer.index, iteration, 1)

    def finish(self, num_workers: int) -> None:
        """Part 1's sum has come (its handle waited for): the mean gradient into `diff`."""
        with self._side():
            self._to_device(self.part1)
            self.codec.decode(self.wire, self.grad, num_workers)
            if self.layer.transposed:
                self._reorder(self.grad, self.diff, to_plan=False)
            done = torch.cuda.Event() if self.on_cuda else None
            if done is not None:
                done.record(self.side_stream)
        if done is not None:
            torch.cuda.current_stream().wait_event(done)

    # ----- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This worker's error feedback and warm-start Q (PowerSGDLayer.state_dict)."""
        return self.codec.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.codec.load_state_dict(state)

    # ----- helpers ---------------------------------------------------------------------------
    def _reorder(self, source: torch.Tensor, target: torch.Tensor, to_plan: bool) -> None:
        """Between the stored N x M weight and the M x N order of the plan; the rest as is."""
        m, n = self.layer.shape.m, self.layer.shape.n
        stored, planned = (source, target) if to_plan else (target, source)
        if to_plan:
            planned[: m * n].view(m, n).copy_(stored[: m * n].view(n, m).t())
        else:
            stored[: m * n].view(n, m).copy_(planned[: m * n].view(m, n).t())
        target[m * n :].copy_(source[m * n :])

    def _side(self) -> Any:
        return torch.cuda.stream(self.side_stream) if self.on_cuda else contextlib.nullcontext()

    def _to_host(self, part: slice) -> torch.cuda.Event | None:
        """Start copying a part of the wire to host (CUDA); the event marks its end."""
        if not self.on_cuda:
            return None
        ready = torch.cuda.Event()
        ready.record()  # after the encoding queued on the current stream
        done = torch.cuda.Event()
        with torch.cuda.stream(self.side_stream):
            self.side_stream.wait_event(ready)
            self.host[part].copy_(self.wire[part], non_blocking=True)
            done.record(self.side_stream)
        return done

    def _to_device(self, part: slice) -> None:
        """The summed part back on the device (CUDA; queued on the current stream)."""
        if self.on_cuda:
            self.wire[part].copy_(self.host[part], non_blocking=True)
