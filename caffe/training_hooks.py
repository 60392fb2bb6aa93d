"""The engine's whole attach surface for distributed training: everything a syncer
(caffe/parallel.py over Poseidon, caffe/allreduce_sync.py over torch.distributed,
caffe/nccl.py for pycaffe scripts) hooks into or reads, and nothing else. Only
caffe/parallel.py imports poseidon (tests/caffe/test_training_hooks.py holds it to that).

Callbacks — any number of attachers, called in the order attached:
    Net.before_forward / after_forward / before_backward / after_backward(fn(layer_index))
    Solver.add_callback(on_start, on_gradients_ready)

Single slots — one attacher each (`HookSlot`: a second attacher is refused with an error,
never silently replaces the first; set None to detach):
    Net.clear_param_diffs_hook()            zero what ClearParamDiffs would (keep pending sums)
    Solver.update_hook(rate)                replaces the update inside apply_update
    Solver.flush_hook()                     before tests, snapshots and the end of step()
    Solver.action_hook(action, at_boundary) -> the action every worker takes (see solver.py)
    InnerProductLayer.sufficient_factor_sink(top_diff, bottom_data)   each backward's factors

Read-only views of a Net that a syncer may use (public; everything else is the engine's):
    param_data, param_diff              the flat learnable buffers (one contiguous range per
    layer_param_range[i]                layer: [start, end) for layer i)
    learnable_params, learnable_param_offsets, params_lr
    layers, layer_names, bottom_vecs, top_vecs
    param_layer_indices, param_owners, learnable_param_ids     weight sharing
    layer_need_backward, bottom_need_backward                  backward pruning
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from caffe.errors import CaffeError

T = TypeVar("T")


def _describe(hook: object) -> str:
    owner = getattr(hook, "__self__", None)
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    return f"{name} of {type(owner).__name__}" if owner is not None else name


class HookSlot(Generic[T]):
    """An attribute that holds one hook or None. Attaching a hook where another one is
    attached raises CaffeError naming both, so two syncers on one solver fail at once
    instead of one silently losing its updates; re-attaching the same hook is a no-op."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner.__name__

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return obj.__dict__.get(self.name)

    def __set__(self, obj: Any, value: T | None) -> None:
        current = obj.__dict__.get(self.name)
        if value is not None and current is not None and value != current:
            raise CaffeError(
                f"{self.owner}.{self.name} already has {_describe(current)} attached; "
                f"refusing a second one ({_describe(value)}): detach the first (set it to "
                "None) or attach one syncer per solver"
            )
        obj.__dict__[self.name] = value
