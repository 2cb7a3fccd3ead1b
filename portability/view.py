"""One subject's memory, read from the ledger for export.

The log is read once, in order, in batches: every event goes through the ledger's
mapper, which verifies its signature and opens its sealed fields (erased content
reads as ``None``), and the events are folded into aggregates. Only verified data
reaches the exporters. Nothing is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

import structlog

from ledger.domain import ATOM_FIELDS
from ledger.errors import InputError, NotFound
from ledger.inputs import SIDECAR
from portability.common import FOREIGN, WIRE, local_of, norm_instant

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.progress import Steps

log = structlog.get_logger("portability")

_TOPICS = ("memory-ledger:subject.", "memory-ledger:artifact.", "memory-ledger:atom.",
           "memory-ledger:record.")
GONE_ATOM = ("hard-redacted", "deleted")
WITHHELD_ATOM = ("soft-redacted", "archived")


@dataclass(frozen=True)
class ArtifactView:
    id: UUID
    ref: str | None
    local_id: str
    kind: str
    captured_at: str
    source: str | None
    private: bool
    title: str | None
    body: str | None
    media_url: str | None
    deleted: bool
    erased: bool
    gone_at: str | None

    @property
    def gone(self) -> bool:
        """Deleted or its content destroyed: never exported, tombstoned in ``.mem``."""
        return self.deleted or self.erased


@dataclass(frozen=True)
class AtomView:
    id: UUID
    ref: str | None
    local_id: str
    fields: dict[str, Any]
    status: str
    erased: bool
    erased_at: str | None
    created_at: str
    rehearsal_count: int
    last_rehearsed_at: str | None
    cited: list[str]
    provider: dict[str, Any]
    foreign: dict[str, Any]
    sidecar: dict[str, Any]
    superseded_by: str | None = None
    """The local id of the atom that replaced this one (a correction), if any."""

    def get(self, name: str) -> Any:
        return self.fields.get(name)

    @property
    def withheld(self) -> bool:
        """Soft-redacted or archived: kept in the ledger, out of shared exports."""
        return self.status in WITHHELD_ATOM


@dataclass(frozen=True)
class RecordView:
    """A portable record (ADR 0017): its kind and line; ``content`` None once erased."""

    id: UUID
    kind: str
    content: dict[str, Any] | None
    revisions: int

    @property
    def erased(self) -> bool:
        return self.content is None


@dataclass(frozen=True)
class SubjectView:
    ledger_id: str
    id: UUID
    ref: str
    display_name: str | None
    locale: str | None
    atoms: list[AtomView]
    artifacts: list[ArtifactView]
    records: list[RecordView] = dataclasses.field(default_factory=list)

    def artifact(self, local_id: str) -> ArtifactView | None:
        for a in self.artifacts:
            if a.local_id == local_id:
                return a
        return None


def fold(app: LedgerApp, batch: int = 5000, progress: Steps | None = None
         ) -> dict[UUID, Any]:
    """Subject, artifact and atom aggregates from the whole log (signatures verified);
    ``progress`` hears the log position read, of the head's."""
    aggs: dict[UUID, Any] = {}
    rows: list[Any] = []
    head = app.reader.head_position() if progress is not None else 0
    for n in app.reader.stored_records(batch=batch):
        if n.topic.startswith(_TOPICS):
            rows.append(n)
        if len(rows) >= batch:
            _apply(app, rows, aggs)
            rows = []
        if progress is not None and n.id % 1000 == 0:
            progress("Reading the log", min(n.id, head), head)
    _apply(app, rows, aggs)
    if progress is not None:
        progress("Reading the log", head, head)
    return aggs


def _apply(app: LedgerApp, rows: list[Any], aggs: dict[UUID, Any]) -> None:
    if not rows:
        return
    app.reader.prefetch_data_keys({str(n.originator_id) for n in rows})  # one query per batch
    for event in app.reader.open_events(rows):
        aggs[event.originator_id] = event.mutate(aggs.get(event.originator_id))


def encoding(progress: Steps | None, done: int, total: int) -> None:
    """Every 500 atoms of an export's encoding loop, and its last."""
    if progress is not None and (done % 500 == 0 or done == total):
        progress("Encoding atoms", done, total)


def subject_refs(aggs: dict[UUID, Any]) -> list[str]:
    from ledger.domain import Subject

    return sorted(a.ref for a in aggs.values() if isinstance(a, Subject))


