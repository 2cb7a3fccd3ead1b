"""The transparency log: an RFC 9162 Merkle tree over the event log, and checkpoints.

Leaf bytes (docs/spec/leaf.md) commit to a stored event — its sequence number,
aggregate id, version, topic, the SHA-256 of its stored state and its signature —
never to plaintext, so crypto-shredding leaves every leaf and proof valid.

The tree's complete-subtree nodes are stored in the event database (``tlog_nodes``);
they are a cache for O(log n) proofs, never a source of trust: ``ledger verify``
recomputes every leaf from the events and compares roots with signed checkpoints.
The tree is extended inside each command's write lock right after its events are
saved, and :meth:`TransparencyLog.catch_up` repairs a gap left by a crash between
the two (ADR 0009).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keys.datakeys import make_engine
from keys.roster import RosterState
from keys.signing import Signer
from ledger import envelope
from ledger.checkpoint import Checkpoint, CheckpointError, sign_checkpoint, verify_checkpoint
from ledger.errors import ConflictError, NotFound, VerificationFailed
from ledger.home import StorageURL
from ledger.leaf import leaf_bytes, leaf_of
from ledger.merkle import MerkleTree, NodeKey, leaf_hash

_MAX_PARAMS = 500  # bound parameters per statement (SQLite before 3.32 allowed 999)


class SqlTreeStore:
    """The :class:`ledger.merkle.TreeStore` contract on SQLAlchemy Core (SQLite, PostgreSQL).

    Level-0 rows also record the notification id of their event, so the tree knows where
    in the notification log to resume.
    """

    def __init__(self, engine: Engine, schema: str | None) -> None:
        self.engine = engine
        md = sa.MetaData(schema=schema)
        # New SQLite ledgers keep nodes in a WITHOUT ROWID table, the rows in their
        # (level, idx) B-tree: one insert per node instead of a rowid row plus an index
        # entry (ADR 0008). Older ledgers keep their rowid table; nothing depends on it.
        self.nodes = sa.Table(
            "tlog_nodes", md,
            sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("hash", sa.LargeBinary, nullable=False),
            sa.Column("notification_id", sa.BigInteger, nullable=True),
            sqlite_with_rowid=False,
        )
        self.checkpoints = sa.Table(
            "tlog_checkpoints", md,
            sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("root", sa.LargeBinary, nullable=False),
            sa.Column("note", sa.Text, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
        )
        md.create_all(engine)
        self.leaf_notifications: dict[int, int] = {}
        table, ph = (engine.dialect.identifier_preparer.format_table(self.nodes),
                     "?" if engine.dialect.paramstyle == "qmark" else "%s")
        self._placeholder = ph
        self._insert_sql = (
            f"INSERT INTO {table} (level, idx, hash, notification_id) "  # noqa: S608 (own table)
            f"VALUES ({ph}, {ph}, {ph}, {ph})")
        self._select_sql = f"SELECT level, idx, hash FROM {table}"  # noqa: S608 (own table)
        self._max_leaf_sql = f"SELECT MAX(idx) FROM {table} WHERE level = 0"  # noqa: S608

    def size(self) -> int:
        with self.engine.connect() as conn:
            top = conn.exec_driver_sql(self._max_leaf_sql).scalar()
        return 0 if top is None else int(top) + 1

    def last_notification_id(self) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(
                sa.select(self.nodes.c.notification_id).where(self.nodes.c.level == 0)
                .order_by(self.nodes.c.idx.desc()).limit(1)).scalar()
        return int(value or 0)

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        found: dict[NodeKey, bytes] = {}
        by_level: dict[int, list[int]] = {}
        for level, index in dict.fromkeys(keys):
            by_level.setdefault(level, []).append(index)
        # Plain SQL with at most _MAX_PARAMS placeholders per statement: SQLAlchemy's
        # construction and compilation of this OR of IN terms cost ten times the query,
        # and every command reads the tree's right edge once (ADR 0008).
        ph = self._placeholder
        statements: list[tuple[list[str], list[int]]] = [([], [])]
        for level, indexes in by_level.items():
            for i in range(0, len(indexes), _MAX_PARAMS - 1):
                chunk = indexes[i:i + _MAX_PARAMS - 1]
                terms, params = statements[-1]
                if params and len(params) + len(chunk) + 1 > _MAX_PARAMS:
                    statements.append(([], []))
                    terms, params = statements[-1]
                terms.append(f"(level = {ph} AND idx IN ({', '.join([ph] * len(chunk))}))")
                params.extend((level, *chunk))
        with self.engine.connect() as conn:
            for terms, params in statements:
                if not terms:
                    continue
                rows = conn.exec_driver_sql(
                    f"{self._select_sql} WHERE {' OR '.join(terms)}", tuple(params)).all()
                found.update({(int(lv), int(ix)): bytes(h) for lv, ix, h in rows})
        for key in keys:
            if key not in found:
                raise KeyError(f"no Merkle node at level {key[0]} index {key[1]}")
        return [found[k] for k in keys]

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        leaves = self.leaf_notifications
        rows = [(lv, ix, h, leaves.get(ix) if lv == 0 else None) for (lv, ix), h in nodes]
        with self.engine.begin() as conn:
            # Plain executemany: a bulk append writes about two nodes per event.
            conn.exec_driver_sql(self._insert_sql, rows)

    def last_notification_id_of(self, index: int) -> int:
        with self.engine.connect() as conn:
            value = conn.execute(sa.select(self.nodes.c.notification_id).where(
                self.nodes.c.level == 0, self.nodes.c.idx == index)).scalar()
        if value is None:
            raise KeyError(f"no leaf {index} in the stored tree")
        return int(value)

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(self.nodes.c.hash).where(self.nodes.c.level == 0,
                                                   self.nodes.c.idx >= start,
                                                   self.nodes.c.idx < stop)
                .order_by(self.nodes.c.idx)).all()
        return [bytes(r[0]) for r in rows]


class SparseTreeStore:
    """An in-memory store holding only some nodes (the peaks of a trusted tree)."""

    def __init__(self, size: int, nodes: dict[NodeKey, bytes]) -> None:
        self._size = size
        self._nodes = dict(nodes)

    def size(self) -> int:
        return self._size

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        try:
            return [self._nodes[k] for k in keys]
        except KeyError as e:
            raise KeyError(f"no Merkle node {e.args[0]} in the sparse tree") from None

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        for key, value in nodes:
            self._nodes[key] = value
            if key[0] == 0:
                self._size = max(self._size, key[1] + 1)


def peak_keys(size: int) -> list[NodeKey]:
    """The complete subtrees a tree of ``size`` leaves decomposes into, largest first."""
    keys, pos = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            keys.append((level, pos >> level))
            pos += 1 << level
    return keys


@dataclass(frozen=True)
class SignedCheckpoint:
    checkpoint: Checkpoint
    note: str

    @property
    def size(self) -> int:
        return self.checkpoint.size

    @property
    def root(self) -> bytes:
        return self.checkpoint.root


def verify_with_roster(note: str, origin: str, roster: RosterState) -> SignedCheckpoint:
    """A checkpoint note is valid if a key that ever held the ``log`` role signed it."""
    log_keys = [e.public_key for e in roster.entries.values()
                if any(g.role == "log" for g in e.grants)]
    last: CheckpointError | None = None
    for pub in log_keys:
        try:
            cp = verify_checkpoint(note, origin, pub, expected_origin=origin)
            return SignedCheckpoint(cp, note)
        except CheckpointError as e:
            last = e
    raise VerificationFailed(
        f"checkpoint is not signed by any log key of this ledger's roster"
        f"{': ' + str(last) if last else ''}",
        hint="check that the checkpoint belongs to this ledger (origin line)")


class TransparencyLog:
    """The tree and checkpoints of one ledger, stored beside its events."""

    def __init__(self, events_url: StorageURL, origin: str) -> None:
        self.origin = origin
        self.engine = make_engine(events_url.sqlalchemy_url(), events_url.schema, pooled=True)
        self.store = SqlTreeStore(self.engine, events_url.schema)
        self.tree = MerkleTree(self.store)

    def close(self) -> None:
        self.engine.dispose()

    def catch_up(self, recorder: Any) -> int:
        """Append leaves for events not yet in the tree; returns the tree size.

        Refuses to extend the tree over a log whose sequence numbers are not consecutive,
        so a tampered log never gets a valid-looking checkpoint.
        """
        size = self.store.size()
        after = self.store.last_notification_id()
        while True:
            rows = recorder.select_notifications(start=after + 1, limit=5000)
            if not rows:
                return size
            hashes: list[bytes] = []
            self.store.leaf_notifications = {}
            for rec in rows:
                opened = envelope.open_state(rec.state)
                seq = opened.envelope["seq"]
                if seq != size + len(hashes) + 1:
                    raise VerificationFailed(
                        f"cannot extend the transparency log: position {rec.id} holds seq "
                        f"{seq}, expected {size + len(hashes) + 1}",
                        hint="run `ledger verify` to find the first bad event")
                self.store.leaf_notifications[size + len(hashes)] = rec.id
                hashes.append(leaf_hash(leaf_of(rec, opened)))
            size = self.tree.extend(hashes)
            after = rows[-1].id

    def append_recorded(self, notifications: Sequence[Any], recorder: Any) -> int:
        """Extend the tree with events just saved (their notifications in log order).

        Falls back to :meth:`catch_up` when the tree is not exactly at their first seq.
        """
        if not notifications or any(getattr(n, "id", None) is None for n in notifications):
            return self.catch_up(recorder)
        size = self.store.size()
        opened = [envelope.open_state(n.state) for n in notifications]
        if opened[0].envelope["seq"] != size + 1:
            return self.catch_up(recorder)
        self.store.leaf_notifications = {}
        hashes: list[bytes] = []
        for n, o in zip(notifications, opened, strict=True):
            if o.envelope["seq"] != size + len(hashes) + 1:
                return self.catch_up(recorder)
            self.store.leaf_notifications[size + len(hashes)] = n.id
            hashes.append(leaf_hash(leaf_of(n, o)))
        return self.tree.extend(hashes)

    def append_sealed(self, recorded: Sequence[tuple[int, int | None, Any, bytes]],
                      recorder: Any) -> int:
        """Extend the tree with events this process just sealed and saved.

        ``recorded`` holds ``(seq, notification id, stored event, signature)`` in log
        order, the sequence number and signature as the mapper sealed them into the
        stored state; the leaves are the ones :meth:`append_recorded` computes from the
        rows, without parsing the stored bytes again. Falls back to :meth:`catch_up`
        like it.
        """
        if not recorded:
            return self.catch_up(recorder)
        size = self.store.size()
        notification_ids: dict[int, int] = {}
        hashes: list[bytes] = []
        for index, (seq, nid, s, signature) in enumerate(recorded, start=size):
            if nid is None or seq != index + 1:
                return self.catch_up(recorder)
            notification_ids[index] = nid
            hashes.append(leaf_hash(leaf_bytes(seq, s.originator_id, s.originator_version,
                                               s.topic, s.state, signature)))
        self.store.leaf_notifications = notification_ids
        return self.tree.extend(hashes, size=size)

    def checkpoint(self, signer: Signer, at: datetime) -> SignedCheckpoint:
        """Sign the current tree head with the log key and record it (idempotent)."""
        size = self.store.size()
        root = self.tree.root(size)
        existing = self.recorded(size)
        if existing is not None:
            if existing.root != root:
                raise VerificationFailed(
                    f"a checkpoint of size {size} with another root is already recorded: "
                    "the log was forked or rewritten", hint="run `ledger verify`")
            return existing
        cp = Checkpoint(self.origin, size, root)
        note = sign_checkpoint(cp, self.origin, signer.signing_key)
        with self.engine.begin() as conn:
            conn.execute(self.store.checkpoints.insert(), [{
                "size": size, "root": root, "note": note, "created_at": at.isoformat()}])
        return SignedCheckpoint(cp, note)

    def recorded(self, size: int | None = None) -> SignedCheckpoint | None:
        """The recorded checkpoint of ``size``, or the latest one (unverified)."""
        q = sa.select(self.store.checkpoints.c.note)
        if size is None:
            q = q.order_by(self.store.checkpoints.c.size.desc()).limit(1)
        else:
            q = q.where(self.store.checkpoints.c.size == size)
        with self.engine.connect() as conn:
            note = conn.execute(q).scalar()
        if note is None:
            return None
        from ledger.checkpoint import parse_body, parse_note

        body, _ = parse_note(note)
        return SignedCheckpoint(parse_body(body), note)

    def latest(self) -> SignedCheckpoint:
        cp = self.recorded()
        if cp is None:
            raise NotFound("this ledger has no checkpoint yet", hint="run `ledger checkpoint`")
        return cp

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return self.tree.inclusion_proof(index, size)

    def consistency(self, old_size: int, new_size: int) -> list[bytes]:
        if old_size > new_size:
            raise ConflictError(f"the old checkpoint (size {old_size}) is larger than the "
                                f"current one (size {new_size})",
                                hint="the log was truncated, or the checkpoint is from another "
                                     "ledger; run `ledger verify --checkpoint FILE`")
        return self.tree.consistency_proof(old_size, new_size)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def verify_since(app: Any, note: str, root_public_key: bytes) -> tuple[Any, dict[str, Any]]:
    """Verify only what was appended after a trusted checkpoint (cost follows new events).

    1. fold the roster from its root-signed events (few); 2. the checkpoint is signed by a
    log key; 3. the stored tree's peaks for that size hash to its root, and the last event
    it covers is included (its time seeds step 6); 4. every newer event passes steps 1-7;
    5. the new leaves extend the trusted peaks to the new root (consistency by construction),
    which must equal any checkpoint recorded for the new size.
    """
    from keys.roster import ROSTER_TOPICS, RosterState
    from keys.signing import key_id
    from ledger.merkle import verify_inclusion
    from ledger.verify import Failure, LogVerifier

    root_kid = key_id(root_public_key)
    full = RosterState()
    roster_events = app.recorder.select_notifications(start=1, limit=10**9,
                                                      topics=sorted(ROSTER_TOPICS))
    opened_roster = []
    for rec in roster_events:
        try:
            opened = envelope.open_state(rec.state)
            if opened.kid != root_kid:
                raise envelope.EnvelopeError("4", "not signed by the trusted root key")
            envelope.verify(opened, root_public_key)
        except envelope.EnvelopeError as e:
            raise VerificationFailed(f"roster event at position {rec.id}: {e}") from e
        full.apply(rec.topic, opened.envelope["payload"])
        opened_roster.append(opened)
    signed = verify_with_roster(note, app.config.origin, full)
    m = signed.size
    v = LogVerifier(ledger_id=app.ledger_id, root_public_key=root_public_key,
                    collect_leaves=True)
    for opened in opened_roster:
        if opened.envelope["seq"] <= m:
            v.report.roster.apply(opened.envelope["topic"], opened.envelope["payload"])
    peaks = peak_keys(m)
    try:
        sparse = SparseTreeStore(m, dict(zip(peaks, app.tlog.store.get_many(peaks),
                                             strict=True)))
    except KeyError:
        sparse = None
    if sparse is None or MerkleTree(sparse).root(m) != signed.root:
        v.report.ok = False
        v.report.failure = Failure(0, None, "-", "8.3", f"the stored tree does not match the "
                                   f"trusted checkpoint of size {m}: history was rewritten; "
                                   "run `ledger verify --checkpoint FILE` for the full check")
        return v.report, {"since": m}
    start = 1
    if m:
        nid = app.tlog.store.last_notification_id_of(m - 1)
        rec = app.recorder.select_notifications(start=nid, limit=1)[0]
        opened = envelope.open_state(rec.state)
        proof = app.tlog.tree.inclusion_proof(m - 1, m)
        verify_inclusion(leaf_hash(leaf_of(rec, opened)), m - 1, m, proof, signed.root)
        v.report.head_seq = m
        v.last_time = datetime.fromisoformat(opened.envelope["timestamp"].replace("Z", "+00:00"))
        start = nid + 1
    v.prior_version = lambda oid, ver: bool(
        app.recorder.select_events(UUID(oid), gt=ver - 1, lte=ver))
    for rec in app.stored_records(start=start):
        if not v.feed(rec):
            return v.report, {"since": m}
    tree = MerkleTree(sparse)
    size = tree.extend(v.leaves or [])
    root = tree.root(size)
    recorded = app.tlog.recorded(size)
    if recorded is not None and recorded.root != root:
        v.report.ok = False
        v.report.failure = Failure(0, None, "-", "8.3", f"the recorded checkpoint of size {size}"
                                   " has another root than the verified log")
    return v.report, {"since": m, "size": size, "root": b64(root)}
