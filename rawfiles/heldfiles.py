"""Read files that SQLite may have open, without ever closing a descriptor to them.

On Linux (POSIX advisory locks), closing *any* descriptor of a file drops every lock
this process holds on it, whichever descriptor took the lock (SQLite's "How To Corrupt
Your Database Files", 2.2). A raw scan that opened and closed ``events.sqlite-shm`` or
``-wal`` while this process had a connection to them let another process (a backup, a
``mode=ro`` reader) think the file unused, reset the shared memory this process had
mapped, and kill it with SIGBUS (issue 20, item 2). So every read of a file under a
ledger home goes through one descriptor per file (device, inode), opened read-only on
first use and kept open for the life of the process; reads are ``pread`` at explicit
offsets, so threads and forked scan workers can share the descriptor.

The cost: one descriptor per distinct file read (a home has a few dozen); a file
replaced under the same name (a new inode) gets a new descriptor, the old one is kept.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["HeldFile", "held_fd", "read_file"]

_HELD: dict[tuple[int, int], int] = {}
_LOCK = threading.Lock()


def held_fd(path: str | Path) -> int:
    """This process's read-only descriptor of the file at ``path`` (never closed)."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    with _LOCK:
        fd = _HELD.get(key)
        if fd is not None:
            return fd
        if len(_HELD) >= 64:
            _prune()
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        fst = os.fstat(fd)
        got = (fst.st_dev, fst.st_ino)
        # the name may point to a new file since the stat: the descriptor says which one
        # it is; a second descriptor of a file already held is kept too, never closed
        _HELD.setdefault(got, fd)
        return fd


def _prune() -> None:
    """Close the descriptors of files that no longer exist (no name links to them: a
    deleted home, a WAL SQLite removed at its last close), so a long-lived process (a
    server, a test session) does not run out of descriptors. No process can open such
    a file again, so no lock of another process needs this one's to be kept."""
    for key, fd in list(_HELD.items()):
        try:
            gone = os.fstat(fd).st_nlink == 0
        except OSError:
            gone = True
        if gone:
            del _HELD[key]
            try:
                os.close(fd)
            except OSError:
                pass


class HeldFile:
    """A minimal binary file object over :func:`held_fd` (``seek``, ``read``,
    ``readinto``); leaving the ``with`` block does not close the descriptor."""

    def __init__(self, path: str | Path) -> None:
        self.fd = held_fd(path)
        self.pos = 0

    def __enter__(self) -> HeldFile:
        return self

    def __exit__(self, *_exc: Any) -> None:
        return None

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 2:
            self.pos = os.fstat(self.fd).st_size + offset
        elif whence == 1:
            self.pos += offset
        else:
            self.pos = offset
        return self.pos

    def readinto(self, view: Any) -> int:
        n = os.preadv(self.fd, [view], self.pos)
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = max(0, os.fstat(self.fd).st_size - self.pos)
        data = os.pread(self.fd, size, self.pos)
        self.pos += len(data)
        return data


def read_file(path: str | Path) -> bytes:
    """The whole file, read through the held descriptor."""
    return HeldFile(path).read()
