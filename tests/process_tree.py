"""Processes of a job as the tests see them, from /proc: a launcher's whole tree, and
whether any of it is still alive."""

from __future__ import annotations

import os
import time


def _parents() -> dict[int, int]:
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """Every process below `pid` now (children, grandchildren, ...)."""
    parents = _parents()
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    """Waits until none of `pids` is alive; returns those still alive at the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {pid for pid in pids if alive(pid)}
        if not left:
            return left
        time.sleep(0.05)
    return {pid for pid in pids if alive(pid)}


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def processes_mentioning(text: str) -> dict[int, str]:
    """Processes whose command line contains `text` (this test process excluded)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            line = command_line(int(entry))
            if text in line and alive(int(entry)):
                found[int(entry)] = line
    return found
