"""A one-line training progress bar (iterations done / max_iter, rate, ETA) on a terminal.

Only for interactive use: `attach_progress_bar` does nothing unless stderr is a terminal,
so log files and pipes receive exactly Caffe's log lines and nothing else. On a terminal
the bar shares stderr with the log, so every log record first erases the bar's line and
the bar is drawn again at the next iteration.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TextIO

_ERASE_LINE = "\r\x1b[K"
_REDRAW_INTERVAL_S = 0.2
_BAR_WIDTH = 30


def format_duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def render(done: int, total: int, elapsed_s: float, done_since_start: int) -> str:
    """`[#####.....] 1200/10000 iters  35.2 iter/s  ETA 04:10` (ETA once the rate is known)."""
    fraction = min(1.0, done / total) if total > 0 else 1.0
    filled = round(fraction * _BAR_WIDTH)
    text = f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {done}/{total} iters"
    if done_since_start > 0 and elapsed_s > 0:
        rate = done_since_start / elapsed_s
        text += f"  {rate:.3g} iter/s  ETA {format_duration((total - done) / rate)}"
    return text


class _EraseBarFilter(logging.Filter):
    """Erases the bar's line before a log record is written to the same terminal."""

    def __init__(self, bar: ProgressBar) -> None:
        super().__init__()
        self.bar = bar

    def filter(self, record: logging.LogRecord) -> bool:
        self.bar.erase()
        return True


class ProgressBar:
    """A solver callback (on_start / on_gradients_ready) that draws the bar on `stream`."""

    def __init__(self, solver, stream: TextIO) -> None:  # type: ignore[no-untyped-def]
        self.solver = solver
        self.stream = stream
        self.start_iter = solver.iter
        self.start_time = time.monotonic()
        self.last_draw = 0.0
        self.visible = False
        self.filter = _EraseBarFilter(self)
        self.handlers = [
            h for h in logging.getLogger("caffe").handlers if getattr(h, "stream", None) is stream
        ]
        for handler in self.handlers:
            handler.addFilter(self.filter)

    def on_start(self) -> None:
        now = time.monotonic()
        if now - self.last_draw < _REDRAW_INTERVAL_S:
            return
        self.last_draw = now
        done = self.solver.iter
        line = render(
            done, self.solver.param.max_iter, now - self.start_time, done - self.start_iter
        )
        self.stream.write(_ERASE_LINE + line)
        self.stream.flush()
        self.visible = True

    def on_gradients_ready(self) -> None:
        pass

    def erase(self) -> None:
        if self.visible:
            self.stream.write(_ERASE_LINE)
            self.visible = False

    def close(self) -> None:
        self.erase()
        self.stream.flush()
        for handler in self.handlers:
            handler.removeFilter(self.filter)


def attach_progress_bar(solver, stream: TextIO | None = None) -> ProgressBar | None:  # type: ignore[no-untyped-def]
    """Add a ProgressBar to `solver` if `stream` (default stderr) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    if isatty is None or not isatty():
        return None
    bar = ProgressBar(solver, stream)
    solver.add_callback(bar)
    return bar
