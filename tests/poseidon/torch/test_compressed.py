"""The lossy schemes end to end through poseidon.torch and the comm core (two workers on
127.0.0.1, the job hosting itself as under torchrun): compressed_worker.py saves each step's
own and synchronised gradients, and here they are checked against what the scheme computes.

- bf16: every synchronised gradient is, bit for bit, the fp32 sum of the workers' gradients
  rounded to bf16 (each worker's rounded first, as they cross the wire), rounded to bf16 and
  divided by P; identical on every worker; and off the exact mean by no more than those
  roundings (half a bf16 unit of each input and of the sum).
- powersgd: every step of every layer equals the PowerSGD codec (sync/powersgd.py, whose
  arithmetic test_powersgd.py holds to PyTorch's hook) driven by hand with those gradients,
  error feedback and warm start carried over three steps; the bias and small layers the
  plan keeps exact are exact means; the saved state is the codec's after the last step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from poseidon.sync.powersgd import PowerSGDLayer, seed_draws
from tests.poseidon.torch.jobs import REPO, free_port_block, torchrun_env

WORKERS, STEPS = 2, 3


def run_job(
    tmp_path,
    compression: str,
    steps: int = STEPS,  # type: ignore[no-untyped-def]
    *resume: str,
) -> list[dict[str, np.ndarray]]:
    port = free_port_block()
    procs = [subprocess.Popen([sys.executable, "-m", "tests.poseidon.torch.compressed_worker",
                               str(tmp_path), compression, str(steps), *resume], cwd=REPO,
                              env=torchrun_env(rank, WORKERS, port), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for rank in range(WORKERS)]  # fmt: skip
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-4000:]
    ranks = [dict(np.load(tmp_path / f"{r}.npz")) for r in range(WORKERS)]
    # The plan rank 0 printed names exactly the modules the plan made lossy.
    plan = json.loads(str(ranks[0]["plan"]))
    lossy = [unit for unit, (scheme, _) in plan.items() if scheme in ("BF16", "PowerSGD")]
    assert lossy, plan
    assert f"lossy layers: {', '.join(lossy)}\n" in outputs[0], outputs[0][-3000:]
    return ranks


def param_names(saved: dict[str, np.ndarray]) -> list[str]:
    return [k.split(".", 2)[2] for k in saved if k.startswith("0.local.")]


def bf16(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x).to(torch.bfloat16).float()


def test_bf16_gradients_are_the_rounded_sum_of_rounded_gradients(tmp_path):
    ranks = run_job(tmp_path, "bf16")
    plan = json.loads(str(ranks[0]["plan"]))
    assert {scheme for scheme, _ in plan.values()} <= {"BF16", "SFB"}
    assert "BF16" in {scheme for scheme, _ in plan.values()}
    for step in range(STEPS):
        for name in param_names(ranks[0]):
            unit = name.rsplit(".", 1)[0]
            got = torch.from_numpy(ranks[0][f"{step}.synced.{name}"])
            torch.testing.assert_close(torch.from_numpy(ranks[1][f"{step}.synced.{name}"]),
                                       got, rtol=0, atol=0)  # fmt: skip
            if plan[unit][0] != "BF16":
                continue
            wire = sum(bf16(r[f"{step}.local.{name}"]) for r in ranks)
            want = wire.to(torch.bfloat16).float() / WORKERS
            torch.testing.assert_close(got, want, rtol=0, atol=0)
            # Against the exact sum: half a bf16 unit for each input's rounding and for the
            # sum's (eps = 2^-7 is one unit at 1.0).
            locals_ = [torch.from_numpy(r[f"{step}.local.{name}"]).double() for r in ranks]
            bound = (
                torch.finfo(torch.bfloat16).eps
                / 2
                * (sum(g.abs() for g in locals_) + wire.double().abs())
            )
            error = (got.double() * WORKERS - sum(locals_)).abs()
            assert bool((error <= bound).all()), name


def test_powersgd_gradients_are_the_codec_with_the_workers_sums(tmp_path):
    ranks = run_job(tmp_path, "powersgd:2")
    plan = json.loads(str(ranks[0]["plan"]))
    compressed = [unit for unit, (scheme, _) in plan.items() if scheme == "PowerSGD"]
    assert compressed, plan  # the conv and the first Linear are worth compressing at rank 2
    draws = dict(zip(compressed, seed_draws(0, len(compressed))))
    names = param_names(ranks[0])
    for unit, (scheme, rank) in plan.items():
        if unit == "(broadcast)":
            continue
        params = [n for n in names if n.rsplit(".", 1)[0] == unit]

        def flat(r: int, step: int, kind: str, params: list[str] = params) -> torch.Tensor:
            return torch.cat([torch.from_numpy(ranks[r][f"{step}.{kind}.{p}"]).reshape(-1)
                              for p in params])  # fmt: skip

        weight = ranks[0][f"0.local.{params[0]}"]
        m, n = weight.shape[0], int(np.prod(weight.shape[1:]))
        codecs = [PowerSGDLayer(m, n, rank or 1, rest=flat(0, 0, "local").numel() - m * n,
                                seed_draw=draws.get(unit, 0)) for _ in ranks]  # fmt: skip
        for step in range(STEPS):
            got = flat(0, step, "synced")
            torch.testing.assert_close(flat(1, step, "synced"), got, rtol=0, atol=0)
            if scheme != "PowerSGD":
                want = sum(flat(r, step, "local") for r in range(WORKERS)) / WORKERS
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
                continue
            wires = [torch.zeros(c.wire_floats) for c in codecs]
            for r, (codec, wire) in enumerate(zip(codecs, wires)):
                codec.encode_p(flat(r, step, "local"), wire)
            p_sum = sum(c.parts(w)[0].clone() for c, w in zip(codecs, wires))
            for codec, wire in zip(codecs, wires):
                codec.parts(wire)[0].copy_(p_sum)
                codec.encode_q(wire)
            q_sum = sum(c.parts(w)[1].clone() for c, w in zip(codecs, wires))
            want = torch.zeros(codecs[0].grad_floats)
            for codec, wire in zip(codecs, wires):
                codec.parts(wire)[1].copy_(q_sum)
                codec.decode(wire, want, WORKERS)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        if scheme == "PowerSGD":
            state = torch.load(tmp_path / "ckpt.1.pt")["compression"][unit]
            assert state["steps"] == STEPS
            torch.testing.assert_close(state["error"], codecs[1].state_dict()["error"],
                                       rtol=1e-4, atol=1e-5)  # fmt: skip


def test_powersgd_resumed_from_a_checkpoint_goes_on_as_if_never_stopped(tmp_path):
    """4 steps straight = 2 steps, a checkpoint (with each rank's compression_state), and 2
    more in a new job — bit for bit; without the PowerSGD state the resumed job differs."""
    straight, resumed, fresh = tmp_path / "straight", tmp_path / "resumed", tmp_path / "fresh"
    for directory in (straight, resumed, fresh):
        directory.mkdir()
    run_job(straight, "powersgd:2", 4)
    run_job(resumed, "powersgd:2", 2)
    run_job(fresh, "powersgd:2", 2)
    run_job(resumed, "powersgd:2", 4, "2")
    run_job(fresh, "powersgd:2", 4, "2", "fresh")
    for rank in range(WORKERS):
        want = torch.load(straight / f"ckpt.{rank}.pt")
        got = torch.load(resumed / f"ckpt.{rank}.pt")
        lost = torch.load(fresh / f"ckpt.{rank}.pt")
        for name, value in want["model"].items():
            torch.testing.assert_close(got["model"][name], value, rtol=0, atol=0)
        assert any(not torch.equal(lost["model"][n], v) for n, v in want["model"].items())
        for unit, state in want["compression"].items():
            torch.testing.assert_close(got["compression"][unit]["error"], state["error"],
                                       rtol=0, atol=0)  # fmt: skip


@pytest.mark.parametrize("bad", ["zip", "powersgd:0", "bf16:2"])
def test_a_bad_compression_is_an_error_naming_the_setting(bad):
    from poseidon.config import Config, SettingError

    with pytest.raises(SettingError, match="POSEIDON_COMPRESSION"):
        Config.from_env({"POSEIDON_COMPRESSION": bad})
