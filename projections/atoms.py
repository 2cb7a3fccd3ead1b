"""Atom store: the current state of atoms, subjects and artifacts, content decrypted.

Content (the fields the ledger encrypts: atom text, gist, details, tags; subject
display name; artifact title, body, media URL) lives in separate ``*_content`` tables,
one row per item, written once and deleted once. Everything else (ids, Konshus and
Persona fields, status, rehearsals, validity, decay state) lives in the main tables,
so purging an item is a row delete and leaves its tombstone (status, ids,
``content_erased``) in place.

Decay state follows ADR 0005: ``salience`` is the value recorded at creation,
``baseline`` the stored baseline that each rehearsal rebases, ``decay_origin`` the
last rehearsal (else creation), ``detail_brightness`` the rebased brightness of each
detail, and ``fades_at`` the instant salience drops below the retrieval threshold
(0.15), stored for inspection and for future SQL-side filtering.

``decay_profile`` holds the profile the atom decays by (ADR 0050): its own, else the
default the enforced memoryPolicy's ``decayPolicy`` gave its kind or privacy class when it
was created, else None, no decay; ``profile_source`` says which. The policy's defaults are
folded from the log like everything else (``proj_atom_decay_policy``), so a rebuild gives
each atom the profile of the policy in force at its creation.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledger.domain import (
    ATOM_FIELDS,
    STATUS_BY_MODE,
    Artifact,
    Atom,
    DataKeyDestroyedMixin,
    Policy,
    Subject,
)
from projections._rows import RowSet, contains, delete_ids, dump_table, insert_rows
from projections.entries import LogEntry, content_gone
from projections.memory import NO_DEFAULTS, DecayDefaults, DecayState, fades_at, profile_of
from projections.routes import ProbeHit, ProbeResult
from projections.runner import Applied
from projections.store import Store, content_digest, content_needles, dumps

__all__ = ["GONE", "AtomReads", "AtomStore", "AtomStoreRoute", "decay_state", "is_candidate"]

_ID = sa.String(36)
_TIME = sa.String(40)

GONE = ("hard-redacted", "deleted")
"""Statuses of an atom whose content is erased (hard redaction, deletion)."""


def _loads(value: str | None) -> Any:
    return None if value is None else json.loads(value)


class AtomStore:
    """Read model ``atoms``: current atoms, subjects and artifacts."""

    name = "atoms"
    version = "5"  # 5: decay profile resolved with the policy's defaults (ADR 0050)
    holds_content: ClassVar[bool] = True

    def __init__(self, store: Store) -> None:
        self.store = store
        md = store.metadata()
        self.atoms = sa.Table(
            "proj_atoms", md,
            sa.Column("atom_id", _ID, primary_key=True),
            sa.Column("subject_id", _ID, nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("ref", sa.String(128)),
            sa.Column("kind", sa.String(32), nullable=False),
            sa.Column("confidence", sa.Float),
            sa.Column("sensitivity", sa.String(32)),
            sa.Column("valid_from", _TIME),
            sa.Column("valid_to", _TIME),
            sa.Column("derivation", sa.String(16)),
            sa.Column("artifact_ids", sa.Text),
            sa.Column("extractor", sa.String(200)),
            sa.Column("human_reviewed", sa.Boolean, nullable=False),
            sa.Column("salience", sa.Float, nullable=False),
            sa.Column("emotional_valence", sa.Float, nullable=False),
            sa.Column("decay_profile", sa.Text),
            sa.Column("profile_source", sa.String(40)),
            sa.Column("privacy_class", sa.String(40)),
            sa.Column("consent_basis", sa.String(40)),
            sa.Column("session_id", sa.String(200)),
            sa.Column("supersedes", _ID),
            sa.Column("superseded_by", _ID),
            sa.Column("min_sources", sa.Integer),
            sa.Column("extensions", sa.Text),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("redaction_mode", sa.String(16)),
            sa.Column("redacted_at", _TIME),
            sa.Column("flags", sa.Text, nullable=False),
            sa.Column("rehearsal_count", sa.Integer, nullable=False),
            sa.Column("last_rehearsed_at", _TIME),
            sa.Column("baseline", sa.Float, nullable=False),
            sa.Column("decay_origin", _TIME, nullable=False),
            sa.Column("fades_at", _TIME),
            sa.Column("detail_brightness", sa.Text),
            sa.Column("created_at", _TIME, nullable=False),
            sa.Column("updated_at", _TIME, nullable=False),
            sa.Column("last_seq", sa.BigInteger, nullable=False),
            sa.Column("content_erased", sa.Boolean, nullable=False),
            sa.Column("data_key_destroyed_at", _TIME),
            sa.Index("proj_atoms_subject", "subject_id", "status"),
            # recall's in-process index re-reads only a subject's atoms changed since
            # it last looked (projections/recall.py)
            sa.Index("proj_atoms_subject_seq", "subject_id", "last_seq"),
            sa.Index("proj_atoms_session", "session_id"),
            # memoryPolicy sweeps (governance/sweep.py, ADR 0014): retention due by class,
            # decay below minimumSalience, tombstone records past their retention.
            sa.Index("proj_atoms_retention", "privacy_class", "status", "created_at"),
            sa.Index("proj_atoms_fading", "status", "fades_at"),
            sa.Index("proj_atoms_tombstones", "status", "redacted_at"),
        )
        self.atom_content = sa.Table(
            "proj_atom_content", md,
            sa.Column("atom_id", _ID, primary_key=True),
            sa.Column("text", sa.Text),
            sa.Column("gist", sa.Text),
            sa.Column("details", sa.Text),
            sa.Column("tags", sa.Text),
        )
        self.subjects = sa.Table(
            "proj_subjects", md,
            sa.Column("subject_id", _ID, primary_key=True),
            sa.Column("ref", sa.String(128), nullable=False),
            sa.Column("locale", sa.String(35)),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("created_at", _TIME, nullable=False),
            sa.Column("content_erased", sa.Boolean, nullable=False),
            sa.Column("data_key_destroyed_at", _TIME),
        )
        self.subject_content = sa.Table(
            "proj_subject_content", md,
            sa.Column("subject_id", _ID, primary_key=True),
            sa.Column("display_name", sa.Text),
        )
        self.artifacts = sa.Table(
            "proj_artifacts", md,
            sa.Column("artifact_id", _ID, primary_key=True),
            sa.Column("subject_id", _ID, nullable=False, index=True),
            sa.Column("ref", sa.String(128)),
            sa.Column("kind", sa.String(32), nullable=False),
            sa.Column("captured_at", _TIME),
            sa.Column("source", sa.String(200)),
            sa.Column("private", sa.Boolean, nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("version", sa.Integer, nullable=False),
            sa.Column("created_at", _TIME, nullable=False),
            sa.Column("content_erased", sa.Boolean, nullable=False),
            sa.Column("data_key_destroyed_at", _TIME),
        )
        self.artifact_content = sa.Table(
            "proj_artifact_content", md,
            sa.Column("artifact_id", _ID, primary_key=True),
            sa.Column("title", sa.Text),
            sa.Column("body", sa.Text),
            sa.Column("media_url", sa.Text),
        )
        # Digests of content values (never the values): kind "text" for free text, "tag"
        # for tags. Erasure probes and the right-to-be-forgotten gathering look values up
        # here by index, so their cost follows the items, not the store (ADR 0012).
        self.digests = sa.Table(
            "proj_content_digests", md,
            sa.Column("item_id", _ID, nullable=False, index=True),
            sa.Column("kind", sa.String(8), nullable=False),
            sa.Column("digest", sa.String(64), nullable=False, index=True),
        )
        # The enforced policy's decayPolicy as of this view's position (one row, no content).
        self.decay_policy = sa.Table(
            "proj_atom_decay_policy", md,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("defaults", sa.Text, nullable=False),
        )
        self.tables = [self.atoms, self.atom_content, self.subjects, self.subject_content,
                       self.artifacts, self.artifact_content, self.digests, self.decay_policy]
        self.content = [self.atom_content, self.subject_content, self.artifact_content]
        self.route = AtomStoreRoute(self)
        a, c = self.atoms, self.atom_content
        self._by_id = (sa.select(a, c.c.text, c.c.gist, c.c.details, c.c.tags)
                       .select_from(a.outerjoin(c, a.c.atom_id == c.c.atom_id))
                       .where(a.c.atom_id.in_(sa.bindparam("ids", expanding=True)))
                       .order_by(a.c.created_at, a.c.atom_id))

    # ------------------------------------------------------------------ lifecycle
    def create(self, conn: Connection) -> None:
        for table in self.tables:
            table.create(conn, checkfirst=True)

    def reset(self, conn: Connection) -> None:
        for table in reversed(self.tables):
            table.drop(conn, checkfirst=True)

    def routes(self) -> Sequence[AtomStoreRoute]:
        return [self.route]

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        return {t.name: dump_table(conn, t) for t in self.tables}

    # ------------------------------------------------------------------ applying
    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        atoms, subjects, artifacts = (RowSet(self.atoms), RowSet(self.subjects),
                                      RowSet(self.artifacts))
        later = {e.originator_id for e in entries
                 if e.event is not None and e.version > 1}
        atoms.load(conn, later)
        subjects.load(conn, later - set(atoms.rows))
        artifacts.load(conn, later - set(atoms.rows) - set(subjects.rows))
        content: dict[str, tuple[sa.Table, dict[str, Any]]] = {}
        purge: list[str] = []
        defaults = start = self._decay_defaults(conn)
        for e in entries:
            ev = e.event
            if ev is None:
                continue
            if isinstance(ev, Atom.Created):
                atoms.add(e.originator_id, _new_atom(e, defaults))
                if not getattr(ev, "content_erased", False) and ev.text is not None:
                    content[e.originator_id] = (self.atom_content, {
                        "atom_id": e.originator_id, "text": ev.text, "gist": ev.gist,
                        "details": dumps(ev.details), "tags": dumps(ev.tags)})
            elif isinstance(ev, Subject.Created):
                subjects.add(e.originator_id, {
                    "subject_id": e.originator_id, "ref": ev.ref, "locale": ev.locale,
                    "version": e.version, "created_at": e.timestamp,
                    "content_erased": bool(getattr(ev, "content_erased", False)),
                    "data_key_destroyed_at": None})
                if ev.display_name is not None:
                    content[e.originator_id] = (self.subject_content, {
                        "subject_id": e.originator_id, "display_name": ev.display_name})
            elif isinstance(ev, Artifact.Created):
                artifacts.add(e.originator_id, {
                    "artifact_id": e.originator_id, "subject_id": ev.subject_id,
                    "ref": ev.ref, "kind": ev.kind, "captured_at": ev.captured_at,
                    "source": ev.source, "private": bool(ev.private), "status": "active",
                    "version": e.version,
                    "created_at": e.timestamp,
                    "content_erased": bool(getattr(ev, "content_erased", False)),
                    "data_key_destroyed_at": None})
                if any(getattr(ev, f) is not None for f in ("title", "body", "media_url")):
                    content[e.originator_id] = (self.artifact_content, {
                        "artifact_id": e.originator_id, "title": ev.title, "body": ev.body,
                        "media_url": ev.media_url})
            elif isinstance(ev, Policy.PolicySet):
                defaults = DecayDefaults.of_policy(ev.document)
            else:
                row = (atoms.touch(e.originator_id) or subjects.touch(e.originator_id)
                       or artifacts.touch(e.originator_id))
                if row is None:
                    continue  # an item whose creation this view never saw: nothing to change
                row["version"] = e.version
                if "updated_at" in row:
                    row["updated_at"] = e.timestamp
                    row["last_seq"] = e.seq
                if content_gone(ev):
                    row["content_erased"] = True
                    for sealed in ("session_id", "extractor", "source"):  # ADR 0004
                        if sealed in row:
                            row[sealed] = None
                    if isinstance(ev, DataKeyDestroyedMixin):
                        row["data_key_destroyed_at"] = e.timestamp
                    if "detail_brightness" in row:
                        row["detail_brightness"] = None
                    if content.pop(e.originator_id, None) is None:
                        purge.append(e.originator_id)
                if isinstance(ev, Atom.Event):
                    _atom_event(row, ev, e)
                elif isinstance(ev, Artifact.Deleted) or (
                        isinstance(ev, Artifact.ErasureReapplied) and ev.mode is not None):
                    row["status"] = "deleted"
        atoms.flush(conn)
        subjects.flush(conn)
        artifacts.flush(conn)
        if defaults != start:
            conn.execute(self.decay_policy.delete())
            conn.execute(self.decay_policy.insert().values(
                id=1, defaults=json.dumps(defaults.as_json(), sort_keys=True)))
        by_table: dict[str, list[dict[str, Any]]] = {}
        for table, values in content.values():
            by_table.setdefault(table.name, []).append(values)
        for table in self.content:
            if by_table.get(table.name):
                insert_rows(conn, table, by_table[table.name])
        digests = [{"item_id": item, "kind": kind, "digest": d}
                   for item, (_t, values) in content.items()
                   for kind, d in _digests_of(values)]
        if digests:
            insert_rows(conn, self.digests, digests)
        purged = purge if purge and self.route.purge_many(conn, purge) else []
        return Applied(purged=purged)

    def _decay_defaults(self, conn: Connection) -> DecayDefaults:
        stored = conn.execute(sa.select(self.decay_policy.c.defaults)).scalar()
        if stored is None:
            return NO_DEFAULTS
        data = json.loads(stored)
        return DecayDefaults(data["perKind"], data["perPrivacyClass"], data["defaultProfile"])

    # ------------------------------------------------------------------ queries
    def atom(self, conn: Connection, atom_id: str) -> dict[str, Any] | None:
        rows = self.atoms_by_id(conn, [atom_id])
        return rows[0] if rows else None

    def atoms_by_id(self, conn: Connection, ids: Sequence[str]) -> list[dict[str, Any]]:
        if not ids:
            return []
        out: list[dict[str, Any]] = []
        for start in range(0, len(ids), 500):
            # one statement object, so SQLAlchemy compiles it once (recall reads the
            # returned atoms' rows on every query: issue 16)
            rows = conn.execute(self._by_id, {"ids": list(ids[start:start + 500])})
            out.extend(_decode_atom(dict(r._mapping)) for r in rows)
        return out

    def list_atoms(self, conn: Connection, subject_id: str | None = None,
                   privacy_class: str | None = None) -> list[dict[str, Any]]:
        cond: sa.ColumnElement[bool] = sa.true()
        if subject_id is not None:
            cond = sa.and_(cond, self.atoms.c.subject_id == subject_id)
        if privacy_class is not None:
            cond = sa.and_(cond, self.atoms.c.privacy_class == privacy_class)
        return self._select(conn, cond)

    def _select(self, conn: Connection, cond: Any) -> list[dict[str, Any]]:
        a, c = self.atoms, self.atom_content
        stmt = (sa.select(a, c.c.text, c.c.gist, c.c.details, c.c.tags)
                .select_from(a.outerjoin(c, a.c.atom_id == c.c.atom_id))
                .where(cond).order_by(a.c.created_at, a.c.atom_id))
        return [_decode_atom(dict(r._mapping)) for r in conn.execute(stmt)]

    def atoms_where(self, conn: Connection, cond: Any) -> list[dict[str, Any]]:
        """Atoms (with content) matching a SQL condition on the atoms table."""
        return self._select(conn, cond)

    def items_with_digests(self, conn: Connection, kind: str,
                           digests: Sequence[str]) -> dict[str, set[str]]:
        """digest -> ids of the items holding a value with that digest (index lookups)."""
        out: dict[str, set[str]] = {}
        wanted = sorted(set(digests))
        d = self.digests
        for start in range(0, len(wanted), 500):
            for item, digest in conn.execute(
                    sa.select(d.c.item_id, d.c.digest).where(
                        d.c.kind == kind, d.c.digest.in_(wanted[start:start + 500]))):
                out.setdefault(str(digest), set()).add(str(item))
        return out

    def subject(self, conn: Connection, subject_id: str) -> dict[str, Any] | None:
        s, c = self.subjects, self.subject_content
        row = conn.execute(
            sa.select(s, c.c.display_name).select_from(
                s.outerjoin(c, s.c.subject_id == c.c.subject_id))
            .where(s.c.subject_id == subject_id)).first()
        return dict(row._mapping) if row is not None else None

    def artifacts_of(self, conn: Connection, subject_id: str) -> list[dict[str, Any]]:
        t, c = self.artifacts, self.artifact_content
        rows = conn.execute(
            sa.select(t, c.c.title, c.c.body, c.c.media_url).select_from(
                t.outerjoin(c, t.c.artifact_id == c.c.artifact_id))
            .where(t.c.subject_id == subject_id).order_by(t.c.created_at, t.c.artifact_id))
        return [dict(r._mapping) for r in rows]

    # ------------------------------------------------------------------ named queries
    @contextlib.contextmanager
    def reading(self) -> Iterator[AtomReads]:
        """The named queries governance asks (:class:`AtomReads`), on one connection: what
        they read is one snapshot of the store."""
        with self.store.engine.connect() as conn:
            yield AtomReads(self, conn)

    def ensure_indexes(self) -> None:
        """Create the atoms table's indexes on a store made before they existed (the
        sweep's ranges, ADR 0014)."""
        with self.store.engine.begin() as conn:
            for index in self.atoms.indexes:
                index.create(conn, checkfirst=True)

    def drop_tombstone_records(self, ids: Sequence[str]) -> int:
        """Drop the rows of these atoms that are content-free tombstone records (the
        condition re-checked in the statement), 500 a statement, in one transaction;
        how many rows went."""
        a = self.atoms
        dropped = 0
        with self.store.engine.begin() as conn:
            for start in range(0, len(ids), 500):
                chunk = list(ids[start:start + 500])
                dropped += conn.execute(sa.delete(a).where(
                    a.c.atom_id.in_(chunk), a.c.status.in_(GONE),
                    a.c.content_erased.is_(True))).rowcount or 0
        return dropped


