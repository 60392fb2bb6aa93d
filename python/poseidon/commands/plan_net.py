"""The net `poseidon plan` plans for: the job's train net, built for its shapes alone.

The net comes from the solver the job trains (`--solver`: its train net, with the TRAIN
state merged as caffe/solvers/nets.py merges it for the job, and its iter_size) or from a net
prototxt (`--model`: what a solver saying `net: "<model>"` trains). A plan needs shapes
only, so the net is built shapes-only (Note [shapes only] in caffe/common.py): no weights
allocated or filled, no data read beyond a database's first record. Data layers whose data
is not here get their shapes from `--input-shape` (the layer becomes an Input layer of that
shape) or, for a Data layer, from batch_size and crop_size; `--batch` sets every data
layer's batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# Where each data layer type keeps its batch size (caffe.proto), for --batch.
BATCH_SIZE_FIELDS = {
    "Data": "data_param",
    "ImageData": "image_data_param",
    "WindowData": "window_data_param",
    "HDF5Data": "hdf5_data_param",
    "MemoryData": "memory_data_param",
}


@dataclass(frozen=True)
class PlanNet:
    net: Any  # a shapes-only caffe.Net of the job's train net
    iter_size: int  # the solver's (1 for --model without --iter-size)


def parse_input_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """['data=32,3,224,224', 'label=32'] -> {'data': (32, 3, 224, 224), 'label': (32,)}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        top, _, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not top.strip() or not shape or min(shape) < 1:
            raise ValueError(f"--input-shape {item!r}: want TOP=N,C,H,W (positive integers), "
                             "e.g. data=32,3,224,224")  # fmt: skip
        shapes[top.strip()] = shape
    return shapes


def job_net_param(model: str | None = None, solver: str | None = None) -> tuple[Any, int]:
    """The job's train NetParameter (TRAIN state merged) and the solver's iter_size; `model`
    replaces the solver's net."""
    from caffe.formats.proto_io import read_solver_param
    from caffe.proto import caffe_pb2
    from caffe.solvers.nets import train_net_param

    param = read_solver_param(solver) if solver else caffe_pb2.SolverParameter()
    if model:
        for field in ("net", "net_param", "train_net", "train_net_param"):
            param.ClearField(field)
        param.net = model
    return train_net_param(param), max(1, int(param.iter_size))


def give_input_shapes(net_param: Any, shapes: Mapping[str, Sequence[int]]) -> None:
    """Replace each data layer (no bottoms) with a top named in `shapes` by an Input layer of
    those shapes; its other tops (labels) are N, the first given shape's batch."""
    left = dict(shapes)
    data_tops = []
    for layer in net_param.layer:
        if layer.bottom:
            continue
        data_tops += list(layer.top)
        given = [tuple(shapes[t]) for t in layer.top if t in shapes]
        if not given:
            continue
        kept = type(layer)(name=layer.name, type="Input", top=layer.top,
                           include=layer.include, exclude=layer.exclude)  # fmt: skip
        for top in layer.top:
            kept.input_param.shape.add().dim.extend(shapes.get(top, given[0][:1]))
            left.pop(top, None)
        layer.CopyFrom(kept)
    if left:
        raise ValueError(f"--input-shape names {', '.join(sorted(left))}: not a top of a data "
                         f"layer (those are {', '.join(data_tops) or 'none'})")  # fmt: skip


def give_batch_size(net_param: Any, batch: int, given: Collection[str] = ()) -> None:
    """Set the batch size of every data layer (axis 0 of Input and DummyData shapes) but
    those with a top in `given` (shapes given in full)."""
    for layer in net_param.layer:
        if layer.bottom or any(top in given for top in layer.top):
            continue
        if layer.type in BATCH_SIZE_FIELDS:
            getattr(layer, BATCH_SIZE_FIELDS[layer.type]).batch_size = batch
            continue
        if layer.type not in ("Input", "DummyData"):
            raise ValueError(f"--batch: layer '{layer.name}' (type {layer.type}) has no batch "
                             "size to set; give its tops' shapes with --input-shape")  # fmt: skip
        param = layer.input_param if layer.type == "Input" else layer.dummy_data_param
        for shape in param.shape:
            if shape.dim:
                shape.dim[0] = batch
        if layer.type == "DummyData":
            param.num[:] = [batch] * len(param.num)


@contextmanager
def _quiet_engine() -> Iterator[None]:
    # Building a net logs every layer at INFO; the plan is the output here.
    engine_log = logging.getLogger("caffe")
    level = engine_log.level
    engine_log.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        engine_log.setLevel(level)


def plan_net(
    model: str | None = None,
    solver: str | None = None,
    batch: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    iter_size: int | None = None,
) -> PlanNet:
    """The job's train net, shapes-only, and its iter_size (`iter_size` overrides)."""
    import caffe
    from caffe.net_filter import filter_net

    with _quiet_engine():
        param, solver_iter_size = job_net_param(model, solver)
        # Only the layers the train net keeps: those are the ones given shapes and batches.
        param = filter_net(param, param.state)
        if batch is not None:
            give_batch_size(param, batch, given=input_shapes or {})
        if input_shapes:
            give_input_shapes(param, input_shapes)
        net = caffe.Net(param, shapes_only=True)
    return PlanNet(net, iter_size if iter_size is not None else solver_iter_size)
