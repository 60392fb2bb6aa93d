"""Data: batches of Datum records read from an LMDB (or LevelDB) database
(docs/caffe_format.md §9.1-9.3).

The database is walked in key order with one cursor, wrapping to the first key at the end
("Restarting data prefetching from start."). Each record is a serialized Datum: uint8 `data`
(C×H×W), `float_data`, or an encoded image (decoded with Pillow, BGR). transform_param is
applied per batch; tops are data (N, C, H, W) float32 and, optionally, label (N) float32. The
top shape comes from the first record (crop replaces H and W) and each batch takes the shape
of its own first record. Loading runs on a prefetch thread (caffe/data/prefetch.py) that keeps
`data_param.prefetch` batches ready: it reads a batch's records in order and has the decode
threads decode and transform them in parallel (caffe/data/batch_assembly.py,
caffe/data/threads.py).

Backend choice: the schema's default backend is LEVELDB, so a prototxt that omits `backend`
means LevelDB to Caffe. Nearly every database in use today is LMDB, so when `source` is an LMDB
environment (it holds data.mdb) it is read as LMDB whatever `backend` says, with a warning; a
real LevelDB needs the optional plyvel package (caffe/data/db.py says how to do without).

Sharding (caffe/data/shard.py): in TRAIN with caffe.solver_count() = P > 1, this rank keeps
the record at running offset k iff k % P == caffe.solver_rank(); `layer.shard` holds the rule.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import torch
from google.protobuf.message import DecodeError

from caffe.common import root_solver
from caffe.data.batch_assembly import assemble_batch
from caffe.data.db import DBCursor, DBReader, is_lmdb_dir, open_db, resolve_backend
from caffe.data.prefetch import BatchLoader, PrefetchingDataLayer, layer_label
from caffe.data.raw_datum import raw_datum_view
from caffe.data.shard import Shard, WrapWarning, shard_for_phase
from caffe.data.transformer import DataTransformer, datum_to_chw, seeded_generator
from caffe.errors import CaffeError, InputShapeError
from caffe.layer import register_layer
from caffe.proto import caffe_pb2

_log = logging.getLogger("caffe")
_DEPRECATED_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


class DatumLoader(BatchLoader):
    """Reads batches of Datums with a wrapping, sharded cursor (runs on the prefetch thread)."""

    def __init__(
        self,
        reader: DBReader,
        batch_size: int,
        transformer: DataTransformer,
        shard: Shard,
        with_labels: bool,
        skip: int,
        where: str,
        wrap_warning: WrapWarning | None = None,
    ) -> None:
        super().__init__(where)
        self.reader = reader
        self.batch_size = batch_size
        self.transformer = transformer
        self.shard = shard
        self.with_labels = with_labels
        self.skip = skip  # records skipped once at the start (rand_skip)
        self.offset = 0  # running count of records passed, across wrap-arounds
        # A database cannot say how many records it holds (LevelDB), so the cursor counts
        # them on its first pass and tells wrap_warning at the first wrap-around.
        self.wrap_warning = wrap_warning
        self._position = 0  # the cursor's record index from the first key
        self._cursor: DBCursor | None = None  # opened on the prefetch thread

    def _open_cursor(self) -> DBCursor:
        cursor = self.reader.cursor()
        if not cursor.valid:
            raise self.error(f"database {self.reader.path} is empty")
        for _ in range(self.skip):
            self._step(cursor)
        return cursor

    def _step(self, cursor: DBCursor) -> None:
        cursor.next()
        self._position += 1
        if not cursor.valid:
            if root_solver():
                _log.info("Restarting data prefetching from start.")
            cursor.seek_to_first()
            if self.wrap_warning is not None:
                self.wrap_warning.check(self._position)
            self._position = 0

    def next_record(self) -> tuple[bytes, bytes]:
        """(key, value) of the next record this shard keeps."""
        if self._cursor is None:
            self._cursor = self._open_cursor()
        cursor = self._cursor
        while not self.shard.keeps(self.offset):
            self._step(cursor)
            self.offset += 1
        record = cursor.key(), cursor.value()
        self._step(cursor)
        self.offset += 1
        return record

    def skip_batches(self, count: int) -> None:
        """Walk the cursor past count batches of this shard's records without decoding."""
        if self._cursor is None:
            self._cursor = self._open_cursor()
        remaining = count * self.batch_size
        while remaining:
            if self.shard.keeps(self.offset):
                remaining -= 1
            self._step(self._cursor)
            self.offset += 1

    def decode(self, key: bytes, value: bytes, contiguous: bool = True) -> tuple[np.ndarray, int]:
        """(C×H×W array, label) of a record; runs on the decode threads (thread-safe). A raw
        uint8 record comes back as a read-only view into it (Note [raw Datum view])."""
        # The caller takes a view (it copies into the batch); force_color/force_gray concern
        # encoded images only, which the view path leaves to protobuf.
        if not contiguous:
            raw = raw_datum_view(value)
            if raw is not None:
                return raw.pixels, raw.label
        where = f"{self.where}: record {key.decode(errors='replace')!r} of {self.reader.path}"
        try:
            datum = caffe_pb2.Datum.FromString(value)
        except DecodeError:
            raise CaffeError(f"{where} is not a serialized Datum") from None
        array = datum_to_chw(datum, self.transformer.force_color, self.transformer.force_gray,
                             where=where, contiguous=contiguous)  # fmt: skip
        return array, datum.label

    def load_batch(self) -> list[torch.Tensor]:
        records = [self.next_record() for _ in range(self.batch_size)]  # in order, one thread
        labels = [0] * len(records)

        def decode(i: int) -> np.ndarray:
            array, labels[i] = self.decode(*records[i], contiguous=False)
            return array

        def mismatch(i: int, shape: tuple[int, ...], first: tuple[int, ...]) -> CaffeError:
            return self.error(
                f"record {records[i][0].decode(errors='replace')!r} has shape {shape} but the "
                f"batch started with {first}; items of a batch must match"
            )

        data = assemble_batch(decode, len(records), self.transformer, mismatch, self.new_tensor)
        batch = [data]
        if self.with_labels:
            batch.append(torch.tensor(labels, dtype=torch.float32, pin_memory=self.pin_memory))
        return batch

    def first_item_shape(self) -> tuple[int, ...]:
        """Shape of the database's first record (read with a cursor of its own)."""
        cursor = self.reader.cursor()
        try:
            if not cursor.valid:
                raise self.error(f"database {self.reader.path} is empty")
            return self.decode(cursor.key(), cursor.value())[0].shape
        finally:
            cursor.close()

    def close(self) -> None:
        if self._cursor is not None:
            self._cursor.close()
            self._cursor = None
        self.reader.close()


