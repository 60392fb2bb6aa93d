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
from caffe.registry import Registry
from caffe.solvers.nets import require_train_net
from caffe.solvers.solver import Solver

_REGISTRY: Registry[type[Solver]] = Registry("solver", SolverError)
S = TypeVar("S", bound=type[Solver])


def register_solver(type_name: str) -> Callable[[S], S]:
    """Class decorator: make SolverParameter.type == `type_name` create this class."""
    return _REGISTRY.register(type_name)


def solver_type_list() -> list[str]:
    """Registered solver types, sorted (as Caffe's SolverRegistry lists them)."""
    return _REGISTRY.names()


def solver_class(type_name: str) -> type[Solver]:
    return _REGISTRY.lookup(type_name, "solver field type")


def get_solver(
    solver: str | os.PathLike | caffe_pb2.SolverParameter, *, mode: str | None = None
) -> Solver:
    """Build the solver that the file's (or message's) `type` names (pycaffe's get_solver)."""
    param = Solver._read_param(solver)
    if not isinstance(solver, caffe_pb2.SolverParameter):
        require_train_net(param, os.fspath(solver))  # the file's name is known only here
    return solver_class(param.type)(param, mode=mode)
