"""The engine's whole attach surface for distributed training: everything a syncer
(caffe/parallel/syncer.py over Poseidon, caffe/parallel/allreduce.py over torch.distributed,
caffe/parallel/nccl.py for pycaffe scripts) hooks into, calls or reads on a Net, a Solver or
a Layer, and nothing else. Only caffe/parallel/ imports poseidon, and the attach tests
(tests/caffe/parallel/test_attach_surface.py) run every syncer on objects that expose
exactly what is listed here (ATTACH_SURFACE).

Callbacks — any number of attachers, called in the order attached; each registration
returns a handle whose remove() detaches it (a closed syncer removes all of its own):
    Net.before_forward / after_forward / before_backward / after_backward(fn(layer_index))
    Solver.add_callback(on_start, on_gradients_ready)

Single slots — one attacher each (`HookSlot`: a second attacher is refused with an error,
never silently replaces the first; set None to detach):
    Net.clear_param_diffs_hook()            zero what ClearParamDiffs would (keep pending sums)
    Solver.update_hook(rate)                replaces the update inside apply_update
    Solver.flush_hook()                     before tests, snapshots and the end of step()
    Solver.action_hook(action, at_boundary) -> the action every worker takes (see solver.py)
    Solver.snapshot_hook(state_file)        every worker, when the job snapshots
    Solver.restore_hook(state_file)         after Solver.restore(state_file)
    InnerProductLayer.sufficient_factor_sink(top_diff, bottom_data)   each backward's factors

Calls:
    Solver.update_param(param_id, rate)     the solver rule for one learnable parameter (a
                                            deferred update applies it layer by layer)
    Solver.subtract_diff(data, diff)        then data -= diff, diff = 0 for that layer's
                                            range (the replay's solver times it as the
                                            update's, already profiled)
    Layer.comm_shape(bottom) -> (kind, m, n, rows)   how the cost model sees the layer
    Layer.batch_wait_s() -> seconds | None  a prefetching data layer's last wait (timeline)
    InnerProductLayer.factor_widths() -> (top diff width, bottom data width)
    InnerProductLayer.add_factor_gradients(dy, x, scale)   the SFB rebuild into its diffs
    The compute replay's layers (poseidon/experiments/replay.py) only, read where present:
    Layer.byte_scale                        its buffers hold 1/byte_scale of the real floats
    Layer.profiled_costs(spec, workers) -> _C.MeasuredCosts   the profile's times, declared
                                            instead of timing the stand-in
    Layer.replay_compute(seconds)           its device spends a codec step's estimated time

Read-only views (public; everything else is the engine's):
    Solver: net, param (iter_size, clip_gradients), iter
    Net: name, device, param_data, param_diff (the flat learnable buffers: one contiguous
        range per layer, layer_param_range[i] = [start, end) of layer i), learnable_params
        (their Blobs' data_tensor and diff_tensor), params_lr, layers, layer_names,
        bottom_vecs, param_layer_indices, param_owners, learnable_param_ids (weight sharing)
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from caffe.errors import CaffeError

T = TypeVar("T")

# What a syncer may touch, by the kind of object (the list above, as data): the attach tests
# give syncers objects that have these attributes and no others.
ATTACH_SURFACE: dict[str, frozenset[str]] = {
    "Solver": frozenset({
        "add_callback", "update_hook", "flush_hook", "action_hook", "snapshot_hook",
        "restore_hook", "update_param", "subtract_diff",
        "net", "param", "iter",
    }),
    "Net": frozenset({
        "before_forward", "after_forward", "before_backward", "after_backward",
        "clear_param_diffs_hook", "name", "device", "param_data", "param_diff",
        "layer_param_range", "learnable_params", "params_lr", "layers", "layer_names",
        "bottom_vecs", "param_layer_indices", "param_owners", "learnable_param_ids",
    }),
    "Layer": frozenset({
        "comm_shape", "batch_wait_s", "factor_widths", "add_factor_gradients",
        "sufficient_factor_sink", "byte_scale", "profiled_costs", "replay_compute",
    }),
    "Blob": frozenset({"data_tensor", "diff_tensor"}),
}  # fmt: skip


class CallbackHandle:
    """What registering a callback returns: `remove()` takes that callback out again (as
    torch's RemovableHandle), at most once; removing twice is a no-op."""

    def __init__(self, owner: Any, attribute: str, callback: Any) -> None:
        self._owner, self._attribute, self._callback = owner, attribute, callback

    def remove(self) -> None:
        if self._owner is None:
            return
        # Copy on write: a forward that is running keeps iterating over the list it began
        # with, so a callback removed from inside another callback cannot skip a neighbour.
        callbacks = getattr(self._owner, self._attribute)
        setattr(self._owner, self._attribute, [c for c in callbacks if c is not self._callback])
        self._owner = None


def add_callback(owner: Any, attribute: str, callback: Any) -> CallbackHandle:
    """Append `callback` to the list `owner.<attribute>` (copy on write, as remove) and
    return its handle."""
    setattr(owner, attribute, [*getattr(owner, attribute), callback])
    return CallbackHandle(owner, attribute, callback)


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
