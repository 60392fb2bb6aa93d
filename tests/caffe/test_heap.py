"""caffe/heap.py: CAFFE_MALLOC sets glibc's thresholds (keep, the default) or leaves them
(system), when the first Net is built; glibc's own settings win; a wrong value is an error
that names the variable."""

import os
import subprocess
import sys

import pytest

import caffe.heap as heap
from caffe.errors import CaffeError


class FakeMallopt:
    """Records its calls; answers 1 (success), as glibc's mallopt does."""

    argtypes: tuple = ()

    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


class FakeLibc:
    def __init__(self):
        self.mallopt = FakeMallopt()


@pytest.fixture
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(heap.ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(heap, "_glibc", lambda: True)
    for name in ("CAFFE_MALLOC", *heap._GLIBC_SETTINGS):
        monkeypatch.delenv(name, raising=False)
    return fake.mallopt


def test_keep_by_default_sets_both_thresholds(libc):
    assert heap.keep_step_buffers()
    assert libc.calls == [(-3, 32 << 20), (-1, 256 << 20)]  # M_MMAP_THRESHOLD, M_TRIM_...


@pytest.mark.parametrize("value", ["keep", " KEEP ", ""])
def test_keep_spelled_any_way(libc, monkeypatch, value):
    monkeypatch.setenv("CAFFE_MALLOC", value)
    assert heap.keep_step_buffers()


def test_system_leaves_glibc_alone(libc, monkeypatch):
    monkeypatch.setenv("CAFFE_MALLOC", "system")
    assert not heap.keep_step_buffers()
    assert libc.calls == []


@pytest.mark.parametrize("name", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_glibc_settings_of_the_user_win(libc, monkeypatch, name):
    monkeypatch.setenv(name, "1048576")
    assert not heap.keep_step_buffers()
    assert libc.calls == []


def test_other_allocators_are_left_alone(libc, monkeypatch):
    monkeypatch.setattr(heap, "_glibc", lambda: False)
    assert not heap.keep_step_buffers()
    assert libc.calls == []


def test_a_wrong_value_names_the_variable(libc, monkeypatch):
    monkeypatch.setenv("CAFFE_MALLOC", "jemalloc")
    with pytest.raises(CaffeError, match=r"CAFFE_MALLOC='jemalloc': want 'keep' or 'system'"):
        heap.keep_step_buffers()


# A fresh process whose mallopt only records (torch is imported first: it loads its own
# libraries through ctypes.CDLL), printing how many calls each step made so far.
RECORDING = """
import ctypes, torch
calls = []
def mallopt(param, value):
    calls.append(param)
    return 1
libc = type("Libc", (), {})()
libc.mallopt = mallopt
ctypes.CDLL = lambda name: libc
import caffe
print(len(calls))
import poseidon.torch
print(len(calls))
from caffe.formats.proto_io import parse_net_text
text = 'layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 } } }'
caffe.Net(parse_net_text(text))
print(len(calls))
caffe.Net(parse_net_text(text))
print(len(calls))
"""


def test_the_first_net_applies_it_not_an_import():
    # Not at `import caffe`, nor through poseidon.torch (a plain PyTorch program keeps its
    # allocator); once, at the first Net.
    env = {k: v for k, v in os.environ.items() if k not in ("CAFFE_MALLOC", *heap._GLIBC_SETTINGS)}
    out = subprocess.run(
        [sys.executable, "-c", RECORDING], capture_output=True, text=True, env=env, check=True
    )
    expected = ["0", "0", "2", "2"] if heap._glibc() else ["0", "0", "0", "0"]
    assert out.stdout.split() == expected, out.stderr[-2000:]


@pytest.mark.skipif(not heap._glibc(), reason="glibc only")
def test_this_glibc_takes_the_settings(monkeypatch):
    monkeypatch.delenv("CAFFE_MALLOC", raising=False)
    for name in heap._GLIBC_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert heap.keep_step_buffers()  # the real mallopt answered 1 twice


def test_once_decides_once(libc, monkeypatch):
    monkeypatch.setattr(heap, "_outcome", None)
    assert heap.keep_step_buffers_once() and heap.keep_step_buffers_once()
    assert len(libc.calls) == 2  # one pair of mallopt calls


def test_once_asks_again_after_an_error(libc, monkeypatch):
    monkeypatch.setattr(heap, "_outcome", None)
    monkeypatch.setenv("CAFFE_MALLOC", "wrong")
    with pytest.raises(CaffeError, match="CAFFE_MALLOC"):
        heap.keep_step_buffers_once()
    monkeypatch.setenv("CAFFE_MALLOC", "system")
    assert not heap.keep_step_buffers_once()
