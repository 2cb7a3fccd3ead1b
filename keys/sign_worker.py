"""The signing process: Ed25519 signatures for the ledger's bulk commands (ADR 0008).

Started by :mod:`keys.signing` as ``python -I sign_worker.py`` (isolated: nothing but
the interpreter's own packages on ``sys.path``, no environment variables read), so it
imports only PyNaCl, never the caller's ``__main__`` or the ledger's modules. It reads
frames from stdin and writes only signatures to stdout:

* ``K`` u32(32) seed: the key for the next messages;
* ``M`` u32(n) then n times u32(length) message: messages to sign, kept in order;
* ``E`` u32(0): write the 64-byte signatures of every message since the last ``E``.

It exits when stdin closes (its parent ended) or on a malformed frame. It writes nothing
else and keeps nothing on disk.
"""

from __future__ import annotations

import struct
import sys

from nacl.bindings import crypto_sign, crypto_sign_seed_keypair

_HEAD = struct.Struct(">cI")
_LEN = struct.Struct(">I")


def serve(read: object, write: object) -> None:
    readn = read.read  # type: ignore[attr-defined]
    secret = b""
    out: list[bytes] = []
    while True:
        head = readn(_HEAD.size)
        if len(head) != _HEAD.size:
            return
        kind, n = _HEAD.unpack(head)
        if kind == b"K" and n == 32:
            seed = readn(32)
            if len(seed) != 32:
                return
            secret = crypto_sign_seed_keypair(seed)[1]
            out = []
        elif kind == b"M" and secret:
            for _ in range(n):
                raw = readn(4)
                if len(raw) != 4:
                    return
                message = readn(_LEN.unpack(raw)[0])
                out.append(crypto_sign(message, secret)[:64])
        elif kind == b"E":
            write.write(b"".join(out))  # type: ignore[attr-defined]
            write.flush()  # type: ignore[attr-defined]
            out = []
        else:
            return


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
