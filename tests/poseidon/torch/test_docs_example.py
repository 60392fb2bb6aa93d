"""The fifteen-line example of README.md and docs/pytorch.md: the same in both, and it runs
(two workers under `poseidon launch`, two steps instead of a hundred)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.poseidon.torch.jobs import REPO, env_for


def example(page: str) -> str:
    text = (REPO / page).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    found = [b for b in blocks if "poseidon.torch.DistributedDataParallel" in b]
    assert len(found) == 1, f"{page}: {len(found)} examples"
    return found[0]


def test_the_example_is_the_same_on_both_pages_and_runs(tmp_path):
    code = example("README.md")
    assert code == example("docs/pytorch.md")
    assert len(code.strip().splitlines()) <= 15
    script = tmp_path / "train.py"
    script.write_text(code.replace("range(100)", "range(2)"))
    command = [sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "--",
               sys.executable, str(script)]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env_for(), capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SFB" in done.stdout + done.stderr  # rank 0 printed its plan
