"""Files written with the mode they are meant to have, whatever the process's umask.

``open()`` and ``Path.write_text`` create files with 0o666 minus the umask, so under
``umask 000`` a public key, an Evidence Pack or a kept checkpoint would be world-writable
(issue 20, item 8): anyone on the machine could swap the public key a verifier pins.
These helpers set the mode explicitly (``fchmod`` on the open descriptor, before any byte
is written, and ``chmod`` on folders they create).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["PRIVATE", "PUBLIC", "PUBLIC_DIR", "make_dirs", "write_file", "write_private"]

PUBLIC = 0o644
"""Readable by all, writable by the owner only: public keys, packs, checkpoints."""
PUBLIC_DIR = 0o755
PRIVATE = 0o600
"""The owner's alone: private keys, a home's configuration."""


def write_file(path: str | Path, data: bytes | str, mode: int = PUBLIC) -> None:
    """Create or replace ``path`` with ``data`` (str: UTF-8), mode exactly ``mode``."""
    _write(path, data, os.O_TRUNC, mode, sync=False)


def _write(path: str | Path, data: bytes | str, flag: int, mode: int, sync: bool) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | flag, mode)
    try:
        os.fchmod(fd, mode)  # the mode asked for, whatever the umask
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: str | Path, data: bytes | str, *, replace: bool = False) -> None:
    """Write a file only its owner may read (mode 0600), flushed to disk before returning.

    ``replace=False``: create ``path``, never overwrite it (``FileExistsError``).
    ``replace=True``: write ``<path>.tmp`` and rename it over ``path``, so a reader sees
    the old file or the new one, never half of one.
    """
    path = Path(path)
    target = path.with_name(path.name + ".tmp") if replace else path
    _write(target, data, os.O_TRUNC if replace else os.O_EXCL, PRIVATE, sync=True)
    if replace:
        os.replace(target, path)


def make_dirs(path: str | Path, mode: int = PUBLIC_DIR, exist_ok: bool = False) -> None:
    """``mkdir -p`` whose new folders get exactly ``mode``."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    path.mkdir(mode=mode, parents=True, exist_ok=exist_ok)
    for new in missing:
        os.chmod(new, mode)
