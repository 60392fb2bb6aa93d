"""PowerSGD (Vogels et al., NeurIPS 2019) for one layer, with no transport of its own.

A layer's flat float32 gradient range holds its weight first, an m × n matrix (conv kernels
as out × in·kh·kw, i.e. `weight.reshape(m, -1)`), then the rest (bias, ...), which is sent
exact. With r = min(rank, m, n), one step on one worker goes through a wire buffer of
`r·m + rest + r·n` floats in two parts that the comm core sums over the workers in turn:

    part 0 = [P (m × r, row-major) | rest]      part 1 = [Q (n × r, row-major)]

    encode_p   M = grad_weight + error;  orthogonalise Q;  P = M·Q;  part 0 = [P | rest]
    (core)     part 0 := SUM over workers
    encode_q   orthogonalise P (the sum);  part 1 = Mᵀ·P
    (core)     part 1 := SUM over workers
    decode     Q = sum / W (kept for the next step);  grad_weight = P·Qᵀ;
               grad_rest = rest_sum / W;  error = M − P·Qᵀ

This module knows nothing of how the sums are made (Poseidon's KV store, an all-reduce).

How it maps onto PyTorch's DDP hook
(torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook, as of torch 2.13)
-------------------------------------------------------------------------------------
The hook works on a DDP bucket, which may hold several parameters; ours works on one layer.
Per compressed tensor the arithmetic is the hook's, op for op, so that with the same seed
draw and the same sums the weight gradient comes out bit for bit equal (the tests check
this against DDP on gloo):

- The matrix is `tensor.view(shape[0], -1)` in both. Q starts as `torch.randn` of
  (1, n, r) on the CPU right after `torch.manual_seed(draw)` in a forked CPU RNG, then moves
  to the layer's device. Before P = M·Q, Q is orthogonalised at every step (the fresh one
  and, with warm start, the one kept from the last step). The hook's products are
  `torch.bmm` over a batch of one; ours are the same products as 2-D `torch.mm` (Mᵀ·P as
  (Pᵀ·M)ᵀ, which is 20× faster on CPU), the same dot products, and the tests still find
  the results bit for bit equal.
- Orthogonalisation: Gram–Schmidt for r ≤ 2 and for fp16/bf16 (each column divided by its
  norm, or by norm + epsilon when epsilon > 0, then projected out of the columns after it),
  otherwise the Q factor of `torch.linalg.qr`, where epsilon plays no part.
- P is summed without dividing (it is orthogonalised next); Q's sum is divided by W
  *before* the approximation P·Qᵀ is formed (the rounding of "divide then multiply") and that
  mean Q is what warm start keeps. P is recomputed every step, so it is not state.
- The error is this worker's input with its error (M) minus the *mean* approximation P·Qᵀ,
  as the hook's `input_tensor_cp - input_tensor` after decompression; it is added to the
  next step's weight gradient before anything else.
- The rest is summed and divided by W like the hook's uncompressed tensors.

Where ours differs, on purpose:

- Error feedback covers the weight only. The hook keeps one error buffer per bucket, so an
  uncompressed tensor in a bucket (a bias) also gets "error" = local input − mean: a
  worker's deviation from the mean, which sums to zero over workers and so changes the mean
  only by rounding, while each worker's buffer grows like a random walk. Ours sends the rest
  exact with no error; the tests bound the difference to rounding.
- Seeds: the hook has one `numpy.random.RandomState(random_seed)` and draws
  `randint(1_000_000_000)` once per bucket, in the order DDP launches buckets, at the
  bucket's first PowerSGD step (every step without warm start); a bucket with nothing to
  compress draws too. All the Qs of a bucket come from that one seeded stream, in order of
  shape (grouped). Ours takes one draw per layer (`seed_draw`, or `encode_p(...,
  seed_draw=)` for a fresh Q), so it reproduces the hook exactly when every bucket holds at
  most one compressed matrix and each layer gets the draw its bucket got; `seed_draws`
  gives the hook's sequence.
- Which tensors to compress is the caller's choice. The hook sends a tensor exact when
  (rows + cols)·r·min_compression_rate ≥ rows·cols (every ndim ≤ 1 tensor fails this);
  `should_compress` is that rule. A layer here must have a matrix (m, n ≥ 2).
- `start_powerSGD_iter`: the hook all-reduces the bucket exactly (divide by W, then sum) for
  its first start_powerSGD_iter steps (at least 2 with error feedback or warm start, because
  DDP rebuilds its buckets after the first iteration) and keeps no error then. Ours has no
  step count of that kind: the caller syncs exactly until it starts using the layer, and
  the layer's first encode_p is the hook's first PowerSGD step.
- A zero column: with epsilon = 0 the hook divides 0 by a zero norm and gets NaN (its
  ZeroDivisionError handler never fires for tensors). Ours leaves the column zero. Note that
  a Q that is entirely zero stays zero under warm start (in the hook too, with epsilon > 0).
- Sums: the hook all-reduces the Ps of a bucket and its uncompressed tensors as separate
  buffers; here part 0 holds both. Per element it is the same sum, but with more than two
  workers a transport may add in a different order for a different buffer length, so the
  results agree to rounding (bit for bit when the sums are made the hook's way).
- Not modelled: `batch_tensors_with_same_shape`, `batched_powerSGD_hook` (the whole bucket
  as one square matrix), the hook's compression statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")

SEED_BOUND = 1_000_000_000  # the hook's state.rng.randint(1_000_000_000)

# Where a layer is in its step, so that calls out of order fail instead of sending garbage.
_IDLE, _P_SENT, _Q_SENT = 0, 1, 2


def seed_draws(seed: int | np.random.RandomState, count: int) -> list[int]:
    """The next `count` torch seeds of the hook's RNG: `numpy.random.RandomState(seed)` (or an
    existing RandomState, to continue its stream), one `randint(1_000_000_000)` each. With warm
    start the hook draws one per bucket at its first PowerSGD step, in bucket launch order."""
    if count < 0:
        raise ValueError(f"count = {count}: cannot draw a negative number of seeds")
    rng = seed if isinstance(seed, np.random.RandomState) else np.random.RandomState(seed)
    return [int(rng.randint(SEED_BOUND)) for _ in range(count)]


def should_compress(m: int, n: int, rank: int, min_compression_rate: float = 2.0) -> bool:
    """The hook's rule: compress an m × n matrix only if (m + n)·r·rate < m·n, with
    r = min(rank, m, n)."""
    r = min(rank, m, n)
    return (m + n) * r * min_compression_rate < m * n


def _orthogonalize(matrix: torch.Tensor, epsilon: float) -> None:
    """Make the columns of `matrix` (1 × rows × r, in place) orthonormal, by the method and
    with the operations the hook uses, so that the result is bitwise the hook's."""
    rank = matrix.shape[2]
    if rank > 2 and matrix.dtype not in (torch.float16, torch.bfloat16):
        # QR is faster for more columns but has no half-precision kernels.
        matrix.copy_(torch.linalg.qr(matrix).Q)
        return
    for i in range(rank):
        col = matrix[:, :, i : i + 1]
        norm = torch.norm(col, dim=1, keepdim=True)
        if epsilon == 0:
            # Dividing by 1 instead of 0 leaves a zero column zero (the hook gets NaN); any
            # other column is divided by its norm exactly as in the hook. No host sync.
            col /= norm.masked_fill_(norm == 0, 1.0)
        else:
            col /= norm + epsilon
        if i + 1 < rank:
            later = matrix[:, :, i + 1 :]
            later -= torch.sum(col * later, dim=1, keepdim=True) * col


