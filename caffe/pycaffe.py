"""The Python-level conveniences of pycaffe's Net (docs/caffe_format.md §5.2): name-keyed views of
blobs, params and layers, and forward/backward/forward_all with keyword blobs."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np

from caffe.errors import CaffeError, NetError
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")


def _is_phase(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _net_arguments(network_file, phase=None, level=0, stages=None, weights=None):
    """pycaffe's signature; Python itself reports wrong or unexpected arguments."""
    return network_file, phase, level, stages, weights


class PycaffeNetMixin:
    """Mixed into caffe.Net; relies on the Net's _blobs/_blob_names/layers bookkeeping."""

    # ----- constructor forms -------------------------------------------------------------
    @staticmethod
    def _parse_constructor(args: tuple, kwargs: dict) -> tuple[caffe_pb2.NetParameter, list[str]]:
        if args and isinstance(args[0], caffe_pb2.NetParameter):
            param = caffe_pb2.NetParameter()
            param.CopyFrom(args[0])
            _, phase, level, stages, weights = _net_arguments(*args, **kwargs)
            if phase is not None:
                param.state.phase = int(phase)
            return param, [weights] if weights else []
        if len(args) == 3 and isinstance(args[1], str) and not kwargs:
            # Legacy form Net(network_file, pretrained_file, phase).
            network_file, weights, phase = args
            _log.warning("DEPRECATION WARNING - deprecated use of Python interface")
            _log.warning('Use this instead (with the named "weights" parameter):')
            _log.warning("Net('%s', %s, weights='%s')", network_file, phase, weights)
            level, stages = 0, None
        else:
            network_file, phase, level, stages, weights = _net_arguments(*args, **kwargs)
        if not _is_phase(phase):
            raise TypeError("Net() needs a phase: caffe.TRAIN or caffe.TEST")
        from caffe.formats.proto_io import read_net_param

        param = read_net_param(str(network_file))
        param.state.phase = int(phase)
        param.state.level = int(level)
        param.state.stage.extend(list(stages or []))
        return param, [str(weights)] if weights else []

    # ----- native-style members ------------------------------------------------------------
    def _forward(self, start: int, end: int) -> float:
        return self.forward_from_to(start, end)

    def _backward(self, start: int, end: int) -> None:
        self.backward_from_to(start, end)

    def _bottom_ids(self, i: int) -> list[int]:
        return list(self._bottom_id_vecs[i])

    def _top_ids(self, i: int) -> list[int]:
        return list(self._top_id_vecs[i])

    # ----- name-keyed views ---------------------------------------------------------------------
    @property
    def blobs(self) -> OrderedDict:
        return OrderedDict(zip(self._blob_names, self._blobs))

    @property
    def blob_loss_weights(self) -> OrderedDict:
        return OrderedDict(zip(self._blob_names, self._blob_loss_weights))

    @property
    def layer_dict(self) -> OrderedDict:
        return OrderedDict(zip(self._layer_names, self.layers))

    @property
    def params(self) -> OrderedDict:
        return OrderedDict(
            (name, list(layer.blobs))
            for name, layer in zip(self._layer_names, self.layers)
            if len(layer.blobs) > 0
        )

    @property
    def inputs(self) -> list[str]:
        return [self._blob_names[i] for i in self._inputs]

    @property
    def outputs(self) -> list[str]:
        return [self._blob_names[i] for i in self._outputs]

    @property
    def top_names(self) -> OrderedDict:
        return OrderedDict(
            (name, [self._blob_names[b] for b in self._top_id_vecs[i]])
            for i, name in enumerate(self._layer_names)
        )

    @property
    def bottom_names(self) -> OrderedDict:
        return OrderedDict(
            (name, [self._blob_names[b] for b in self._bottom_id_vecs[i]])
            for i, name in enumerate(self._layer_names)
        )

    def _layer_position(self, name: str) -> int:
        if name not in self._layer_name_to_idx:
            raise NetError(f"Unknown layer '{name}' in net '{self.name}'")
        return self._layer_name_to_idx[name]

    # ----- forward / backward with keyword blobs ------------------------------------------------
    def forward(self, blobs=None, start=None, end=None, **kwargs) -> dict[str, np.ndarray]:
        """Forward from `start` to `end` (layer names); kwargs fill the net inputs.

        Returns {name: data} for the outputs (or `end`'s tops) plus any names in `blobs`.
        """
        blobs = list(blobs or [])
        start_ind = 0 if start is None else self._layer_position(start)
        if end is not None:
            end_ind = self._layer_position(end)
            outputs = set(self.top_names[end] + blobs)
        else:
            end_ind = len(self.layers) - 1
            outputs = set(self.outputs + blobs)
        if kwargs:
            if set(kwargs) != set(self.inputs):
                raise CaffeError(
                    f"Input blob arguments {sorted(kwargs)} do not match net inputs {self.inputs}"
                )
            for name, value in kwargs.items():
                blob = self.blob_by_name(name)
                if value.shape[0] != blob.shape[0]:
                    raise CaffeError(f"Input '{name}' is not batch sized: {value.shape[0]} rows "
                                     f"for a batch of {blob.shape[0]}")  # fmt: skip
                blob.data[...] = value
        self._forward(start_ind, end_ind)
        return {name: self.blob_by_name(name).data for name in outputs}

    def backward(self, diffs=None, start=None, end=None, **kwargs) -> dict[str, np.ndarray]:
        """Backward from `start` down to `end`; kwargs set the diffs of the net outputs."""
        diffs = list(diffs or [])
        start_ind = len(self.layers) - 1 if start is None else self._layer_position(start)
        if end is not None:
            end_ind = self._layer_position(end)
            outputs = set(self.bottom_names[end] + diffs)
        else:
            end_ind = 0
            outputs = set(self.inputs + diffs)
        if kwargs:
            if set(kwargs) != set(self.outputs):
                raise CaffeError(
                    f"Top diff arguments {sorted(kwargs)} do not match net outputs {self.outputs}"
                )
            for name, value in kwargs.items():
                blob = self.blob_by_name(name)
                if value.shape[0] != blob.shape[0]:
                    raise CaffeError(f"Diff '{name}' is not batch sized")
                blob.diff[...] = value
        self._backward(start_ind, end_ind)
        return {name: self.blob_by_name(name).diff for name in outputs}

    def forward_all(self, blobs=None, **kwargs) -> dict[str, np.ndarray]:
        """Forward every item of the keyword inputs, batch by batch; padding is stripped."""
        all_outs: dict[str, list] = {name: [] for name in set(self.outputs + list(blobs or []))}
        for batch in self._batch(kwargs):
            for name, value in self.forward(blobs=blobs, **batch).items():
                all_outs[name].extend(value.copy())
        outs = {name: np.asarray(values) for name, values in all_outs.items()}
        if kwargs and outs:
            pad = len(next(iter(outs.values()))) - len(next(iter(kwargs.values())))
            if pad:
                outs = {name: value[:-pad] for name, value in outs.items()}
        return outs

    def forward_backward_all(self, blobs=None, diffs=None, **kwargs):
        """forward_all and backward over batches; kwargs hold inputs and output diffs."""
        all_outs: dict[str, list] = {n: [] for n in set(self.outputs + list(blobs or []))}
        all_diffs: dict[str, list] = {n: [] for n in set(self.inputs + list(diffs or []))}
        forward_args = {k: v for k, v in kwargs.items() if k in self.inputs}
        backward_args = {k: v for k, v in kwargs.items() if k in self.outputs}
        for fb, bb in zip(self._batch(forward_args), self._batch(backward_args)):
            for name, value in self.forward(blobs=blobs, **fb).items():
                all_outs[name].extend(value.copy())
            for name, value in self.backward(diffs=diffs, **bb).items():
                all_diffs[name].extend(value.copy())
        outs = {n: np.asarray(v) for n, v in all_outs.items()}
        grads = {n: np.asarray(v) for n, v in all_diffs.items()}
        if forward_args and outs:
            pad = len(next(iter(outs.values()))) - len(next(iter(forward_args.values())))
            if pad:
                outs = {n: v[:-pad] for n, v in outs.items()}
                grads = {n: v[:-pad] for n, v in grads.items()}
        return outs, grads

    def _batch(self, blobs: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        """Cut keyword arrays into net-batch-sized pieces, zero-padding the last one."""
        if not blobs:
            return
        num = len(next(iter(blobs.values())))
        batch_size = self._blobs[0].shape[0]
        full, remainder = divmod(num, batch_size)
        for b in range(full):
            i = b * batch_size
            yield {name: value[i : i + batch_size] for name, value in blobs.items()}
        if remainder:
            padded = {}
            for name, value in blobs.items():
                padding = np.zeros((batch_size - remainder, *value.shape[1:]), dtype=value.dtype)
                padded[name] = np.concatenate([value[-remainder:], padding])
            yield padded

    # ----- MemoryData input -------------------------------------------------------------------
    def set_input_arrays(self, data: np.ndarray, labels: np.ndarray) -> None:
        """Feed arrays to the first layer, which must be MemoryData (labels 1-D allowed)."""
        if labels.ndim == 1:
            labels = np.ascontiguousarray(labels[:, np.newaxis, np.newaxis, np.newaxis])
        self._set_input_arrays(data, labels)

    def _set_input_arrays(self, data: np.ndarray, labels: np.ndarray) -> None:
        first = self.layers[0] if self.layers else None
        if first is None or first.type != "MemoryData":
            raise CaffeError("set_input_arrays may only be called if the first layer is MemoryData")
        for what, array in (("data", data), ("labels", labels)):
            if array.dtype != np.float32:
                raise CaffeError(f"{what} array must be float32, got {array.dtype}")
            if not array.flags["C_CONTIGUOUS"]:
                raise CaffeError(f"{what} array must be C contiguous")
            if array.ndim != 4:
                raise CaffeError(f"{what} array must be 4-D, got shape {array.shape}")
        if labels.shape[0] != data.shape[0]:
            raise CaffeError(f"data has {data.shape[0]} items but labels {labels.shape[0]}")
        first.reset(data, labels, data.shape[0])
