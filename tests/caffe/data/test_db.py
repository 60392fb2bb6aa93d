import random

import pytest

import caffe.data.db
from caffe.data.db import COMMIT_EVERY_PUTS, open_db, open_db_writer, resolve_backend
from caffe.errors import CaffeError
from caffe.proto import caffe_pb2

# plyvel is a test dependency (pyproject's test extra): LevelDB runs in CI, never skips.
BACKENDS = ["lmdb", "leveldb"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_cursor_walks_keys_in_byte_order(tmp_path, backend):
    keys = [f"{i:05d}_k".encode() for i in range(50)] + [b"B", b"a", b"\x00z"]
    shuffled = keys[:]
    random.Random(0).shuffle(shuffled)
    with open_db_writer(str(tmp_path / "db"), backend) as writer:
        for key in shuffled:
            writer.put(key, key[::-1])
    with open_db(str(tmp_path / "db"), backend) as reader:
        assert [k for k, _ in reader] == sorted(keys)
        cursor = reader.cursor()
        first = cursor.key()
        for _ in range(len(keys)):
            assert cursor.value() == cursor.key()[::-1]
            cursor.next()
        assert not cursor.valid
        cursor.seek_to_first()
        assert cursor.valid and cursor.key() == first == min(keys)
        cursor.close()


def test_writer_commits_every_thousand_puts(tmp_path):
    writer = open_db_writer(str(tmp_path / "db"))
    for i in range(COMMIT_EVERY_PUTS - 1):
        writer.put(f"{i:08d}", b"x")
    assert len(writer._pending) == COMMIT_EVERY_PUTS - 1
    writer.put("last", b"x")
    assert len(writer._pending) == 0
    writer.put("one more", b"y")
    writer.close()
    assert len(open_db(str(tmp_path / "db"))) == COMMIT_EVERY_PUTS + 1


def test_lmdb_map_grows_as_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(caffe.data.db, "_LMDB_INITIAL_MAP_BYTES", 64 << 10)
    value = bytes(range(256)) * 64  # 16 KiB per record, 2 MiB in all
    with open_db_writer(str(tmp_path / "db")) as writer:
        for i in range(128):
            writer.put(f"{i:04d}", value)
    reader = open_db(str(tmp_path / "db"))
    assert len(reader) == 128 and all(v == value for _, v in reader)


def test_readers_of_one_database_share_it_and_walk_independently(tmp_path):
    with open_db_writer(str(tmp_path / "db")) as writer:
        for key in (b"a", b"b", b"c"):
            writer.put(key, key)
    one, two = open_db(str(tmp_path / "db")), open_db(str(tmp_path / "db"))
    assert one._shared is two._shared
    c1, c2 = one.cursor(), two.cursor()
    c1.next()
    c1.next()
    assert (c1.key(), c2.key()) == (b"c", b"a")
    one.close()
    c2.next()
    assert c2.key() == b"b", "closing one reader leaves the others working"


def test_missing_or_foreign_directories_are_named(tmp_path):
    with pytest.raises(CaffeError, match="no_db: no such LMDB"):
        open_db(str(tmp_path / "no_db"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(CaffeError, match="plain: not an LMDB database"):
        open_db(str(tmp_path / "plain"))


def test_existing_database_needs_overwrite(tmp_path):
    path = str(tmp_path / "db")
    with open_db_writer(path) as writer:
        writer.put("old", b"1")
    with pytest.raises(CaffeError, match="already exists"):
        open_db_writer(path)
    with open_db_writer(path, overwrite=True) as writer:
        writer.put("new", b"2")
    assert list(open_db(path)) == [(b"new", b"2")]


def test_error_inside_a_writer_block_drops_the_pending_batch(tmp_path):
    path = str(tmp_path / "db")
    with pytest.raises(RuntimeError), open_db_writer(path) as writer:
        writer.put("a", b"1")
        raise RuntimeError("converter failed")
    assert list(open_db(path)) == []


def test_backend_names():
    assert resolve_backend("LMDB") == "lmdb"
    assert resolve_backend(caffe_pb2.DataParameter.LEVELDB) == "leveldb"
    with pytest.raises(CaffeError, match="rocksdb"):
        resolve_backend("rocksdb")


def test_leveldb_without_plyvel_says_how_to_proceed(tmp_path, monkeypatch):
    monkeypatch.setattr(caffe.data.db, "_plyvel", lambda: None)
    with pytest.raises(CaffeError, match=r"plyvel.*--backend lmdb"):
        open_db(str(tmp_path), "leveldb")
    with pytest.raises(CaffeError, match="plyvel"):
        open_db_writer(str(tmp_path / "new"), "leveldb")


def test_a_leveldb_open_elsewhere_says_so(tmp_path):
    import plyvel

    with open_db_writer(str(tmp_path / "db"), "leveldb") as writer:
        writer.put(b"k", b"v")
    holder = plyvel.DB(str(tmp_path / "db"))  # as another process would hold it
    try:
        with pytest.raises(CaffeError, match=r"another process has it open.*need an LMDB"):
            open_db(str(tmp_path / "db"), "leveldb")
    finally:
        holder.close()
