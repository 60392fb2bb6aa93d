"""Forward and backward spans of every layer on a syncer's timeline (the "compute" lane),
so that a trace shows what each layer's communication overlapped with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def attach_compute_timeline(net: Any, timeline: Any, iteration: Callable[[], int]) -> list[Any]:
    """Record `forward <layer>` / `backward <layer>` spans on `timeline` (an object with
    now_us() and span(...), poseidon.timeline.Timeline). Attach after the syncer's own
    callbacks: a layer's forward span then excludes its wait for the layer's gradient.
    A prefetching data layer's forward is a `data <layer>` span on the "data" lane, with how
    long it waited for its batch (`waited_ms`: the pipeline was slower than the net).
    Returns the callbacks' handles (remove() detaches)."""
    names, starts = net.layer_names, {}
    prefetching = {i for i, layer in enumerate(net.layers) if layer.batch_wait_s() is not None}

    def begin(kind: str) -> Callable[[int], None]:
        return lambda i: starts.__setitem__((kind, i), timeline.now_us())

    def end(kind: str) -> Callable[[int], None]:
        def record(i: int) -> None:
            start, now = starts.pop((kind, i)), timeline.now_us()
            if kind == "forward" and i in prefetching:
                waited = net.layers[i].batch_wait_s() or 0.0
                timeline.span(f"data {names[i]}", "data", start, now, layer=i,
                              iteration=iteration(), waited_ms=round(waited * 1e3, 3))  # fmt: skip
                return
            timeline.span(f"{kind} {names[i]}", "compute", start, now, layer=i,
                          iteration=iteration())  # fmt: skip

        return record

    return [
        net.before_forward(begin("forward")),
        net.after_forward(end("forward")),
        net.before_backward(begin("backward")),
        net.after_backward(end("backward")),
    ]
