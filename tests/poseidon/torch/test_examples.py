"""The examples of poseidon.torch run as they say: the fifteen-line one of README.md and
docs/pytorch.md (the same on both pages), and examples/pytorch/ (two workers under
`poseidon launch`, a few steps each)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

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
    output = launch(str(script))
    assert "SFB" in output  # rank 0 printed its plan


def launch(*command: str) -> str:
    """`poseidon launch -n 2 -- python COMMAND`: its output (it must succeed)."""
    done = subprocess.run([sys.executable, "-m", "poseidon.cli", "launch", "-n", "2", "--",
                           sys.executable, *command], cwd=REPO, env=env_for(),
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    "script, arguments, expected",
    [
        (
            "mlp_digits.py",
            ["--epochs", "1", "--batch", "100"],
            r"epoch 1: loss [0-9.]+, test accuracy",
        ),
        ("transformer_lm.py", ["--steps", "3"], r"step 2: loss [0-9.]+ \(log V"),
    ],
)
def test_the_examples_run_on_two_workers(script, arguments, expected):
    output = launch(str(REPO / "examples" / "pytorch" / script), *arguments)
    assert re.search(expected, output), output[-3000:]
