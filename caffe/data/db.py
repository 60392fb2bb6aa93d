"""Key/value databases of serialized records (Caffe's `db::DB`): LMDB, and LevelDB via plyvel.

    open_db(path, backend="lmdb") -> DBReader        .cursor() walks keys in byte order
    open_db_writer(path, backend="lmdb") -> DBWriter  .put(key, value); commits every 1000 puts
    resolve_backend(backend) -> "lmdb" | "leveldb"   accepts names and DataParameter.DB values

LMDB is the format every tool here writes. LevelDB is read and written only when the optional
`plyvel` package is installed; without it, opening one raises a CaffeError that says how to get
an LMDB instead. `backend` may be a name ("lmdb", "leveldb", any case) or a
`caffe_pb2.DataParameter.DB` value.

Note [one environment per process]: LMDB forbids opening the same environment twice in one
process (closing either breaks the other's file locks), yet a training process routinely has
several layers reading one database (a TRAIN and a TEST net, or two nets in a test). Readers
therefore share one read-only `lmdb.Environment` per database directory; each cursor runs its own
read transaction, which LMDB allows from any thread (py-lmdb always opens with MDB_NOTLS), but a
cursor must be used by one thread at a time.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import lmdb

from caffe.errors import CaffeError
from caffe.proto import caffe_pb2

COMMIT_EVERY_PUTS = 1000  # as Caffe's converters
_LMDB_INITIAL_MAP_BYTES = 64 << 20  # doubled whenever a commit does not fit
_BACKEND_NAMES = {
    caffe_pb2.DataParameter.LMDB: "lmdb",
    caffe_pb2.DataParameter.LEVELDB: "leveldb",
}


def resolve_backend(backend: str | int) -> str:
    """'lmdb' or 'leveldb' for a backend name (any case) or a DataParameter.DB value."""
    if isinstance(backend, str):
        name = backend.strip().lower()
        if name in ("lmdb", "leveldb"):
            return name
    elif backend in _BACKEND_NAMES:
        return _BACKEND_NAMES[backend]
    raise CaffeError(f"Unknown database backend {backend!r}: use lmdb or leveldb")


def is_lmdb_dir(path: str) -> bool:
    """Whether `path` is an LMDB environment directory (it holds data.mdb)."""
    return os.path.isfile(os.path.join(path, "data.mdb"))


def _plyvel():  # type: ignore[no-untyped-def]
    try:
        import plyvel
    except ImportError:
        return None
    return plyvel


def _leveldb_unavailable(path: str) -> CaffeError:
    return CaffeError(
        f"{path}: reading or writing LevelDB needs the optional 'plyvel' package "
        "(pip install plyvel). Alternatively use LMDB: re-create the database with "
        "--backend lmdb (convert_imageset, compute_image_mean and the converters default to it) "
        "and set `backend: LMDB` in data_param."
    )


# --------------------------------------------------------------------------- reading


class DBCursor:
    """A position in a database: seek_to_first(), next(), valid, key(), value()."""

    valid: bool

    def seek_to_first(self) -> None:
        raise NotImplementedError

    def next(self) -> None:
        raise NotImplementedError

    def key(self) -> bytes:
        raise NotImplementedError

    def value(self) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        """Release the cursor's read transaction."""

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs from the current position to the end."""
        while self.valid:
            yield self.key(), self.value()
            self.next()


class DBReader:
    """A database opened for reading; iterating it yields (key, value) in key order."""

    path: str
    backend: str

    def cursor(self) -> DBCursor:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        cursor = self.cursor()
        try:
            yield from cursor
        finally:
            cursor.close()

    def __enter__(self) -> DBReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SharedHandle:
    """One open database shared by all its readers in this process; closed with the last."""

    def __init__(self, handle: Any, close: Callable[[], None]) -> None:
        self.handle = handle
        weakref.finalize(self, close)


_shared: weakref.WeakValueDictionary[tuple[str, str, int], _SharedHandle] = (
    weakref.WeakValueDictionary()
)
_shared_lock = threading.Lock()


def _shared_handle(
    backend: str, path: str, marker: str, opener: Callable[[str], Any]
) -> _SharedHandle:
    """The process's handle for the database at `path` (see Note [one environment per process]).

    The key includes the inode of `marker` (data.mdb, or "." for the directory), so a database
    deleted and re-created at the same path gets a fresh handle.
    """
    real = os.path.realpath(path)
    key = (backend, real, os.stat(os.path.join(real, marker)).st_ino)
    with _shared_lock:
        shared = _shared.get(key)
        if shared is None:
            handle = opener(real)
            shared = _SharedHandle(handle, handle.close)
            _shared[key] = shared
        return shared


def _open_lmdb_env(path: str) -> lmdb.Environment:
    options = dict(subdir=True, readonly=True, readahead=False, max_readers=1024)
    try:
        return lmdb.open(path, lock=True, **options)
    except lmdb.Error:
        # A read-only directory or lock file: read without locks, as Caffe's NOLOCK retry.
        try:
            return lmdb.open(path, lock=False, **options)
        except lmdb.Error as e:
            raise CaffeError(f"{path}: cannot open LMDB database: {e}") from None


class _LmdbCursor(DBCursor):
    def __init__(self, shared: _SharedHandle) -> None:
        self._shared = shared  # keeps the environment open while the cursor lives
        self._txn = shared.handle.begin(write=False)
        self._cursor = self._txn.cursor()
        self.valid = self._cursor.first()

    def seek_to_first(self) -> None:
        self.valid = self._cursor.first()

    def next(self) -> None:
        self.valid = self._cursor.next()

    def key(self) -> bytes:
        return self._cursor.key()

    def value(self) -> bytes:
        return self._cursor.value()

    def close(self) -> None:
        if self._txn is not None:
            self._cursor.close()
            self._txn.abort()
            self._txn = None
            self.valid = False


class _LevelDbCursor(DBCursor):
    def __init__(self, shared: _SharedHandle) -> None:
        self._shared = shared
        self._iterator = None
        self.seek_to_first()

    def seek_to_first(self) -> None:
        self.close()
        self._iterator = self._shared.handle.iterator()
        self.next()

    def next(self) -> None:
        try:
            self._key, self._value = next(self._iterator)
            self.valid = True
        except StopIteration:
            self.valid = False

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def close(self) -> None:
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None
            self.valid = False


class _SharedReader(DBReader):
    cursor_class: type[DBCursor]

    def __init__(self, path: str, shared: _SharedHandle) -> None:
        self.path = path
        self._shared: _SharedHandle | None = shared

    def _handle(self) -> _SharedHandle:
        if self._shared is None:
            raise CaffeError(f"{self.path}: database already closed")
        return self._shared

    def cursor(self) -> DBCursor:
        return self.cursor_class(self._handle())  # type: ignore[call-arg]

    def close(self) -> None:
        # Shared with other readers: dropping our reference closes it with the last one.
        self._shared = None


class LmdbReader(_SharedReader):
    backend = "lmdb"
    cursor_class = _LmdbCursor

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise CaffeError(f"{path}: no such LMDB database directory")
        if not is_lmdb_dir(path):
            raise CaffeError(f"{path}: not an LMDB database (no data.mdb in the directory)")
        super().__init__(path, _shared_handle("lmdb", path, "data.mdb", _open_lmdb_env))

    def __len__(self) -> int:
        return int(self._handle().handle.stat()["entries"])


class LevelDbReader(_SharedReader):
    backend = "leveldb"
    cursor_class = _LevelDbCursor

    def __init__(self, path: str) -> None:
        plyvel = _plyvel()
        if plyvel is None:
            raise _leveldb_unavailable(path)
        if not os.path.isfile(os.path.join(path, "CURRENT")):
            raise CaffeError(f"{path}: no LevelDB database there (no CURRENT file)")

        def opener(real: str):  # type: ignore[no-untyped-def]
            try:
                return plyvel.DB(real, create_if_missing=False)
            except plyvel.Error as e:
                hint = ""
                if "lock" in str(e).lower():
                    # LevelDB admits one process per database, readers included.
                    hint = (" (another process has it open: LevelDB allows one process at a "
                            "time, so the workers of a distributed job need an LMDB)")  # fmt: skip
                raise CaffeError(f"{path}: cannot open LevelDB database: {e}{hint}") from None

        super().__init__(path, _shared_handle("leveldb", path, ".", opener))


def open_db(path: str, backend: str | int = "lmdb") -> DBReader:
    """Open the database at `path` for reading; errors name the path."""
    if resolve_backend(backend) == "lmdb":
        return LmdbReader(path)
    return LevelDbReader(path)


# --------------------------------------------------------------------------- writing


class DBWriter:
    """Buffered puts, committed every COMMIT_EVERY_PUTS puts and on commit()/close()."""

    path: str

    def __init__(self) -> None:
        self._pending: list[tuple[bytes, bytes]] = []
        self.count = 0  # records written so far (committed or pending)

    def put(self, key: bytes | str, value: bytes) -> None:
        self._pending.append((key.encode() if isinstance(key, str) else key, bytes(value)))
        self.count += 1
        if len(self._pending) >= COMMIT_EVERY_PUTS:
            self.commit()

    def commit(self) -> None:
        if self._pending:
            self._write(self._pending)
            self._pending = []

    def _write(self, items: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> DBWriter:
        return self

    def __exit__(self, exc_type, *exc: object) -> None:  # type: ignore[no-untyped-def]
        if exc_type is None:
            self.close()
        else:
            self._pending = []  # do not commit half a batch after an error
            self.close()


class LmdbWriter(DBWriter):
    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        try:
            self._env = lmdb.open(
                path, map_size=_LMDB_INITIAL_MAP_BYTES, subdir=True, meminit=False, max_dbs=0
            )
        except lmdb.Error as e:
            raise CaffeError(f"{path}: cannot create LMDB database: {e}") from None

    def _write(self, items: list[tuple[bytes, bytes]]) -> None:
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for key, value in items:
                        txn.put(key, value)
                return
            except lmdb.MapFullError:
                # The transaction was aborted; grow the map and write the whole batch again.
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    def close(self) -> None:
        if self._env is not None:
            self.commit()
            self._env.close()
            self._env = None


class LevelDbWriter(DBWriter):
    def __init__(self, path: str) -> None:
        super().__init__()
        plyvel = _plyvel()
        if plyvel is None:
            raise _leveldb_unavailable(path)
        self.path = path
        try:
            self._db = plyvel.DB(path, create_if_missing=True, write_buffer_size=64 << 20)
        except plyvel.Error as e:
            raise CaffeError(f"{path}: cannot create LevelDB database: {e}") from None

    def _write(self, items: list[tuple[bytes, bytes]]) -> None:
        with self._db.write_batch() as batch:
            for key, value in items:
                batch.put(key, value)

    def close(self) -> None:
        if self._db is not None:
            self.commit()
            self._db.close()
            self._db = None


def open_db_writer(path: str, backend: str | int = "lmdb", overwrite: bool = False) -> DBWriter:
    """Create a new database at `path`. An existing one is an error unless `overwrite`.

    With `overwrite`, an existing LMDB's data.mdb/lock.mdb are removed (nothing else in the
    directory is touched); an existing LevelDB is reused and its keys overwritten.
    """
    name = resolve_backend(backend)
    if os.path.exists(path):
        if not overwrite:
            raise CaffeError(f"{path}: already exists; remove it or choose another name")
        if name == "lmdb":
            if not os.path.isdir(path):
                raise CaffeError(f"{path}: exists and is not a directory")
            for file_name in ("data.mdb", "lock.mdb"):
                target = os.path.join(path, file_name)
                if os.path.exists(target):
                    os.remove(target)
    if name == "lmdb":
        return LmdbWriter(path)
    return LevelDbWriter(path)
