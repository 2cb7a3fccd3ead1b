"""Witness cosignatures (c2sp.org/tlog-cosignature, Ed25519 ``cosignature/v1``). Pure.

A cosignature is a signed-note signature line on a checkpoint:

    — <witness name> base64(key ID || u64 BE timestamp || Ed25519 signature)

* key ID: ``SHA-256(name || 0x0A || 0x04 || 32-byte public key)[:4]``;
* signed message: ``"cosignature/v1\\n" || "time <timestamp>\\n" || checkpoint body``
  (the whole note text, extension lines included, without signature lines).

Verification takes text and trusted keys and returns verified values or raises
:class:`CosignatureError`; it opens nothing. docs/spec/witness.md numbers the steps.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

from ledger.checkpoint import (
    SIGNATURE_PREFIX,
    CheckpointError,
    NoteSignature,
    parse_note,
)
from ledger.errors import VerificationFailed

ALG_COSIGNATURE_V1 = 0x04
COSIGNATURE_HEADER = "cosignature/v1\n"
MAX_TIMESTAMP = (1 << 63) - 1
_TS = struct.Struct(">Q")
_KEY_HASH = re.compile(r"[0-9a-f]{8}", re.ASCII)


class CosignatureError(VerificationFailed, ValueError):
    """A cosignature or witness key is malformed or does not verify."""


@dataclass(frozen=True)
class WitnessKey:
    """A trusted cosigner: its name and 32-byte Ed25519 public key."""

    name: str
    public_key: bytes

    @property
    def key_id(self) -> bytes:
        return cosigner_key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        return witness_vkey(self.name, self.public_key)


@dataclass(frozen=True)
class Cosignature:
    """A verified cosignature of one checkpoint body."""

    name: str
    key_id: bytes
    timestamp: int
    signature: bytes

    def line(self) -> str:
        raw = self.key_id + _TS.pack(self.timestamp) + self.signature
        return f"{SIGNATURE_PREFIX}{self.name} {base64.b64encode(raw).decode()}\n"


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "+" in name or any(c.isspace() for c in name) \
            or any(ord(c) < 0x20 for c in name):
        raise CosignatureError(f"cosigner name {name!r} is empty or has '+', a space or a "
                               "control character")


def cosigner_key_id(name: str, public_key: bytes) -> bytes:
    """``SHA-256(name || 0x0A || 0x04 || public key)[:4]``."""
    _check_name(name)
    if not isinstance(public_key, bytes) or len(public_key) != 32:
        raise CosignatureError("an Ed25519 cosigner public key has 32 bytes")
    return hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public_key
                          ).digest()[:4]


def witness_vkey(name: str, public_key: bytes) -> str:
    """Verifier key text with signature type 0x04: ``name+hexid+base64(0x04 || key)``."""
    kid = cosigner_key_id(name, public_key)
    material = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + public_key).decode()
    return f"{name}+{kid.hex()}+{material}"


def parse_witness_vkey(vkey: str) -> WitnessKey:
    """Parse a cosigner vkey (type 0x04); :class:`CosignatureError` names what is wrong."""
    parts = vkey.strip().split("+", 2) if isinstance(vkey, str) else []
    if len(parts) != 3:
        raise CosignatureError("witness key is not <name>+<key id>+<base64 key>")
    name, hash8, material = parts
    _check_name(name)
    if not _KEY_HASH.fullmatch(hash8):
        raise CosignatureError(f"witness key id {hash8!r} is not 8 lowercase hex digits")
    try:
        raw = base64.b64decode(material, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CosignatureError(f"witness key material is not base64: {e}") from e
    if base64.b64encode(raw).decode() != material:
        raise CosignatureError("witness key material is not canonical base64")
    if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
        raise CosignatureError(
            "witness key is not type 0x04 (cosignature/v1) with a 32-byte Ed25519 key"
            + (" (type 0x01 is a log key, not a witness key)" if raw[:1] == b"\x01" else ""))
    key = WitnessKey(name, raw[1:])
    if key.key_id.hex() != hash8:
        raise CosignatureError(f"witness key id {hash8} does not match its key "
                               f"(expected {key.key_id.hex()})")
    return key


def signed_message(body: str, timestamp: int) -> bytes:
    """The bytes a cosignature/v1 signs: header line, time line, then the note text."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise CosignatureError(f"timestamp {timestamp} is outside 0..2^63-1")
    return f"{COSIGNATURE_HEADER}time {timestamp}\n{body}".encode()


