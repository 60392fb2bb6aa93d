"""Rewrite a legacy net prototxt (V0/V1 layers, input fields, old BatchNorm params) in the
current format (Caffe's tools/upgrade_net_proto_text):

    python -m caffe.tools.upgrade_net_proto_text OLD.prototxt NEW.prototxt

Exit status: 0 done (also when the file was already current), 1 upgraded with problems
(see the log) or bad input.
"""

from __future__ import annotations

import sys

from caffe.formats.proto_io import parse_text, read_text_file, write_text
from caffe.formats.upgrade import upgrade_net_param
from caffe.proto import caffe_pb2
from caffe.tools import upgrade_common

USAGE = "Usage: upgrade_net_proto_text v0_net_proto_file_in net_proto_file_out"


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = parse_text(read_text_file(path_in), caffe_pb2.NetParameter(), path_in)
    changed = upgrade_net_param(param, path_in)
    return upgrade_common.write_upgraded(
        param, changed, path_in, path_out, write_text, "NetParameter text proto"
    )


def main(argv: list[str] | None = None) -> int:
    return upgrade_common.main(argv, USAGE, upgrade_file)


if __name__ == "__main__":
    sys.exit(main())
