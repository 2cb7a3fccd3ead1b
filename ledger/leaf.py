"""Leaf bytes of the transparency log (docs/spec/leaf.md). Pure.

A leaf commits to one stored event and never to plaintext:

    "memory-ledger/leaf/v1" 0x00 || seq (u64 BE) || originator id (16 bytes) ||
    version (u64 BE) || len(topic) (u16 BE) || topic (UTF-8) ||
    SHA-256(stored state) (32 bytes) || Ed25519 signature (64 bytes)
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any
from uuid import UUID

from ledger import envelope

LEAF_DOMAIN = b"memory-ledger/leaf/v1\x00"
_HEAD = struct.Struct(">Q16sQH")  # seq, originator id, version, topic length (big-endian)


def leaf_bytes(seq: int, originator_id: UUID | str, version: int, topic: str, state: bytes,
               signature: bytes) -> bytes:
    """The leaf of one stored event (docs/spec/leaf.md)."""
    oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    t = topic.encode()
    return b"".join((LEAF_DOMAIN, _HEAD.pack(seq, oid.bytes, version, len(t)), t,
                     hashlib.sha256(state).digest(), signature))


def leaf_of(rec: Any, opened: envelope.Opened) -> bytes:
    return leaf_bytes(int(opened.envelope["seq"]), rec.originator_id, rec.originator_version,
                      rec.topic, rec.state, opened.signature)
