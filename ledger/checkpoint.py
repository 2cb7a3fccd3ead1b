"""C2SP checkpoints (c2sp.org/tlog-checkpoint) in signed notes (c2sp.org/signed-note), Ed25519.

Pure code: text and trusted public keys in, a verified :class:`Checkpoint` out, or a
:class:`CheckpointError` naming the failed step.  The step numbers are those of
``docs/spec/checkpoint.md``:

1. parse the note, 2. find the trusted key's signature line, 3. verify Ed25519,
4. parse the checkpoint body, 5. check the origin.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

from ledger.errors import VerificationFailed

__all__ = [
    "ALG_ED25519",
    "MAX_NOTE_BYTES",
    "MAX_SIGNATURES",
    "Checkpoint",
    "CheckpointError",
    "NoteSignature",
    "format_body",
    "key_id",
    "parse_body",
    "parse_note",
    "parse_vkey",
    "sign_checkpoint",
    "sign_note",
    "verify_checkpoint",
    "verify_note",
    "vkey_string",
]

ALG_ED25519 = 0x01
KEY_ID_SIZE = 4
PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
ROOT_SIZE = 32
MAX_NOTE_BYTES = 1 << 20
MAX_SIGNATURES = 100
MAX_TREE_SIZE = (1 << 63) - 1
SIGNATURE_PREFIX = "\u2014 "  # em dash, space

STEPS = {
    1: "parse note",
    2: "find trusted signature",
    3: "verify signature",
    4: "parse checkpoint body",
    5: "check origin",
}

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")
_DECIMAL = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_KEY_HASH = re.compile(r"[0-9a-f]{8}", re.ASCII)


class CheckpointError(VerificationFailed, ValueError):
    """A note or checkpoint failed verification at ``step`` (see ``STEPS``)."""

    def __init__(self, step: int, detail: str) -> None:
        self.step = step
        self.detail = detail
        super().__init__(f"checkpoint step {step} ({STEPS[step]}): {detail}")


@dataclass(frozen=True)
class NoteSignature:
    """One parsed signature line: ``— <key_name> base64(key_id || signature)``."""

    key_name: str
    key_id: bytes
    signature: bytes

    @property
    def label(self) -> str:
        """``name+keyid`` as in Go's error messages."""
        return f"{self.key_name}+{self.key_id.hex()}"


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: origin, size and RFC 9162 root; construction checks step 4's rules."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin:
            raise CheckpointError(4, "origin line is empty")
        _check_line(self.origin, "origin")
        if not isinstance(self.size, int) or isinstance(self.size, bool):
            raise CheckpointError(4, f"tree size {self.size!r} is not an integer")
        if not 0 <= self.size <= MAX_TREE_SIZE:
            raise CheckpointError(4, f"tree size {self.size} is outside 0..2^63-1")
        if not isinstance(self.root, bytes) or len(self.root) != ROOT_SIZE:
            length = len(self.root) if isinstance(self.root, bytes) else "?"
            raise CheckpointError(4, f"root hash is {length} bytes, expected {ROOT_SIZE}")
        if not isinstance(self.extensions, tuple):
            raise CheckpointError(4, "extensions must be a tuple of lines")
        for number, line in enumerate(self.extensions, start=4):
            if not isinstance(line, str) or not line:
                raise CheckpointError(4, f"extension line {number} is empty")
            _check_line(line, f"extension line {number}")


def _check_line(line: str, what: str) -> None:
    """A body line: no newline, no control character, encodable as UTF-8."""
    if "\n" in line or _CONTROL.search(line):
        raise CheckpointError(4, f"{what} contains a newline or control character")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CheckpointError(4, f"{what} is not valid UTF-8") from e


def _b64decode_canonical(text: str) -> bytes:
    """Standard base64 (RFC 4648 §4) with padding, rejecting any non-canonical spelling."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as e:
        raise ValueError(f"not standard base64: {e}") from e
    if base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("non-canonical base64")
    return raw


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid signed-note key name, or None."""
    if not isinstance(name, str) or not name:
        return "key name is empty"
    if "+" in name or any(ch.isspace() for ch in name):
        return f"key name {name!r} contains '+' or a space"
    if _CONTROL.search(name):
        return f"key name {name!r} contains a control character"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return f"key name {name!r} is not valid UTF-8"
    return None


