"""Image files listed in a text file -> a database of Datums (Caffe's tools/convert_imageset):

    python -m caffe.tools.convert_imageset [FLAGS] ROOTFOLDER/ LISTFILE DB_NAME

LISTFILE lines are "relative/path label", split at the last space. Images are read with Pillow
in OpenCV's conventions (BGR colour, or one grey channel with --gray) and stored C×H×W uint8
under keys "%08d_<path>" (the line number and the listed path). Flags, with gflags spellings
(--flag=value, --flag value, -flag, --noflag):

    --gray            read images as grey (default false)
    --shuffle         shuffle the lines before converting (default false)
    --backend         lmdb or leveldb (default lmdb)
    --resize_width    } both > 0: resize every image (bilinear) to this size
    --resize_height   }
    --check_size      fail if the images differ in size (default false)
    --encoded         store encoded images (default false): the file's own bytes when no resize
                      or conversion is needed, otherwise re-encoded
    --encode_type     png, jpg, ...: the encoding to store (implies --encoded); default: guess
                      from each file's extension

An image that cannot be read is logged and skipped, as Caffe does.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import numpy as np

from caffe.data.db import open_db_writer
from caffe.data.image_codec import decode_image, encode_image, join_root, read_image
from caffe.errors import CaffeError
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")
_LOG_EVERY_FILES = 1000
_BOOL_FLAGS = ("gray", "shuffle", "check_size", "encoded")
_TRUE = {"true", "t", "yes", "y", "1"}
_FALSE = {"false", "f", "no", "n", "0"}


def read_list(list_file: str) -> list[tuple[str, int]]:
    """(path, label) per non-empty line; the label follows the last space."""
    try:
        with open(list_file) as f:
            raw = [line.rstrip("\r\n") for line in f]
    except OSError as e:
        raise CaffeError(f"cannot read list file {list_file}: {e.strerror}") from None
    lines = []
    for number, line in enumerate(raw, start=1):
        if not line.strip():
            continue
        path, _, label = line.rpartition(" ")
        if not path or not label.strip().lstrip("-").isdigit():
            raise CaffeError(f"{list_file}:{number}: expected 'path label', got {line!r}")
        lines.append((path, int(label)))
    return lines


def _encoding_of(path: str, encode_type: str) -> str:
    if encode_type:
        return encode_type.lower()
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if not extension:
        _log.warning("Failed to guess the encoding of '%s'", path)
    return extension


def image_datum(
    path: str, label: int, color: bool, height: int, width: int, encoding: str | None
) -> tuple[caffe_pb2.Datum, tuple[int, ...]]:
    """One image as a Datum (raw C×H×W uint8, or encoded when `encoding` is given), and the
    C×H×W shape of the image it holds."""
    image = read_image(path, color, height, width)
    datum = caffe_pb2.Datum(label=label)
    if encoding is None:
        datum.channels, datum.height, datum.width = image.shape
        datum.data = image.tobytes()
        return datum, image.shape
    with open(path, "rb") as f:
        raw = f.read()
    # The file's own bytes will do when they decode (natively) to exactly what we read.
    keep_file = (
        not (height > 0 and width > 0)
        and _same_encoding(os.path.splitext(path)[1], encoding)
        and decode_image(raw, None, where=path).shape[0] == image.shape[0]
    )
    datum.data = raw if keep_file else encode_image(image, encoding)
    datum.encoded = True
    return datum, image.shape


def _same_encoding(extension: str, encoding: str) -> bool:
    def canonical(name: str) -> str:
        name = name.lstrip(".").lower()
        return "jpg" if name == "jpeg" else name

    return canonical(extension) == canonical(encoding)


def convert_imageset(
    root_folder: str,
    list_file: str,
    db_name: str,
    gray: bool = False,
    shuffle: bool = False,
    backend: str = "lmdb",
    resize_height: int = 0,
    resize_width: int = 0,
    check_size: bool = False,
    encoded: bool = False,
    encode_type: str = "",
    seed: int | None = None,
) -> int:
    """Convert the listed images into a new database at db_name; returns how many were stored."""
    lines = read_list(list_file)
    if shuffle:
        _log.info("Shuffling data")
        order = np.random.default_rng(seed).permutation(len(lines))
        lines = [lines[i] for i in order]
    _log.info("A total of %d images.", len(lines))
    encoded = encoded or bool(encode_type)
    stored = 0
    first_shape: tuple[int, ...] | None = None
    with open_db_writer(db_name, backend) as writer:
        for line_id, (path, label) in enumerate(lines):
            full_path = join_root(root_folder, path)
            encoding = _encoding_of(path, encode_type) if encoded else None
            try:
                datum, shape = image_datum(
                    full_path, label, not gray, resize_height, resize_width, encoding
                )
            except CaffeError as e:
                _log.error("%s", e)
                continue
            if check_size:
                if first_shape is None:
                    first_shape = shape
                elif shape != first_shape:
                    raise CaffeError(
                        f"Incorrect data size: {full_path} is {shape}, the first "
                        f"image {first_shape} (--check_size)"
                    )
            writer.put(f"{line_id:08d}_{path}", datum.SerializeToString())
            stored += 1
            if stored % _LOG_EVERY_FILES == 0:
                _log.info("Processed %d files.", stored)
    if stored % _LOG_EVERY_FILES:
        _log.info("Processed %d files.", stored)
    return stored


def _gflags_style(args: list[str]) -> list[str]:
    """gflags spellings to argparse ones: -flag -> --flag; for booleans --flag=true -> --flag,
    --flag=false and --noflag -> --no-flag."""
    out = []
    for arg in args:
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 2:
            arg = "-" + arg
        name, has_value, value = arg[2:].partition("=") if arg.startswith("--") else ("", "", "")
        if name in _BOOL_FLAGS and has_value:
            if value.lower() not in _TRUE | _FALSE:
                raise CaffeError(f"invalid boolean value '{value}' for flag --{name}")
            arg = f"--{name}" if value.lower() in _TRUE else f"--no-{name}"
        elif name.startswith("no") and name[2:] in _BOOL_FLAGS and not has_value:
            arg = f"--no-{name[2:]}"
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.convert_imageset",
        description="Convert a set of images to the leveldb/lmdb format used as input for Caffe.",
    )
    for flag in _BOOL_FLAGS:
        parser.add_argument(f"--{flag}", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--backend", default="lmdb")
    parser.add_argument("--resize_width", type=int, default=0)
    parser.add_argument("--resize_height", type=int, default=0)
    parser.add_argument("--encode_type", default="")
    parser.add_argument("root_folder")
    parser.add_argument("list_file")
    parser.add_argument("db_name")
    try:
        args = parser.parse_args(_gflags_style(sys.argv[1:] if argv is None else argv))
        convert_imageset(
            args.root_folder,
            args.list_file,
            args.db_name,
            args.gray,
            args.shuffle,
            args.backend,
            args.resize_height,
            args.resize_width,
            args.check_size,
            args.encoded,
            args.encode_type,
        )
    except CaffeError as e:
        _log.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
