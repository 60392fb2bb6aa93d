"""One emulation per prefix at a time: a second would tear down the first's namespaces as
leftovers of a crashed run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from poseidon.experiments.emulation import EmulationError, hold_prefix_lock


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path):
    fd = hold_prefix_lock("tst", str(tmp_path))
    try:
        with pytest.raises(EmulationError, match=rf"another emulation \(pid {os.getpid()}\)"):
            hold_prefix_lock("tst", str(tmp_path))
        hold_prefix_lock("other", str(tmp_path))  # another prefix is another set of hosts
    finally:
        os.close(fd)
    os.close(hold_prefix_lock("tst", str(tmp_path)))  # released with its file


def test_the_lock_dies_with_its_process(tmp_path):
    # A killed emulation leaves namespaces but no lock: the next one may clean up after it.
    code = (
        "import os, sys\n"
        "from poseidon.experiments.emulation import hold_prefix_lock\n"
        f"hold_prefix_lock('tst', {str(tmp_path)!r})\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    os.close(hold_prefix_lock("tst", str(tmp_path)))
