"""Rewrite a solver prototxt that uses the deprecated `solver_type` enum with the `type`
string (Caffe's tools/upgrade_solver_proto_text):

    python -m caffe.tools.upgrade_solver_proto_text OLD_solver.prototxt NEW_solver.prototxt

The snapshot_prefix rule that applies when a solver is *read* for training is not written
into the file. Exit status: 0 done (also when already current), 1 bad input.
"""

from __future__ import annotations

import sys

from caffe.formats.proto_io import parse_text, read_text_file, write_text
from caffe.formats.upgrade import upgrade_solver_param
from caffe.proto import caffe_pb2
from caffe.tools import upgrade_common

USAGE = "Usage: upgrade_solver_proto_text old_solver_proto_file_in solver_proto_file_out"


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = parse_text(read_text_file(path_in), caffe_pb2.SolverParameter(), path_in)
    changed = upgrade_solver_param(param, path_in, fix_snapshot_prefix=False)
    return upgrade_common.write_upgraded(
        param, changed, path_in, path_out, write_text, "SolverParameter text proto"
    )


def main(argv: list[str] | None = None) -> int:
    return upgrade_common.main(argv, USAGE, upgrade_file)


if __name__ == "__main__":
    sys.exit(main())
