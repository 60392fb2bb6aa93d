"""Write a file so that readers see the old content or the new, never a part of it.

Used by every writer of Caffe files: prototxts (caffe/formats/proto_io.py), binary weights, solver
states and mean files (caffe/formats/weights_io.py), HDF5 weights and solver states
(caffe/formats/net_io.py, caffe/solvers/snapshot.py) and the upgrade tools.

    write_atomically(path, buffers, Error)    bytes to `path`
    with replacing(path, Error) as tmp: ...   any writer (h5py) fills `tmp`; then it replaces
    parse_temp_name(name) -> TempName | None  is `name` one of our temporary files?

Temporary files are named `<path>.<host>.<pid>.<8 hex digits>.tmp`, beside `path` (a rename
within one directory is atomic). The host and pid say who wrote it, so that a later run can
tell a temporary file abandoned by a killed process of this host (safe to remove) from one
that another live process may still be writing (left alone): see
caffe/solvers/snapshot.py's stale-file sweep.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import socket
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from caffe.errors import CaffeError

# Older versions wrote HDF5 weights to `<path>.tmp` (no owner in the name).
_TEMP_NAME = re.compile(
    r"^(?P<target>.+?)(?:\.(?P<host>[A-Za-z0-9-]+)\.(?P<pid>\d+)\.[0-9a-f]{8})?\.tmp$"
)
_FULL = (errno.ENOSPC, errno.EDQUOT)


def _host() -> str:
    """This host's name as it goes into temporary names: first label, [A-Za-z0-9-] only."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])
    return name or "localhost"


def temp_name(path: str) -> str:
    """A fresh temporary name beside `path`, never another writer's (random part)."""
    return f"{path}.{_host()}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


@dataclass(frozen=True)
class TempName:
    """What a temporary file's name says: the file it was to become, and who wrote it."""

    target: str
    host: str | None  # None: an older version's `<path>.tmp`, writer unknown
    pid: int | None

    def abandoned(self) -> bool:
        """True only if its writer was a process of this host that no longer runs."""
        if self.host != _host() or self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False  # alive, another user's
        return False


def parse_temp_name(name: str) -> TempName | None:
    """TempName for a file name (no directory) that temp_name() made, else None."""
    match = _TEMP_NAME.match(name)
    if match is None:
        return None
    pid = match.group("pid")
    return TempName(match.group("target"), match.group("host"), int(pid) if pid else None)


def failure_message(path: str, error: OSError) -> str:
    """ "Could not write file <path>: <errno text>", the same for os and h5py errors.

    h5py puts the errno in OSError.errno but a long HDF5 report in strerror; the errno's
    own text is the one line a user needs ("No space left on device").
    """
    if error.errno:
        reason = os.strerror(error.errno)
        if error.errno in _FULL:
            reason += " (the disk is full)"
    else:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"Could not write file {path}: {reason}"


@contextlib.contextmanager
def replacing(path: str, error: type[CaffeError]) -> Iterator[str]:
    """Yield a temporary name for the caller to create and fill; if the block succeeds, the
    file is fsynced and renamed over `path`.

    An OSError (inside the block or after it) raises `error(failure_message(...))`; on any
    failure the temporary file is removed and `path` is left as it was. The caller must
    close the file before the block ends (nest `with h5py.File(tmp, "x")` inside).
    """
    tmp = temp_name(path)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise error(failure_message(path, e)) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomically(path: str, buffers: Iterable[bytes], error: type[CaffeError]) -> None:
    """Write `buffers` to a temporary file beside `path`, fsync it, then rename it over `path`.

    An OSError raises `error("Could not write file <path>: <reason>")`; on any failure the
    temporary file is removed and `path` is left as it was.
    """
    with replacing(path, error) as tmp:
        # O_EXCL: never clobbers another writer's file; mode 0o666 lets the umask decide
        # permissions, as for any file the user creates.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            for buffer in buffers:
                f.write(buffer)
