"""Time a net layer by layer: the loop of `caffe time`, reusable (`poseidon profile`).

Every iteration runs each layer's forward on its own, in net order, then each layer's
backward on its own, in reverse order, with a Timer around each call; on CUDA the Timer
synchronises the device, so a layer's time covers the kernels it queued and nothing of
its neighbours'. Layers that need no backward are still "timed" (their callbacks run), as
in Caffe, and report the few microseconds that costs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from caffe.timer import Timer


@dataclass
class IterationTimes:
    """One timed iteration; every time in seconds."""

    forward_s: list[float]  # per layer, net order
    backward_s: list[float]  # per layer, net order
    forward_total_s: float  # the whole forward pass
    backward_total_s: float  # the whole backward pass
    iteration_s: float  # forward + backward, as one span


def time_layers(
    net: Any,
    iterations: int,
    on_iteration: Callable[[int, IterationTimes], None] | None = None,
) -> list[IterationTimes]:
    """Run `iterations` timed forward+backward passes of `net` (a caffe.Net), layer by
    layer; `on_iteration(k, times)` is called after iteration k (1-based), inside the loop
    (`caffe time` logs there)."""
    num_layers = len(net.layers)
    pass_timer, layer_timer, iteration_timer = Timer(), Timer(), Timer()
    result = []
    for iteration in range(1, iterations + 1):
        forward_s = [0.0] * num_layers
        backward_s = [0.0] * num_layers
        iteration_timer.start()
        pass_timer.start()
        for i in range(num_layers):
            layer_timer.start()
            net.forward_from_to(i, i)
            forward_s[i] = layer_timer.seconds
        forward_total_s = pass_timer.seconds
        pass_timer.start()
        for i in range(num_layers - 1, -1, -1):
            layer_timer.start()
            net.backward_from_to(i, i)
            backward_s[i] = layer_timer.seconds
        backward_total_s = pass_timer.seconds
        times = IterationTimes(forward_s, backward_s, forward_total_s, backward_total_s,
                               iteration_timer.seconds)  # fmt: skip
        result.append(times)
        if on_iteration is not None:
            on_iteration(iteration, times)
    return result
