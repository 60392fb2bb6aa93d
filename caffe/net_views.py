"""Read-only views of a Net's structure, for what runs beside the engine and must not
depend on its internals: distributed syncers (caffe/training_hooks.py lists the whole
surface), the compute profiles and the replay of python/poseidon/experiments. Each view
is a tuple: reading it never lets a caller change the Net."""

from __future__ import annotations

from caffe.blob import Blob


class NetViewsMixin:
    _layer_names: list[str]
    _bottom_vecs: list[list[Blob]]
    _top_vecs: list[list[Blob]]
    _param_layer_indices: list[tuple[int, int]]
    _param_owners: list[int]
    _learnable_param_ids: list[int]
    _layer_need_backward: list[bool]
    _bottom_need_backward: list[list[bool]]
    _blobs: list[Blob]

    def memory_report(self) -> dict[str, int]:
        """Bytes of device memory the net's blobs hold now, each distinct memory once:
        "data" and "diff" of the blobs between layers (inputs and split tops included; a
        diff nothing has asked for is not allocated), "params" the learnable parameters'
        data and diff (the flat buffers). Reading it allocates nothing."""
        data: dict[int, int] = {}
        diff: dict[int, int] = {}
        for blob in self._blobs:
            for half, seen in zip(blob.memory(), (data, diff)):
                if half is not None:
                    seen[id(half)] = half.nbytes
        params = self.param_data.nbytes + self.param_diff.nbytes  # type: ignore[attr-defined]
        return {"data": sum(data.values()), "diff": sum(diff.values()), "params": params}

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(self._layer_names)

    @property
    def bottom_vecs(self) -> tuple[tuple[Blob, ...], ...]:
        """Per layer, its bottom blobs in order."""
        return tuple(tuple(blobs) for blobs in self._bottom_vecs)

    @property
    def top_vecs(self) -> tuple[tuple[Blob, ...], ...]:
        """Per layer, its top blobs in order."""
        return tuple(tuple(blobs) for blobs in self._top_vecs)

    @property
    def param_layer_indices(self) -> tuple[tuple[int, int], ...]:
        """Per net parameter: (layer index, blob index within the layer)."""
        return tuple(self._param_layer_indices)

    @property
    def param_owners(self) -> tuple[int, ...]:
        """Per net parameter: -1 when it owns its memory, else the net parameter it shares."""
        return tuple(self._param_owners)

    @property
    def learnable_param_ids(self) -> tuple[int, ...]:
        """Per net parameter: its index in learnable_params (a sharer: its owner's)."""
        return tuple(self._learnable_param_ids)

    @property
    def layer_need_backward(self) -> tuple[bool, ...]:
        return tuple(self._layer_need_backward)

    @property
    def bottom_need_backward(self) -> tuple[tuple[bool, ...], ...]:
        return tuple(tuple(needs) for needs in self._bottom_need_backward)
