"""Rewrite a legacy binary net (a V0/V1 .caffemodel, with its weights) in the current
format (Caffe's tools/upgrade_net_proto_binary):

    python -m caffe.tools.upgrade_net_proto_binary OLD.caffemodel NEW.caffemodel

Exit status: 0 done (also when the file was already current), 1 bad input.
"""

from __future__ import annotations

import logging
import os
import sys

from google.protobuf.message import DecodeError

from caffe.errors import CaffeError, WeightsError
from caffe.proto import caffe_pb2
from caffe.upgrade import upgrade_net_param

_log = logging.getLogger("caffe")
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
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temporary, "wb") as f:
            f.write(param.SerializeToString())
        os.replace(temporary, path)
    except OSError as e:
        raise WeightsError(f"Could not write file {path}: {e.strerror}") from None


def upgrade_file(path_in: str, path_out: str) -> bool:
    """Upgrade path_in into path_out; False if nothing needed upgrading."""
    param = read_net_binary(path_in)
    changed = upgrade_net_param(param, path_in)
    if not changed:
        _log.error("File already in latest proto format: %s", path_in)
    write_net_binary(path_out, param)
    _log.info("Wrote upgraded NetParameter binary proto to %s", path_out)
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