class PowerSGDLayer:
    """One layer's PowerSGD state on one worker: the error feedback and the Q kept between
    steps (warm start). A step is encode_p, the sum of part 0, encode_q, the sum of part 1,
    decode. Not thread-safe; one step at a time."""

    def __init__(
        self,
        m: int,
        n: int,
        rank: int,
        *,
        rest: int = 0,
        seed_draw: int,
        error_feedback: bool = True,
        warm_start: bool = True,
        epsilon: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if m < 2 or n < 2:
            raise ValueError(
                f"the weight is {m} × {n}: PowerSGD needs a matrix (m, n ≥ 2); "
                "send a vector exact (as rest of a layer, or not through PowerSGD)"
            )
        if rank < 1:
            raise ValueError(f"rank = {rank}: the approximation rank must be at least 1")
        if rest < 0:
            raise ValueError(f"rest = {rest}: cannot be negative")
        if epsilon < 0:
            raise ValueError(f"epsilon = {epsilon}: cannot be negative")
        self.m, self.n, self.rest = m, n, rest
        self.rank = min(rank, m, n)  # the effective rank r
        self.error_feedback, self.warm_start, self.epsilon = error_feedback, warm_start, epsilon
        # As tensors report it ("cuda" becomes "cuda:0"), for the checks of what comes in.
        self.device, self.dtype = torch.empty(0, device=device).device, dtype
        self.steps = 0  # completed steps (decodes)
        self._phase = _IDLE
        # M = this step's weight gradient plus error, kept from encode_p to decode (the hook's
        # input_tensor_cp): the caller's grad is not touched before decode.
        self._matrix = torch.empty(m, n, device=self.device, dtype=dtype)
        self._error = (
            torch.zeros(m * n, device=self.device, dtype=dtype) if error_feedback else None
        )
        self._q = torch.empty(1, n, self.rank, device=self.device, dtype=dtype)
        self._fill_q(seed_draw)

    # Sizes of the flat buffers the caller hands over.
    @property
    def grad_floats(self) -> int:
        """m·n + rest."""
        return self.m * self.n + self.rest

    @property
    def wire_floats(self) -> int:
        """r·m + rest + r·n."""
        return self.rank * (self.m + self.n) + self.rest

    def parts(self, wire: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of the wire's part 0 ([P | rest], summed first) and part 1 (Q, summed second)."""
        self._check("wire", wire, self.wire_floats)
        split = self.rank * self.m + self.rest
        return wire[:split], wire[split:]

    def encode_p(
        self, grad: torch.Tensor, wire: torch.Tensor, *, seed_draw: int | None = None
    ) -> None:
        """grad: this worker's flat gradient range (m·n + rest floats), left untouched. Adds
        the error feedback, keeps the result, writes P = M·Q into wire's part 0 and the rest
        after it. `seed_draw` starts Q afresh from that seed; without warm start every step
        after the first needs one (the hook draws one per bucket per step then)."""
        self._check("grad", grad, self.grad_floats)
        self._check("wire", wire, self.wire_floats)
        if seed_draw is not None:
            self._fill_q(seed_draw)
        elif not self.warm_start and self.steps > 0:
            raise ValueError(
                "warm_start=False starts every step from a new random Q: pass seed_draw"
            )
        m, n, r, weight = self.m, self.n, self.rank, self.m * self.n
        if self._error is not None and self.steps > 0:
            torch.add(grad[:weight].view(m, n), self._error.view(m, n), out=self._matrix)
        else:
            # The hook adds no error in its first PowerSGD step (it has none yet).
            self._matrix.copy_(grad[:weight].view(m, n))
        _orthogonalize(self._q, self.epsilon)
        torch.mm(self._matrix, self._q[0], out=wire[: r * m].view(m, r))
        wire[r * m : r * m + self.rest].copy_(grad[weight:])
        self._phase = _P_SENT

    def encode_q(self, wire: torch.Tensor) -> None:
        """wire's part 0 now holds the SUM over workers: orthogonalises P there (in place) and
        writes Q = Mᵀ·P into part 1."""
        self._check("wire", wire, self.wire_floats)
        self._expect(_P_SENT, "encode_q", "encode_p")
        m, n, r = self.m, self.n, self.rank
        p = wire[: r * m].view(1, m, r)
        _orthogonalize(p, self.epsilon)
        q = wire[r * m + self.rest :].view(1, n, r)
        # Q = Mᵀ·P computed as (Pᵀ·M)ᵀ: with M transposed, torch's CPU product of a
        # large matrix and a thin one takes a slow path (63 ms against 2.9 ms for 2048 ×
        # 2048 at rank 4, one thread; the hook's bmm too). Each entry is the same dot product.
        q[0].copy_(torch.mm(p[0].t(), self._matrix).t())
        self._phase = _Q_SENT

    def decode(self, wire: torch.Tensor, grad: torch.Tensor, num_workers: int) -> None:
        """wire's part 1 now holds the SUM over workers: grad := the mean approximation
        P·Qᵀ/num_workers (weight) and rest_sum/num_workers (rest); the error becomes this
        worker's input (with its error) minus that approximation."""
        self._check("wire", wire, self.wire_floats)
        self._check("grad", grad, self.grad_floats)
        if num_workers < 1:
            raise ValueError(f"num_workers = {num_workers}: must be at least 1")
        self._expect(_Q_SENT, "decode", "encode_q")
        m, n, r, weight = self.m, self.n, self.rank, self.m * self.n
        # The hook divides the summed Q (and keeps that mean for warm start), then multiplies.
        torch.div(wire[r * m + self.rest :].view(1, n, r), num_workers, out=self._q)
        p = wire[: r * m].view(1, m, r)
        torch.mm(p[0], self._q[0].t(), out=grad[:weight].view(m, n))
        torch.div(wire[r * m : r * m + self.rest], num_workers, out=grad[weight:])
        if self._error is not None:
            torch.sub(self._matrix.view(-1), grad[:weight], out=self._error)
        self.steps += 1
        self._phase = _IDLE

    def state_dict(self) -> dict[str, torch.Tensor | int]:
        """Everything needed to resume bit for bit: the shapes (checked on load), the step
        count, Q as kept for the next step and, with error feedback, the error. Between steps
        only."""
        self._expect(_IDLE, "state_dict", "decode")
        state: dict[str, torch.Tensor | int] = {
            "m": self.m,
            "n": self.n,
            "rank": self.rank,
            "rest": self.rest,
            "steps": self.steps,
            "q": self._q.reshape(-1).clone(),
        }
        if self._error is not None:
            state["error"] = self._error.clone()
        return state

    def load_state_dict(self, state: Mapping[str, torch.Tensor | int]) -> None:
        """Resume from `state_dict()` of a layer of the same shape and error feedback setting.
        Raises ValueError naming the field that does not fit; nothing changes then."""
        self._expect(_IDLE, "load_state_dict", "decode")
        for name in ("m", "n", "rank", "rest"):
            value = _field(state, name, int)
            if value != getattr(self, name):
                raise ValueError(f"state's {name} = {value}, this layer's is {getattr(self, name)}")
        steps = _field(state, "steps", int)
        if steps < 0:
            raise ValueError(f"state's steps = {steps}: cannot be negative")
        q = self._tensor_field(state, "q", self.n * self.rank)
        error = None
        if self.error_feedback:
            error = self._tensor_field(state, "error", self.m * self.n)
        elif "error" in state:
            raise ValueError("state has an error but this layer's error_feedback is off")
        self._q.view(-1).copy_(q)
        if self._error is not None and error is not None:
            self._error.copy_(error)
        self.steps = steps

    def _fill_q(self, seed_draw: int) -> None:
        # Drawn on the CPU from a forked RNG, as the hook does: the same numbers on every
        # device, and the program's global RNG stream is left alone.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_draw)
            self._q.copy_(torch.randn(*self._q.shape, device="cpu", dtype=self.dtype))

    def _check(self, name: str, tensor: torch.Tensor, floats: int) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(tensor).__name__}")
        if tensor.dim() != 1 or tensor.numel() != floats:
            raise ValueError(
                f"{name} must be a flat tensor of {floats} floats "
                f"(m={self.m}, n={self.n}, rank={self.rank}, rest={self.rest}), "
                f"got shape {tuple(tensor.shape)}"
            )
        if tensor.dtype != self.dtype or tensor.device != self.device:
            raise ValueError(
                f"{name} is {tensor.dtype} on {tensor.device}, "
                f"the layer works in {self.dtype} on {self.device}"
            )
        if not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the layer writes through views of it)")

    def _expect(self, phase: int, call: str, previous: str) -> None:
        if self._phase != phase:
            raise RuntimeError(f"{call} called out of order: it comes after {previous}")

    def _tensor_field(self, state: Mapping[str, object], name: str, floats: int) -> torch.Tensor:
        value = _field(state, name, torch.Tensor)
        if tuple(value.shape) != (floats,) or value.dtype != self.dtype:
            raise ValueError(
                f"state's {name} is {value.dtype} of shape {tuple(value.shape)}, "
                f"expected {self.dtype} of shape ({floats},)"
            )
        return value


def _field(state: Mapping[str, object], name: str, kind: type[T]) -> T:
    if name not in state:
        raise ValueError(f"state has no {name!r}")
    value = state[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"state's {name} is a {type(value).__name__}, expected {kind.__name__}")
    return value
