"""Which module may import which (docs/design.md §1), read from the sources:

- the client core (python/poseidon/sync/) and every front-end-neutral module of `poseidon`
  import no `caffe` and no torch.nn, and poseidon.torch imports no `caffe`: only the commands
  and experiments that work on Caffe nets may, and only when they run;
- `import poseidon.torch` (and the core) in a fresh interpreter loads no `caffe` module;
- no import circle between modules of `caffe` and `poseidon`, counting imports inside
  functions (they only hide a circle) and the package a submodule import runs first;
- no module imports another module's private name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"caffe": REPO / "caffe", "poseidon": REPO / "python" / "poseidon"}
EXTENSIONS = {"poseidon._C"}  # compiled: no source to read, imports nothing of ours
# The parts of `poseidon` that work on Caffe nets: they may import caffe (inside functions).
CAFFE_USERS = ("poseidon.commands", "poseidon.experiments")


@dataclass
class Module:
    name: str
    path: Path | None
    imports: dict[str, int] = field(default_factory=dict)  # module -> first line
    private: list[tuple[int, str]] = field(default_factory=list)  # (line, "module.name")


def module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_modules(packages: dict[str, Path] = PACKAGES) -> dict[str, Module]:
    modules = {name: Module(name, None) for name in EXTENSIONS}
    for package, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            name = module_name(package, root, path)
            modules[name] = Module(name, path)
    for module in modules.values():
        if module.path is not None:
            read_imports(module, modules)
    return modules


def known(name: str, modules: dict[str, Module]) -> str | None:
    """The longest prefix of `name` that is one of our modules."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(sub) for sub in ast.walk(node))
    return skipped


def read_imports(module: Module, modules: dict[str, Module]) -> None:
    assert module.path is not None
    tree = ast.parse(module.path.read_text(), str(module.path))
    skipped = type_checking_only(tree)
    is_package = module.path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[tuple[str, str | None]] = []  # (module imported, name taken from it)
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.name.split(".") if is_package else module.name.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                targets.append((submodule, None) if submodule in modules else (base, alias.name))
        for target, taken in targets:
            found = known(target, modules)
            if found is None:
                continue
            module.imports.setdefault(found, node.lineno)
            if taken and taken.startswith("_") and not taken.startswith("__"):
                module.private.append((node.lineno, f"{found}.{taken}"))


def import_edges(modules: dict[str, Module]) -> dict[str, set[str]]:
    """module -> the modules importing it runs: each one it names, and each package above a
    named module that does not contain the importer (importing a.b.c runs a/b/__init__ first;
    a module inside a.b is run by that package, not the other way round)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for target in module.imports:
            if target == module.name:
                continue
            edges[module.name].add(target)
            parts = target.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                inside = module.name == package or module.name.startswith(package + ".")
                if package in modules and not inside:
                    edges[module.name].add(package)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


MODULES = read_modules()


def in_package(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_client_core_and_poseidon_torch_import_no_caffe():
    offenders = []
    for module in MODULES.values():
        if not in_package(module.name, "poseidon") or module.name.startswith(CAFFE_USERS):
            continue
        offenders += [f"{module.path}:{line}: {target}"
                      for target, line in module.imports.items()
                      if in_package(target, "caffe")]  # fmt: skip
    assert not offenders, "modules of poseidon that import caffe:\n" + "\n".join(offenders)
    # The rule is not vacuous: the commands that work on Caffe nets do import it.
    assert any(m.name.startswith(CAFFE_USERS) for m in MODULES.values() for name in m.imports
               if in_package(name, "caffe"))  # fmt: skip


def test_the_client_core_imports_no_front_end():
    """poseidon/sync/ knows tensors, not models: no torch.nn, no front end of ours."""
    offenders = []
    for module in MODULES.values():
        if not in_package(module.name, "poseidon.sync"):
            continue
        tree = ast.parse(module.path.read_text())  # type: ignore[union-attr]
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            bad = [n for n in names
                   if in_package(n, "torch.nn") or in_package(n, "caffe")
                   or in_package(n, "poseidon.torch") or in_package(n, "poseidon.experiments")
                   or in_package(n, "poseidon.commands")]  # fmt: skip
            if bad:
                offenders.append(f"{module.path}:{node.lineno}: {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)
    assert len([m for m in MODULES if in_package(m, "poseidon.sync")]) > 5


@pytest.mark.parametrize("imported", ["poseidon.torch", "poseidon.sync.client",
                                      "poseidon.sync.allreduce", "poseidon.plan"])  # fmt: skip
def test_importing_the_core_loads_no_caffe(imported):
    code = (f"import sys, {imported}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'caffe'))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.strip()  # fmt: skip
    assert out == "[]", f"import {imported} loaded {out}"


def test_no_import_circles():
    found = circles(import_edges(MODULES))
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_module_imports_another_ones_private_name():
    found = [f"{m.path}:{line}: {name}" for m in MODULES.values() for line, name in m.private]
    assert not found, "\n".join(found)


# ----- the checks themselves -------------------------------------------------------------
def write(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"pkg": root / "pkg"}


def test_the_checks_find_a_circle_hidden_in_a_function_and_a_private_import(tmp_path):
    packages = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import helper\n",
        "pkg/b.py": "def helper():\n    from pkg.a import _secret\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.d\n",
        "pkg/d.py": "import pkg.c\n",
    })  # fmt: skip
    modules = read_modules(packages)
    assert circles(import_edges(modules)) == [["pkg.a", "pkg.b"]]  # c <-> d is typing only
    assert [name for m in modules.values() for _, name in m.private] == ["pkg.a._secret"]


def test_the_checks_find_a_circle_through_a_package_init(tmp_path):
    # base imports a helper of the package `rules`, whose __init__ imports a rule that
    # imports base: importing base first fails, which the flat graph alone would not show.
    packages = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/base.py": "from pkg.rules.helper import x\n",
        "pkg/rules/__init__.py": "from pkg.rules.sgd import SGD\n",
        "pkg/rules/helper.py": "x = 1\n",
        "pkg/rules/sgd.py": "from pkg.base import Base\n",
    })  # fmt: skip
    assert circles(import_edges(read_modules(packages))) == [
        ["pkg.base", "pkg.rules", "pkg.rules.sgd"]
    ]
