"""Solver types by their `type` string (SolverParameter.type), as Caffe's SolverRegistry.

A rule registers with one decorator line, `@register_solver("Adam")`; an unknown type
fails with the list of known ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from caffe.errors import SolverError
from caffe.proto import caffe_pb2
from caffe.solver import Solver

_REGISTRY: dict[str, type[Solver]] = {}
S = TypeVar("S", bound=type[Solver])


def register_solver(type_name: str) -> Callable[[S], S]:
    """Class decorator: make SolverParameter.type == `type_name` create this class."""

    def decorate(cls: S) -> S:
        if type_name in _REGISTRY:
            raise ValueError(f"solver type '{type_name}' registered twice")
        _REGISTRY[type_name] = cls
        cls.type_name = type_name
        return cls

    return decorate


def solver_type_list() -> list[str]:
    """Registered solver types, sorted (as Caffe's SolverRegistry lists them)."""
    return sorted(_REGISTRY)


def solver_class(type_name: str) -> type[Solver]:
    cls = _REGISTRY.get(type_name)
    if cls is None:
        raise SolverError(
            f"Unknown solver type: '{type_name}' (solver field type). "
            f"Known types: {', '.join(solver_type_list())}"
        )
    return cls


def get_solver(
    solver: str | os.PathLike | caffe_pb2.SolverParameter, *, mode: str | None = None
) -> Solver:
    """Build the solver that the file's (or message's) `type` names (pycaffe's get_solver)."""
    param = Solver._read_param(solver)
    return solver_class(param.type)(param, mode=mode)
