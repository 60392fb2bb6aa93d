"""Which layers a NetState includes (docs/caffe_format.md §2 step 1: phase, level, stage rules)."""

from __future__ import annotations

from caffe.errors import NetError
from caffe.proto import caffe_pb2


def state_meets_rule(state: caffe_pb2.NetState, rule: caffe_pb2.NetStateRule) -> bool:
    """A rule is met iff every condition it sets holds for the state."""
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    stages = set(state.stage)
    if any(s not in stages for s in rule.stage):
        return False
    return not any(s in stages for s in rule.not_stage)


def filter_net(param: caffe_pb2.NetParameter, state: caffe_pb2.NetState) -> caffe_pb2.NetParameter:
    """A copy of `param` holding only the layers that `state` includes."""
    filtered = caffe_pb2.NetParameter()
    filtered.CopyFrom(param)
    del filtered.layer[:]
    for layer in param.layer:
        if layer.include and layer.exclude:
            raise NetError(
                f"Layer '{layer.name}' specifies both include and exclude rules; "
                "specify one or the other"
            )
        if layer.include:
            keep = any(state_meets_rule(state, r) for r in layer.include)
        else:
            keep = not any(state_meets_rule(state, r) for r in layer.exclude)
        if keep:
            filtered.layer.add().CopyFrom(layer)
    return filtered
