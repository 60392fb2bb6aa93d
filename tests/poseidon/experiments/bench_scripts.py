"""Loading a bench/ script as a module for its tests (bench/ is not a package)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[3] / "bench"


def load_bench_script(name: str) -> ModuleType:
    """bench/NAME.py as the module NAME (registered, so its dataclasses find their module)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"no bench/{name}.py"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
