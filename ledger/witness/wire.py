"""Wire formats: the tlog-witness ``add-checkpoint`` body and answer, and tlog-proof files.

Pure text in and out (c2sp.org/tlog-witness, c2sp.org/tlog-proof); a malformed input
raises :class:`WireError` saying which line is wrong.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from ledger.checkpoint import SIGNATURE_PREFIX
from ledger.errors import InputError

MAX_PROOF_LINES = 63
MAX_BODY_BYTES = (1 << 20) + 64 * 64  # a note of at most 1 MiB and the proof lines
SIZE_CONTENT_TYPE = "text/x.tlog.size"
PROOF_HEADER = "c2sp.org/tlog-proof@v1"
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,18}", re.ASCII)


class WireError(InputError):
    """A request, answer or proof file does not follow its format."""


def _hash(line: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(line.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error, ValueError) as e:
        raise WireError(f"{what} is not base64") from e
    if len(raw) != 32 or base64.b64encode(raw).decode() != line:
        raise WireError(f"{what} is not the canonical base64 of a 32-byte hash")
    return raw


def _size(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text) or int(text) > (1 << 63) - 1:
        raise WireError(f"{what} {text[:24]!r} is not a decimal size without leading zeros")
    return int(text)


@dataclass(frozen=True)
class AddCheckpoint:
    """An ``add-checkpoint`` request: old size, consistency proof, the signed checkpoint."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str

    def body(self) -> bytes:
        lines = [f"old {self.old_size}", *(base64.b64encode(p).decode() for p in self.proof)]
        return ("".join(ln + "\n" for ln in lines) + "\n" + self.note).encode()


def parse_add_checkpoint(body: bytes) -> AddCheckpoint:
    """Parse a request body; the note is returned as text for the signed-note parser."""
    if len(body) > MAX_BODY_BYTES:
        raise WireError(f"request body is {len(body)} bytes, limit {MAX_BODY_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"request body is not UTF-8 at byte {e.start}") from e
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise WireError("request has no empty line before the checkpoint")
    lines = head.split("\n")
    first = lines[0]
    if not first.startswith("old "):
        raise WireError("the first line must be 'old <size>'")
    old = _size(first[4:], "old size")
    if len(lines) - 1 > MAX_PROOF_LINES:
        raise WireError(f"{len(lines) - 1} consistency proof lines, limit {MAX_PROOF_LINES}")
    proof = tuple(_hash(ln, f"proof line {i}") for i, ln in enumerate(lines[1:], start=1))
    # A proof sent with old size 0 is well-formed; the witness answers it with 422, after
    # the checks that come first in tlog-witness (origin, signature, sizes).
    return AddCheckpoint(old, proof, note)


def format_size(size: int) -> bytes:
    """The body of a 409 answer: the size of the latest cosigned checkpoint."""
    return f"{size}\n".encode()


def parse_size(body: bytes) -> int:
    text = body.decode("ascii", "replace")
    if not text.endswith("\n"):
        raise WireError("a text/x.tlog.size answer ends with a newline")
    return _size(text[:-1], "size")


def parse_cosignature_lines(body: bytes) -> list[str]:
    """A 200 answer: one or more signature lines, each ``— ...`` ending in LF."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WireError("the witness answer is not UTF-8") from e
    if not text.endswith("\n") or text == "\n":
        raise WireError("the witness answer is not newline-terminated signature lines")
    lines = text[:-1].split("\n")
    if any(not ln.startswith(SIGNATURE_PREFIX) for ln in lines) or len(lines) > 100:
        raise WireError("the witness answer holds a line that is not a note signature")
    return [ln + "\n" for ln in lines]


# ----------------------------------------------------------------------------- tlog-proof
@dataclass(frozen=True)
class TlogProof:
    """A c2sp.org/tlog-proof@v1 file: entry index, inclusion proof, (cosigned) checkpoint."""

    index: int
    proof: tuple[bytes, ...]
    note: str
    extra: bytes | None = None

    def text(self) -> str:
        lines = [PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines += [base64.b64encode(p).decode() for p in self.proof]
        return "".join(ln + "\n" for ln in lines) + "\n" + self.note


def parse_tlog_proof(text: str) -> TlogProof:
    head, sep, note = text.partition("\n\n")
    if not sep:
        raise WireError("tlog-proof has no empty line before the checkpoint")
    lines = head.split("\n")
    if lines[0] != PROOF_HEADER:
        raise WireError(f"tlog-proof must start with {PROOF_HEADER!r}")
    at = 1
    extra = None
    if at < len(lines) and lines[at].startswith("extra "):
        try:
            extra = base64.b64decode(lines[at][6:], validate=True)
        except (binascii.Error, ValueError) as e:
            raise WireError("tlog-proof extra line is not base64") from e
        at += 1
    if at >= len(lines) or not lines[at].startswith("index "):
        raise WireError("tlog-proof has no 'index <n>' line")
    index = _size(lines[at][6:], "index")
    proof = tuple(_hash(ln, f"proof line {i}") for i, ln in enumerate(lines[at + 1:], start=1))
    if len(proof) > 64:
        raise WireError("tlog-proof has more than 64 proof lines")
    return TlogProof(index, proof, note, extra)
