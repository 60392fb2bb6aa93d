"""Class labels stored in float blobs, as Caffe stores them: conversion to indices and the
range check that turns a bad label into an error naming the layer (not an index error
deep inside torch)."""

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
    bad = (index < 0) | (index >= num_classes)
    if bool(bad.any()):
        raise layer.error(f"label {int(index[bad][0])} outside [0, {num_classes}) for "
                          f"{num_classes} classes")  # fmt: skip
    return index, valid
