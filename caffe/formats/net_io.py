"""Net weights in and out: .caffemodel (binary NetParameter), HDF5, and sharing with
another net (Caffe's ToProto, CopyTrainedLayersFrom, ShareTrainedLayersWith)."""

from __future__ import annotations

import logging
import os

import numpy as np
import torch

from caffe.errors import WeightsError
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")


def _shape_text(shape) -> str:
    return " ".join(str(d) for d in shape) + f" ({int(np.prod(shape)) if len(shape) else 1})"


class NetWeightsMixin:
    """Mixed into caffe.Net."""

    # ----- writing ---------------------------------------------------------------------------
    def layer_params_for_saving(self) -> list[caffe_pb2.LayerParameter]:
        """Each layer's LayerParameter as set up (phase, loss weights...), without blobs."""
        out = []
        for layer in self.layers:
            lp = caffe_pb2.LayerParameter()
            lp.CopyFrom(layer.layer_param)
            del lp.blobs[:]
            out.append(lp)
        return out

    def to_proto(self, write_diff: bool = False) -> caffe_pb2.NetParameter:
        """The whole net with current blob values (Caffe's Net::ToProto)."""
        param = caffe_pb2.NetParameter()
        param.name = self.name
        for layer, lp in zip(self.layers, self.layer_params_for_saving()):
            dst = param.layer.add()
            dst.CopyFrom(lp)
            for blob in layer.blobs:
                bp = dst.blobs.add()
                if blob.shape:  # a 0-axis blob has no shape message at all, as in Caffe
                    bp.shape.dim.extend(blob.shape)
                bp.data.extend(blob.data.reshape(-1).tolist())
                if write_diff:
                    bp.diff.extend(blob.diff.reshape(-1).tolist())
        return param

    def save(self, filename: str, write_diff: bool = False) -> None:
        """Write a binary .caffemodel (atomically: a crash never leaves half a file)."""
        from caffe.formats.weights_io import write_caffemodel

        blobs = [
            [(b.shape_tuple, b.data.reshape(-1), b.diff.reshape(-1) if write_diff else None)
             for b in layer.blobs]
            for layer in self.layers
        ]  # fmt: skip
        header = caffe_pb2.NetParameter(name=self.name)
        header.layer.extend(self.layer_params_for_saving())
        write_caffemodel(str(filename), header, blobs, write_diff=write_diff)

    def save_hdf5(self, filename: str, write_diff: bool = False) -> None:
        """Write HDF5 weights (groups data/<layer>/<i>, and diff/ with write_diff), atomically
        as save(): a failure (a full disk) raises WeightsError and leaves no file behind."""
        import h5py

        from caffe.formats.atomic_write import replacing

        with replacing(str(filename), WeightsError) as tmp, h5py.File(tmp, "x") as f:
            data = f.create_group("data")
            diff = f.create_group("diff") if write_diff else None
            for layer_id, layer in enumerate(self.layers):
                if not layer.blobs:
                    continue
                group = data.create_group(self._layer_names[layer_id])
                diff_group = diff.create_group(self._layer_names[layer_id]) if diff else None
                for param_id, blob in enumerate(layer.blobs):
                    net_id = self._net_param_id(layer_id, param_id)
                    if self._param_owners[net_id] >= 0:
                        continue  # shared: written once, by its owner
                    group.create_dataset(str(param_id), data=blob.data)
                    if diff_group is not None:
                        diff_group.create_dataset(str(param_id), data=blob.diff)

    def _net_param_id(self, layer_id: int, param_id: int) -> int:
        return self._param_layer_indices.index((layer_id, param_id))

    # ----- reading -------------------------------------------------------------------------
    def copy_from(self, filename: str) -> None:
        """Load weights by layer name from a .caffemodel or HDF5 file; other layers are ignored."""
        from caffe.formats.weights_io import is_hdf5

        if not os.path.exists(filename):
            raise WeightsError(f"Could not open file {filename}")
        if is_hdf5(filename):
            copied = self.load_hdf5(filename)
        else:
            copied = self._copy_from_caffemodel(filename)
        self._report_layers_without_weights(filename, copied)

    def _report_layers_without_weights(self, filename: str, copied: set[str]) -> None:
        """BVLC is silent when a learnable layer finds nothing to copy (a file cut short at a
        layer boundary, a renamed layer): the net then trains or tests on its initial
        weights. We say so, one line per layer, so that a fine-tuning's intended fresh layers
        are listed and an incomplete file is noticed."""
        for layer_id, layer in enumerate(self.layers):
            name = self._layer_names[layer_id]
            if not layer.blobs or name in copied:
                continue
            owned = [
                self._param_owners[self._net_param_id(layer_id, j)] < 0
                for j in range(len(layer.blobs))
            ]
            if any(owned):  # a layer whose every blob is shared gets its owner's weights
                _log.warning(
                    "Layer '%s' (%s) got no weights from %s: it keeps its initial values",
                    name, layer.type, filename,
                )  # fmt: skip

    def _copy_from_caffemodel(self, filename: str) -> set[str]:
        from caffe.formats.weights_io import read_caffemodel, shape_equals

        weights = read_caffemodel(filename)
        if not weights.layers:
            raise WeightsError(
                f"{filename}: no layers in this weights file (empty, or cut short before its "
                "first layer); nothing was loaded"
            )
        copied = set()
        for source in weights.layers:
            if not self.has_layer(source.name):
                _log.info("Ignoring source layer %s", source.name)
                continue
            _log.info("Copying source layer %s", source.name)
            target = self.layer_by_name(source.name)
            if len(source.blobs) != len(target.blobs):
                raise WeightsError(
                    f"{filename}: incompatible number of blobs for layer {source.name}: the file "
                    f"has {len(source.blobs)}, the net expects {len(target.blobs)}"
                )
            for j, (src, dst) in enumerate(zip(source.blobs, target.blobs)):
                if not shape_equals(src, dst.shape_tuple):
                    raise WeightsError(
                        f"{filename}: cannot copy param {j} weights from layer '{source.name}'; "
                        f"shape mismatch. Source param shape is {_shape_text(src.shape)}; target "
                        f"param shape is {_shape_text(dst.shape_tuple)}. To learn this layer's "
                        "parameters from scratch rather than copying from a saved net, rename "
                        "the layer."
                    )
                values = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
                dst.data_tensor.copy_(values.view(dst.shape_tuple))
            copied.add(source.name)
        return copied

    def load_hdf5(self, filename: str) -> set[str]:
        """Copy same-named layers' weights; returns the names of the layers copied."""
        import h5py

        copied = set()
        with h5py.File(filename, "r") as f:
            if "data" not in f:
                raise WeightsError(f"{filename}: no /data group; not a Caffe HDF5 weights file")
            data = f["data"]
            if not len(data):
                raise WeightsError(f"{filename}: no layers in /data; nothing was loaded")
            for name in data:
                if not self.has_layer(name):
                    _log.info("Ignoring source layer %s", name)
                    continue
                layer_id = self.layer_index(name)
                target = self.layers[layer_id]
                group = data[name]
                if len(group) > len(target.blobs):
                    raise WeightsError(f"{filename}: incompatible number of blobs for layer {name}")
                for param_id, blob in enumerate(target.blobs):
                    key = str(param_id)
                    if key not in group:
                        if self._param_owners[self._net_param_id(layer_id, param_id)] >= 0:
                            continue  # a shared param is stored under its owner
                        raise WeightsError(f"{filename}: missing dataset /data/{name}/{key}")
                    values = np.asarray(group[key], dtype=np.float32)
                    if tuple(values.shape) != blob.shape_tuple:
                        raise WeightsError(
                            f"{filename}: cannot copy param {param_id} weights from layer "
                            f"'{name}'; shape mismatch. Source param shape is "
                            f"{_shape_text(values.shape)}; target param shape is "
                            f"{_shape_text(blob.shape_tuple)}."
                        )
                    blob.data_tensor.copy_(torch.from_numpy(values))
                copied.add(name)
        return copied

    def share_with(self, other) -> None:
        """Alias the data (not diff) of same-named layers' blobs with `other` (test nets)."""
        for layer_id, name in enumerate(self._layer_names):
            if not other.has_layer(name):
                continue
            source = other.layer_by_name(name)
            target = self.layers[layer_id]
            if len(source.blobs) != len(target.blobs):
                raise WeightsError(f"incompatible number of blobs for layer {name}")
            for j, (src, dst) in enumerate(zip(source.blobs, target.blobs)):
                if src.shape != dst.shape:
                    raise WeightsError(
                        f"cannot share param {j} weights from layer '{name}'; shape mismatch. "
                        f"Source param shape is {src.shape_string()}; target param shape is "
                        f"{dst.shape_string()}"
                    )
                dst.share_data(src)

    share_trained_layers_with = share_with
