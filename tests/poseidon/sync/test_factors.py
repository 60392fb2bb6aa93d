"""Sufficient factors (poseidon/sync/factors.py): what a FactorLog keeps, the [dy | x] wire
layout, and the rebuild from every worker's buffer against the gradient computed whole."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from poseidon.sync.factors import FactorLog, stack_factors

OUT, IN = 3, 5


def pair(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, OUT, generator=g), torch.randn(rows, IN, generator=g)


def test_pack_is_every_dy_row_then_every_x_row_and_empties_the_log():
    log = FactorLog(OUT, IN)
    (dy1, x1), (dy2, x2) = pair(2, 1), pair(4, 2)
    log.add(dy1, x1)
    log.add(dy2, x2)
    assert log.rows == 6 and log.width == OUT + IN
    packed = log.pack()
    expected = torch.cat([dy1.reshape(-1), dy2.reshape(-1), x1.reshape(-1), x2.reshape(-1)])
    assert torch.equal(packed, expected)
    assert log.rows == 0 and log.pack().numel() == 0


def test_keep_copies_survives_the_next_pass_overwriting_its_views():
    log = FactorLog(OUT, IN)
    dy, x = pair(2, 3)
    log.keep_copies(dy, x)
    kept = log.pack().clone()
    dy.zero_()
    log.keep_copies(dy, x)  # the engine's next pass reuses the same blob memory
    assert torch.equal(kept[: 2 * OUT], pair(2, 3)[0].reshape(-1))


def test_remember_and_received_pair_calls_by_key():
    log = FactorLog(OUT, IN)
    dy1, x1 = pair(1, 4)
    dy2, x2 = pair(2, 5)
    k1, k2 = log.remember(x1), log.remember(x2)
    assert not log.received(k2, dy2)  # the first call still waits for its dy
    assert log.received(k1, dy1)
    dy, x = stack_factors([log.pack().numpy()], OUT, IN, torch.device("cpu"))
    assert torch.equal(dy, torch.cat([dy2, dy1])) and torch.equal(x, torch.cat([x2, x1]))


def test_every_workers_factors_rebuild_the_summed_gradient():
    buffers, grads = [], torch.zeros(OUT, IN, dtype=torch.float64)
    for rank, rows in enumerate([3, 1, 0, 2]):  # a worker may have no rows
        log = FactorLog(OUT, IN)
        dy, x = pair(rows, 10 + rank)
        if rows:
            log.add(dy, x)
            grads += dy.double().t() @ x.double()
        buffers.append(log.pack().numpy())
    dy, x = stack_factors(buffers, OUT, IN, torch.device("cpu"))
    assert dy.shape == (6, OUT) and x.shape == (6, IN)
    torch.testing.assert_close((dy.t() @ x).double(), grads, rtol=1e-6, atol=1e-6)


def test_a_buffer_that_is_not_whole_rows_is_an_error():
    with pytest.raises(ValueError, match=r"factor buffer of 7 floats is not rows of 8"):
        stack_factors([np.zeros(7, np.float32)], OUT, IN, torch.device("cpu"))
