"""Classes by type name, as Caffe's LayerRegistry and SolverRegistry.

A class registers with one decorator line; an unknown name fails with the list of known
names. caffe/layer.py holds the layer types, caffe/solvers/registry.py the solver types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from caffe.errors import CaffeError

T = TypeVar("T", bound=type)
C = TypeVar("C", bound=type)


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[CaffeError]) -> None:
        self.kind = kind  # "layer", "solver": names the registry in messages
        self.error = error  # raised for an unknown name
        self._classes: dict[str, T] = {}

    def register(self, type_name: str) -> Callable[[C], C]:
        """Class decorator: `type_name` creates this class; sets cls.type_name."""

        def decorate(cls: C) -> C:
            if type_name in self._classes:
                raise ValueError(f"{self.kind} type '{type_name}' registered twice")
            self._classes[type_name] = cls
            cls.type_name = type_name
            return cls

        return decorate

    def names(self) -> list[str]:
        """Registered type names, sorted."""
        return sorted(self._classes)

    def lookup(self, type_name: str, where: str) -> T:
        """The class registered as `type_name`; unknown: `error` naming `where` and the known."""
        cls = self._classes.get(type_name)
        if cls is None:
            raise self.error(
                f"Unknown {self.kind} type: '{type_name}' ({where}). "
                f"Known types: {', '.join(self.names())}"
            )
        return cls
