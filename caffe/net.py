"""Net: builds a DAG of layers from a NetParameter and runs it forward and backward.

Every rule of Caffe's Net::Init is kept (docs/caffe_format.md §2): state filtering, automatic Split
layers, in-place tops, anonymous loss tops, loss weights in top diffs, weight sharing
by name, backward pruning with propagate_down and force_backward, outputs sorted by
name. Callbacks before/after forward/backward of each layer, one single-slot hook and
read-only views (caffe/net_views.py) are what distributed training attaches to: the whole
surface is listed in caffe/training_hooks.py.

Memory for learnable parameters is allocated once, after setup: all owned parameters
live in one flat data buffer and one flat diff buffer, in learnable-parameter order,
so each layer's parameters form one contiguous range (`layer_param_range`), and learnable
parameter i starts at `learnable_param_offsets[i]` (the solver updates runs of them at once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

from caffe.blob import Blob
from caffe.common import SHAPES_ONLY_DEVICE, compute_device, root_solver
from caffe.errors import NetError
from caffe.fillers import deferred_fills, flush_fills
from caffe.formats.net_io import NetWeightsMixin
from caffe.heap import keep_step_buffers_once, lazy_zeros
from caffe.insert_splits import insert_splits
from caffe.layer import Layer, create_layer
from caffe.net_filter import filter_net
from caffe.net_views import NetViewsMixin
from caffe.proto import caffe_pb2
from caffe.pycaffe import PycaffeNetMixin
from caffe.training_hooks import CallbackHandle, HookSlot, add_callback

_log = logging.getLogger("caffe")
# Where the layers that announce their draws at setup live (Note [deferred fills]).
BUILT_IN_PACKAGES = ("caffe.", "poseidon.")
LayerCallback = Callable[[int], None]


class Net(PycaffeNetMixin, NetWeightsMixin, NetViewsMixin):
    """pycaffe's caffe.Net. Constructors:

    Net(network_file, phase, level=0, stages=None, weights=None)
    Net(network_file, pretrained_file, phase)        (deprecated form)
    Net(net_parameter)                               (a NetParameter with its state set)

    `shapes_only=True` builds every blob's shape and nothing else: no memory, no values, no
    data read but a database's first record (Note [shapes only] in caffe/common.py).
    """

    # Single slot of the distributed-training surface (caffe/training_hooks.py).
    clear_param_diffs_hook: HookSlot[Callable[[], None]] = HookSlot()

    def __init__(self, *args, shapes_only: bool = False, **kwargs) -> None:
        param, weights = self._parse_constructor(args, kwargs)
        if shapes_only and weights:
            raise NetError("a shapes-only net holds no values: it cannot load weights")
        self.device = SHAPES_ONLY_DEVICE if shapes_only else compute_device()
        if not shapes_only:
            keep_step_buffers_once()  # caffe/heap.py: CAFFE_MALLOC
        self._before_forward: list[LayerCallback] = []
        self._after_forward: list[LayerCallback] = []
        self._before_backward: list[LayerCallback] = []
        self._after_backward: list[LayerCallback] = []
        self.clear_param_diffs_hook: Callable[[], None] | None = None
        self._init(param)
        for path in weights:
            self.copy_from(path)

    # ----- construction ---------------------------------------------------------------
    def _init(self, in_param: caffe_pb2.NetParameter) -> None:
        # Weights are drawn into the parameter buffer once it exists (Note [deferred fills]).
        with deferred_fills() as pending_fills:
            self._build(in_param, pending_fills)
        self.debug_info = self.param.debug_info
        if root_solver():
            for blob_id in self._outputs:
                _log.info("This network produces output %s", self._blob_names[blob_id])
            _log.info("Network initialization done.")

    def _build(self, in_param: caffe_pb2.NetParameter, pending_fills: list) -> None:
        param = insert_splits(filter_net(in_param, in_param.state))
        self.param = param
        self.name = param.name
        self.phase = param.state.phase
        if root_solver():
            _log.info("Initializing net from parameters: \n%s", param)
        self.layers: list[Layer] = []
        self._layer_names: list[str] = []
        self._blobs: list[Blob] = []
        self._blob_names: list[str] = []
        self._blob_need_backward: list[bool] = []
        self._blob_loss_weights: list[float] = []
        self._bottom_vecs: list[list[Blob]] = []
        self._top_vecs: list[list[Blob]] = []
        self._bottom_id_vecs: list[list[int]] = []
        self._top_id_vecs: list[list[int]] = []
        self._bottom_need_backward: list[list[bool]] = []
        self._layer_need_backward: list[bool] = []
        self._inputs: list[int] = []
        self._params: list[Blob] = []
        self._param_owners: list[int] = []
        self._param_display_names: list[str] = []
        self._param_layer_indices: list[tuple[int, int]] = []
        self._param_names_index: dict[str, int] = {}
        self._learnable_param_ids: list[int] = []
        self.learnable_params: list[Blob] = []
        self.params_lr: list[float] = []
        self.params_weight_decay: list[float] = []
        self._has_params_lr: list[bool] = []
        self._has_params_decay: list[bool] = []
        blob_name_to_idx: dict[str, int] = {}
        available: dict[str, None] = {}  # insertion-ordered set
        memory_used = 0
        for layer_id, layer_param in enumerate(param.layer):
            if not layer_param.HasField("phase"):
                layer_param.phase = param.state.phase
            if layer_param.propagate_down and len(layer_param.propagate_down) != len(
                layer_param.bottom
            ):
                raise NetError(
                    f"Layer '{layer_param.name}': propagate_down must be specified either 0 or "
                    f"bottom_size times ({len(layer_param.propagate_down)} given, "
                    f"{len(layer_param.bottom)} bottoms)"
                )
            layer = create_layer(layer_param, self.device)
            self.layers.append(layer)
            self._layer_names.append(layer_param.name)
            if root_solver():
                _log.info("Creating Layer %s", layer_param.name)
            need_backward = False
            self._bottom_vecs.append([])
            self._top_vecs.append([])
            self._bottom_id_vecs.append([])
            self._top_id_vecs.append([])
            self._bottom_need_backward.append([])
            for bottom_id in range(len(layer_param.bottom)):
                blob_id = self._append_bottom(layer_param, layer_id, bottom_id, available,
                                              blob_name_to_idx)  # fmt: skip
                need_backward |= self._blob_need_backward[blob_id]
            for top_id in range(len(layer_param.top)):
                self._append_top(layer_param, layer_id, top_id, available, blob_name_to_idx)
            if layer.auto_top_blobs:
                needed = max(layer.min_top, layer.exact_num_top)
                for top_id in range(len(layer_param.top), needed):
                    self._append_top(layer_param, layer_id, top_id, None, None)
            if root_solver():
                _log.info("Setting up %s", layer_param.name)
            self._set_up(layer, layer_id, pending_fills)
            for top_id, blob_id in enumerate(self._top_id_vecs[layer_id]):
                top = self._blobs[blob_id]
                self._blob_loss_weights[blob_id] = layer.loss(top_id)
                if root_solver():
                    _log.info("Top shape: %s", top.shape_string())
                    if layer.loss(top_id):
                        _log.info("    with loss weight %g", layer.loss(top_id))
                memory_used += top.count
            if root_solver():
                _log.info("Memory required for data: %d", memory_used * 4)
            num_param_blobs = len(layer.blobs)
            if len(layer_param.param) > num_param_blobs:
                raise NetError(
                    f"Too many params specified for layer {layer_param.name} "
                    f"({len(layer_param.param)} param entries, {num_param_blobs} blobs)"
                )
            layer.param_propagate_down = []
            for param_id in range(num_param_blobs):
                spec = self._param_spec(layer_param, param_id)
                layer.param_propagate_down.append(spec.lr_mult != 0)
                need_backward |= spec.lr_mult != 0
            for param_id in range(num_param_blobs):
                self._append_param(layer_id, param_id)
            self._layer_need_backward.append(need_backward)
            if need_backward:
                for blob_id in self._top_id_vecs[layer_id]:
                    self._blob_need_backward[blob_id] = True
        self._prune_backward(param)
        self._outputs = [blob_name_to_idx[name] for name in sorted(available)]
        self._blob_name_to_idx = blob_name_to_idx
        self._layer_name_to_idx = {name: i for i, name in enumerate(self._layer_names)}
        for i, layer in enumerate(self.layers):
            layer.need_backward = self._layer_need_backward[i]
            layer.bottom_need_backward = list(self._bottom_need_backward[i])
        self._allocate_param_buffers()

    def _set_up(self, layer: Layer, layer_id: int, pending_fills: list) -> None:
        """run_setup, keeping deferred fills in the order they would have drawn: a user's
        layer (a Python layer, or a class registered from outside this project) may draw at
        setup, so fills pending before it draw first; a built-in layer announces its draws
        (flush_fills), and one that did not is named (Note [deferred fills] in
        caffe/fillers.py)."""
        bottom, top = self._bottom_vecs[layer_id], self._top_vecs[layer_id]
        if not type(layer).__module__.startswith(BUILT_IN_PACKAGES):
            flush_fills()
        if not pending_fills:
            layer.run_setup(bottom, top)
            return
        state = torch.random.get_rng_state()
        first_pending = pending_fills[0]
        layer.run_setup(bottom, top)
        unflushed = bool(pending_fills) and pending_fills[0] is first_pending
        if unflushed and not torch.equal(state, torch.random.get_rng_state()):
            raise NetError(
                f"Layer '{layer.layer_param.name}' (type {layer.layer_param.type}) drew from "
                "torch's random generator at setup while weight fills were deferred, which "
                "reorders the draws: it must call caffe.fillers.flush_fills() first"
            )

    def _append_top(self, layer_param, layer_id, top_id, available, name_to_idx) -> None:
        has_name = top_id < len(layer_param.top)
        blob_name = layer_param.top[top_id] if has_name else "(automatic)"
        if (
            name_to_idx is not None
            and top_id < len(layer_param.bottom)
            and layer_param.bottom[top_id] == blob_name
        ):
            # In-place: the top is the bottom blob at the same index.
            if root_solver():
                _log.info("%s -> %s (in-place)", layer_param.name, blob_name)
            blob_id = name_to_idx[blob_name]
        elif name_to_idx is not None and blob_name in name_to_idx:
            raise NetError(
                f"Top blob '{blob_name}' produced by multiple sources (layer '{layer_param.name}')"
            )
        else:
            if root_solver():
                _log.info("%s -> %s", layer_param.name, blob_name)
            blob_id = len(self._blobs)
            self._blobs.append(Blob(device=self.device))
            self._blob_names.append(blob_name)
            self._blob_need_backward.append(False)
            self._blob_loss_weights.append(0.0)
            if name_to_idx is not None:
                name_to_idx[blob_name] = blob_id
            if layer_param.type == "Input":
                self._inputs.append(blob_id)
        self._top_id_vecs[layer_id].append(blob_id)
        self._top_vecs[layer_id].append(self._blobs[blob_id])
        if available is not None:
            available[blob_name] = None

    def _append_bottom(self, layer_param, layer_id, bottom_id, available, name_to_idx) -> int:
        blob_name = layer_param.bottom[bottom_id]
        if blob_name not in available:
            raise NetError(
                f"Unknown bottom blob '{blob_name}' (layer '{layer_param.name}', "
                f"bottom index {bottom_id})"
            )
        blob_id = name_to_idx[blob_name]
        if root_solver():
            _log.info("%s <- %s", layer_param.name, blob_name)
        self._bottom_vecs[layer_id].append(self._blobs[blob_id])
        self._bottom_id_vecs[layer_id].append(blob_id)
        del available[blob_name]
        need = self._blob_need_backward[blob_id]
        if layer_param.propagate_down:
            need = layer_param.propagate_down[bottom_id]
        self._bottom_need_backward[layer_id].append(need)
        return blob_id

    @staticmethod
    def _param_spec(layer_param: caffe_pb2.LayerParameter, param_id: int) -> caffe_pb2.ParamSpec:
        if param_id < len(layer_param.param):
            return layer_param.param[param_id]
        return caffe_pb2.ParamSpec()

    def _append_param(self, layer_id: int, param_id: int) -> None:
        layer_param = self.layers[layer_id].layer_param
        spec = self._param_spec(layer_param, param_id)
        blob = self.layers[layer_id].blobs[param_id]
        net_param_id = len(self._params)
        self._params.append(blob)
        self._param_layer_indices.append((layer_id, param_id))
        name = spec.name
        self._param_display_names.append(name or str(param_id))
        if not name or name not in self._param_names_index:
            # An owner: a new learnable parameter.
            if name:
                self._param_names_index[name] = net_param_id
            self._param_owners.append(-1)
            self._learnable_param_ids.append(len(self.learnable_params))
            self.learnable_params.append(blob)
            self.params_lr.append(spec.lr_mult)
            self.params_weight_decay.append(spec.decay_mult)
            self._has_params_lr.append(spec.HasField("lr_mult"))
            self._has_params_decay.append(spec.HasField("decay_mult"))
            return
        owner_id = self._param_names_index[name]
        self._param_owners.append(owner_id)
        owner_layer, owner_param = self._param_layer_indices[owner_id]
        owner = self._params[owner_id]
        if root_solver():
            _log.info("Sharing parameters '%s' owned by layer '%s', param index %d", name,
                      self._layer_names[owner_layer], owner_param)  # fmt: skip
        where = f"Shared parameter blobs with name '{name}' (layer '{layer_param.name}')"
        if spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE:
            if owner.count != blob.count:
                raise NetError(f"{where} cannot share: counts differ "
                               f"({owner.shape_string()} vs {blob.shape_string()})")  # fmt: skip
        elif owner.shape != blob.shape:
            raise NetError(
                f"{where} cannot share: shapes differ ({owner.shape_string()} vs "
                f"{blob.shape_string()}); set share_mode: PERMISSIVE to allow equal counts"
            )
        learnable_id = self._learnable_param_ids[owner_id]
        self._learnable_param_ids.append(learnable_id)
        for has, values, field, value in (
            (self._has_params_lr, self.params_lr, "lr_mult", spec.lr_mult),
            (self._has_params_decay, self.params_weight_decay, "decay_mult", spec.decay_mult),
        ):
            if not spec.HasField(field):
                continue
            if has[learnable_id] and values[learnable_id] != value:
                raise NetError(f"Shared param '{name}' has mismatched {field}")
            has[learnable_id] = True
            values[learnable_id] = value

    def _prune_backward(self, param: caffe_pb2.NetParameter) -> None:
        """Reverse pass: drop backward for layers that reach no loss
        (docs/caffe_format.md §2 step 6)."""
        under_loss: set[str] = set()
        skip_backprop: set[str] = set()
        for layer_id in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[layer_id]
            contributes = False
            skip_propagate = True
            for top_id, blob_id in enumerate(self._top_id_vecs[layer_id]):
                blob_name = self._blob_names[blob_id]
                if layer.loss(top_id) or blob_name in under_loss:
                    contributes = True
                if blob_name not in skip_backprop:
                    skip_propagate = False
                if contributes and not skip_propagate:
                    break
            if self._layer_need_backward[layer_id] and skip_propagate:
                self._layer_need_backward[layer_id] = False
                self._bottom_need_backward[layer_id] = [False] * len(
                    self._bottom_need_backward[layer_id]
                )
            if not contributes:
                self._layer_need_backward[layer_id] = False
            if root_solver():
                verdict = "needs" if self._layer_need_backward[layer_id] else "does not need"
                _log.info("%s %s backward computation.", self._layer_names[layer_id], verdict)
            for bottom_id, blob_id in enumerate(self._bottom_id_vecs[layer_id]):
                blob_name = self._blob_names[blob_id]
                if contributes:
                    under_loss.add(blob_name)
                else:
                    self._bottom_need_backward[layer_id][bottom_id] = False
                if not self._bottom_need_backward[layer_id][bottom_id]:
                    skip_backprop.add(blob_name)
        if param.force_backward:
            for layer_id, layer in enumerate(self.layers):
                self._layer_need_backward[layer_id] = True
                needs = self._bottom_need_backward[layer_id]
                for bottom_id, blob_id in enumerate(self._bottom_id_vecs[layer_id]):
                    needs[bottom_id] = needs[bottom_id] or layer.allow_force_backward(bottom_id)
                    self._blob_need_backward[blob_id] |= needs[bottom_id]
                layer.param_propagate_down = [True] * len(layer.blobs)

    def _allocate_param_buffers(self) -> None:
        """Move every owned parameter into one flat data and one flat diff buffer."""
        total = sum(b.count for b in self.learnable_params)
        self.param_data = torch.empty(total, dtype=torch.float32, device=self.device)
        self.param_diff = lazy_zeros(total, self.device)
        self.layer_param_range: list[tuple[int, int]] = []
        offset = 0
        offsets: dict[int, int] = {id(b): -1 for b in self.learnable_params}
        for layer in self.layers:
            start = offset
            for blob in layer.blobs:
                if offsets.get(id(blob), 0) != -1:
                    continue  # not learnable here (shared from its owner), or placed already
                offsets[id(blob)] = offset
                count = blob.count
                data_view = self.param_data[offset : offset + count]
                if not blob.awaits_fill:  # a deferred fill draws into the buffer later
                    data_view.copy_(blob.data_tensor.reshape(-1))
                blob.bind_storage(data_view, self.param_diff[offset : offset + count])
                offset += count
            self.layer_param_range.append((start, offset))
        # Where learnable parameter i starts in the flat buffers (the solver's update plan).
        self.learnable_param_offsets = [offsets[id(b)] for b in self.learnable_params]
        for net_id, owner_id in enumerate(self._param_owners):
            if owner_id >= 0:
                self._params[net_id].share_data(self._params[owner_id])
                self._params[net_id].share_diff(self._params[owner_id])

    # ----- running ----------------------------------------------------------------------
    def forward_from_to(self, start: int, end: int) -> float:
        """Run layers start..end inclusive; returns the summed weighted loss."""
        if start < 0 or end >= len(self.layers) or start > end + 1:
            raise IndexError(f"forward range {start}..{end} outside 0..{len(self.layers) - 1}")
        layers, bottoms, tops = self.layers, self._bottom_vecs, self._top_vecs
        before, after = self._before_forward, self._after_forward
        loss = None
        for i in range(start, end + 1):
            if before:
                for callback in before:
                    callback(i)
            layer_loss = layers[i].run_forward(bottoms[i], tops[i])
            if layer_loss is not None:
                loss = layer_loss if loss is None else loss + layer_loss
            if self.debug_info:
                self._forward_debug_info(i)
            if after:
                for callback in after:
                    callback(i)
        return float(loss) if loss is not None else 0.0

    def backward_from_to(self, start: int, end: int) -> None:
        """Run backward for layers start down to end (inclusive) that need it."""
        if start >= len(self.layers) or end < 0:
            raise IndexError(f"backward range {start}..{end} outside 0..{len(self.layers) - 1}")
        layers, bottoms, tops = self.layers, self._bottom_vecs, self._top_vecs
        need, propagate = self._layer_need_backward, self._bottom_need_backward
        before, after = self._before_backward, self._after_backward
        for i in range(start, end - 1, -1):
            if before:
                for callback in before:
                    callback(i)
            if need[i]:
                layers[i].run_backward(tops[i], propagate[i], bottoms[i])
                if self.debug_info:
                    self._backward_debug_info(i)
            if after:
                for callback in after:
                    callback(i)

    def forward_prefilled(self) -> float:
        return self.forward_from_to(0, len(self.layers) - 1)

    def backward_all(self) -> None:
        if self.layers:
            self.backward_from_to(len(self.layers) - 1, 0)

    def forward_backward(self) -> float:
        loss = self.forward_prefilled()
        self.backward_all()
        return loss

    def reshape(self) -> None:
        for i, layer in enumerate(self.layers):
            layer.reshape(self._bottom_vecs[i], self._top_vecs[i])

    def clear_param_diffs(self) -> None:
        """Zero every learnable diff (Caffe's ClearParamDiffs).

        A distributed syncer that still owes some layers their update (their diff range
        holds a received gradient sum) installs `clear_param_diffs_hook` to zero only the
        other layers; it zeroes the rest itself once their deferred update is applied.
        """
        self.claim_params_on_device()
        if self.clear_param_diffs_hook is not None:
            self.clear_param_diffs_hook()
            return
        self.param_diff.zero_()

    def update(self) -> None:
        """data -= diff for every learnable parameter (Caffe's Net::Update)."""
        self.claim_params_on_device()
        self.param_data.sub_(self.param_diff)

    def claim_params_on_device(self) -> None:
        """Make the device copy of every learnable blob the newest before the flat buffers
        are written directly (Caffe's mutable_gpu_data): values a user wrote into a host
        mirror (`blob.data`, `blob.diff` on CUDA) are taken, and no stale mirror later
        overwrites what the solver wrote. A no-op on CPU, where there is no mirror."""
        if self.device.type == "cpu":
            return
        for blob in self.learnable_params:
            blob.data_tensor  # noqa: B018  (the accessor syncs and claims)
            blob.diff_tensor  # noqa: B018

    # ----- callbacks ----------------------------------------------------------------------
    # Each returns a handle whose remove() detaches the callback (caffe/training_hooks.py).
    def before_forward(self, callback: LayerCallback) -> CallbackHandle:
        return add_callback(self, "_before_forward", callback)

    def after_forward(self, callback: LayerCallback) -> CallbackHandle:
        return add_callback(self, "_after_forward", callback)

    def before_backward(self, callback: LayerCallback) -> CallbackHandle:
        return add_callback(self, "_before_backward", callback)

    def after_backward(self, callback: LayerCallback) -> CallbackHandle:
        return add_callback(self, "_after_backward", callback)

    # ----- introspection --------------------------------------------------------------
    def has_blob(self, name: str) -> bool:
        return name in self._blob_name_to_idx

    def blob_by_name(self, name: str) -> Blob:
        if name not in self._blob_name_to_idx:
            raise KeyError(f"Unknown blob name {name} in net '{self.name}'")
        return self._blobs[self._blob_name_to_idx[name]]

    def has_layer(self, name: str) -> bool:
        return name in self._layer_name_to_idx

    def layer_by_name(self, name: str) -> Layer:
        if name not in self._layer_name_to_idx:
            raise KeyError(f"Unknown layer name {name} in net '{self.name}'")
        return self.layers[self._layer_name_to_idx[name]]

    def layer_index(self, name: str) -> int:
        return self._layer_name_to_idx[name]

    def _forward_debug_info(self, i: int) -> None:
        for blob_id, blob in zip(self._top_id_vecs[i], self._top_vecs[i]):
            value = blob.data_tensor.abs().mean().item() if blob.count else 0.0
            _log.info("    [Forward] Layer %s, top blob %s data: %g", self._layer_names[i],
                      self._blob_names[blob_id], value)  # fmt: skip
        for param_id, blob in enumerate(self.layers[i].blobs):
            value = blob.data_tensor.abs().mean().item() if blob.count else 0.0
            _log.info("    [Forward] Layer %s, param blob %d data: %g", self._layer_names[i],
                      param_id, value)  # fmt: skip

    def _backward_debug_info(self, i: int) -> None:
        for bottom_id, blob in enumerate(self._bottom_vecs[i]):
            if not self._bottom_need_backward[i][bottom_id]:
                continue
            value = blob.diff_tensor.abs().mean().item() if blob.count else 0.0
            _log.info("    [Backward] Layer %s, bottom blob %s diff: %g", self._layer_names[i],
                      self._blob_names[self._bottom_id_vecs[i][bottom_id]], value)  # fmt: skip
        for param_id, blob in enumerate(self.layers[i].blobs):
            value = blob.diff_tensor.abs().mean().item() if blob.count else 0.0
            _log.info("    [Backward] Layer %s, param blob %d diff: %g", self._layer_names[i],
                      param_id, value)  # fmt: skip
