"""Shared pieces of the portability formats: limits, strict JSON, instants, ids.

Nothing here opens a ledger. Every reader of untrusted bytes goes through
:func:`read_capped` (size checked before a byte is read) and :func:`loads_strict`
(duplicate keys, NaN and Infinity refused, the position named).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from ledger.errors import InputError
from ledger.inputs import REF_PATTERN, SIDECAR

#: Our provider namespace in exported records (Konshus atom, .mem episode, Persona atom).
WIRE = "x-memory-ledger"
#: Key in ``Atom.extensions`` for foreign ``.mem`` episode fields that are not ``x-`` keys.
FOREIGN = "x-mem-fields"
RESERVED = (WIRE, SIDECAR, FOREIGN)

MiB = 1024 * 1024
#: A Konshus or Persona document is read whole; above this it is refused unread.
MAX_DOCUMENT_BYTES = 32 * MiB
#: One ``.mem`` JSONL record (an artifact body is at most 1,000,000 characters).
MAX_LINE_BYTES = 8 * MiB
#: One file of a ``.mem`` bundle.
MAX_BUNDLE_FILE_BYTES = 1024 * MiB

_REF = re.compile(REF_PATTERN)
_INSTANT = re.compile(
    r"^\d{4}-(0[1-9]|1[0-2])-\d{2}T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?"
    r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$")

@dataclass(frozen=True)
class Refusal:
    """An item of the input that was deliberately not created, and why (no content)."""

    kind: str
    id: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind, "id": self.id, "reason": self.reason}


@dataclass
class Plan:
    """What an import would write: inputs for one ``import_records`` call, and more.

    ``erase`` lists (kind, ref, tombstone id) the ledger must crypto-shred when they
    exist (kind ``any``: atom or artifact); ``placeholders`` (kind, ref, input,
    tombstone id) are items created only to be shredded at once, so that the ledger
    remembers a tombstone it had nothing to apply to. Tombstone ids in ``untrusted``
    act only with the caller's explicit consent.
    """

    format: str
    subject: dict[str, Any]
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    atoms: list[dict[str, Any]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    erase: list[tuple[str, str, str]] = field(default_factory=list)
    placeholders: list[tuple[str, str, dict[str, Any], str]] = field(default_factory=list)
    tombstones: dict[str, int] = field(default_factory=dict)
    untrusted: list[str] = field(default_factory=list)
    manifest_signature: str | None = None
    #: Portable records (ADR 0017): (kind, line) to keep; (kind, id, tombstone id) a
    #: tombstone covers; (kind, id, tombstone id) a tombstone targets (placeholders).
    record_lines: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    record_erase: list[tuple[str, str, str]] = field(default_factory=list)
    record_placeholders: list[tuple[str, str, str]] = field(default_factory=list)
    #: Items of the input already in the ledger under a sealed source id (pasted text).
    repeats: int = 0

    @property
    def subject_ref(self) -> str:
        return str(self.subject["ref"])


# ------------------------------------------------------------------ reading untrusted bytes
def read_capped(path: Path, limit: int, what: str) -> bytes:
    """Read a file, refusing it by its size before reading when it exceeds ``limit``."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror or e}") from e
    if size > limit:
        raise InputError(f"{what} {path} is {size} bytes, over the {limit} byte limit; "
                         "it was not read",
                         hint="pass --max-bytes to raise the limit if the file is genuine")
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror or e}") from e
    if len(data) > limit:
        raise InputError(f"{what} {path} grew past the {limit} byte limit while being read")
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {dup!r}")
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def loads_strict(data: bytes | str, where: str) -> Any:
    """Parse JSON; refuse duplicate keys, NaN/Infinity and bad UTF-8, naming the place."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{where} is not UTF-8 (byte {e.start})") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        raise InputError(f"{where} starts with a byte-order mark", hint="save it as UTF-8 "
                         "without BOM")
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{where} is not valid JSON: {e.msg} at line {e.lineno} "
                         f"column {e.colno}") from None
    except ValueError as e:
        raise InputError(f"{where} is not valid JSON: {e}") from None
    except RecursionError:
        raise InputError(f"{where} is nested too deeply") from None


# ------------------------------------------------------------------ instants
@lru_cache(maxsize=65536)
def _instant(value: str) -> datetime | None:
    if not _INSTANT.match(value):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:  # a day or leap second the calendar does not have
        return None


def parse_instant(value: Any, where: str) -> datetime:
    """An RFC 3339 date-time (with zone) as an aware UTC datetime, or InputError."""
    t = _instant(value) if isinstance(value, str) else None
    if t is None:
        raise InputError(f"{where}: {value!r} is not an RFC 3339 date-time",
                         hint="use a form like 2026-01-12T18:44:00Z")
    return t


def fmt_instant(t: datetime) -> str:
    """UTC with ``Z``; microseconds only when there are any (so seeds round-trip)."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if t.microsecond else "%Y-%m-%dT%H:%M:%SZ")


