"""Portable records that are not atoms or artifacts (ADR 0017).

A ``.mem`` bundle may hold entities, edges, facts, chunks, resources, procedures,
contexts and vendor kinds the ledger has no model for. Each is kept as a
:class:`ledger.domain.Record` of the subject: the whole line sealed under the record's
own data key (personal data like any atom field), the subject and the kind in the
clear. Tombstones received in a bundle are kept the same way (kind ``tombstone``), so
they are exported again verbatim, whoever signed them.

The record's aggregate id is derived from the subject, the kind and the record's own
``id`` (or, for id-less link kinds, the ids it links), never from its content: a
tombstone or a later bundle finds it by id even after its content is destroyed, so
a stale bundle cannot bring it back. Nothing here writes; :mod:`service` does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger.domain import Record

if TYPE_CHECKING:
    from ledger.application import LedgerApp

#: Kinds never kept as records: episodes are atoms or artifacts, our subject line is the
#: subject.
NOT_RECORDS = ("episode",)
TOMBSTONE_KIND = "tombstone"
#: Tombstone ``derived`` lists and the record kind each names.
DERIVED_KINDS = {"fact_ids": "fact", "edge_ids": "edge", "entity_ids": "entity",
                 "chunk_ids": "chunk", "sentence_ids": "sentence"}
#: Kinds whose updates supersede (spec §"Supersession, not overwrite").
BITEMPORAL = ("edge", "fact")


def identity(kind: str, line: dict[str, Any]) -> str | None:
    """What names a record within its subject and kind: its ``id``, or for id-less kinds
    the id fields it links (``srcFactID``, ``episodeID``...); None if it has neither."""
    local = line.get("id")
    if isinstance(local, str) and local:
        return f"id:{local}"
    links = {k: v for k, v in sorted(line.items())
             if (k.endswith("ID") or k.endswith("IDs") or k.endswith("Type"))
             and isinstance(v, str | list)}
    if not links:
        return None
    return "links:" + json.dumps(links, sort_keys=True, ensure_ascii=False,
                                 separators=(",", ":"))


def record_uuid(app: LedgerApp, subject_ref: str, kind: str, ident: str | None) -> UUID:
    """The aggregate id of a record (a new random one when it has no identity)."""
    if ident is None:
        return app.reader.ref_id("record", None)
    return app.reader.ref_id("record", f"{subject_ref}/{kind}/{ident}")


def id_uuid(app: LedgerApp, subject_ref: str, kind: str, local_id: str) -> UUID:
    return record_uuid(app, subject_ref, kind, f"id:{local_id}")


@dataclass
class RecordPlan:
    """What an import does to records: create, supersede, skip, shred (no content
    here but the lines being created)."""

    create: list[tuple[UUID, str, dict[str, Any] | None]]
    supersede: list[tuple[UUID, dict[str, Any]]]
    skipped: int
    shred: list[UUID]


def plan(app: LedgerApp, subject_ref: str, lines: Sequence[tuple[str, dict[str, Any]]],
         covered: set[tuple[str, str]], erase: Iterable[tuple[str, str, bool]],
         placeholders: Iterable[tuple[str, str]]) -> RecordPlan:
    """Resolve record lines against the ledger.

    ``covered``: (kind, id) pairs a tombstone names: never created. ``erase``: (kind,
    id, apply) of tombstoned records to shred when they exist and ``apply`` (trusted or
    consented). ``placeholders``: (kind, id) of trusted tombstones' targets: when absent,
    an empty record is created, so a later stale bundle is skipped by id.
    """
    wanted: dict[UUID, tuple[str, dict[str, Any]]] = {}
    for kind, line in lines:
        ident = identity(kind, line)
        if ident is not None and ident.startswith("id:") and (kind, ident[3:]) in covered:
            continue
        uid = record_uuid(app, subject_ref, kind, ident)
        wanted.setdefault(uid, (kind, line))
    existing = {u for u in wanted if app.reader.exists(u)}
    current = {a.id: a for a in app.reader.get_many(sorted(existing))} if existing else {}
    out = RecordPlan(create=[], supersede=[], skipped=0, shred=[])
    for uid, (kind, line) in wanted.items():
        agg = current.get(uid)
        if agg is None:
            out.create.append((uid, kind, line))
        elif agg.content_erased or agg.content is None or agg.content == line:
            out.skipped += 1  # erased records never come back; equal ones are no-ops
        else:
            out.supersede.append((uid, dict(line or {})))
    hit = [id_uuid(app, subject_ref, kind, local) for kind, local, apply in erase if apply]
    hit = [u for u in dict.fromkeys(hit) if app.reader.exists(u)]
    for agg in app.reader.get_many(hit) if hit else []:
        if agg.content is not None and not agg.content_erased:
            out.shred.append(agg.id)
    made = {c[0] for c in out.create}
    for kind, local in placeholders:
        uid = id_uuid(app, subject_ref, kind, local)
        if uid not in made and not app.reader.exists(uid):
            out.create.append((uid, kind, None))
            made.add(uid)
    return out


def build(app: LedgerApp, subject_id: UUID, rp: RecordPlan, at: Any) -> list[Any]:
    """The aggregates to commit for ``rp`` (inside the import's write command)."""
    out: list[Any] = []
    for uid, kind, line in rp.create:
        out.append(Record._create(Record.Created, id=uid, timestamp=at,
                                  subject_id=str(subject_id), kind=kind, content=line))
    if rp.supersede:
        by_id = {a.id: a for a in app.reader.get_many([u for u, _ in rp.supersede])}
        for uid, line in rp.supersede:
            agg = by_id[uid]
            if agg.content_erased:
                continue
            agg.trigger_event(Record.Superseded, timestamp=at, content=line)
            out.append(agg)
    return out


def of_subject(app: LedgerApp, subject_id: str) -> list[UUID]:
    """Ids of the subject's records, from the log's record topic (the subject id is in
    the clear there); no read model holds records."""
    from ledger import envelope

    rows = app.reader.notifications(start=1, limit=10**9,
                             topics=[Record.Created.TOPIC])
    ids = [UUID(str(n.originator_id)) for n in rows
           if envelope.open_state(n.state).envelope["payload"].get("subject_id")
           == subject_id]
    return ids


def live_of(app: LedgerApp, subject_id: str) -> list[Any]:
    """The subject's records whose content is still there (erasure targets)."""
    ids = of_subject(app, subject_id)
    return [a for a in app.reader.get_many(ids) if a.content is not None and not a.content_erased
            ] if ids else []


def needles_of(value: Any, min_chars: int) -> list[str]:
    """The free text of a record (strings with a space, at least ``min_chars`` long),
    for the erasure's raw-scan needles; ids, labels and instants are left out: other
    items share them legitimately."""
    if isinstance(value, str):
        return [value] if " " in value.strip() and len(value) >= min_chars else []
    if isinstance(value, dict):
        return [s for v in value.values() for s in needles_of(v, min_chars)]
    if isinstance(value, list):
        return [s for v in value for s in needles_of(v, min_chars)]
    return []
