"""Tile: repeat the bottom `tiles` times along `axis` (the whole block from axis on is
repeated, so shape[axis] grows by the factor tiles)."""

from __future__ import annotations

import math

from caffe.layer import Layer, register_layer


@register_layer("Tile")
class TileLayer(Layer):
    exact_num_bottom = 1
    exact_num_top = 1

    def setup(self, bottom, top):
        p = self.layer_param.tile_param
        if p.tiles <= 0:
            raise self.error(f"Number of tiles must be positive (tile_param.tiles {p.tiles}).")
        self.tiles = p.tiles

    def reshape(self, bottom, top):
        shape = bottom[0].shape
        try:
            self.axis = bottom[0].canonical_axis(self.layer_param.tile_param.axis)
        except ValueError as exc:
            raise self.error(f"tile_param.axis: {exc}") from None
        self.outer = math.prod(shape[: self.axis])
        self.inner = math.prod(shape[self.axis :])
        top_shape = list(shape)
        top_shape[self.axis] *= self.tiles
        top[0].reshape(top_shape)

    def forward(self, bottom, top):
        block = bottom[0].data_tensor.reshape(self.outer, 1, self.inner)
        tiled = block.expand(self.outer, self.tiles, self.inner)
        top[0].set_data(tiled.reshape(top[0].shape_tuple))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dy = top[0].diff_tensor.reshape(self.outer, self.tiles, self.inner)
            bottom[0].set_diff(dy.sum(dim=1).view(bottom[0].shape_tuple))
