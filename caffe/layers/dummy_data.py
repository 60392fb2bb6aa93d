"""DummyData: tops filled by fillers, for tests and benchmarks (dummy_data_param).

Shapes: `shape` once for all tops or once per top, or the legacy num/channels/height/width
lists (each once or once per top); not both. Fillers: none (constant 0), one for all tops, or
one per top. Caffe's refill rule: a top whose filler is constant is filled once, at setup, and
never touched again (so a caller may write into it); any other top is refilled every forward.
"""

from __future__ import annotations

from caffe.fillers import filler_values
from caffe.layer import Layer, register_layer
from caffe.proto import caffe_pb2

_LEGACY_AXES = ("num", "channels", "height", "width")


@register_layer("DummyData")
class DummyDataLayer(Layer):
    exact_num_bottom = 0
    min_top = 1

    def setup(self, bottom, top):
        param = self.layer_param.dummy_data_param
        shapes = self._shapes(param, len(top))
        fillers = list(param.data_filler)
        if len(fillers) not in (0, 1, len(top)):
            raise self.error(
                f"Number of data fillers must be 0, 1 or equal to the number of "
                f"tops: {len(top)}; you specified {len(fillers)}"
            )
        if not fillers:
            fillers = [caffe_pb2.FillerParameter(type="constant", value=0)]
        self.fillers = [fillers[i if len(fillers) > 1 else 0] for i in range(len(top))]
        self.refill = [filler.type != "constant" for filler in self.fillers]
        self.shapes = shapes
        for blob, shape, filler, refill in zip(top, shapes, self.fillers, self.refill):
            blob.reshape(shape)
            if not refill:
                blob.set_data(filler_values(filler, tuple(shape)).to(self.device))

    def _shapes(self, param: caffe_pb2.DummyDataParameter, num_top: int) -> list[list[int]]:
        legacy = [list(getattr(param, axis)) for axis in _LEGACY_AXES]
        has_legacy = any(legacy)
        if has_legacy and len(param.shape):
            raise self.error("Both shape and legacy fields were specified")
        if has_legacy:
            for axis, values in zip(_LEGACY_AXES, legacy):
                if len(values) not in (1, num_top):
                    raise self.error(
                        f"{axis} must be specified once, or once per top blob "
                        f"({len(values)} given for {num_top} tops)"
                    )
            return [
                [values[i if len(values) > 1 else 0] for values in legacy] for i in range(num_top)
            ]
        if len(param.shape) not in (1, num_top):
            raise self.error(
                f"Must specify 'shape' once, or once per top blob "
                f"({len(param.shape)} given for {num_top} tops)"
            )
        return [list(param.shape[i if len(param.shape) > 1 else 0].dim) for i in range(num_top)]

    def reshape(self, bottom, top):
        """Shapes are fixed at setup."""

    def forward(self, bottom, top):
        for blob, shape, filler, refill in zip(top, self.shapes, self.fillers, self.refill):
            if not refill:
                continue
            if blob.device.type == "cpu":  # drawn into the top: the same values, no temporary
                filler_values(filler, tuple(shape), out=blob.data_tensor)
            else:
                blob.set_data(filler_values(filler, tuple(shape)).to(self.device))
