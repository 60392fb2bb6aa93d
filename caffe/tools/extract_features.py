"""Features of a trained net written to databases (Caffe's tools/extract_features):

    python -m caffe.tools.extract_features W.caffemodel NET.prototxt BLOB1[,BLOB2...]
        DB1[,DB2...] NUM_MINI_BATCHES lmdb|leveldb [CPU|GPU] [DEVICE_ID=0]

The net is built in the TEST phase (its data layer supplies the inputs) with the weights of
W (a .caffemodel or .h5). Each of NUM_MINI_BATCHES forward passes writes, for every named
blob, one Datum per item n of the batch into that blob's new database: `float_data` holds
item n's values, `channels`, `height` and `width` the blob's legacy 4-D shape without its
first axis (an N×D blob gives D×1×1, as Caffe's Blob::LegacyShape pads trailing axes), no
label. Keys are the item's running index over all batches, zero-padded to 10 digits
("0000000000", "0000000001", ...), as Caffe's format_int(i, 10). A database that already
exists is an error (Caffe opens them NEW). GPU without a CUDA device computes on CPU.
"""

from __future__ import annotations

import contextlib
import logging
import sys

import numpy as np

from caffe.common import set_device, set_mode_cpu, set_mode_gpu
from caffe.data.db import COMMIT_EVERY_PUTS, open_db_writer, resolve_backend
from caffe.errors import CaffeError
from caffe.proto import caffe_pb2
from caffe.tools.exit_status import run_reporting_errors

_log = logging.getLogger("caffe")
USAGE = (
    "This program takes in a trained network and an input data layer, and then extract "
    "features of the input data produced by the net.\n"
    "Usage: extract_features  pretrained_net_param  feature_extraction_proto_file  "
    "extract_feature_blob_name1[,name2,...]  save_feature_dataset_name1[,name2,...]  "
    "num_mini_batches  db_type  [CPU/GPU] [DEVICE_ID=0]\n"
    "Note: you can extract multiple features in one pass by specifying multiple feature blob "
    "names and dataset names separated by ','. The names cannot contain white space characters "
    "and the number of blobs and datasets must be equal."
)
_REQUIRED_ARGS = 6


def legacy_chw(shape: list[int], blob_name: str) -> tuple[int, int, int]:
    """Caffe's (channels, height, width) of a blob: LegacyShape(1..3), trailing axes as 1."""
    if not 1 <= len(shape) <= 4:
        raise CaffeError(
            f"feature blob {blob_name} has shape {shape}: a Datum holds blobs of 1 to 4 axes "
            "(Caffe's legacy num × channels × height × width)"
        )
    padded = [*shape, 1, 1, 1]
    return padded[1], padded[2], padded[3]


def feature_key(index: int) -> str:
    return f"{index:010d}"


def extract_features(
    weights: str,
    net_proto: str,
    blob_names: list[str],
    db_names: list[str],
    num_mini_batches: int,
    backend: str,
) -> list[int]:
    """Run the extraction; returns the number of records written per blob."""
    from caffe.net import Net

    if len(blob_names) != len(db_names):
        raise CaffeError(
            f"the number of blob names ({len(blob_names)}) and dataset names ({len(db_names)}) "
            "must be equal"
        )
    if num_mini_batches < 0:
        raise CaffeError(f"num_mini_batches must be >= 0 (got {num_mini_batches})")
    backend = resolve_backend(backend)
    net = Net(net_proto, caffe_pb2.TEST)
    net.copy_from(weights)
    for name in blob_names:
        if not net.has_blob(name):
            raise CaffeError(f"Unknown feature blob name {name} in the network {net_proto}")
    counts = [0] * len(blob_names)
    # A failure drops the records not yet committed (DBWriter.__exit__) and closes.
    with contextlib.ExitStack() as stack:
        writers = []
        for db_name in db_names:
            _log.info("Opening dataset %s", db_name)
            writers.append(stack.enter_context(open_db_writer(db_name, backend)))
        _log.info("Extracting Features")
        datum = caffe_pb2.Datum()
        for _ in range(num_mini_batches):
            net.forward_prefilled()
            for i, name in enumerate(blob_names):
                blob = net.blob_by_name(name)
                shape = blob.shape
                channels, height, width = legacy_chw(shape, name)
                features = np.asarray(blob.data, dtype=np.float32).reshape(shape[0], -1)
                for row in features:
                    datum.Clear()
                    datum.channels, datum.height, datum.width = channels, height, width
                    datum.float_data.extend(row.tolist())
                    writers[i].put(feature_key(counts[i]), datum.SerializeToString())
                    counts[i] += 1
                    if counts[i] % COMMIT_EVERY_PUTS == 0:
                        _log.info("Extracted features of %d query images for feature blob %s",
                                  counts[i], name)  # fmt: skip
    for count, name in zip(counts, blob_names):
        _log.info("Extracted features of %d query images for feature blob %s", count, name)
    _log.info("Successfully extracted the features!")
    return counts


def _choose_mode(args: list[str]) -> None:
    if len(args) > _REQUIRED_ARGS and args[_REQUIRED_ARGS] == "GPU":
        device_id = 0
        if len(args) > _REQUIRED_ARGS + 1:
            try:
                device_id = int(args[_REQUIRED_ARGS + 1])
            except ValueError:
                device_id = -1
            if device_id < 0:
                raise CaffeError(f"DEVICE_ID must be an integer >= 0, got {args[7]!r}")
        _log.info("Using GPU")
        _log.info("Using Device_id=%d", device_id)
        set_mode_gpu()
        set_device(device_id)
    else:
        _log.info("Using CPU")
        set_mode_cpu()


def run(args: list[str]) -> None:
    if len(args) < _REQUIRED_ARGS:
        raise CaffeError(USAGE)
    _choose_mode(args)
    weights, net_proto, blobs, dbs, batches, backend = args[:_REQUIRED_ARGS]
    try:
        num_mini_batches = int(batches)
    except ValueError:
        raise CaffeError(f"num_mini_batches must be an integer, got {batches!r}") from None
    extract_features(weights, net_proto, blobs.split(","), dbs.split(","), num_mini_batches,
                     backend)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_reporting_errors(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
