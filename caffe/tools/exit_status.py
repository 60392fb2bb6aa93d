"""How a `python -m caffe.tools.<tool>` run ends: 0 on success; a user error (bad path,
malformed file, missing optional module) is logged as one line and gives 1, with no
traceback, as BVLC's tools end on a CHECK failure."""

from __future__ import annotations

import logging
from collections.abc import Callable

from caffe.errors import CaffeError

_log = logging.getLogger("caffe")


def run_reporting_errors(
    action: Callable[[], object], errors: tuple[type[BaseException], ...] = (CaffeError,)
) -> int:
    """Run `action`; an exception of `errors` becomes one error line and status 1."""
    try:
        action()
    except errors as e:
        _log.error("%s", e)
        return 1
    return 0
