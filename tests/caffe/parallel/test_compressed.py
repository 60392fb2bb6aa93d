"""The lossy schemes in a Caffe job (POSEIDON_COMPRESSION), over `poseidon launch` on
127.0.0.1: the plan gives layers BF16 or PowerSGD and the log names them; every worker ends
with bit-identical weights, also when the workers start from different weights (the lossy
layers' weights cross at the start through the broadcast unit, never through a lossy wire);
a BF16 step is the single process's step on the global batch within bf16 rounding."""

from __future__ import annotations

import numpy as np
import pytest

from tests.caffe.parallel.job import reference_weights, run_job
from tests.caffe.parallel.test_job_ends import LAUNCH

ITERS = 6


def schemes_of(ranks) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {k.split("/")[1]: str(v) for k, v in ranks[0].items() if k.startswith("scheme/")}


def assert_identical(ranks) -> None:  # type: ignore[no-untyped-def]
    for name, value in ranks[0].items():
        if name.startswith(("scheme/", "traffic/")):
            continue
        for rank, arrays in enumerate(ranks[1:], start=1):
            assert arrays[name].tobytes() == value.tobytes(), f"{name}: worker {rank}"


@pytest.mark.parametrize(("compression", "lossy"), [("bf16", "BF16"), ("powersgd:1", "PowerSGD")])
def test_lossy_layers_are_named_and_every_worker_ends_identical(tmp_path, compression, lossy):
    env = {"POSEIDON_COMPRESSION": compression, "PERTURB_OTHER_RANKS": "1", "GLOG_minloglevel": "0"}
    ranks, output = run_job(str(tmp_path), 2, 2, iters=ITERS, env=env)
    schemes = schemes_of(ranks)
    chosen = sorted(name for name, scheme in schemes.items() if scheme == lossy)
    assert chosen, schemes
    assert f"synchronise LOSSY (compressed gradients): {', '.join(chosen)}" in output
    assert_identical(ranks)
    for name, value in ranks[0].items():
        if not name.startswith(("scheme/", "traffic/")):
            assert np.isfinite(value).all(), name


def test_a_bf16_step_is_the_exact_step_within_bf16_rounding(tmp_path):
    ranks, _ = run_job(str(tmp_path), 2, 1, iters=1, env={"POSEIDON_COMPRESSION": "bf16"})
    start = reference_weights(str(tmp_path), 2, 0)
    exact = reference_weights(str(tmp_path), 2, 1)
    schemes = schemes_of(ranks)
    assert "BF16" in schemes.values(), schemes
    for name, value in exact.items():
        update, got = value - start[name], ranks[0][name] - start[name]
        # The gradient crossed as bf16 (8 significant bits): 2% of the blob's largest update
        # bounds the rounding (half a unit, 0.4%, of each worker's gradient and of the sum).
        bound = 0.02 * float(np.abs(update).max()) + 1e-12
        assert float(np.abs(got - update).max()) <= bound, name
        if schemes[name.split("/")[0]] == "BF16":  # rounded, so not the exact bytes
            assert got.tobytes() != update.tobytes(), f"{name}: not rounded?"


def test_a_lossy_scheme_forced_on_a_layer_it_cannot_serve_names_the_setting(tmp_path):
    with pytest.raises(AssertionError, match=r"POSEIDON_LAYER_SCHEMES: layer 'conv1' \(conv, "
                       r"4x9\) cannot take sfb"):  # fmt: skip
        run_job(str(tmp_path), 2, 1, iters=2, env={"POSEIDON_LAYER_SCHEMES": "conv1=sfb"})


def test_launch_passes_the_compression_to_every_process(tmp_path, capsys):
    from poseidon.cli import main

    assert main(["launch", "-n", "2", "--compression", "zip", "--", "true"]) == 2
    assert "--compression='zip'" in capsys.readouterr().err
    assert main(["launch", "-n", "2", "--powersgd-rank", "0", "--", "true"]) == 2
    assert "--powersgd-rank='0': want an integer >= 1" in capsys.readouterr().err
    # The flag reaches the coordinator and the workers: the plan is PowerSGD's.
    env = {"GLOG_minloglevel": "0"}
    ranks, output = run_job(str(tmp_path), 2, 2, iters=2, env=env, extra_args=["--compression",
                            "powersgd:1"])  # fmt: skip
    assert "PowerSGD" in schemes_of(ranks).values()
    assert "compression powersgd, PowerSGD rank 1" in output


def test_a_powersgd_job_resumed_from_its_snapshot_ends_as_if_never_stopped(tmp_path):
    """Each worker keeps its error feedback and Q beside rank 0's .solverstate (Note
    [PowerSGD snapshots] in caffe/parallel/syncer.py): 6 iterations, a snapshot, 6 more in a
    new job = 12 straight, bit for bit; without those files the resumed job differs."""
    import os
    import shutil

    from tests.caffe.parallel.test_job_ends import CAFFE, run_to_end, weights, write_case

    directory = str(tmp_path)
    launch = [*LAUNCH, "--compression", "powersgd:1", "--"]
    first = write_case(directory, "first", 6)
    with open(first) as f:
        text = f.read().replace("snapshot: 0", "snapshot: 6")
    with open(first, "w") as f:
        f.write(text)
    run_to_end([*launch, *CAFFE, "train", "--solver", first], directory)
    state = tmp_path / "first_iter_6.solverstate"
    sidecars = [tmp_path / f"first_iter_6.solverstate.powersgd-rank{r}.pt" for r in (0, 1)]
    assert state.exists() and all(s.exists() for s in sidecars)
    resumed = write_case(directory, "resumed", 12)
    run_to_end([*launch, *CAFFE, "train", "--solver", resumed, "--snapshot", str(state)],
               directory)  # fmt: skip
    reference = write_case(directory, "reference", 12)
    run_to_end([*launch, *CAFFE, "train", "--solver", reference], directory)
    want = weights(str(tmp_path / "reference_iter_12.caffemodel"))
    got = weights(str(tmp_path / "resumed_iter_12.caffemodel"))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    # The same resume without the workers' PowerSGD state: warned, and not the same run.
    for s in sidecars:
        os.remove(s)
    shutil.move(tmp_path / "resumed_iter_12.caffemodel", tmp_path / "kept.caffemodel")
    output = run_to_end([*launch, *CAFFE, "train", "--solver", resumed, "--snapshot",
                         str(state)], directory)  # fmt: skip
    assert "PowerSGD error feedback starts from zero" in output
    lost = weights(str(tmp_path / "resumed_iter_12.caffemodel"))
    assert any(not np.array_equal(lost[name], want[name]) for name in want)


def test_a_job_that_knows_its_link_plans_on_the_measured_schedule(tmp_path):
    """POSEIDON_LINK_RATE: the workers time each scheme's compute at the layers' shapes, the
    coordinator ranks plans on the simulated iteration (docs/communication.md §5), the log
    prints it, and the job trains as any other."""
    env = {"POSEIDON_COMPRESSION": "auto", "POSEIDON_LINK_RATE": "100mbit",
           "PERTURB_OTHER_RANKS": "1", "GLOG_minloglevel": "0"}  # fmt: skip
    ranks, output = run_job(str(tmp_path), 2, 2, iters=ITERS, env=env)
    assert "link 100 Mbit/s" in output
    assert "ms of backward + synchronisation as scheduled" in output
    assert "iteration" in output and "shorter than with" in output
    assert_identical(ranks)
