"""The signing process: Ed25519 signatures for the ledger's bulk commands (ADR 0008).

Started by :mod:`keys.signing` as ``python -I sign_worker.py CONTROL_FD`` (isolated:
nothing but the interpreter's own packages on ``sys.path``, no environment variables
read), so it imports only PyNaCl, never the caller's ``__main__`` or the ledger's
modules. It reads frames from stdin and writes only signatures to stdout:

* ``K`` u32(36), seed (32 bytes), stream number (u32): the key of a new stream, whose
  chunks are numbered from 0;
* ``M`` u32(n), then n times u32(length) message: the stream's next chunk. The answer is
  ``R`` u32(n) and the n 64-byte signatures, or ``R`` u32(0) when the parent has
  claimed the chunk: before each chunk the worker reads the claims waiting on
  ``CONTROL_FD`` (8 bytes each: stream number, first chunk the parent signs itself) and
  skips the chunks at or after the lowest claim of the current stream.

It exits when stdin closes (its parent ended) or on a malformed frame. It writes nothing
else and keeps nothing on disk.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import BinaryIO

from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

_HEAD = struct.Struct(">cI")
_LEN = struct.Struct(">I")
_KEY = struct.Struct(">32sI")
_CLAIM = struct.Struct(">II")
_NONE = 2**32


def serve(read: BinaryIO, write: BinaryIO, control: int) -> None:
    readn = read.read
    secret, stream, chunk, claimed_from = b"", -1, 0, _NONE
    pending = b""  # a claim read in part
    while True:
        head = readn(_HEAD.size)
        if len(head) != _HEAD.size:
            return
        kind, n = _HEAD.unpack(head)
        if kind == b"K" and n == _KEY.size:
            body = readn(_KEY.size)
            if len(body) != _KEY.size:
                return
            seed, stream = _KEY.unpack(body)
            secret = crypto_sign_seed_keypair(seed)[1]
            chunk, claimed_from = 0, _NONE
        elif kind == b"M" and secret:
            messages = []
            for _ in range(n):
                raw = readn(_LEN.size)
                if len(raw) != _LEN.size:
                    return
                messages.append(readn(_LEN.unpack(raw)[0]))
            try:
                pending += os.read(control, 4096)
            except BlockingIOError:
                pass
            usable = len(pending) - len(pending) % _CLAIM.size
            for number, first in _CLAIM.iter_unpack(pending[:usable]):
                if number == stream:
                    claimed_from = min(claimed_from, first)
            pending = pending[usable:]
            if chunk >= claimed_from:
                write.write(_HEAD.pack(b"R", 0))
            else:
                write.write(b"".join([_HEAD.pack(b"R", n),
                                      *[crypto_sign(m, secret)[:64] for m in messages]]))
            write.flush()
            chunk += 1
        else:
            return


if __name__ == "__main__":
    fd = int(sys.argv[1])
    os.set_blocking(fd, False)
    serve(sys.stdin.buffer, sys.stdout.buffer, fd)
