"""The published times behind the derived GPU profiles are rows of docs/published_times.md §1.

profile_derive.py quotes, in each PUBLISHED_TIMES entry's `source`, the table row it took its
time from, and every derived profile in models/profiles/ carries that quote in
`derivation.source`. Both must be rows of the table, character for character, so that a
reader can find where each number came from. The sources are read from the files (the module
is parsed, not imported), so this needs no build.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROFILE_DERIVE = REPO / "python" / "poseidon" / "experiments" / "profile_derive.py"
TABLE_DOC = REPO / "docs" / "published_times.md"
CITATION = "docs/published_times.md \u00a71"
NO_TIME = "no published time; the rate of "


def table_rows() -> set[str]:
    """The lines of section 1 (and 1b, today's GPUs) of docs/published_times.md that are table
    rows."""
    rows, inside = set(), False
    for line in TABLE_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            inside = line.startswith(("## 1.", "## 1b."))
        elif inside and line.startswith("|"):
            rows.add(line)
    return rows


def quoted_rows(source: str) -> list[str]:
    """The table rows one `source` quotes: one, or several joined by ' + '."""
    return source.removeprefix(NO_TIME).split(" + ")


def string_of(node: ast.expr, constants: dict[str, str]) -> str:
    """A source expression: string literals, module-level string constants and `+`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return string_of(node.left, constants) + string_of(node.right, constants)
    if isinstance(node, ast.Name):
        return constants[node.id]
    return ast.literal_eval(node)


def profile_derive_constants() -> tuple[str, dict[str, str]]:
    """EXPERIMENTS_MD and each PUBLISHED_TIMES entry's `source`, from profile_derive.py."""
    tree = ast.parse(PROFILE_DERIVE.read_text(encoding="utf-8"))
    citation, sources, constants = None, {}, {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = getattr(target, "id", None)
        if name == "EXPERIMENTS_MD":
            citation = ast.literal_eval(node.value)
        elif name == "PUBLISHED_TIMES":
            for key, call in zip(node.value.keys, node.value.values, strict=True):
                source = next(k.value for k in call.keywords if k.arg == "source")
                sources["/".join(ast.literal_eval(key))] = string_of(source, constants)
        elif name is not None and isinstance(node, ast.Assign):
            try:
                value = string_of(node.value, constants)
            except (ValueError, KeyError, TypeError):
                continue  # not a string constant
            if isinstance(value, str):
                constants[name] = value
    assert citation is not None and sources, "profile_derive.py changed shape"
    return citation, sources


def test_profile_derive_quotes_rows_of_the_table():
    citation, sources = profile_derive_constants()
    assert citation == CITATION
    rows = table_rows()
    for entry, source in sources.items():
        for row in quoted_rows(source):
            assert row in rows, f"{entry}: {row!r} is not a row of {CITATION}"


def test_shipped_profiles_quote_rows_of_the_table():
    _, sources = profile_derive_constants()
    rows = table_rows()
    derived = [
        path
        for path in sorted((REPO / "models" / "profiles").glob("*.json"))
        if json.loads(path.read_text(encoding="utf-8")).get("method") == "derived"
    ]
    assert derived
    for path in derived:
        source = json.loads(path.read_text(encoding="utf-8"))["derivation"]["source"]
        assert source.startswith(CITATION + ": "), path.name
        quote = source.removeprefix(CITATION + ": ")
        assert quote in sources.values(), f"{path.name}: no PUBLISHED_TIMES entry quotes this"
        for row in quoted_rows(quote):
            assert row in rows, f"{path.name}: {row!r} is not a row of {CITATION}"
