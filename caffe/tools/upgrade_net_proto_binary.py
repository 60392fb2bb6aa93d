"""Rewrite a legacy binary net (a V0/V1 .caffemodel, with its weights) in the current
format (Caffe's tools/upgrade_net_proto_binary):

    python -m caffe.tools.upgrade_net_proto_binary OLD.caffemodel NEW.caffemodel

Exit status: 0 done (also when the file was already current), 1 bad input.
"""

from __future__ import annotations

import sys

from google.protobuf.message import DecodeError

from caffe.errors import WeightsError
from caffe.formats.atomic_write import write_atomically
from caffe.formats.upgrade import upgrade_net_param
from caffe.proto import caffe_pb2
from caffe.tools import upgrade_common

USAGE = "Usage: upgrade_net_proto_binary v0_net_proto_file_in net_proto_file_out"


def read_net_binary(path: str) -> caffe_pb2.NetParameter:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise WeightsError(f"Could not open file {path}: {e.strerror}") from None
    param = caffe_pb2.NetParameter()
    try:
        param.ParseFromString(data)
    except DecodeError:
        raise WeightsError(
            f"{path}: not a binary NetParameter (.caffemodel), or the file is truncated"
        ) from None
    return param


def write_net_binary(path: str, param: caffe_pb2.NetParameter) -> None:
    write_atomically(path, [param.SerializeToString()], WeightsError)


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = read_net_binary(path_in)
    changed = upgrade_net_param(param, path_in)
    return upgrade_common.write_upgraded(
        param, changed, path_in, path_out, write_net_binary, "NetParameter binary proto"
    )


def main(argv: list[str] | None = None) -> int:
    return upgrade_common.main(argv, USAGE, upgrade_file)


if __name__ == "__main__":
    sys.exit(main())
