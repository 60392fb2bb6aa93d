"""What the three upgrade tools (upgrade_net_proto_text/binary, upgrade_solver_proto_text)
share: the message they log after upgrading, and a main() that takes IN and OUT paths."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from google.protobuf.message import Message

from caffe.errors import CaffeError

_log = logging.getLogger("caffe")


def write_upgraded(
    param: Message,
    changed: bool,
    path_in: str,
    path_out: str,
    write: Callable[[str, Message], None],
    what: str,
) -> bool:
    """Write the upgraded `param` to `path_out` with `write`; returns `changed`.

    As Caffe, a file that needed no upgrade is logged as an error but still written.
    """
    if not changed:
        _log.error("File already in latest proto format: %s", path_in)
    write(path_out, param)
    _log.info("Wrote upgraded %s to %s", what, path_out)
    return changed


def main(argv: list[str] | None, usage: str, upgrade_file: Callable[[str, str], bool]) -> int:
    """`tool IN OUT`: 0 when written, 1 on a wrong argument count or bad input (logged)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        _log.error(usage)
        return 1
    try:
        upgrade_file(args[0], args[1])
    except CaffeError as e:
        _log.critical("%s", e)
        return 1
    return 0
