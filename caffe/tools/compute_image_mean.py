"""The mean image of a Datum database (Caffe's tools/compute_image_mean):

    python -m caffe.tools.compute_image_mean [--backend lmdb] INPUT_DB [OUTPUT_FILE]

Every record (raw uint8, float_data, or an encoded image, decoded natively) must have the
first record's C×H×W. The mean is written, if OUTPUT_FILE is given, as a BlobProto with the
legacy num=1/channels/height/width fields set, as Caffe writes mean files (mean.binaryproto),
and the per-channel means are logged ("mean_value channel [c]: v") for use as mean_value.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np
from google.protobuf.message import DecodeError

from caffe.data.db import open_db
from caffe.data.transformer import datum_to_chw
from caffe.errors import CaffeError
from caffe.formats.weights_io import write_blobproto
from caffe.proto import caffe_pb2
from caffe.tools.exit_status import run_reporting_errors

_log = logging.getLogger("caffe")
_LOG_EVERY_RECORDS = 10000


def compute_image_mean(
    input_db: str, output_file: str | None = None, backend: str = "lmdb"
) -> np.ndarray:
    """The 1×C×H×W float32 mean of every record in `input_db`; written to `output_file` if given."""
    total: np.ndarray | None = None
    count = 0
    with open_db(input_db, backend) as reader:
        for key, value in reader:
            where = f"record {key.decode(errors='replace')!r} of {input_db}"
            try:
                datum = caffe_pb2.Datum.FromString(value)
            except DecodeError:
                raise CaffeError(f"{where} is not a serialized Datum") from None
            values = datum_to_chw(datum, where=where)
            if total is None:
                total = np.zeros(values.shape, dtype=np.float64)
            elif values.shape != total.shape:
                raise CaffeError(
                    f"Incorrect data field size: {where} is {values.shape}, "
                    f"the first record {total.shape}"
                )
            total += values
            count += 1
            if count % _LOG_EVERY_RECORDS == 0:
                _log.info("Processed %d files.", count)
    if total is None:
        raise CaffeError(f"{input_db}: the database has no records")
    if count % _LOG_EVERY_RECORDS:
        _log.info("Processed %d files.", count)
    mean = (total / count).astype(np.float32)[np.newaxis]
    if output_file:
        _log.info("Write to %s", output_file)
        write_blobproto(output_file, mean, legacy4d=True)
    _log.info("Number of channels: %d", mean.shape[1])
    for channel, value in enumerate(mean[0].reshape(mean.shape[1], -1).mean(axis=1)):
        _log.info("mean_value channel [%d]: %g", channel, value)
    return mean


def _gflags_style(args: list[str]) -> list[str]:
    """Accept Caffe's -backend=lmdb spelling as well as --backend lmdb."""
    return ["-" + a if a.startswith("-backend") else a for a in args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m caffe.tools.compute_image_mean",
        description="Compute the mean image of a set of images given by a leveldb/lmdb.",
    )
    parser.add_argument("--backend", default="lmdb", help="lmdb or leveldb (default lmdb)")
    parser.add_argument("input_db")
    parser.add_argument("output_file", nargs="?")
    args = parser.parse_args(_gflags_style(sys.argv[1:] if argv is None else argv))
    return run_reporting_errors(
        lambda: compute_image_mean(args.input_db, args.output_file, args.backend)
    )


if __name__ == "__main__":
    sys.exit(main())