def load(app: LedgerApp, subject: str | None, progress: Steps | None = None) -> SubjectView:
    """The view of ``subject`` (a ref or id); without one, the ledger's only subject."""
    from ledger.domain import Artifact, Atom, Record, Subject

    aggs = fold(app, progress=progress)
    subjects = [a for a in aggs.values() if isinstance(a, Subject)]
    if subject is None:
        if len(subjects) != 1:
            raise InputError(f"this ledger holds {len(subjects)} subjects; say which to export",
                             hint="pass --subject REF")
        subj = subjects[0]
    else:
        found = [s for s in subjects if subject in (s.ref, str(s.id))]
        if not found:
            raise NotFound(f"no subject {subject!r} in this ledger")
        subj = found[0]
    sid = str(subj.id)
    artifacts: dict[str, ArtifactView] = {}
    for a in aggs.values():
        if isinstance(a, Artifact) and a.subject_id == sid:
            artifacts[str(a.id)] = _artifact_view(a, subj.ref)
    local_by_uuid = {k: v.local_id for k, v in artifacts.items()}
    for a in aggs.values():  # artifacts of other subjects an atom may cite
        if isinstance(a, Artifact) and str(a.id) not in local_by_uuid:
            local_by_uuid[str(a.id)] = a.ref or str(a.id)
    mine = [a for a in aggs.values() if isinstance(a, Atom) and a.subject_id == sid]
    atoms = [_atom_view(a, subj.ref, local_by_uuid) for a in mine]
    local_atom = {str(v.id): v.local_id for v in atoms}
    atoms = [dataclasses.replace(v, superseded_by=local_atom.get(str(a.superseded_by),
                                                                 v.sidecar.get("superseded_by"))
                                 if a.superseded_by else v.sidecar.get("superseded_by"))
             for v, a in zip(atoms, mine, strict=True)]
    view = SubjectView(
        ledger_id=str(app.ledger_id), id=subj.id, ref=subj.ref,
        display_name=None if subj.content_erased else subj.display_name, locale=subj.locale,
        atoms=sorted(atoms, key=lambda v: v.local_id),
        artifacts=sorted(artifacts.values(), key=lambda v: v.local_id),
        records=[RecordView(id=r.id, kind=r.kind,
                            content=None if r.content_erased else r.content,
                            revisions=r.revisions)
                 for r in aggs.values() if isinstance(r, Record) and r.subject_id == sid])
    log.info("portability.view_loaded", subject_id=sid, atoms=len(atoms),
             artifacts=len(artifacts))
    return view


def _when(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00"))


def _artifact_view(a: Any, subject_ref: str) -> ArtifactView:
    deleted = getattr(a, "status", "active") == "deleted"
    return ArtifactView(
        id=a.id, ref=a.ref, local_id=local_of(a.ref, subject_ref, str(a.id)), kind=a.kind,
        captured_at=norm_instant(a.captured_at) or "", source=a.source, private=bool(a.private),
        title=a.title, body=a.body, media_url=a.media_url, deleted=deleted,
        erased=bool(a.content_erased),
        gone_at=norm_instant(a.data_key_destroyed_at) or (
            norm_instant(a.modified_on.astimezone(UTC).isoformat()) if deleted else None))


def _atom_view(a: Any, subject_ref: str, local_by_uuid: dict[str, str]) -> AtomView:
    ext = dict(a.extensions or {})
    sidecar = dict(ext.pop(SIDECAR, None) or {})
    foreign = dict(ext.pop(FOREIGN, None) or {})
    ext.pop(WIRE, None)
    # importer-carried source data, sealed (None once erased); older logs kept it in the
    # clear in ``extensions`` and the sidecar, read above
    source = dict(getattr(a, "source_data", None) or {})
    ext.update(source.get("provider") or {})
    foreign.update(source.get(FOREIGN) or {})
    for key in ("id", "episode"):
        if key in source:
            sidecar[key] = source[key]
    fields = {name: getattr(a, name, None) for name in ATOM_FIELDS}
    mapped = [local_by_uuid.get(x, x) for x in (a.artifact_ids or [])]
    cited = mapped + [u for u in sidecar.get("unresolved", []) if u not in mapped]
    status = str(getattr(a, "status", "active"))
    if status == "active" and sidecar.get("status"):
        status = str(sidecar["status"])
    lasts = [t for t in (norm_instant(a.last_rehearsed_at),
                         sidecar.get("last_rehearsed_at")) if t]
    erased = bool(a.content_erased) or status in GONE_ATOM
    return AtomView(
        id=a.id, ref=a.ref,
        local_id=local_of(a.ref, subject_ref, str(a.id), sidecar.get("id")),
        fields=fields, status=status, erased=erased,
        erased_at=norm_instant(a.data_key_destroyed_at or getattr(a, "redacted_at", None)),
        created_at=sidecar.get("created_at") or norm_instant(a.created_on.isoformat()) or "",
        rehearsal_count=int(sidecar.get("rehearsal_count", 0)) + int(a.rehearsal_count),
        last_rehearsed_at=max(lasts, key=_when) if lasts else None,
        cited=cited, provider=ext, foreign=foreign, sidecar=sidecar)