def cosign(body: str, name: str, signing_key: nacl.signing.SigningKey,
           timestamp: int) -> Cosignature:
    """Cosign a checkpoint's note text (the body, ending in LF) at ``timestamp``."""
    if not body.endswith("\n"):
        raise CosignatureError("the checkpoint text must end with a newline")
    public_key = bytes(signing_key.verify_key)
    sig = bytes(signing_key.sign(signed_message(body, timestamp)).signature)
    return Cosignature(name, cosigner_key_id(name, public_key), timestamp, sig)


def split_cosignature(sig: NoteSignature) -> tuple[int, bytes]:
    """``(timestamp, 64-byte signature)`` of a line's signature bytes; raise if not 72."""
    if len(sig.signature) != 8 + 64:
        raise CosignatureError(f"cosignature by {sig.label} is {len(sig.signature)} bytes after "
                               "its key id, expected 72 (u64 timestamp || Ed25519 signature)")
    (timestamp,) = _TS.unpack(sig.signature[:8])
    if timestamp > MAX_TIMESTAMP:
        raise CosignatureError(f"cosignature by {sig.label}: timestamp over 2^63-1")
    return timestamp, sig.signature[8:]


def verify_cosignature(body: str, sig: NoteSignature, key: WitnessKey) -> Cosignature:
    """Verify one signature line of ``key`` over ``body``."""
    if sig.key_name != key.name or sig.key_id != key.key_id:
        raise CosignatureError(f"line {sig.label} is not by witness {key.vkey}")
    timestamp, raw = split_cosignature(sig)
    try:
        nacl.signing.VerifyKey(key.public_key).verify(signed_message(body, timestamp), raw)
    except nacl.exceptions.BadSignatureError as e:
        raise CosignatureError(
            f"cosignature by {sig.label} (time {timestamp}) does not verify over this "
            "checkpoint: it was made for another checkpoint, or altered") from e
    return Cosignature(sig.key_name, sig.key_id, timestamp, raw)


@dataclass(frozen=True)
class CosignatureCheck:
    """What :func:`check_cosignatures` found in one note."""

    body: str
    valid: dict[str, Cosignature]  # by witness vkey
    unknown: list[str]  # labels (name+keyid) of lines by keys not trusted (ignored)


def check_cosignatures(note: str | bytes, witnesses: list[WitnessKey]) -> CosignatureCheck:
    """Verify the cosignatures of trusted ``witnesses`` in a signed note.

    Lines of unknown keys are ignored (listed in ``unknown``); a line of a trusted witness
    that does not verify raises :class:`CosignatureError` (it is not merely absent: someone
    put a cosignature of another checkpoint, or an altered one, on this note).
    """
    try:
        body, sigs = parse_note(note)
    except CheckpointError as e:
        raise CosignatureError(str(e)) from e
    by_id = {(w.name, w.key_id): w for w in witnesses}
    valid: dict[str, Cosignature] = {}
    unknown: list[str] = []
    for sig in sigs:
        key = by_id.get((sig.key_name, sig.key_id))
        if key is None:
            unknown.append(sig.label)
            continue
        valid[key.vkey] = verify_cosignature(body, sig, key)
    return CosignatureCheck(body, valid, unknown)


def add_lines(note: str, lines: list[str]) -> str:
    """``note`` with signature ``lines`` appended (each ``— ...\\n``), skipping repeats."""
    have = set(note.split("\n"))
    extra = [ln for ln in lines if ln.rstrip("\n") not in have]
    return note + "".join(ln if ln.endswith("\n") else ln + "\n" for ln in extra)
