"""The erasure journal: which data keys this ledger destroyed, and where that is recorded
(ADR 0045).

A backup holds the log and the keystore as they were when it was taken; every erasure
recorded after that is missing from it, and a restore would bring the erased memory
back. The journal is what a restore needs to stop that: for each destroyed data key, its
id, the kind of item, the signed event that recorded the destruction (id, sequence number,
time), the KEK epoch then in force and the batch that destroyed it; for each tombstone,
the same; for each batch, its request and when it was opened and closed; and the signed
checkpoint (size, root, C2SP note) of the log it was derived from. Ids, positions, times
and digests only: never content, never a plain hash of personal data.

It is derived from the log (the log is the truth: the journal can always be made again
from it) and signed as a DSSE envelope (payload type :data:`PAYLOAD_TYPE`, of its own:
it can never pass as another signed kind) by the ledger's ``log`` key, the key that
signs its checkpoints, so a verifier checks it offline against the roster's public keys
(:func:`check_journal`). It lives in the home (``journal/erasure-journal.json``), is
refreshed when an erasure finishes (service/erasure_cases.py) and by ``ledger journal
export``, which also copies it out: to a second disk, object storage, the witness
operator. A few hundred bytes per erased item.

Derivation is incremental: the journal records the log position it reached, and a
refresh reads only the events of the journal's topics after it, under the write lock
(:meth:`LedgerApp.held_still`), so the journal covers exactly the log its checkpoint
signs.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from governance.dsse import (
    DocumentInvalid,
    SignedDocument,
    check_signature,
    read_document,
    sign_document,
)
from ledger import clock, envelope
from ledger.domain import (
    Artifact,
    Atom,
    ErasureReappliedMixin,
    ErasureRequest,
    Record,
    RedactionBatch,
    Subject,
)

if TYPE_CHECKING:
    from keys.roster import RosterState
    from ledger.application import LedgerApp
    from ledger.transparency import SignedCheckpoint

log = structlog.get_logger("governance")

PAYLOAD_TYPE = "application/vnd.memory-ledger.erasure-journal.v1+json"
JOURNAL_TYPE = "https://memory-ledger.dev/erasure-journal/v1"
FOLDER = "journal"
FILE = "erasure-journal.json"

_KINDS: dict[str, type[Any]] = {"subject": Subject, "artifact": Artifact, "atom": Atom,
                                "record": Record, "request": ErasureRequest,
                                "batch": RedactionBatch}
KEY_TOPICS: dict[str, str] = {agg.DataKeyDestroyed.TOPIC: kind for kind, agg in _KINDS.items()}
"""``*.data-key-destroyed`` topic -> kind of item."""
REAPPLIED_TOPICS: dict[str, str] = {agg.ErasureReapplied.TOPIC: kind
                                    for kind, agg in _KINDS.items()}
"""``*.erasure-reapplied`` topic (ADR 0045) -> kind of item."""
TOMBSTONE_TOPICS: dict[str, str] = {Atom.Redacted.TOPIC: "atom", Artifact.Deleted.TOPIC:
                                    "artifact", Record.Erased.TOPIC: "record"}
"""Tombstones (an atom's redaction counts only in the hard and delete modes)."""
BATCH_TOPICS = (RedactionBatch.Created.TOPIC, RedactionBatch.Closed.TOPIC)
TOPICS: tuple[str, ...] = (*KEY_TOPICS, *REAPPLIED_TOPICS, *TOMBSTONE_TOPICS, *BATCH_TOPICS)
READ_BATCH = 1000
HARD_MODES = ("hard", "delete")

_BATCH_REASON = re.compile(r"erasure batch ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-"
                           r"[0-9a-f]{4}-[0-9a-f]{12})")


def journal_path(home: Path) -> Path:
    """Where a home keeps its erasure journal."""
    return home / FOLDER / FILE


@dataclass(frozen=True)
class Journal:
    """A journal document with the bytes it was read from or written as."""

    document: dict[str, Any]
    data: bytes

    @property
    def ledger_id(self) -> str:
        return str(self.document["ledger"]["id"])

    @property
    def size(self) -> int:
        """The size of the checkpoint it was derived from: the log it covers."""
        return int(self.document["checkpoint"]["size"])

    @property
    def generated_at(self) -> str:
        return str(self.document["generated_at"])

    @property
    def keys(self) -> list[dict[str, Any]]:
        return list(self.document["keys"])

    @property
    def tombstones(self) -> list[dict[str, Any]]:
        return list(self.document["tombstones"])

    @property
    def batches(self) -> list[dict[str, Any]]:
        return list(self.document["batches"])

    def summary(self) -> dict[str, Any]:
        """What a report says of it: its size, time and counts (no ids)."""
        cp = self.document["checkpoint"]
        return {"ledger_id": self.ledger_id, "size": self.size,
                "head_time": cp.get("head_time"), "generated_at": self.generated_at,
                "keys": len(self.document["keys"]),
                "tombstones": len(self.document["tombstones"]),
                "batches": len(self.document["batches"]), "bytes": len(self.data)}


# ----------------------------------------------------------------------------- deriving
def refresh_journal(app: LedgerApp) -> Journal:
    """Bring the home's journal up to the log's head (under the write lock) and write it."""
    with app.held_still() as (cp, position):
        return write_journal(app, cp, position)


def write_journal(app: LedgerApp, cp: SignedCheckpoint, position: int) -> Journal:
    """Derive the journal of the log ``cp`` covers (its last event at notification
    ``position``), sign it with the log key and write it in the home (whole: a reader sees
    the old file or the new one). The caller holds the write lock
    (:meth:`LedgerApp.held_still`)."""
    from keys.files import make_dirs, write_private

    signer = app.signer("log")
    previous = _previous(app, signer.public_key, cp.size, position)
    doc = _derive(app, previous, cp, position)
    data = sign_document(doc, PAYLOAD_TYPE, signer)
    path = journal_path(app.config.home)
    make_dirs(path.parent, mode=0o700, exist_ok=True)
    write_private(path, data, replace=True)
    log.info("journal.written", size=cp.size, keys=len(doc["keys"]),
             tombstones=len(doc["tombstones"]), incremental=previous is not None)
    return Journal(doc, data)


def _previous(app: LedgerApp, log_key: bytes, size: int, position: int
              ) -> dict[str, Any] | None:
    """The home's journal to extend, if it is this ledger's, signed by its log key and
    not past the log; else None (it is derived again from the first event)."""
    path = journal_path(app.config.home)
    try:
        signed = read_document(path.read_bytes(), PAYLOAD_TYPE, JOURNAL_TYPE, str(path))
        check_signature(signed, log_key, str(path))
    except (OSError, DocumentInvalid):
        return None
    doc = signed.document
    try:
        ok = (doc["ledger"]["id"] == app.ledger_id
              and int(doc["checkpoint"]["size"]) <= size
              and int(doc["checkpoint"]["position"]) <= position)
    except (KeyError, TypeError, ValueError):
        return None
    return doc if ok else None


def _derive(app: LedgerApp, previous: dict[str, Any] | None, cp: SignedCheckpoint,
            position: int) -> dict[str, Any]:
    batches: dict[str, dict[str, Any]] = {}
    keys: list[dict[str, Any]] = []
    tombstones: list[dict[str, Any]] = []
    start = 1
    if previous is not None:
        batches = {b["batch_id"]: b for b in previous["batches"]}
        keys, tombstones = list(previous["keys"]), list(previous["tombstones"])
        start = int(previous["checkpoint"]["position"]) + 1
    while start <= position:
        rows = app.reader.notifications(start, READ_BATCH, topics=TOPICS, stop=position)
        if not rows:
            break
        # verified (signature, signer's role) before anything derived from it is signed
        for n, ev in zip(rows, app.reader.open_events(rows), strict=True):
            env = envelope.open_state(n.state).envelope
            at = {"event_id": envelope.event_id(env["originator_id"], env["version"]),
                  "seq": int(env["seq"]), "at": str(env["timestamp"])}
            oid = str(env["originator_id"])
            _take(n.topic, ev, oid, at, batches, keys, tombstones)
        start = int(rows[-1].id) + 1
    cp_doc = {"size": cp.size, "root": base64.b64encode(cp.root).decode(), "note": cp.note,
              "position": position, "head_time": _head_time(app, cp.size)}
    return {
        "type": JOURNAL_TYPE,
        "ledger": {"id": app.ledger_id, "origin": app.config.origin,
                   "log_vkey": app.log_vkey()},
        "generated_at": clock.format_instant(clock.now()),
        "checkpoint": cp_doc,
        "batches": sorted(batches.values(), key=lambda b: int(b["opened"]["seq"])),
        "keys": keys,
        "tombstones": tombstones,
        "kek_epochs": _epochs(app),
    }


def _take(topic: str, ev: Any, oid: str, at: dict[str, Any],
          batches: dict[str, dict[str, Any]], keys: list[dict[str, Any]],
          tombstones: list[dict[str, Any]]) -> None:
    """Add what one verified event says to the journal's lists."""
    if topic == RedactionBatch.Created.TOPIC:
        batches[oid] = {"batch_id": oid, "request_id": ev.request_id, "mode": ev.mode,
                        "opened": at, "closed": None}
    elif topic == RedactionBatch.Closed.TOPIC:
        if oid in batches:
            batches[oid]["closed"] = at
    elif topic in KEY_TOPICS or topic in REAPPLIED_TOPICS:
        kind = KEY_TOPICS.get(topic) or REAPPLIED_TOPICS[topic]
        entry = {"key_id": str(ev.key_id), "kind": kind, **at,
                 "kek_epoch": ev.kek_epoch, "batch_id": _batch_of(kind, oid, ev, batches)}
        if isinstance(ev, ErasureReappliedMixin):
            entry["reapplies"] = ev.original.get("key_event")
        keys.append(entry)
        if isinstance(ev, ErasureReappliedMixin) and ev.mode is not None:
            tombstones.append({"item_id": oid, "kind": kind, "mode": ev.mode, **at,
                               "batch_id": ev.batch_id,
                               "reapplies": ev.original.get("tombstone_event")})
    elif topic in TOMBSTONE_TOPICS:
        mode = getattr(ev, "mode", "delete")  # an artifact's deletion has no mode
        if mode not in HARD_MODES:
            return  # a soft or archive redaction keeps the content: no erasure
        tombstones.append({"item_id": oid, "kind": TOMBSTONE_TOPICS[topic], "mode": mode,
                           **at, "batch_id": getattr(ev, "batch_id", None)})


def _batch_of(kind: str, oid: str, ev: Any, batches: dict[str, dict[str, Any]]
              ) -> str | None:
    """The batch whose erasure destroyed this key: itself (a batch's own key), its
    request's (a request's key), the one named in the event (``erasure batch ID``, or a
    re-application's ``batch_id``); None for a key destroyed outside a batch (a
    tombstone placeholder of an import)."""
    if kind == "batch":
        return oid
    if isinstance(ev, ErasureReappliedMixin):
        return ev.batch_id
    if kind == "request":
        return next((b for b, row in batches.items() if row.get("request_id") == oid), None)
    found = _BATCH_REASON.search(str(getattr(ev, "reason", "") or ""))
    return found.group(1) if found else None


def _head_time(app: LedgerApp, size: int) -> str | None:
    seq, when = app.reader.head()
    return clock.format_instant(when) if when is not None and seq == size else None


def _epochs(app: LedgerApp) -> list[dict[str, Any]]:
    """The KEK epochs the log records (started, destroyed, forgotten by a restore)."""
    from eventsourcing.application import AggregateNotFoundError

    from ledger.epochs import epochs_id

    try:
        agg: Any = app.reader.aggregate(epochs_id(app))
    except AggregateNotFoundError:
        return []
    out = []
    for epoch, entry in sorted(agg.epochs.items(), key=lambda kv: int(kv[0])):
        out.append({"epoch": int(epoch), **{k: entry[k] for k in (
            "started_at", "destroyed_at", "forgotten_at") if entry.get(k)}})
    return out


# ----------------------------------------------------------------------------- reading
def read_journal(data: bytes, what: str) -> SignedDocument:
    """The journal's form (canonical DSSE envelope of :data:`PAYLOAD_TYPE`, one
    signature); :class:`DocumentInvalid` otherwise. The signature is checked by
    :func:`check_journal`."""
    signed = read_document(data, PAYLOAD_TYPE, JOURNAL_TYPE, what)
    doc = signed.document
    try:
        for name in ("batches", "keys", "tombstones"):
            if not isinstance(doc[name], list):
                raise TypeError(name)
        for entry in doc["keys"]:
            UUID(str(entry["key_id"]))
            int(entry["seq"])
            str(entry["event_id"])
        for entry in doc["tombstones"]:
            UUID(str(entry["item_id"]))
            int(entry["seq"])
        int(doc["checkpoint"]["size"])
        str(doc["checkpoint"]["note"])
        str(doc["ledger"]["id"]), str(doc["ledger"]["origin"])
    except (KeyError, TypeError, ValueError):
        raise DocumentInvalid(f"{what}: not a well-formed erasure journal") from None
    return signed


def check_journal(signed: SignedDocument, data: bytes, what: str, *, ledger_id: str,
                  origin: str, roster: RosterState) -> Journal:
    """Verify a journal offline against a ledger's roster: it is this ledger's (id and
    origin), signed by a key that held the ``log`` role when it was generated, and its
    checkpoint is signed by a log key of the roster and states the size and root the
    journal claims. :class:`DocumentInvalid` otherwise."""
    from keys.errors import KeyNotAuthorized
    from ledger.transparency import verify_with_roster

    doc = signed.document
    if doc["ledger"]["id"] != ledger_id or doc["ledger"]["origin"] != origin:
        raise DocumentInvalid(f"{what} is the erasure journal of another ledger "
                              f"({doc['ledger']['id']}), not of {ledger_id}",
                              hint="give the journal exported from the ledger this backup "
                                   "was taken of")
    try:
        when = datetime.fromisoformat(str(doc["generated_at"]).replace("Z", "+00:00"))
        public = roster.holds(signed.kid, ("log",), when)
    except (KeyNotAuthorized, ValueError) as e:
        raise DocumentInvalid(f"{what} is not signed by a log key of this ledger's roster: "
                              f"{e}", hint="a journal signed after the log key was rotated "
                                           "cannot be checked against an older roster") from None
    check_signature(signed, public, what)
    note = str(doc["checkpoint"]["note"])
    try:
        cp = verify_with_roster(note, origin, roster)
    except Exception as e:  # VerificationFailed, CheckpointError: one verdict
        raise DocumentInvalid(f"{what}: its checkpoint does not verify: {e}") from None
    if cp.size != int(doc["checkpoint"]["size"]) or \
            base64.b64encode(cp.root).decode() != doc["checkpoint"].get("root"):
        raise DocumentInvalid(f"{what}: its checkpoint's size or root differs from the "
                              "note it carries")
    return Journal(doc, data)