def norm_instant(value: str | None) -> str | None:
    """Re-format a ledger instant (ISO 8601, any offset) in the export form."""
    if value is None:
        return None
    return fmt_instant(datetime.fromisoformat(value.replace("Z", "+00:00")))


# ------------------------------------------------------------------ ids
def namespaced(subject_ref: str, local_id: str) -> tuple[str, bool]:
    """The ledger ref of an item a subject's export calls ``local_id``.

    Export ids are only unique within one subject's export, so refs are
    ``<subject>:<local id>``. When that is not a valid ref (odd characters, too long),
    a digest of the local id stands in and the second value is False: the caller keeps
    the local id beside the atom so that it is exported again unchanged.
    """
    ref = f"{subject_ref}:{local_id}"
    if _REF.match(ref):
        return ref, True
    ref = f"{subject_ref}:id.{hashlib.sha256(local_id.encode()).hexdigest()[:32]}"
    if not _REF.match(ref):
        raise InputError(f"subject id {subject_ref!r} is too long to namespace item ids",
                         hint="import under a shorter subject id with --subject")
    return ref, False


def local_of(ref: str | None, subject_ref: str, fallback: str,
             source_id: str | None = None) -> str:
    """The id an item is exported under: kept source id, else its ref without the
    subject prefix, else its ref, else ``fallback`` (the aggregate id)."""
    if source_id:
        return source_id
    if ref is None:
        return fallback
    prefix = subject_ref + ":"
    return ref[len(prefix):] if ref.startswith(prefix) else ref


def check_subject_ref(ref: Any, where: str) -> str:
    if ref is None:
        raise InputError(f"{where}: the input names no subject",
                         hint="pass --subject REF to say whose memory this is")
    if not isinstance(ref, str) or not _REF.match(ref):
        raise InputError(f"{where}: subject id {ref!r} is not a valid ledger subject id "
                         "(1-128 of A-Z a-z 0-9 . _ : -, starting with a letter or digit)",
                         hint="choose the subject id to import under with --subject")
    return ref


def provider_extensions(record: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``x-`` keys of a foreign record, our reserved ones refused."""
    ext = {k: v for k, v in record.items() if k.startswith("x-") and k != WIRE}
    for k in ext:
        if k in RESERVED:
            raise InputError(f"{where}: key {k!r} is reserved for memory-ledger's own records")
    return ext


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def first(items: Iterable[str], n: int = 5) -> str:
    items = list(items)
    shown = ", ".join(items[:n])
    return shown + (f" (and {len(items) - n} more)" if len(items) > n else "")


def placeholder(kind: str, subject: str, ref: str, tomb: dict[str, Any] | None
                ) -> dict[str, Any]:
    """An item created only to be crypto-shredded: the ledger's memory of a tombstone.

    Here rather than in ``service.py``, so that ``mem.py`` needs nothing of the import
    service, which imports the formats (the cycle adapters -> mem -> service -> adapters).
    """
    from ledger.domain import ERASED  # the domain (and eventsourcing) only when used

    if kind == "artifact":
        return {"subject": subject, "ref": ref, "kind": "document", "title": ERASED,
                "private": True, "source": "tombstone"}
    side: dict[str, Any] = {"placeholder": True}
    if tomb is not None:
        side["tombstone"] = tomb
    return {"subject": subject, "ref": ref, "text": ERASED, "kind": "fact",
            "derivation": "stated", "sensitivity": "private", "extensions": {SIDECAR: side}}