def key_id(key_name: str, public_key: bytes) -> bytes:
    """Ed25519 key ID: ``SHA-256(name || 0x0A || 0x01 || public_key)[:4]``."""
    problem = _name_problem(key_name)
    if problem is not None:
        raise ValueError(problem)
    if not isinstance(public_key, bytes) or len(public_key) != PUBLIC_KEY_SIZE:
        raise ValueError(f"Ed25519 public key must be {PUBLIC_KEY_SIZE} bytes")
    data = key_name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public_key
    return hashlib.sha256(data).digest()[:KEY_ID_SIZE]


def vkey_string(key_name: str, public_key: bytes) -> str:
    """Verifier key text: ``<name>+<hex key id>+<base64(0x01 || public key)>``."""
    kid = key_id(key_name, public_key)
    return f"{key_name}+{kid.hex()}+{_b64(bytes([ALG_ED25519]) + public_key)}"


def parse_vkey(vkey: str) -> tuple[str, bytes]:
    """Parse a verifier key into ``(name, 32-byte public key)``; ``ValueError`` if malformed."""
    parts = vkey.split("+", 2) if isinstance(vkey, str) else []
    if len(parts) != 3:
        raise ValueError("verifier key is not <name>+<key id>+<key>")
    name, hash16, key64 = parts
    problem = _name_problem(name)
    if problem is not None:
        raise ValueError(f"verifier key: {problem}")
    if not _KEY_HASH.fullmatch(hash16):
        raise ValueError(f"verifier key id {hash16!r} is not 8 lowercase hex digits")
    try:
        key = _b64decode_canonical(key64)
    except ValueError as e:
        raise ValueError(f"verifier key material: {e}") from e
    if len(key) != 1 + PUBLIC_KEY_SIZE or key[0] != ALG_ED25519:
        raise ValueError("verifier key is not 0x01 followed by a 32-byte Ed25519 key")
    public_key = key[1:]
    expected = key_id(name, public_key)
    if expected.hex() != hash16:
        raise ValueError(f"verifier key id {hash16} does not match key (expected {expected.hex()})")
    return name, public_key


def format_body(cp: Checkpoint) -> str:
    """Checkpoint note text: origin, decimal size, base64 root, extension lines; each + ``\\n``."""
    lines = [cp.origin, str(cp.size), _b64(cp.root), *cp.extensions]
    return "".join(line + "\n" for line in lines)


