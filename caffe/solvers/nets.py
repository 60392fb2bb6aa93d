"""The nets a solver trains and tests, built from its SolverParameter (docs/caffe_format.md §4.1).

Train net: exactly one of train_net_param, train_net, net_param, net; its NetState is
{phase: TRAIN} merged with the net's own `state`, then with `train_state`.
Test nets: every test_net_param, then every test_net file, then (given net/net_param)
copies of the generic net for the remaining test_iter entries; net i gets
{phase: TEST} ⊕ its own state ⊕ test_state[i]. File paths are used as written, i.e.
relative to the current directory, as Caffe does. Merging follows protobuf MergeFrom:
phase and level are replaced when set, stages are appended.
"""

from __future__ import annotations

import logging

from caffe.common import root_solver
from caffe.errors import SolverError
from caffe.formats.proto_io import read_net_param
from caffe.net import Net
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")
_TRAIN_FIELDS = "net, net_param, train_net, train_net_param"


def _info(message: str, *args: object) -> None:
    if root_solver():
        _log.info(message, *args)


def _with_state(
    net_param: caffe_pb2.NetParameter, phase: int, extra: caffe_pb2.NetState | None
) -> caffe_pb2.NetParameter:
    state = caffe_pb2.NetState(phase=phase)
    state.MergeFrom(net_param.state)
    if extra is not None:
        state.MergeFrom(extra)
    net_param.state.CopyFrom(state)
    return net_param


def load_weights(net: Net, weights: list[str]) -> None:
    """Copy every file of the solver's `weights` (each entry may be a comma list) into net."""
    for entry in weights:
        for path in entry.split(","):
            if path:
                _info("Finetuning from %s", path)
                net.copy_from(path)


def require_train_net(param: caffe_pb2.SolverParameter, source: str | None = None) -> None:
    """SolverError unless the solver names a train net; the message names `source` (the
    solver file) and says when it is empty, which otherwise fails on its lr_policy ''."""
    if any(param.HasField(f) for f in ("train_net_param", "train_net", "net_param", "net")):
        return
    # Reading a file fills in snapshot_prefix (Caffe's rule), so that one does not count.
    empty = all(field.name == "snapshot_prefix" for field, _ in param.ListFields())
    if source is None:
        lead = "The solver"
    else:
        lead = f"{source}: the solver file is empty; it" if empty else f"{source}: the solver"
    raise SolverError(f"{lead} names no net to train (set one of: {_TRAIN_FIELDS})")


def train_net_param(param: caffe_pb2.SolverParameter) -> caffe_pb2.NetParameter:
    """The train net's NetParameter with its merged TRAIN state."""
    given = [f for f in ("train_net_param", "train_net", "net_param", "net") if param.HasField(f)]
    if not given:
        raise SolverError(
            f"SolverParameter must specify a train net using one of these fields: {_TRAIN_FIELDS}"
        )
    if len(given) > 1:
        raise SolverError(
            "SolverParameter must not contain more than one of these fields specifying a "
            f"train_net: {_TRAIN_FIELDS} (given: {', '.join(given)})"
        )
    field = given[0]
    if field in ("train_net_param", "net_param"):
        _info("Creating training net specified in %s.", field)
        net_param = caffe_pb2.NetParameter()
        net_param.CopyFrom(getattr(param, field))
    else:
        path = getattr(param, field)
        _info("Creating training net from %s file: %s", field, path)
        net_param = read_net_param(path)
    return _with_state(net_param, caffe_pb2.TRAIN, param.train_state)


def build_train_net(param: caffe_pb2.SolverParameter) -> Net:
    net = Net(train_net_param(param))
    load_weights(net, list(param.weights))
    return net


def params_of_test_nets(
    param: caffe_pb2.SolverParameter,
) -> list[tuple[str, caffe_pb2.NetParameter]]:
    """(source description, NetParameter with merged TEST state) for every test net."""
    has_net_param, has_net = param.HasField("net_param"), param.HasField("net")
    if has_net_param and has_net:
        raise SolverError("Both net_param and net may not be specified.")
    num_specific = len(param.test_net_param) + len(param.test_net)
    num_test_iter = len(param.test_iter)
    if (has_net_param or has_net) and num_test_iter < num_specific:
        raise SolverError(
            f"test_iter must be specified for each test network ({num_test_iter} test_iter for "
            f"{num_specific} test_net/test_net_param)"
        )
    if not (has_net_param or has_net) and num_test_iter != num_specific:
        raise SolverError(
            f"test_iter must be specified for each test network ({num_test_iter} test_iter for "
            f"{num_specific} test_net/test_net_param)"
        )
    sources: list[tuple[str, caffe_pb2.NetParameter]] = []
    for net_param in param.test_net_param:
        copy = caffe_pb2.NetParameter()
        copy.CopyFrom(net_param)
        sources.append(("test_net_param", copy))
    for path in param.test_net:
        sources.append((f"test_net file: {path}", read_net_param(path)))
    for _ in range(num_test_iter - num_specific):
        if has_net_param:
            copy = caffe_pb2.NetParameter()
            copy.CopyFrom(param.net_param)
            sources.append(("net_param", copy))
        else:
            sources.append((f"net file: {param.net}", read_net_param(param.net)))
    if len(param.test_state) and len(param.test_state) != len(sources):
        raise SolverError(
            f"test_state must be unspecified or specified once per test net ({len(sources)} "
            f"test nets, {len(param.test_state)} test_state)"
        )
    if sources and param.test_interval <= 0:
        raise SolverError(
            f"test_interval must be > 0 when the solver has test nets (got {param.test_interval})"
        )
    states = list(param.test_state) or [None] * len(sources)
    return [
        (source, _with_state(net_param, caffe_pb2.TEST, state))
        for (source, net_param), state in zip(sources, states)
    ]


def build_test_nets(param: caffe_pb2.SolverParameter) -> list[Net]:
    nets = []
    for i, (source, net_param) in enumerate(params_of_test_nets(param)):
        _info("Creating test net (#%d) specified by %s", i, source)
        net = Net(net_param)
        net.debug_info = param.debug_info
        load_weights(net, list(param.weights))
        nets.append(net)
    return nets
