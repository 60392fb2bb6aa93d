"""`caffe time`: benchmark a model's forward and backward passes, layer by layer.

    caffe time --model M [--phase TRAIN|TEST] [--iterations 50] [--gpu id] [--level N]
               [--stage a,b]

One untimed forward/backward first ("Initial loss: X"), then --iterations timed
iterations, each layer's forward and backward timed on its own, with Caffe's log lines:
"Iteration: k forward-backward time: X ms.", per layer "<name>\\tforward: X ms." and
"<name>\\tbackward: X ms.", then the averages and "Total Time", framed by
"*** Benchmark begins ***" / "*** Benchmark ends ***". On CUDA the timer synchronises
the device, so each time covers the kernels the layer queued.
"""

from __future__ import annotations

import logging

from caffe.errors import CaffeError
from caffe.proto import caffe_pb2
from caffe.solvers.log import cpp_float
from caffe.timer import Timer
from caffe.tools.devices import choose_devices
from caffe.tools.flags import Flags
from caffe.tools.layer_timing import IterationTimes, time_layers
from caffe.tools.score import build_net, log_device

_log = logging.getLogger("caffe")


def phase_from_flag(value: str, default: int) -> int:
    if not value:
        return default
    if value == "TRAIN":
        return caffe_pb2.TRAIN
    if value == "TEST":
        return caffe_pb2.TEST
    raise CaffeError(f'phase must be "TRAIN" or "TEST" (--phase {value})')


def benchmark(flags: Flags) -> int:
    if not flags.model:
        raise CaffeError("Need a model definition to time (--model).")
    if flags.iterations < 1:
        raise CaffeError(f"--iterations must be at least 1 (got {flags.iterations}).")
    phase = phase_from_flag(flags.phase, caffe_pb2.TRAIN)
    log_device(choose_devices(flags.gpu))
    net = build_net(flags, phase)
    # The untimed pass lets lazy allocation and kernel selection happen outside the timing.
    _log.info("Performing Forward")
    initial_loss = net.forward_prefilled()
    _log.info("Initial loss: %s", cpp_float(initial_loss))
    _log.info("Performing Backward")
    net.backward_all()
    _log.info("*** Benchmark begins ***")
    _log.info("Testing for %d iterations.", flags.iterations)

    def log_iteration(iteration: int, times: IterationTimes) -> None:
        _log.info("Iteration: %d forward-backward time: %s ms.", iteration,
                  cpp_float(times.iteration_s * 1e3))  # fmt: skip

    total_timer = Timer()
    total_timer.start()
    timed = time_layers(net, flags.iterations, log_iteration)
    n = flags.iterations
    forward_ms = [sum(t.forward_s[i] for t in timed) * 1e3 for i in range(len(net.layers))]
    backward_ms = [sum(t.backward_s[i] for t in timed) * 1e3 for i in range(len(net.layers))]
    total_forward_ms = sum(t.forward_total_s for t in timed) * 1e3
    total_backward_ms = sum(t.backward_total_s for t in timed) * 1e3
    _log.info("Average time per layer: ")
    for i, name in enumerate(net._layer_names):
        _log.info("%10s\tforward: %s ms.", name, cpp_float(forward_ms[i] / n))
        _log.info("%10s\tbackward: %s ms.", name, cpp_float(backward_ms[i] / n))
    total_timer.stop()
    _log.info("Average Forward pass: %s ms.", cpp_float(total_forward_ms / n))
    _log.info("Average Backward pass: %s ms.", cpp_float(total_backward_ms / n))
    _log.info("Average Forward-Backward: %s ms.", cpp_float(total_timer.ms / n))
    _log.info("Total Time: %s ms.", cpp_float(total_timer.ms))
    _log.info("*** Benchmark ends ***")
    return 0
