"""Rewrite a legacy net prototxt (V0/V1 layers, input fields, old BatchNorm params) in the
current format (Caffe's tools/upgrade_net_proto_text):

    python -m caffe.tools.upgrade_net_proto_text OLD.prototxt NEW.prototxt

Exit status: 0 done (also when the file was already current), 1 upgraded with problems
(see the log) or bad input.
"""

from __future__ import annotations

import logging
import sys

from caffe.errors import CaffeError
from caffe.proto import caffe_pb2
from caffe.proto_io import parse_text, read_text_file, write_text
from caffe.upgrade import upgrade_net_param

_log = logging.getLogger("caffe")
USAGE = "Usage: upgrade_net_proto_text v0_net_proto_file_in net_proto_file_out"


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = parse_text(read_text_file(path_in), caffe_pb2.NetParameter(), path_in)
    changed = upgrade_net_param(param, path_in)
    if not changed:
        _log.error("File already in latest proto format: %s", path_in)
    write_text(path_out, param)
    _log.info("Wrote upgraded NetParameter text proto to %s", path_out)
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
