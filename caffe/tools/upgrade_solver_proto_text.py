"""Rewrite a solver prototxt that uses the deprecated `solver_type` enum with the `type`
string (Caffe's tools/upgrade_solver_proto_text):

    python -m caffe.tools.upgrade_solver_proto_text OLD_solver.prototxt NEW_solver.prototxt

The snapshot_prefix rule that applies when a solver is *read* for training is not written
into the file. Exit status: 0 done (also when already current), 1 bad input.
"""

from __future__ import annotations

import logging
import sys

from caffe.errors import CaffeError
from caffe.proto import caffe_pb2
from caffe.proto_io import parse_text, read_text_file, write_text
from caffe.upgrade import upgrade_solver_param

_log = logging.getLogger("caffe")
USAGE = "Usage: upgrade_solver_proto_text old_solver_proto_file_in solver_proto_file_out"


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = parse_text(read_text_file(path_in), caffe_pb2.SolverParameter(), path_in)
    changed = upgrade_solver_param(param, path_in, fix_snapshot_prefix=False)
    if not changed:
        _log.error("File already in latest proto format: %s", path_in)
    write_text(path_out, param)
    _log.info("Wrote upgraded SolverParameter text proto to %s", path_out)
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        _log.error(USAGE)
        return 1
    try:
        upgrade_file(args[0], args[1])
    except CaffeError as e:
        _log.critical("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
