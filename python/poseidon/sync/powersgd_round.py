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

The matrix is the plan's (`LayerPlan.matrix_m` × `matrix_n`): the cost model's M × N (M
outputs). A weight stored N × M (Caffe's InnerProduct with transpose: true) goes through a
scratch copy in M × N order, so that the parts' sizes are the plan's. The compute replay's
byte-scaled stand-in (plan.h, Note [byte-scaled layers]) holds 1/s of the weight's floats and
compresses a matrix of 1/s of its rows and columns, the weight's first floats; the rest
follows the weight in the range, so it goes through a scratch copy too, and the weight's
floats past the matrix are left as they are. Its device spends the plan's estimated seconds
of each step (`replay_compute`), as the real one spends them computing.

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
                 comm_thread: ThreadPoolExecutor | None = None,
                 replay_compute: Callable[[float], None] | None = None) -> None:  # fmt: skip
        m, n = planned.matrix_m, planned.matrix_n
        rank = max(1, planned.rank)
        rest = planned.parts[0].num_floats - rank * m if planned.parts else -1
        # Where the rest starts: after the weight (m·n floats; a stand-in's 1/s of them).
        self.weight_floats = diff.numel() - rest
        if rest < 0 or m * n > self.weight_floats:
            raise ValueError(f"layer {layer.name!r}: a {m}x{n} weight does not fit its "
                             f"{diff.numel()} gradient floats")  # fmt: skip
        if layer.transposed and layer.byte_scale != 1:
            raise ValueError(f"layer {layer.name!r}: a transposed weight cannot be byte-scaled")
        self.worker, self.layer, self.diff = worker, layer, diff
        self.continuation, self.side_stream = continuation, side_stream
        self.comm_thread, self.replay_compute = comm_thread, replay_compute
        self.estimate = planned.estimate
        self.m, self.n = m, n
        self.codec = PowerSGDLayer(m, n, rank, rest=rest, seed_draw=seed_draw,
                                   device=diff.device)  # fmt: skip
        if self.codec.wire_floats != planned.wire_floats:
            raise ValueError(f"layer {layer.name!r}: PowerSGD's wire is {self.codec.wire_floats} "
                             f"floats, the plan's {planned.wire_floats}")  # fmt: skip
        self.on_cuda = diff.device.type == "cuda"
        # The gradient as [m x n matrix | rest]: the range itself, or a scratch copy (Note
        # above).
        direct = not layer.transposed and m * n == self.weight_floats
        self.grad = diff if direct else torch.empty(m * n + rest, dtype=diff.dtype,
                                                    device=diff.device)  # fmt: skip
        self.wire = torch.zeros(self.codec.wire_floats, dtype=torch.float32, device=diff.device)
        self.host = torch.zeros(self.wire.numel(), dtype=torch.float32).pin_memory() \
            if self.on_cuda else self.wire  # fmt: skip
        self.part0, self.part1 = (slice(p.offset, p.offset + p.num_floats) for p in planned.parts)
        worker.register_layer(layer.index, self.host.numpy())

    # ----- the three steps -----------------------------------------------------------------
    def submit(self, iteration: int) -> Future:
        """Encode P and start part 0's sum; the continuation starts part 1's. Returns a future
        of part 1's handle."""
        if self.grad is not self.diff:
            self._reorder(self.diff, self.grad, to_plan=True)
        self.codec.encode_p(self.grad, self.wire)
        self._replayed(self.estimate.encode_s)
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
            self._replayed(self.estimate.between_s)
            copied = self._to_host(self.part1)
        if copied is not None:
            copied.synchronize()
        return self.worker.push_pull(self.layer.index, iteration, 1)

    def finish(self, num_workers: int) -> None:
        """Part 1's sum has come (its handle waited for): the mean gradient into `diff`."""
        with self._side():
            self._to_device(self.part1)
            self.codec.decode(self.wire, self.grad, num_workers)
            self._replayed(self.estimate.finish_s)
            if self.grad is not self.diff:
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
    def _replayed(self, seconds: float) -> None:
        if self.replay_compute is not None:
            self.replay_compute(seconds)

    def _reorder(self, source: torch.Tensor, target: torch.Tensor, to_plan: bool) -> None:
        """Between the layer's range and the scratch [m x n matrix | rest]: a stored N x M
        weight transposed, a stand-in's matrix taken from its weight's first floats."""
        m, n, w = self.m, self.n, self.weight_floats
        stored, planned = (source, target) if to_plan else (target, source)
        matrix = planned[: m * n].view(m, n)
        flat = stored[: m * n]
        weight = flat.view(n, m).t() if self.layer.transposed else flat.view(m, n)
        if to_plan:
            matrix.copy_(weight)
            planned[m * n :].copy_(stored[w:])
        else:
            weight.copy_(matrix)
            stored[w:].copy_(planned[m * n :])

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
