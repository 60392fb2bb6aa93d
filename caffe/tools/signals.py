"""Caffe's SignalHandler for `caffe train`: Ctrl-C (SIGINT), SIGTERM and SIGHUP become
solver actions.

The handlers only record that a signal arrived; the solver asks `action()` once per
iteration (and per test batch) and gets the effect chosen by --sigint_effect /
--sighup_effect: "stop" (end training early; the solver still writes its final snapshot,
as Caffe's does), "snapshot" (save now and go on) or "none" (ignore the signal).
SIGTERM — a batch system's or a launcher's polite "end now" — gets --sigint_effect too, so
that it loses no work either (BVLC's caffe dies at once); with `--sigint_effect none` it
keeps its default and ends the process, since ignoring it would leave only SIGKILL.
A second Ctrl-C or SIGTERM while a first one is still waiting to be served (the process
is busy building nets, say) raises KeyboardInterrupt, so a stuck run can always be ended.
In a Poseidon job the action is taken by every worker at one agreed iteration
(caffe/parallel/syncer.py, Note [agreed actions]).
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType

from caffe.tools.flags import FlagError

_log = logging.getLogger("caffe")
EFFECTS = ("stop", "snapshot", "none")


def check_effect(flag: str, value: str) -> str:
    if value not in EFFECTS:
        raise FlagError(
            f'Invalid signal effect "{value}" was specified (--{flag}: one of stop, snapshot, none)'
        )
    return value


class SignalHandler:
    """Context manager that installs the handlers and restores the previous ones on exit."""

    def __init__(self, sigint_effect: str, sighup_effect: str) -> None:
        self.sigint_effect = check_effect("sigint_effect", sigint_effect)
        self.sighup_effect = check_effect("sighup_effect", sighup_effect)
        self._got_sigint = False
        self._sigint_name = "SIGINT"  # or SIGTERM, served alike
        self._got_sighup = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> SignalHandler:
        if threading.current_thread() is not threading.main_thread():
            return self  # Python delivers signals to the main thread only
        self._install(signal.SIGINT, self._on_sigint)
        if self.sigint_effect != "none":
            self._install(signal.SIGTERM, self._on_sigint)
        if hasattr(signal, "SIGHUP"):
            self._install(signal.SIGHUP, self._on_sighup)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        self._previous.clear()

    def _install(self, signum: int, handler) -> None:  # type: ignore[no-untyped-def]
        self._previous[signum] = signal.signal(signum, handler)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._got_sigint and self.sigint_effect != "none":
            raise KeyboardInterrupt  # the first one was never served: force the exit
        self._got_sigint = True
        self._sigint_name = signal.Signals(signum).name

    def _on_sighup(self, signum: int, frame: FrameType | None) -> None:
        self._got_sighup = True

    def action(self) -> str:
        """The solver's action function: "none", "stop" or "snapshot" (each signal once)."""
        if self._got_sigint:
            self._got_sigint = False
            if self.sigint_effect != "none":
                _log.info("Caught %s: %s.", self._sigint_name, self.sigint_effect)
            return self.sigint_effect
        if self._got_sighup:
            self._got_sighup = False
            if self.sighup_effect != "none":
                _log.info("Caught SIGHUP: %s.", self.sighup_effect)
            return self.sighup_effect
        return "none"
