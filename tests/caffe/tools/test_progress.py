"""The progress bar appears on terminals only and never mixes into log lines."""

import io
import logging
from types import SimpleNamespace

from caffe.log import GlogFormatter
from caffe.tools import progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeSolver:
    def __init__(self, max_iter: int) -> None:
        self.iter = 0
        self.param = SimpleNamespace(max_iter=max_iter)
        self.callbacks = []

    def add_callback(self, callback) -> None:
        self.callbacks.append(callback)


def test_render_counts_rate_and_eta():
    assert progress.render(0, 100, 0.0, 0) == f"[{'.' * 30}] 0/100 iters"
    text = progress.render(50, 100, 10.0, 50)
    assert text.startswith(f"[{'#' * 15}{'.' * 15}] 50/100 iters")
    assert text.endswith("5 iter/s  ETA 00:10")
    assert progress.render(100, 100, 1.0, 100).startswith(f"[{'#' * 30}]")
    assert "ETA 1:00:00" in progress.render(1, 3601, 1.0, 1)


def test_no_bar_unless_stderr_is_a_terminal():
    solver = FakeSolver(10)
    assert progress.attach_progress_bar(solver, io.StringIO()) is None
    assert solver.callbacks == []


def test_bar_is_drawn_and_erased_before_each_log_line(monkeypatch):
    monkeypatch.setattr(progress, "_REDRAW_INTERVAL_S", 0.0)
    terminal = FakeTerminal()
    handler = logging.StreamHandler(terminal)
    handler.setFormatter(GlogFormatter())
    logger = logging.getLogger("caffe")
    logger.addHandler(handler)
    try:
        solver = FakeSolver(4)
        bar = progress.attach_progress_bar(solver, terminal)
        assert solver.callbacks == [bar]
        solver.iter = 2
        bar.on_start()
        assert "\r\x1b[K[###############...............] 2/4 iters" in terminal.getvalue()
        logger.warning("a log line")
        written = terminal.getvalue()
        # The bar's line is erased, then the log line starts at column 0.
        assert "\r\x1b[KW" in written
        assert written.splitlines()[-1].endswith("a log line")
        solver.iter = 3
        bar.on_start()
        bar.close()  # leaves the terminal on an empty line
        assert terminal.getvalue().endswith("\r\x1b[K")
        assert bar.filter not in handler.filters
    finally:
        logger.removeHandler(handler)
