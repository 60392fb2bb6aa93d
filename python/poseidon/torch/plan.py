"""The plan of a torch.nn model: the LayerSpecs its workers declare, made in one place for
DistributedDataParallel and for `poseidon plan --torch` (docs/design.md §4: what `poseidon plan`
prints is the plan the job runs).

    poseidon plan --torch examples/pytorch/mlp_digits.py:build_model --torch-input 32,1,32,32 \\
        --workers 4

The model's sync units (units.py) go through poseidon.plan.layer_specs, the derivation the
Caffe engine uses too; each nn.Linear's K comes from a forward of a copy of the model on the
example input (units.measure_linear_rows). One more unit follows the model's: the broadcast
unit, through which rank 0's parameters and buffers reach the others (broadcast.py). It is
always SFB (a copy, never a sum) and moves nothing per iteration, so the printed table leaves
it out.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from poseidon.plan import BROADCAST_NAME, format_plan, layer_specs
from poseidon.plan import broadcast_spec as unit_spec
from poseidon.sync.broadcast import BROADCAST_FLOATS
from poseidon.torch.units import SyncUnit, unit_layout


def state_tensors(model: nn.Module) -> list[torch.Tensor]:
    """What rank 0 broadcasts: every parameter and buffer."""
    return [*model.parameters(), *model.buffers()]


def broadcast_floats(model: nn.Module) -> int:
    """The broadcast unit's capacity: the model's state in float32 words, at most
    BROADCAST_FLOATS (larger states go in pieces)."""
    total = sum(t.numel() * t.element_size() for t in state_tensors(model)) // 4 + 1
    return max(1, min(BROADCAST_FLOATS, total))


def broadcast_spec(model: nn.Module, units: list[SyncUnit]) -> Any:
    """The broadcast unit's LayerSpec (id len(units), after the model's units)."""
    return unit_spec(len(units), broadcast_floats(model))


def torch_layer_specs(model: nn.Module, units: list[SyncUnit], rows: dict[int, int],
                      accumulation_steps: int, sync: str, scheme: str,
                      layer_schemes: dict[str, str]) -> list[Any]:  # fmt: skip
    """A torch model's LayerSpecs: its units, then the broadcast unit."""
    specs = layer_specs(unit_layout(units, rows), accumulation_steps, sync, scheme,
                        layer_schemes, what="layer_schemes")  # fmt: skip
    return [*specs, broadcast_spec(model, units)]


def format_torch_plan(plan: Any) -> str:
    """The plan's table without the broadcast unit."""
    return format_plan(plan, skip_names=(BROADCAST_NAME,))


def load_factory(spec: str) -> Callable[[], Any]:
    """`module:function` or `path/to/file.py:function` -> the function (called with no
    arguments, it returns a model, or a (model, example_inputs) pair)."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"--torch {spec!r}: want MODULE:FUNCTION or FILE.py:FUNCTION")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"--torch {spec!r}: no file {where}")
        loader = importlib.util.spec_from_file_location(path.stem, path)
        assert loader is not None and loader.loader is not None
        module = importlib.util.module_from_spec(loader)
        sys.modules.setdefault(path.stem, module)
        loader.loader.exec_module(module)
    else:
        sys.path.insert(0, ".")  # as `python -m` would find it
        module = importlib.import_module(where)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"--torch {spec!r}: {where} has no function {name}")
    return factory


def parse_input(text: str) -> torch.Tensor:
    """`N,C,H,W` (float32) or `N,T:int64` -> an example input of that shape (zeros)."""
    shape_text, _, dtype_text = text.partition(":")
    dtype = getattr(torch, dtype_text or "float32", None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"--torch-input {text!r}: unknown dtype {dtype_text!r}")
    try:
        shape = [int(d) for d in shape_text.split(",")]
    except ValueError:
        raise ValueError(f"--torch-input {text!r}: want a shape like 32,3,224,224") from None
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"--torch-input {text!r}: every dimension must be >= 1")
    return torch.zeros(shape, dtype=dtype)


def model_and_inputs(factory_spec: str, inputs: Sequence[str],
                     batch: int | None) -> tuple[nn.Module, tuple]:  # fmt: skip
    """The model a factory builds and the example inputs of its first forward: the
    --torch-input shapes if given, else those the factory returned; `batch` replaces every
    input's first dimension."""
    made = load_factory(factory_spec)()
    model, example = made if isinstance(made, tuple) else (made, ())
    if not isinstance(model, nn.Module):
        raise ValueError(f"--torch {factory_spec}: returned {type(model).__name__}, not an "
                         "nn.Module (or a (module, example_inputs) pair)")  # fmt: skip
    args = tuple(parse_input(t) for t in inputs) if inputs else tuple(
        example if isinstance(example, (tuple, list)) else (example,))  # fmt: skip
    if not args:
        raise ValueError(f"--torch {factory_spec}: give the input's shape (--torch-input "
                         "N,C,H,W), or let the factory return (model, example_inputs)")  # fmt: skip
    if batch is not None:
        args = tuple(a.new_zeros((batch, *a.shape[1:])) if isinstance(a, torch.Tensor) else a
                     for a in args)  # fmt: skip
    return model, args
