"""The docs show the cost model's formulas as the code states them (docs/design.md §6, rule 12).

`poseidon/include/poseidon/cost_model.h` states next to each CommCost field the formula that
`comm_cost` computes (poseidon/tests/test_cost_model.cc checks the numbers). Each of those
formulas, and BestScheme's inequality between the SFB and colocated PS costs, must appear as
written in docs/paper.md §4 and docs/communication.md §5; and the time model's table
(Note [time model]: wire bytes, flops and memory bytes per scheme, and where each scheme's
compute falls) must appear in docs/communication.md §5 too. Reads files only.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "poseidon" / "include" / "poseidon" / "cost_model.h"
FIELD = re.compile(r"double (\w+_floats) = 0;\s*// [^:]*: (\S+)")


def header_formulas() -> dict[str, str]:
    formulas = dict(FIELD.findall(HEADER.read_text(encoding="utf-8")))
    assert set(formulas) == {*PAPER, *LOCAL}, formulas
    return formulas


# The paper's four (docs/paper.md §4), and the local stage of several workers per machine
# (Note [local aggregation], docs/communication.md §5 only).
PAPER = ("ps_worker_floats", "ps_server_floats", "ps_colocated_floats", "sfb_floats")
LOCAL = ("ps_local_floats", "sfb_local_floats")


def section(relative: str, number: str) -> str:
    """The text of section `number` (a `## N.` heading) of a Markdown file."""
    text = (REPO / relative).read_text(encoding="utf-8")
    start = re.search(rf"^## {re.escape(number)}\. .*$", text, re.MULTILINE)
    assert start, f"{relative} has no section {number}"
    end = re.compile(r"^## ", re.MULTILINE).search(text, start.end())
    return text[start.end() : end.start() if end else len(text)]


def test_the_docs_show_the_headers_formulas():
    formulas = header_formulas()
    best_scheme = f"{formulas['sfb_floats']} ≤ {formulas['ps_colocated_floats']}"
    for relative, number in [("docs/paper.md", "4"), ("docs/communication.md", "5")]:
        text = section(relative, number)
        for name in PAPER + (LOCAL if relative == "docs/communication.md" else ()):
            formula = formulas[name]
            assert formula in text, f"{relative} section {number} lacks {name} = {formula}"
        assert best_scheme in text, f"{relative} section {number} lacks {best_scheme}"
    assert best_scheme in section("docs/design.md", "3")


TIME_ROW = re.compile(r"^//   (PS|BF16|SFB|PowerSGD)  +(.+)$", re.MULTILINE)


def test_the_docs_show_the_time_model():
    rows = [(name, re.split(r"  +", rest.strip())) for name, rest in
            TIME_ROW.findall(HEADER.read_text(encoding="utf-8"))]  # fmt: skip
    # Two tables: the amounts (4 rows), and where each scheme's compute falls (PS has none).
    assert sorted(name for name, _ in rows) == sorted(
        ["PS", "BF16", "SFB", "PowerSGD", "BF16", "SFB", "PowerSGD"]
    ), rows
    text = section("docs/communication.md", "5")
    for name, cells in rows:
        assert len(cells) == 3, (name, cells)
        lines = [ln for ln in text.splitlines() if ln.startswith(f"| {name} |")]
        assert any(all(f in ln for f in cells) for ln in lines), (
            f"docs/communication.md §5 has no {name} row with {cells}"
        )
