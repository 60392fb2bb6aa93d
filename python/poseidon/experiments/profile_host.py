"""The engine's own host work per iteration on a CPU: a CPU profile's `host_s`.

Note [host work]. A CPU node does everything in line. Besides its layers' forward and
backward and its parameters' updates, which a profile times one by one, each iteration
spends time in the engine's own Python: the solver's step and its bookkeeping per parameter,
the net's loop over its layers, clearing the diffs. A GPU hides that behind the kernels it
is running (clock.py, Note [device clock]); a CPU cannot. So `poseidon profile` on a CPU
measures it, in `iterations` rounds of: one solver step (SGD with momentum and weight
decay, the experiment worker's solver), then at once each layer's forward and backward and
each layer's update timed alone, as the profile times them. A round's host work is its step
minus those parts; `host_s` is the median over the rounds, and 0 if that is negative.
Taking the step and its parts in the same round cancels the machine's drift: timed minutes
apart, the same difference moved by ±1 ms from one run to the next on a net whose host work
is 3 ms (docs/experiments.md §6.5). The predictor and the replay both charge `host_s` in
equal shares with each layer's forward (predict.py, replay.py); the replay's own host work,
which is not the emulated node's, counts as nothing (clock.py, Note [device clock]).
"""

from __future__ import annotations

import time

from poseidon.experiments.netspec import set_batch
from poseidon.experiments.profile_measure import quiet_engine, update_samples


def host_samples(path: str, batch: int | None, iterations: int, warmup: int) -> list[float]:
    """Each round's solver step minus its net's layers and updates timed alone, seconds
    (`profile_measure.host_seconds` makes the profile's figure of them)."""
    from caffe.tools.layer_timing import time_layers

    solver = _solver(path, batch)
    solver.step(max(1, warmup))
    net = solver.net
    samples = []
    for _ in range(iterations):
        start = time.perf_counter()
        solver.step(1)
        step = time.perf_counter() - start
        (layers,) = time_layers(net, 1)
        updates = update_samples(net, 1)  # one timed call per layer
        parts = sum(layers.forward_s) + sum(layers.backward_s)
        parts += sum(times[0] for times in updates.values())
        samples.append(step - parts)
    return samples


def _solver(path: str, batch: int | None):  # type: ignore[no-untyped-def]
    """The experiment worker's solver on `path`'s TRAIN net (at `batch`), built quietly."""
    import caffe
    from caffe.formats.proto_io import read_net_param
    from poseidon.experiments.worker import solver_parameter

    net_param = read_net_param(path)
    if batch is not None:
        set_batch(net_param, batch, path)
    with quiet_engine():
        return caffe.SGDSolver(solver_parameter(net_param, "cpu"))
