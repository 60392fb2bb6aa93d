"""Which parameters of a torch.nn model move together, and how the cost model sees them.

A *sync unit* is what the comm core calls a layer: every trainable parameter a module owns
directly (`named_parameters(recurse=False)`), in module order — which is, for a model written
front to back, the order its forward runs, so the send queue's "lower layers first" puts the
parameters the next forward needs first on the wire (WFBP). Its gradient travels as one
contiguous float32 range (PS) or, for an `nn.Linear`, as sufficient factors (SFB).

How the cost model sees a unit (docs/paper.md §4, the core's `CommShape`, as for a Caffe net):
- `nn.Linear(in, out)`: kind FC, an out×in weight (M×N in the paper's names) and K = the rows
  of the GEMM per iteration: every leading dimension of its input counts (a transformer's
  batch × sequence), known after the first forward;
- `nn.Conv1d/2d/3d`: kind conv, out × (in/groups · kernel);
- anything else (norms, embeddings, a Linear whose weight is also another module's): kind
  other, one vector. A tied weight's gradient holds the other module's share too, which no
  sufficient factors carry, so only a Linear that owns all of its parameters alone may be SFB.

`unit_layout(units, rows)` gives the units as the core's SyncLayers (poseidon/sync/layout.py),
as if their gradients lay end to end in one buffer, so that poseidon.plan.layer_specs — the
one derivation of a job's plan — and every round serve both front ends.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from poseidon.sync.layout import CommShape, SyncLayer

CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass
class SyncUnit:
    """One module's trainable parameters, moved together."""

    index: int  # the comm core's layer id: module order
    name: str  # the module's qualified name ("features.0"), or "(root)"
    module: nn.Module
    params: list[nn.Parameter] = field(default_factory=list)
    param_names: list[str] = field(default_factory=list)
    tied: bool = False  # a parameter of it is also another module's

    @property
    def num_floats(self) -> int:
        return sum(p.numel() for p in self.params)

    @property
    def sfb_capable(self) -> bool:
        """An nn.Linear owning all of its parameters, each of them learning."""
        linear = self.module
        if not isinstance(linear, nn.Linear) or self.tied:
            return False
        own = [linear.weight] + ([linear.bias] if linear.bias is not None else [])
        return len(own) == len(self.params) and all(a is b for a, b in zip(own, self.params))

    def comm_shape(self, rows: int | None) -> CommShape:
        """The unit as the cost model sees it, `rows` being K for an FC unit: None when no
        forward called the Linear as a module (nn.MultiheadAttention's out_proj: its weight is
        used directly), so that no factors could be captured and the parameter server must
        carry it."""
        module = self.module
        if self.sfb_capable and rows is not None:
            return CommShape("FC", m=module.out_features, n=module.in_features, rows=rows)
        if isinstance(module, CONVOLUTIONS) and module.weight in self.params and not self.tied:
            weight = module.weight
            return CommShape("conv", m=weight.shape[0], n=math.prod(weight.shape[1:]), rows=1)
        return CommShape("other", m=self.num_floats, n=1, rows=1)


def sync_units(model: nn.Module) -> list[SyncUnit]:
    """The trainable parameters of `model`, grouped into sync units in module order; a
    parameter seen again in a later module (weight tying) stays with its first owner, which
    is then `tied`. Frozen parameters (requires_grad False) move nowhere."""
    owner: dict[int, SyncUnit] = {}
    units: list[SyncUnit] = []
    for name, module in model.named_modules(remove_duplicate=False):
        unit = None
        for param_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if id(param) in owner:
                owner[id(param)].tied = True
                continue
            if unit is None:
                unit = SyncUnit(len(units), name or "(root)", module)
                units.append(unit)
            unit.params.append(param)
            unit.param_names.append(f"{name}.{param_name}" if name else param_name)
            owner[id(param)] = unit
    return units


def unit_layout(units: list[SyncUnit], rows: dict[int, int]) -> list[SyncLayer]:
    """The units as the core's layout; `rows[i]` is FC unit i's K (rows of its GEMM per
    iteration), absent for a Linear that no forward called as a module."""
    layout, start = [], 0
    for u in units:
        layout.append(SyncLayer(u.index, u.name, start, start + u.num_floats, (), False,
                                u.comm_shape(rows.get(u.index))))  # fmt: skip
        start += u.num_floats
    return layout


class RowsUnknownError(RuntimeError):
    """The Linear layers' K could not be measured; the message says what to pass instead."""


def measure_linear_rows(model: nn.Module, units: list[SyncUnit], args: tuple,
                        kwargs: dict) -> dict[int, int]:  # fmt: skip
    """Each SFB-capable unit's rows per forward (its K: every leading dimension of each call's
    input, summed over the calls), from one forward of a *copy* of `model` on `args`.

    Note [measuring K]. The plan needs K before the first real forward (rank 0's parameters
    are broadcast before it, through the plan's broadcast unit), and the model must come out
    of the measurement untouched: a forward of the model itself would run its Python side
    effects twice (a call counter, a cache) and its BatchNorm statistics. So a copy runs it:
    first on the meta device (shapes only: no compute, no memory; the copy shares nothing
    with the model), and, when the forward cannot run on meta (data-dependent control flow,
    an op without a meta kernel), on a real copy under no_grad, the RNG restored after."""
    wanted = {u.module: u.index for u in units if u.sfb_capable}
    if not wanted:
        return {}
    names = {module: name for name, module in model.named_modules(remove_duplicate=False)}
    by_name = {names[module]: index for module, index in wanted.items()}
    failures = []
    for device in ("meta", None):
        try:
            with rng_kept(), torch.no_grad():
                copied = copy_model(model, device)
                copied_args, copied_kwargs = copy_inputs((args, kwargs), device)
                rows: dict[int, int] = {}
                for name, module in copied.named_modules(remove_duplicate=False):
                    if name in by_name:
                        module.register_forward_hook(_row_counter(rows, by_name[name]))
                copied(*copied_args, **copied_kwargs)
            return rows
        except Exception as e:  # any failure of a user's forward: try the next way
            failures.append(f"{device or 'a real copy'}: {type(e).__name__}: {e}")
    raise RowsUnknownError(
        "cannot measure the rows (K) of the model's nn.Linear layers from a copy of its first "
        f"forward ({'; '.join(failures)}); pass sfb_rows=K (rows of every Linear's input per "
        "step, batch x sequence) to DistributedDataParallel"
    )


def _row_counter(rows: dict[int, int], index: int):  # type: ignore[no-untyped-def]
    def count(module: nn.Module, inputs: tuple, output: Any) -> None:
        rows[index] = rows.get(index, 0) + inputs[0].numel() // module.in_features

    return count


def copy_model(model: nn.Module, device: str | None) -> nn.Module:
    """A deep copy of `model`; with device="meta" its tensors are meta tensors of the same
    shapes (made straight from the model's, so its memory is never copied)."""
    if device is None:
        return copy.deepcopy(model)
    memo: dict[int, Any] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        meta = torch.empty_like(tensor, device=device)
        if isinstance(tensor, nn.Parameter):
            meta = nn.Parameter(meta, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = meta
    return copy.deepcopy(model, memo)


def copy_inputs(inputs: Any, device: str | None) -> Any:
    def copy_tensor(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        return torch.empty_like(x, device=device) if device else x.detach().clone()

    return tree_map(copy_tensor, inputs)


@contextmanager
def rng_kept() -> Iterator[None]:
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