def _digests_of(values: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, digest) of every content value of one content row."""
    texts: list[Any] = [values.get(k) for k in ("text", "gist", "display_name", "title",
                                                  "body", "media_url")]
    details = values.get("details")
    if details:
        texts += [d.get("content") for d in json.loads(details) if isinstance(d, dict)]
    out = {("text", content_digest(t)) for t in texts if isinstance(t, str) and t}
    tags = values.get("tags")
    if tags:
        out |= {("tag", content_digest(t)) for t in json.loads(tags) if isinstance(t, str)}
    return sorted(out)


#: The atom's fields (ledger/domain.py) the row holds as the event has them: the content
#: (text, gist, details, tags) lives in the content table, the JSON ones are dumped below.
_AS_IS = tuple(n for n in ATOM_FIELDS if n not in (
    "text", "gist", "details", "tags", "artifact_ids", "human_reviewed", "salience",
    "emotional_valence", "decay_profile", "extensions"))


def _new_atom(e: LogEntry, defaults: DecayDefaults) -> dict[str, Any]:
    ev = e.event
    salience = float(ev.salience if ev.salience is not None else 0.5)
    valence = float(ev.emotional_valence or 0.0)
    profile, source = defaults.resolve(ev.decay_profile, ev.kind, ev.privacy_class)
    state = DecayState(salience, 0, valence, e.timestamp, profile_of(profile))
    details = ev.details if not getattr(ev, "content_erased", False) else None
    return {
        "atom_id": e.originator_id, "version": e.version,
        **{name: getattr(ev, name) for name in _AS_IS},
        "artifact_ids": dumps(ev.artifact_ids or []),
        "human_reviewed": bool(ev.human_reviewed),
        "salience": salience, "emotional_valence": valence,
        "decay_profile": dumps(profile), "profile_source": source,
        "extensions": dumps(ev.extensions),
        "superseded_by": None, "status": "active", "redaction_mode": None,
        "redacted_at": None, "flags": "[]", "rehearsal_count": 0,
        "last_rehearsed_at": None, "baseline": salience, "decay_origin": e.timestamp,
        "fades_at": fades_at(state),
        "detail_brightness": dumps([float(d["brightness"]) for d in details])
        if details else None,
        "created_at": e.timestamp, "updated_at": e.timestamp, "last_seq": e.seq,
        "content_erased": bool(getattr(ev, "content_erased", False)),
        "data_key_destroyed_at": None,
    }


def is_candidate(row: dict[str, Any], at: str) -> bool:
    """Persona §6 candidate selection, salience aside: active, not superseded, expired or
    erased, and valid at ``at`` (``valid_from <= at < valid_to``, open ends allowed)."""
    return (row["status"] == "active" and not row["content_erased"]
            and row["superseded_by"] is None and row["text"] is not None
            and (row["valid_from"] is None or row["valid_from"] <= at)
            and (row["valid_to"] is None or at < row["valid_to"]))


def decay_state(row: dict[str, Any]) -> DecayState:
    """The decay state stored in an atom row (``decay_profile`` as stored JSON or dict)."""
    profile = row["decay_profile"]
    if isinstance(profile, str):
        profile = json.loads(profile)
    return DecayState(float(row["baseline"]), int(row["rehearsal_count"]),
                      float(row["emotional_valence"]), str(row["decay_origin"]),
                      profile_of(profile))


def _atom_event(row: dict[str, Any], ev: Any, e: LogEntry) -> None:
    if isinstance(ev, Atom.Rehearsed):
        state = decay_state(row)
        after = state.rehearsed(e.timestamp)
        if row["detail_brightness"] is not None:
            row["detail_brightness"] = dumps(
                state.rehearsed_brightness(json.loads(row["detail_brightness"]), e.timestamp))
        row.update(baseline=after.baseline, rehearsal_count=after.count,
                   decay_origin=after.origin, last_rehearsed_at=e.timestamp,
                   fades_at=fades_at(after))
    elif isinstance(ev, Atom.Superseded):
        row.update(superseded_by=ev.superseded_by, valid_to=ev.valid_to, status="superseded")
    elif isinstance(ev, Atom.Expired):
        row.update(valid_to=ev.valid_to, status="expired")
    elif isinstance(ev, Atom.Redacted):
        row.update(status=STATUS_BY_MODE[ev.mode], redaction_mode=ev.mode,
                   redacted_at=e.timestamp)
    elif isinstance(ev, Atom.Archived):  # decay archival by a sweep (ADR 0050)
        row.update(status="archived", redaction_mode=None, redacted_at=e.timestamp)
    elif isinstance(ev, Atom.Unredacted):
        row.update(status="active", redaction_mode=None, redacted_at=None)
    elif isinstance(ev, Atom.ErasureReapplied) and ev.mode is not None:
        # a hard erasure's tombstone, re-recorded after a restore (ADR 0045)
        row.update(status=STATUS_BY_MODE[ev.mode], redaction_mode=ev.mode,
                   redacted_at=e.timestamp)
    elif isinstance(ev, Atom.SourceRemoved):
        row.update(artifact_ids=dumps(list(ev.remaining)))
    elif isinstance(ev, Atom.Flagged | Atom.FlagResolved):
        flags = set(json.loads(row["flags"]))
        flags = flags | {ev.flag} if isinstance(ev, Atom.Flagged) else flags - {ev.flag}
        row["flags"] = dumps(sorted(flags))


def _decode_atom(row: dict[str, Any]) -> dict[str, Any]:
    for key in ("artifact_ids", "decay_profile", "extensions", "detail_brightness",
                "details", "tags", "flags"):
        row[key] = _loads(row.get(key))
    row["human_reviewed"] = bool(row["human_reviewed"])
    row["content_erased"] = bool(row["content_erased"])
    return row


class AtomReads:
    """The atom store's named queries, on one connection (:meth:`AtomStore.reading`):
    what the erasure, the sweep and the policy check ask, each by a name that says what
    it asks, so that no SQL, table or connection leaves the read model."""

    def __init__(self, model: AtomStore, conn: Connection) -> None:
        self.m = model
        self._conn = conn

    # --------------------------------------------------------------- atoms and subjects
    def atoms_by_id(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """The atoms (with content) of these ids, 500 a statement."""
        return self.m.atoms_by_id(self._conn, ids)

    def all_atoms(self) -> list[dict[str, Any]]:
        return self.m.list_atoms(self._conn)

    def atoms_of_subject(self, subject_id: str) -> list[dict[str, Any]]:
        return self.m.atoms_where(self._conn, self.m.atoms.c.subject_id == subject_id)

    def atoms_in_sessions(self, sessions: Sequence[str],
                          not_of: str | None = None) -> list[dict[str, Any]]:
        """The atoms of these sessions (``not_of``: but none of that subject's)."""
        a = self.m.atoms
        cond: sa.ColumnElement[bool] = a.c.session_id.in_(list(sessions))
        if not_of is not None:
            cond = sa.and_(cond, a.c.subject_id != not_of)
        return self.m.atoms_where(self._conn, cond)

    def subject(self, subject_id: str) -> dict[str, Any] | None:
        return self.m.subject(self._conn, subject_id)

    def items_with_digests(self, kind: str, digests: Sequence[str]) -> dict[str, set[str]]:
        """digest -> ids of the items holding a value with that digest (index lookups)."""
        return self.m.items_with_digests(self._conn, kind, digests)

    def live_atom_contents(self) -> Iterator[Any]:
        """Every atom not erased, with its subject and content columns as stored (text,
        gist, tags and details as JSON text), streamed."""
        a, ac = self.m.atoms, self.m.atom_content
        stmt = (sa.select(ac.c.atom_id, a.c.subject_id, ac.c.text, ac.c.gist, ac.c.tags,
                          ac.c.details)
                .select_from(ac.join(a, a.c.atom_id == ac.c.atom_id))
                .where(a.c.status.notin_(GONE)))
        yield from self._conn.execution_options(stream_results=True,
                                                yield_per=2000).execute(stmt)

    # --------------------------------------------------------------- artifacts
    def artifacts_of(self, subject_id: str) -> list[dict[str, Any]]:
        return self.m.artifacts_of(self._conn, subject_id)

    def artifact_texts(self, ids: Sequence[str]) -> list[Any]:
        """The content rows (artifact_id, title, body, media_url) of these artifacts."""
        ac = self.m.artifact_content
        return list(self._conn.execute(sa.select(ac).where(ac.c.artifact_id.in_(list(ids)))))

    def artifacts_among(self, ids: Sequence[str]) -> list[str]:
        """Those of these ids that are artifacts."""
        art = self.m.artifacts
        return [str(a) for (a,) in self._conn.execute(
            sa.select(art.c.artifact_id).where(art.c.artifact_id.in_(list(ids))))]

    def artifacts_containing(self, lowered: str) -> set[str]:
        """The artifacts whose title or body holds ``lowered`` (lower case), as a
        substring, case-folded."""
        ac = self.m.artifact_content
        return {str(a) for (a,) in self._conn.execute(sa.select(ac.c.artifact_id).where(
            sa.or_(sa.func.lower(ac.c.body).contains(lowered, autoescape=True),
                   sa.func.lower(ac.c.title).contains(lowered, autoescape=True))))}

    def live_artifact_contents(self) -> Iterator[Any]:
        """Every artifact whose content is not erased: id, subject, title, body; streamed."""
        t, c = self.m.artifacts, self.m.artifact_content
        stmt = (sa.select(c.c.artifact_id, t.c.subject_id, c.c.title, c.c.body)
                .select_from(c.join(t, t.c.artifact_id == c.c.artifact_id))
                .where(t.c.content_erased.is_(False)))
        yield from self._conn.execution_options(stream_results=True,
                                                yield_per=2000).execute(stmt)

    def artifact_statuses(self) -> dict[str, str]:
        art = self.m.artifacts
        return {str(r.artifact_id): str(r.status)
                for r in self._conn.execute(sa.select(art.c.artifact_id, art.c.status))}

    # --------------------------------------------------------------- the policy's rules
    def retention_due(self, privacy_class: str | None, statuses: Sequence[str],
                      created_by: str) -> list[Any]:
        """(atom_id, created_at) of the atoms of this class (None: unclassified) in these
        statuses created at or before ``created_by``: one range of
        ``proj_atoms_retention``, oldest first."""
        a = self.m.atoms
        cond = sa.and_(a.c.privacy_class.is_(None) if privacy_class is None
                       else a.c.privacy_class == privacy_class,
                       a.c.status.in_(statuses), a.c.created_at <= created_by)
        return list(self._conn.execute(sa.select(a.c.atom_id, a.c.created_at).where(cond)
                                       .order_by(a.c.created_at, a.c.atom_id)))

    def atoms_fading_by(self, instant: str) -> list[dict[str, Any]]:
        """The active atoms, content not erased, whose salience falls below the retrieval
        threshold at or before ``instant`` (``fades_at``, indexed), as rows without
        content, soonest first."""
        a = self.m.atoms
        cond = sa.and_(a.c.status == "active", a.c.fades_at.is_not(None),
                       a.c.fades_at <= instant, a.c.content_erased.is_(False))
        return [dict(r._mapping) for r in self._conn.execute(
            sa.select(a).where(cond).order_by(a.c.fades_at, a.c.atom_id))]

    def tombstone_records_by(self, redacted_by: str) -> list[Any]:
        """(atom_id, privacy_class, redacted_at) of the content-free records of erased
        atoms whose tombstone is at or before ``redacted_by``, oldest first."""
        a = self.m.atoms
        cond = sa.and_(a.c.status.in_(GONE), a.c.redacted_at.is_not(None),
                       a.c.redacted_at <= redacted_by, a.c.content_erased.is_(True))
        return list(self._conn.execute(
            sa.select(a.c.atom_id, a.c.privacy_class, a.c.redacted_at)
            .where(cond).order_by(a.c.redacted_at, a.c.atom_id)))

    def consent_candidates(self, statuses: Sequence[str], classes: Sequence[str],
                           sensitivities: Sequence[str]) -> list[Any]:
        """(atom_id, privacy_class, consent_basis, sensitivity, extensions) of the atoms in
        these statuses, content not erased, of one of these classes or unclassified and of
        one of these sensitivities, oldest first."""
        a = self.m.atoms
        cond = sa.and_(a.c.status.in_(statuses), a.c.content_erased.is_(False), sa.or_(
            a.c.privacy_class.in_(list(classes)),
            sa.and_(a.c.privacy_class.is_(None), a.c.sensitivity.in_(list(sensitivities)))))
        return list(self._conn.execute(
            sa.select(a.c.atom_id, a.c.privacy_class, a.c.consent_basis, a.c.sensitivity,
                      a.c.extensions).where(cond).order_by(a.c.created_at, a.c.atom_id)))

    def subject_ids(self) -> list[str]:
        """Every subject of the store, by id, ascending."""
        s = self.m.subjects
        return [str(r[0]) for r in self._conn.execute(
            sa.select(s.c.subject_id).order_by(s.c.subject_id))]

    def subjects_over(self, limit: int) -> list[Any]:
        """(subject_id, n) of the subjects with more than ``limit`` active atoms whose
        content is not erased."""
        a = self.m.atoms
        n = sa.func.count().label("n")
        return list(self._conn.execute(
            sa.select(a.c.subject_id, n)
            .where(a.c.status == "active", a.c.content_erased.is_(False))
            .group_by(a.c.subject_id).having(sa.func.count() > limit)
            .order_by(a.c.subject_id)))

    def erased_atom_refs(self) -> list[Any]:
        """(atom_id, ref) of every erased atom."""
        a = self.m.atoms
        return list(self._conn.execute(sa.select(a.c.atom_id, a.c.ref)
                                       .where(a.c.status.in_(GONE))))

    def atom_ids(self) -> set[str]:
        return {str(r[0]) for r in self._conn.execute(sa.select(self.m.atoms.c.atom_id))}

    def references_of_live(self, statuses: Sequence[str]) -> list[Any]:
        """(atom_id, supersedes, artifact_ids, flags, text, gist, details, tags; JSON as
        stored) of the atoms in these statuses whose content is not erased, oldest first."""
        a, c = self.m.atoms, self.m.atom_content
        return list(self._conn.execute(
            sa.select(a.c.atom_id, a.c.supersedes, a.c.artifact_ids, a.c.flags, c.c.text,
                      c.c.gist, c.c.details, c.c.tags)
            .select_from(a.outerjoin(c, a.c.atom_id == c.c.atom_id))
            .where(a.c.status.in_(statuses), a.c.content_erased.is_(False))
            .order_by(a.c.created_at, a.c.atom_id)).all())


class AtomStoreRoute:
    """The atom store's content tables: atom, subject and artifact content rows, and the
    digests of their values."""

    name = "atom-store"
    model = "atoms"

    def __init__(self, model: AtomStore) -> None:
        self.m = model

    def purge(self, conn: Connection, item_id: str) -> int:
        return self.purge_many(conn, [item_id])

    def purge_many(self, conn: Connection, item_ids: Sequence[str]) -> int:
        d = self.m.digests
        n = sum(delete_ids(conn, t, item_ids) for t in self.m.content)
        for start in range(0, len(item_ids), 500):
            n += int(conn.execute(d.delete().where(
                d.c.item_id.in_(list(item_ids[start:start + 500])))).rowcount or 0)
        return n

    def compact(self, conn: Connection) -> None:
        return None  # row deletes only; the store-wide compaction follows

    def content_tables(self) -> Sequence[str]:
        return [t.name for t in (*self.m.content, self.m.digests)]

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        """Thorough probe of one item: by id, and every stored value scanned for the
        content (substring, in SQL). ``probe_many`` is the indexed form erasure uses."""
        hits: list[ProbeHit] = []
        checked: list[str] = []
        with self.m.store.engine.connect() as conn:
            for table in self.m.content:
                if not self.m.store.table_exists(conn, table.name):
                    continue
                (pk,) = table.primary_key.columns
                checked.append(table.name)
                n = conn.execute(sa.select(sa.func.count()).select_from(table)
                                 .where(pk == item_id)).scalar_one()
                if n:
                    hits.append(ProbeHit(table.name, "id", int(n)))
                if not content:
                    continue
                text_cols = [c for c in table.columns if c is not pk]
                needles = [n.decode() for n in content_needles(content)]
                cond = sa.or_(*[contains(conn, c, s) for c in text_cols for s in needles])
                ids = [str(r[0]) for r in conn.execute(sa.select(pk).where(cond))]
                if ids:
                    hits.append(ProbeHit(table.name, "content", len(ids),
                                         tuple(i for i in ids if i != item_id)))
            hits += self._digest_hits(conn, {item_id: [content] if content else []})[item_id]
            checked.append(self.m.digests.name)
        return ProbeResult(self.name, item_id, tuple(checked), tuple(hits))

    def probe_many(self, items: Mapping[str, Sequence[str]]) -> list[ProbeResult]:
        """Probe many items at once, with index lookups only: rows keyed by each id in
        every content table, and any stored value equal (case-folded) to one of the
        item's texts under any id, through the digest index. Substring copies are left
        to the raw file scan that follows every erasure (ADR 0012)."""
        ids = list(items)
        found: dict[str, list[ProbeHit]] = {i: [] for i in ids}
        checked: list[str] = []
        with self.m.store.engine.connect() as conn:
            for table in (*self.m.content, self.m.digests):
                if not self.m.store.table_exists(conn, table.name):
                    continue
                checked.append(table.name)
                key = table.c.item_id if table is self.m.digests else \
                    next(iter(table.primary_key.columns))
                counts: dict[str, int] = {}
                for start in range(0, len(ids), 500):
                    for item, n in conn.execute(
                            sa.select(key, sa.func.count()).where(
                                key.in_(ids[start:start + 500])).group_by(key)):
                        counts[str(item)] = int(n)
                for item, n in counts.items():
                    found[item].append(ProbeHit(table.name, "id", n))
            if self.m.store.table_exists(conn, self.m.digests.name):
                for item, extra in self._digest_hits(conn, items).items():
                    found[item] += extra
        return [ProbeResult(self.name, i, tuple(checked), tuple(found[i])) for i in ids]

    def _digest_hits(self, conn: Connection,
                     items: Mapping[str, Sequence[str]]) -> dict[str, list[ProbeHit]]:
        wanted = {i: {content_digest(t) for t in texts if t} for i, texts in items.items()}
        holders = self.m.items_with_digests(conn, "text", [d for v in wanted.values()
                                                            for d in v])
        out: dict[str, list[ProbeHit]] = {i: [] for i in items}
        for item, digests in wanted.items():
            other = sorted({h for d in digests for h in holders.get(d, ())})
            if other:
                out[item].append(ProbeHit(self.m.digests.name, "content", len(other),
                                          tuple(h for h in other if h != item)))
        return out
