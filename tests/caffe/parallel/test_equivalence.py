"""Distributed = local: P1 workers × batch K train exactly like one process on P1·K.

For every sync mode (and a forced all-SFB plan), P1 ∈ {1, 2, 3} and P2 ∈ {1, 2}: 20
iterations of SGD with momentum (step lr policy, weight decay) on a net with two
convolutions and two InnerProduct layers give the single process's weights (rtol 1e-4),
and every worker holds bit-identical weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.caffe.parallel.job import reference_weights, run_job

MODES = [("ps-nooverlap", "auto"), ("wfbp", "auto"), ("poseidon", "auto"), ("poseidon", "sfb")]
ITERS = 20


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    cache: dict[tuple[int, str], dict] = {}

    def get(workers: int, extra: str = "") -> dict:
        if (workers, extra) not in cache:
            directory = tmp_path_factory.mktemp(f"ref{workers}")
            cache[(workers, extra)] = reference_weights(str(directory), workers, ITERS, extra)
        return cache[(workers, extra)]

    return get


def assert_matches(ranks, expected, rtol=1e-4):
    for name, value in expected.items():
        scale = max(float(np.abs(value).max()), 1e-6)
        for rank, arrays in enumerate(ranks):
            np.testing.assert_allclose(
                arrays[name],
                value,
                rtol=rtol,
                atol=rtol * scale,
                err_msg=f"{name} on worker {rank}",
            )
            # Identical weights on every worker: same bytes, not just close.
            assert arrays[name].tobytes() == ranks[0][name].tobytes(), f"{name}: worker {rank}"


@pytest.mark.parametrize("servers", [1, 2])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("sync,scheme", MODES)
def test_distributed_equals_single_process(tmp_path, reference, sync, scheme, workers, servers):
    ranks, _ = run_job(str(tmp_path), workers, servers, sync, scheme, ITERS)
    assert_matches(ranks, reference(workers))
    schemes = {k.split("/")[1]: str(v) for k, v in ranks[0].items() if k.startswith("scheme/")}
    if sync != "poseidon":
        assert set(schemes.values()) == {"PS"}
    elif scheme == "sfb":
        assert schemes["ip1"] == schemes["ip2"] == "SFB" and schemes["conv1"] == "PS"


@pytest.mark.parametrize("sync", ["wfbp", "poseidon"])
def test_shards_as_separate_processes(tmp_path, reference, sync):
    # The matrix above runs shard r inside worker r (the default); here every shard is a
    # process of its own, so every push crosses TCP.
    ranks, _ = run_job(str(tmp_path), 3, 2, sync, "auto", ITERS, colocate=False)
    assert_matches(ranks, reference(3))


@pytest.mark.parametrize("sync,scheme", [("poseidon", "sfb"), ("wfbp", "auto")])
def test_iter_size_two(tmp_path, reference, sync, scheme):
    # iter_size 2 at batch K accumulates 2·K items per worker: compare with the single
    # process at batch 2·K·P1... which is what iter_size 2 at batch P1·K computes too.
    ranks, _ = run_job(str(tmp_path), 2, 2, sync, scheme, ITERS, extra="iter_size: 2")
    assert_matches(ranks, reference(2, "iter_size: 2"))


def test_clip_gradients_waits_for_every_layer(tmp_path, reference):
    extra = "clip_gradients: 0.05"
    ranks, _ = run_job(str(tmp_path), 3, 2, "poseidon", "auto", ITERS, extra=extra)
    assert_matches(ranks, reference(3, extra))


def test_per_layer_schemes_override_best_scheme(tmp_path, reference):
    # POSEIDON_LAYER_SCHEMES: ip1 through the PS, ip2 by SFB, whatever BestScheme says.
    env = {"POSEIDON_LAYER_SCHEMES": "ip1=ps,ip2=sfb"}
    ranks, _ = run_job(str(tmp_path), 2, 2, "poseidon", "auto", ITERS, env=env)
    assert_matches(ranks, reference(2))
    schemes = {k.split("/")[1]: str(v) for k, v in ranks[0].items() if k.startswith("scheme/")}
    assert schemes["ip1"] == "PS" and schemes["ip2"] == "SFB"


def test_per_layer_schemes_must_name_synchronised_layers(tmp_path):
    env = {"POSEIDON_LAYER_SCHEMES": "fc9=ps"}
    with pytest.raises(
        AssertionError,
        match=r"POSEIDON_LAYER_SCHEMES names fc9: not a "
        r"synchronised layer",
    ):
        run_job(str(tmp_path), 2, 2, "poseidon", "auto", 3, env=env, timeout_s=60)
