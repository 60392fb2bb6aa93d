"""time_layers: the per-layer loop of `caffe time`, one record per iteration."""

from __future__ import annotations

import caffe
from caffe.formats.proto_io import parse_net_text
from caffe.tools.layer_timing import time_layers

NET = """
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 6 } shape { dim: 4 }
                           data_filler { type: "gaussian" } data_filler { type: "constant" } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_every_layer_every_iteration():
    param = parse_net_text(NET)
    param.state.phase = caffe.TRAIN
    net = caffe.Net(param)
    seen = []
    timed = time_layers(net, 3, lambda k, times: seen.append((k, times)))
    assert [k for k, _ in seen] == [1, 2, 3]
    assert [times for _, times in seen] == timed
    for times in timed:
        assert len(times.forward_s) == len(times.backward_s) == 3
        assert all(t > 0 for t in times.forward_s + times.backward_s)
        # The passes hold their layers, and the iteration both passes.
        assert times.forward_total_s >= sum(times.forward_s)
        assert times.backward_total_s >= sum(times.backward_s)
        assert times.iteration_s >= times.forward_total_s + times.backward_total_s
    # The loop really ran backward: the weight gradient accumulated.
    assert abs(net.params["ip"][0].diff).sum() > 0
