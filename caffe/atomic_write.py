"""Write a file so that readers see the old content or the new, never a part of it.

Used by every writer of Caffe files: prototxts (caffe/proto_io.py), binary weights, solver
states and mean files (caffe/weights_io.py), and the upgrade tools.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable

from caffe.errors import CaffeError


def write_atomically(path: str, buffers: Iterable[bytes], error: type[CaffeError]) -> None:
    """Write `buffers` to a temporary file beside `path`, fsync it, then rename it over `path`.

    An OSError raises `error("Could not write file <path>: <reason>")`; on any failure the
    temporary file is removed and `path` is left as it was.
    """
    # O_EXCL with a random name: never clobbers another writer's temporary file; mode 0o666
    # lets the umask decide permissions, as for any file the user creates.
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise error(f"Could not write file {path}: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            for buffer in buffers:
                f.write(buffer)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise error(f"Could not write file {path}: {e.strerror}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
