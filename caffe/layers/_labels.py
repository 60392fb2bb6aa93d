"""Class labels stored in float blobs, as Caffe stores them: conversion to indices and the
range check that turns a bad label into an error naming the layer (not an index error
deep inside torch).

`class_indices` checks the range up front (one host sync); `gather_labels` is the fast form
of "check, then pick each position's value at its label": on CPU gather checks the range
itself and a failure is turned into the same error, so a good batch costs no extra pass or
sync; on CUDA an out-of-range gather is a device-side assert that poisons the context, so
there the labels are checked first."""

from __future__ import annotations

import torch

from caffe.layer import Layer


def class_indices(
    layer: Layer, labels: torch.Tensor, num_classes: int, ignore_label: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(int64 indices, mask of non-ignored positions or None without ignore_label).

    Values truncate toward zero like Caffe's static_cast<int>; ignored positions read as
    class 0 so that they can index safely, and the mask removes their contribution.
    """
    index = labels.long()
    valid = None
    if ignore_label is not None:
        valid = index != ignore_label
        index = torch.where(valid, index, torch.zeros_like(index))
    check_label_range(layer, index, num_classes)
    return index, valid


def operand_shapes(outer: int, classes: int, inner: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes a class-score layer computes with: scores (outer, classes, inner) and labels
    (outer, inner), or - when inner is 1, the common (N, C) case, where the blobs mostly have
    these shapes already and need no view - (outer, classes) and (outer,)."""
    if inner == 1:
        return (outer, classes), (outer,)
    return (outer, classes, inner), (outer, inner)


def check_label_range(layer: Layer, index: torch.Tensor, num_classes: int) -> None:
    """Raise the layer's error naming the first label outside [0, num_classes)."""
    bad = (index < 0) | (index >= num_classes)
    if bool(bad.any()):
        raise layer.error(f"label {int(index[bad][0])} outside [0, {num_classes}) for "
                          f"{num_classes} classes")  # fmt: skip


def gather_labels(
    layer: Layer, values: torch.Tensor, index: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """values (outer, num_classes[, inner]) at index (outer[, inner]): (outer, 1[, inner])."""
    if values.device.type != "cpu":
        check_label_range(layer, index, num_classes)
    try:
        return values.gather(1, index.unsqueeze(1))
    except RuntimeError:
        check_label_range(layer, index, num_classes)
        raise