def parse_body(body: str) -> Checkpoint:
    """Step 4: parse checkpoint note text into a :class:`Checkpoint`."""
    if not body.endswith("\n"):
        raise CheckpointError(4, "checkpoint text does not end with a newline")
    lines = body[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError(4, f"checkpoint text has {len(lines)} lines, needs at least 3")
    origin, size_text, root_text, *extensions = lines
    if not _DECIMAL.fullmatch(size_text):
        raise CheckpointError(4, f"tree size {size_text[:32]!r} is not a canonical decimal")
    if len(size_text) > 19:
        raise CheckpointError(4, f"tree size {size_text[:32]} is outside 0..2^63-1")
    try:
        root = _b64decode_canonical(root_text)
    except ValueError as e:
        raise CheckpointError(4, f"root hash line: {e}") from e
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def parse_note(text: str | bytes) -> tuple[str, list[NoteSignature]]:
    """Step 1: split a signed note into its text and syntactically valid signature lines."""
    if isinstance(text, bytes):
        if len(text) > MAX_NOTE_BYTES:
            raise CheckpointError(1, f"note is {len(text)} bytes, limit {MAX_NOTE_BYTES}")
        try:
            note = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(1, f"note is not valid UTF-8 at byte {e.start}") from e
    elif isinstance(text, str):
        note = text
        if len(note) > MAX_NOTE_BYTES:
            raise CheckpointError(1, f"note is over the {MAX_NOTE_BYTES}-byte limit")
        try:
            size = len(note.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise CheckpointError(1, f"note is not valid UTF-8 at character {e.start}") from e
        if size > MAX_NOTE_BYTES:
            raise CheckpointError(1, f"note is {size} bytes, limit {MAX_NOTE_BYTES}")
    else:
        raise CheckpointError(1, "note is neither text nor bytes")
    control = _CONTROL.search(note)
    if control:
        raise CheckpointError(
            1, f"note has control character {control.group()!r} at character {control.start()}"
        )
    split = note.rfind("\n\n")
    if split < 0:
        raise CheckpointError(1, "note has no blank line before its signatures")
    body, block = note[: split + 1], note[split + 2 :]
    if not block.endswith("\n"):
        raise CheckpointError(1, "signature block is empty or does not end with a newline")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise CheckpointError(1, f"note has {len(lines)} signature lines, limit {MAX_SIGNATURES}")
    signatures: list[NoteSignature] = []
    for number, line in enumerate(lines, start=1):
        if not line.startswith(SIGNATURE_PREFIX):
            raise CheckpointError(1, f"signature line {number} does not start with '\u2014 '")
        name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        problem = _name_problem(name)
        if problem is not None:
            raise CheckpointError(1, f"signature line {number}: {problem}")
        try:
            raw = _b64decode_canonical(encoded)
        except ValueError as e:
            raise CheckpointError(1, f"signature line {number}: {e}") from e
        if len(raw) < KEY_ID_SIZE + 1:
            raise CheckpointError(1, f"signature line {number}: signature is {len(raw)} bytes")
        signatures.append(NoteSignature(name, raw[:KEY_ID_SIZE], raw[KEY_ID_SIZE:]))
    return body, signatures


def verify_note(note_text: str | bytes, key_name: str, public_key: bytes) -> str:
    """Steps 1-3: return the note text once every signature line of the trusted key verifies."""
    # 1. Parse.
    body, signatures = parse_note(note_text)
    # 2. Find the trusted key's lines: same name AND same key ID (others are ignored).
    try:
        trusted_id = key_id(key_name, public_key)
    except ValueError as e:
        raise CheckpointError(2, f"trusted key is malformed: {e}") from e
    label = f"{key_name}+{trusted_id.hex()}"
    mine = [s for s in signatures if s.key_name == key_name and s.key_id == trusted_id]
    if not mine:
        others = ", ".join(s.label for s in signatures[:5])
        more = f" and {len(signatures) - 5} more" if len(signatures) > 5 else ""
        raise CheckpointError(
            2, f"no signature by trusted key {label} (note is signed by {others}{more})"
        )
    # 3. Verify Ed25519 over the note text bytes; any bad line from the trusted key rejects.
    message = body.encode("utf-8")
    verifier = nacl.signing.VerifyKey(public_key)
    for sig in mine:
        if len(sig.signature) != SIGNATURE_SIZE:
            raise CheckpointError(
                3, f"signature by {label} is {len(sig.signature)} bytes, expected {SIGNATURE_SIZE}"
            )
        try:
            verifier.verify(message, sig.signature)
        except nacl.exceptions.BadSignatureError as e:
            raise CheckpointError(
                3, f"Ed25519 signature by {label} does not verify over the {len(message)}-byte text"
            ) from e
    return body


def verify_checkpoint(
    note_text: str | bytes,
    key_name: str,
    public_key: bytes,
    expected_origin: str | None = None,
) -> Checkpoint:
    """Steps 1-5: verify a signed checkpoint note and return the checkpoint it carries."""
    body = verify_note(note_text, key_name, public_key)
    # 4. Parse the checkpoint body.
    cp = parse_body(body)
    # 5. Check the origin.
    if expected_origin is not None and cp.origin != expected_origin:
        raise CheckpointError(
            5, f"origin {cp.origin[:100]!r} is not the expected {expected_origin[:100]!r}"
        )
    return cp


def sign_note(text: str, key_name: str, signing_key: nacl.signing.SigningKey) -> str:
    """Sign note text with Ed25519; returns ``text + "\\n" + "— name base64(id || sig)\\n"``."""
    if not text.endswith("\n") or _CONTROL.search(text):
        raise ValueError("note text must end with a newline and contain no control characters")
    public_key = bytes(signing_key.verify_key)
    kid = key_id(key_name, public_key)
    signature = signing_key.sign(text.encode("utf-8")).signature
    note = f"{text}\n{SIGNATURE_PREFIX}{key_name} {_b64(kid + signature)}\n"
    if len(note.encode("utf-8")) > MAX_NOTE_BYTES:
        raise ValueError(f"signed note would exceed {MAX_NOTE_BYTES} bytes")
    return note


def sign_checkpoint(cp: Checkpoint, key_name: str, signing_key: nacl.signing.SigningKey) -> str:
    """Format and sign a checkpoint; the result passes :func:`verify_checkpoint`."""
    return sign_note(format_body(cp), key_name, signing_key)