@register_layer("Data")
class DataLayer(PrefetchingDataLayer):
    min_top = 1
    max_top = 2
    wrap_warning: WrapWarning | None = None

    def make_loader(self, top):
        param = self.layer_param.data_param
        if param.batch_size <= 0:
            raise self.error("data_param.batch_size must be positive")
        if not param.source:
            raise self.error("data_param.source is not set")
        for name in _DEPRECATED_FIELDS:
            if param.HasField(name):
                _log.warning(
                    "%s: data_param.%s is deprecated and ignored; use transform_param",
                    layer_label(self),
                    name,
                )
        generator = seeded_generator()
        transformer = DataTransformer(
            self.layer_param.transform_param, self.phase, generator, where=layer_label(self)
        )
        skip = 0
        if param.rand_skip:
            skip = int(torch.randint(0, param.rand_skip, (1,), generator=generator))
            _log.info("Skipping first %d data points.", skip)
        self.shard = shard_for_phase(self.phase)
        if self.wrap_warning is None:  # one per layer: a resumed run makes a new loader
            self.wrap_warning = WrapWarning(
                layer_label(self), f"data_param.source '{param.source}'", param.batch_size,
                self.shard,
            )  # fmt: skip
        loader = DatumLoader(
            self._open_source(param),
            param.batch_size,
            transformer,
            self.shard,
            with_labels=len(top) > 1,
            skip=skip,
            where=layer_label(self),
            wrap_warning=self.wrap_warning,
        )
        try:
            item_shape = loader.first_item_shape()
        except CaffeError:
            loader.close()
            raise
        channels, height, width = transformer.output_shape(*item_shape)
        top[0].reshape(param.batch_size, channels, height, width)
        if len(top) > 1:
            top[1].reshape(param.batch_size)
        if root_solver():
            _log.info("output data size: %d,%d,%d,%d", param.batch_size, channels, height, width)
        return loader

    def reshape_tops(self, top):
        """Shapes only (caffe/common.py): the first record's shape when the database is there,
        else batch_size × C × crop_size × crop_size, C from transform_param (force_gray: 1;
        else as many as mean_values; else 3, colour, assumed with a warning)."""
        param = self.layer_param.data_param
        if os.path.exists(param.source):
            super().reshape_tops(top)
            return
        transform = self.layer_param.transform_param
        crop = int(transform.crop_size)
        if param.batch_size <= 0:
            raise self.error("data_param.batch_size must be positive")
        if not crop:
            raise InputShapeError(
                f"{layer_label(self)}: data_param.source '{param.source}' does not exist and "
                "transform_param has no crop_size: nothing says the height and width of top "
                f"'{self.layer_param.top[0]}'",
                list(self.layer_param.top),
            )
        channels = 1 if transform.force_gray else len(transform.mean_value)
        if channels <= 1 and not transform.force_gray:
            _log.warning("%s: data_param.source '%s' does not exist; its items are taken to "
                         "have 3 channels (colour)", layer_label(self), param.source)  # fmt: skip
            channels = 3
        top[0].reshape(param.batch_size, channels, crop, crop)
        if len(top) > 1:
            top[1].reshape(param.batch_size)

    def _open_source(self, param: caffe_pb2.DataParameter) -> DBReader:
        backend = resolve_backend(param.backend)
        if backend == "leveldb" and is_lmdb_dir(param.source):
            _log.warning(
                "%s: data_param.backend is LEVELDB (the default when unset) but %s is an LMDB "
                "database; reading it as LMDB. Set `backend: LMDB` to silence this warning.",
                layer_label(self),
                param.source,
            )
            backend = "lmdb"
        try:
            return open_db(param.source, backend)
        except CaffeError as e:
            raise self.error(f"cannot open data_param.source '{param.source}': {e}") from None
