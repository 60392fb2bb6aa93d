"""Measure a compute profile with the engine (`poseidon profile --model M -o P.json`): in
this process (profile_measure.py's pieces), or with several copies of the net measuring at
once (profile_copies.py); see profile_measure.py's docstring for what is measured."""

from __future__ import annotations

import datetime

from poseidon.experiments.profile import Profile
from poseidon.experiments.profile_copies import measure_copies
from poseidon.experiments.profile_host import host_samples
from poseidon.experiments.profile_measure import (
    apply_samples,
    build_net,
    choose_device,
    collect_samples,
    skeleton,
)
from poseidon.experiments.resolve import model_label


def measure_profile(
    prototxt_path: str,
    *,
    batch: int | None = None,
    device: str = "cpu",
    iterations: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    model: str | None = None,
    copies: int = 1,
) -> Profile:
    """Measure `prototxt_path`'s TRAIN net; see the module docstring."""
    import torch

    if iterations < 1 or warmup < 0 or copies < 1 or (threads is not None and threads < 1):
        raise ValueError("want iterations >= 1, warmup >= 0, copies >= 1 and threads >= 1")
    choose_device(device)
    if copies > 1:
        profile, samples = measure_copies(prototxt_path, batch, device, iterations, warmup,
                                          threads, copies)  # fmt: skip
    else:
        previous_threads = torch.get_num_threads()
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            net = build_net(prototxt_path, batch)
            profile = skeleton(net, prototxt_path, device)
            samples = collect_samples(net, iterations, warmup)
            if device == "cpu":  # Note [host work]
                samples.host = host_samples(prototxt_path, batch, iterations, warmup)
        finally:
            torch.set_num_threads(previous_threads)
    apply_samples(profile, samples)
    profile.model = model or model_label(prototxt_path)
    profile.measurement = {"iterations": iterations, "warmup": warmup, "statistic": "median",
                           "copies": copies, "date": datetime.date.today().isoformat()}  # fmt: skip
    return profile
