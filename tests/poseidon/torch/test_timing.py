"""Each sync unit's share of a backward pass, timed on a copy (poseidon/torch/timing.py): every
unit gets a positive share, the bigger layer the bigger one, the model and the RNG come out
untouched, and a forward the copy cannot run gives no times with a warning."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from poseidon.torch.timing import measure_unit_backward
from poseidon.torch.units import sync_units


def test_every_unit_gets_its_share_and_the_model_is_untouched() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 1024), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4))  # fmt: skip
    units = sync_units(model)
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(64, 16)
    rng = torch.get_rng_state()
    shares = measure_unit_backward(model, units, (x,), {})
    assert sorted(shares) == [u.index for u in units]
    assert all(s > 0 for s in shares.values())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(rng, torch.get_rng_state())


def test_the_larger_layer_takes_longer() -> None:
    model = nn.Sequential(nn.Linear(512, 2048), nn.Linear(2048, 2048), nn.Linear(2048, 8))
    units = sync_units(model)
    runs = [measure_unit_backward(model, units, (torch.randn(256, 512),), {}) for _ in range(3)]
    # The 2048×2048 product against the 8×2048 one: the median of three runs.
    wide = sorted(r[units[1].index] for r in runs)[1]
    narrow = sorted(r[units[2].index] for r in runs)[1]
    assert wide > narrow


def test_a_forward_the_copy_cannot_run_gives_no_times() -> None:
    class Picky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.calls:
                raise RuntimeError("only once")
            self.calls += 1
            return self.fc(x)

    model = Picky()
    with pytest.warns(UserWarning, match="cannot time the backward pass .*only once"):
        assert measure_unit_backward(model, sync_units(model), (torch.randn(2, 4),), {}) == {}
    assert model.calls == 0
