"""caffe.formats.atomic_write: temporary names say who wrote them; failures are one line naming the
file with the errno's own text, and leave no temporary file."""

import os

import h5py
import numpy as np
import pytest

from caffe.errors import WeightsError
from caffe.formats.atomic_write import (
    failure_message,
    parse_temp_name,
    replacing,
    temp_name,
    write_atomically,
)


def test_temp_names_parse_back_to_their_target_and_writer(tmp_path):
    target = str(tmp_path / "snap_iter_3.caffemodel.h5")
    name = os.path.basename(temp_name(target))
    parsed = parse_temp_name(name)
    assert parsed.target == "snap_iter_3.caffemodel.h5" and parsed.pid == os.getpid()
    assert not parsed.abandoned()  # this process is alive
    assert parse_temp_name("x.caffemodel.h5.tmp").host is None  # an older version's name
    assert parse_temp_name("x.caffemodel") is None


def test_h5py_errors_read_as_their_errno_text():
    h5py_error = OSError(28, "Can't synchronously write data (file write failed: ...)")
    assert failure_message("a.h5", h5py_error) == (
        "Could not write file a.h5: No space left on device (the disk is full)"
    )
    assert failure_message("a.h5", OSError("Unable to create file\nmore")) == (
        "Could not write file a.h5: Unable to create file"
    )


def test_replacing_an_hdf5_file_fails_cleanly_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "w.h5"
    path.write_bytes(b"old")
    full = pytest.raises(WeightsError, match=r"Could not write file .*w\.h5: No space left")
    with full, replacing(str(path), WeightsError) as tmp, h5py.File(tmp, "x") as f:
        f.create_dataset("a", data=np.zeros(3))
        raise OSError(28, "HDF5 report")
    assert os.listdir(tmp_path) == ["w.h5"] and path.read_bytes() == b"old"
    with replacing(str(path), WeightsError) as tmp, h5py.File(tmp, "x") as f:
        f.create_dataset("a", data=np.arange(3))
    with h5py.File(path, "r") as f:
        assert list(f["a"]) == [0, 1, 2]
    assert os.listdir(tmp_path) == ["w.h5"]


def test_other_exceptions_also_remove_the_temporary_file(tmp_path):
    def buffers():
        yield b"a"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(str(tmp_path / "f"), buffers(), WeightsError)
    assert os.listdir(tmp_path) == []
