"""Vector index: one embedding per atom, in per-subject sparse segments; exact cosine.

Storage (``proj_vec_segments``): a subject's vectors are packed into segments of up to
``segment_size`` (1024) slots. A segment row holds, per slot, the atom id (36 ASCII
bytes), a flag byte (0 empty, 1 retrievable, 2 not retrievable) and the number of
non-zero components (uint16); then all slots' non-zero components as indices (uint16)
and values (float32), little-endian. The default embedder's vectors have ~25 non-zeros
in 256 dimensions, so this is ~6x smaller than dense storage; a dense embedder costs
1.5x. ``proj_vec_slots`` maps atom id to (subject, segment, slot) and holds no content.
A search reads a subject's few segment rows (10^5 vectors: ~100 rows), not one row
per atom.

Search is exact, in float64: each slot's score is the sum of value * query[index] over
its components, in index order, with numpy (``bincount``) when installed and in plain
Python otherwise; both give the same ids and scores. Embeddings derive from content (a
hashed n-gram vector reveals which words an atom holds), so the index is a content
route: erasure removes the slot's components and id from the segment (the row is
rewritten; SQLite's ``secure_delete`` zeroes the old pages) and deletes the slot
mapping. Emptied slots stay until a rebuild packs segments afresh.

Dense embedders (``embedder.sparse`` false: wordllama, MiniLM, an endpoint) use the dense
layout (ADR 0021): ``vals`` holds ``dim`` float32 per slot at ``slot * dim``, ``idx`` is
empty and ``nnz`` is ``dim`` for a live slot, 0 for an erased one (whose values are
overwritten with zeros in place). Each segment row carries ``seq``, the notification
position of the batch that last wrote it, so an in-process copy of a subject's vectors
(:mod:`projections.recall`) re-reads only the segments written since it was made.
"""

from __future__ import annotations

import heapq
import secrets
import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from ledger.domain import Atom
from projections._rows import dump_table, insert_rows
from projections.embedder import Embedder, HashingEmbedder, embed_matrix, to_bytes
from projections.entries import LogEntry, content_gone, retrieval
from projections.memory import index_text
from projections.routes import ProbeHit, ProbeResult
from projections.runner import Applied
from projections.store import Store, content_digest

np: Any = None  # imported on first use (the CLI imports this module at start-up)


def _numpy() -> Any:
    global np
    if np is None:
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy is a dependency
            return None
        np = numpy
    return np

__all__ = ["PROBE_SIMILARITY", "SEGMENT_SIZE", "VectorIndex", "VectorRoute"]

PROBE_SIMILARITY = 0.9
"""A stored vector this close to the probed content's embedding counts as a trace."""
SEGMENT_SIZE = 1024
ID_WIDTH = 36
EMPTY, ON, OFF = 0, 1, 2
_EMPTY_ID = b"\x00" * ID_WIDTH
_LITTLE = sys.byteorder == "little"
_COLUMNS = ("ids", "flags", "nnz", "idx", "vals")


def _pack(arr: array[Any]) -> bytes:
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        arr = array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def _unpack(typecode: str, data: bytes) -> array[Any]:
    arr = array(typecode)
    arr.frombytes(data)
    if not _LITTLE:  # pragma: no cover - big-endian hosts
        arr.byteswap()
    return arr


def sparse(vector: Sequence[float]) -> tuple[list[int], array[float]]:
    """Non-zero components of a vector, as float32 (the stored precision)."""
    values = array("f", vector)
    idx = [i for i, v in enumerate(values) if v != 0.0]
    return idx, array("f", (values[i] for i in idx))


@dataclass
class _Segment:
    subject_id: str
    segment: int
    ids: bytearray = field(default_factory=bytearray)
    flags: bytearray = field(default_factory=bytearray)
    nnz: array[int] = field(default_factory=lambda: array("H"))
    idx: array[int] = field(default_factory=lambda: array("H"))
    vals: array[float] = field(default_factory=lambda: array("f"))
    new: bool = False
    dirty: bool = False
    dense: int = 0
    """Dimension of the dense layout (values at ``slot * dense``), 0 for sparse."""
    seq: int = 0

    @property
    def count(self) -> int:
        return len(self.flags)

    def append(self, atom_id: str, idx: Sequence[int], vals: array[float]) -> int:
        slot = self.count
        self.ids += atom_id.encode("ascii")
        self.flags.append(ON)
        if self.dense:
            self.nnz.append(self.dense)
        else:
            self.nnz.append(len(idx))
            self.idx.extend(idx)
        self.vals.extend(vals)
        self.dirty = True
        return slot

    def clear(self, slot: int) -> None:
        """Erase one slot: its components removed (dense: overwritten with zeros), id and
        flag zeroed."""
        if self.dense:
            start = slot * self.dense
            self.vals[start:start + self.dense] = array("f", bytes(4 * self.dense))
        else:
            start = sum(self.nnz[:slot])
            end = start + self.nnz[slot]
            del self.idx[start:end]
            del self.vals[start:end]
        self.nnz[slot] = 0
        self.ids[slot * ID_WIDTH:(slot + 1) * ID_WIDTH] = _EMPTY_ID
        self.flags[slot] = EMPTY
        self.dirty = True

    def row(self) -> dict[str, Any]:
        return {"subject_id": self.subject_id, "segment": self.segment, "count": self.count,
                "seq": self.seq,
                "ids": bytes(self.ids), "flags": bytes(self.flags), "nnz": _pack(self.nnz),
                "idx": _pack(self.idx), "vals": _pack(self.vals)}

    @classmethod
    def from_row(cls, subject_id: str, segment: int, row: Any, dense: int = 0) -> _Segment:
        return cls(subject_id, segment, bytearray(row.ids), bytearray(row.flags),
                   _unpack("H", bytes(row.nnz)), _unpack("H", bytes(row.idx)),
                   _unpack("f", bytes(row.vals)), dense=dense, seq=int(row.seq))


@dataclass(frozen=True)
class _Raw:
    """One segment row as read for a search."""

    subject_id: str
    segment: int
    seq: int
    ids: bytes
    flags: bytes
    nnz: bytes
    idx: bytes
    vals: bytes


class VectorIndex:
    """Read model ``vectors``."""

    name = "vectors"
    holds_content: ClassVar[bool] = True

    def __init__(self, store: Store, embedder: Embedder | None = None,
                 segment_size: int = SEGMENT_SIZE) -> None:
        self.store = store
        self.embedder: Embedder = embedder or HashingEmbedder()
        self.dim = self.embedder.dim
        if not 1 <= self.dim <= 65535:
            raise ValueError(f"embedding dimension {self.dim} does not fit uint16 indices")
        self.segment_size = segment_size
        self.dense = 0 if getattr(self.embedder, "sparse", False) else self.dim
        self.version = (f"6/{self.embedder.id}/seg{segment_size}/"
                        + ("dense" if self.dense else "sparse"))
        md = store.metadata()
        self.segments = sa.Table(
            "proj_vec_segments", md,
            sa.Column("subject_id", sa.String(36), primary_key=True),
            sa.Column("segment", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("count", sa.Integer, nullable=False),
            sa.Column("seq", sa.BigInteger, nullable=False),
            *(sa.Column(c, sa.LargeBinary, nullable=False) for c in _COLUMNS),
            sa.Index("proj_vec_segments_seq", "subject_id", "seq"),
        )
        self.slots = sa.Table(
            "proj_vec_slots", md,
            sa.Column("atom_id", sa.String(36), primary_key=True),
            sa.Column("subject_id", sa.String(36), nullable=False),
            sa.Column("segment", sa.Integer, nullable=False),
            sa.Column("slot", sa.Integer, nullable=False),
            # content_digest of the embedded text (never the text): lets an erasure ask
            # "is this exact text still embedded under any id?" with one index lookup
            sa.Column("digest", sa.String(64), index=True),
        )
        self.generations = sa.Table(
            "proj_vec_generation", md,
            sa.Column("one", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("token", sa.String(36), nullable=False),
        )
        """One row: a token drawn when the tables are made, so again after a rebuild
        (which packs the segments afresh): a copy of the index made from other tables
        (recall's snapshot files, ADR 0059) is known stale by it."""
        self.route = VectorRoute(self)

    def create(self, conn: Connection) -> None:
        self.segments.create(conn, checkfirst=True)
        self.slots.create(conn, checkfirst=True)
        self.generations.create(conn, checkfirst=True)
        if conn.execute(sa.select(self.generations.c.token)).first() is None:
            insert = (sqlite_insert if conn.dialect.name == "sqlite" else pg_insert)(
                self.generations).values(one=1, token=secrets.token_hex(16))
            conn.execute(insert.on_conflict_do_nothing())

    def reset(self, conn: Connection) -> None:
        self.slots.drop(conn, checkfirst=True)
        self.segments.drop(conn, checkfirst=True)
        self.generations.drop(conn, checkfirst=True)

    def generation(self, conn: Connection) -> str | None:
        """The tables' token (None before they are made)."""
        if not self.store.table_exists(conn, self.generations.name):
            return None
        got = conn.execute(sa.select(self.generations.c.token)).scalar()
        return None if got is None else str(got)

    def routes(self) -> Sequence[VectorRoute]:
        return [self.route]

    # ------------------------------------------------------------------ storage
    def _load(self, conn: Connection, subject_id: str, segment: int) -> _Segment | None:
        s = self.segments
        row = conn.execute(sa.select(s.c.seq, *(s.c[c] for c in _COLUMNS)).where(
            s.c.subject_id == subject_id, s.c.segment == segment)).first()
        return None if row is None else _Segment.from_row(subject_id, segment, row, self.dense)

    def _flush(self, conn: Connection, segs: Sequence[_Segment]) -> None:
        new = [g.row() for g in segs if g.new]
        dirty = [g.row() for g in segs if g.dirty and not g.new]
        if new:
            conn.execute(self.segments.insert(), new)
        if dirty:
            s = self.segments
            conn.execute(s.update().where(s.c.subject_id == sa.bindparam("_s"),
                                          s.c.segment == sa.bindparam("_g")),
                         [{"_s": r.pop("subject_id"), "_g": r.pop("segment"), **r}
                          for r in dirty])

    # ------------------------------------------------------------------ applying
    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        texts: dict[str, tuple[str, str]] = {}
        for e in entries:
            ev = e.event
            if isinstance(ev, Atom.Created) and not getattr(ev, "content_erased", False) \
                    and ev.text is not None:
                texts[e.originator_id] = (ev.subject_id,
                                          index_text(ev.text, ev.gist, ev.tags, ev.details))
        ids = list(texts)
        vecs: dict[str, tuple[Sequence[int], array[float]]]
        if self.dense:
            matrix = embed_matrix(self.embedder, [texts[a][1] for a in ids])
            vecs = {a: ((), array("f", matrix[i].tobytes())) for i, a in enumerate(ids)}
        else:
            vecs = dict(zip(ids, (sparse(v) for v in self.embedder.embed(
                [texts[a][1] for a in ids])), strict=True))
        position = entries[-1].position if entries else 0

        segs: dict[tuple[str, int], _Segment] = {}
        tails: dict[str, _Segment] = {}
        where: dict[str, tuple[str, int, int] | None] = {}
        known = sorted({e.originator_id for e in entries
                        if isinstance(e.event, Atom.Event) and e.version > 1})
        sl = self.slots
        for start in range(0, len(known), 500):
            for a, s, g, i in conn.execute(
                    sa.select(sl.c.atom_id, sl.c.subject_id, sl.c.segment, sl.c.slot)
                    .where(sl.c.atom_id.in_(known[start:start + 500]))):
                where[str(a)] = (str(s), int(g), int(i))
        added: dict[str, dict[str, Any]] = {}
        dropped: list[str] = []

        def segment(subject_id: str, number: int) -> _Segment | None:
            key = (subject_id, number)
            if key not in segs:
                seg = self._load(conn, subject_id, number)
                if seg is None:
                    return None
                segs[key] = seg
            return segs[key]

        def tail(subject_id: str) -> _Segment:
            seg = tails.get(subject_id)
            if seg is None:
                last = conn.execute(sa.select(sa.func.max(self.segments.c.segment)).where(
                    self.segments.c.subject_id == subject_id)).scalar()
                seg = None if last is None else segment(subject_id, int(last))
            if seg is None or seg.count >= self.segment_size:
                number = 0 if seg is None else seg.segment + 1
                seg = _Segment(subject_id, number, new=True, dense=self.dense)
                segs[(subject_id, number)] = seg
            tails[subject_id] = seg
            return seg

        for e in entries:
            ev, atom_id = e.event, e.originator_id
            if atom_id in vecs and isinstance(ev, Atom.Created):
                subject_id = texts[atom_id][0]
                seg = tail(subject_id)
                slot = seg.append(atom_id, *vecs[atom_id])
                where[atom_id] = (subject_id, seg.segment, slot)
                added[atom_id] = {"atom_id": atom_id, "subject_id": subject_id,
                                  "segment": seg.segment, "slot": slot,
                                  "digest": content_digest(texts[atom_id][1])}
                continue
            loc = where.get(atom_id)
            if not isinstance(ev, Atom.Event) or loc is None:
                continue
            found = segment(loc[0], loc[1])
            if found is None:
                continue
            if content_gone(ev):
                found.clear(loc[2])
                where[atom_id] = None
                if added.pop(atom_id, None) is None:
                    dropped.append(atom_id)
            elif retrieval(ev) is not None:
                found.flags[loc[2]] = ON if retrieval(ev) else OFF
                found.dirty = True
        for seg in segs.values():
            if seg.dirty or seg.new:
                seg.seq = position
        self._flush(conn, list(segs.values()))
        if added:
            insert_rows(conn, self.slots, list(added.values()))
        for start in range(0, len(dropped), 500):
            conn.execute(self.slots.delete().where(
                self.slots.c.atom_id.in_(dropped[start:start + 500])))
        return Applied(purged=dropped)

    # ------------------------------------------------------------------ queries
    def embed_query(self, query: str) -> list[float]:
        return self.embedder.embed([query])[0]

    def _rows(self, conn: Connection, subject_id: str | None,
              after_seq: int | None = None) -> list[_Raw]:
        """Segment rows (one subject's, or all), in order.

        On PostgreSQL the rows are fetched in binary format through the same connection:
        psycopg's default text format would hex-encode every ``bytea`` (2x the bytes).
        """
        s = self.segments
        cols = ", ".join(["subject_id", "segment", "seq", *_COLUMNS])
        if conn.dialect.name == "postgresql":
            conds: list[str] = []
            params: list[Any] = []
            if subject_id is not None:
                conds.append("subject_id = %s")
                params.append(subject_id)
            if after_seq is not None:
                conds.append("seq > %s")
                params.append(after_seq)
            where = ("WHERE " + " AND ".join(conds) + " ") if conds else ""
            cur = conn.connection.driver_connection.cursor(binary=True)  # type: ignore[union-attr]
            try:
                cur.execute(f"SELECT {cols} FROM {self.store.q(s.name)} {where}"  # noqa: S608 (identifiers only)
                            "ORDER BY subject_id, segment", tuple(params))
                return [_Raw(str(r[0]), int(r[1]), int(r[2]), *(bytes(v) for v in r[3:]))
                        for r in cur.fetchall()]
            finally:
                cur.close()
        stmt = sa.select(s.c.subject_id, s.c.segment, s.c.seq,
                         *(s.c[c] for c in _COLUMNS)).order_by(s.c.subject_id, s.c.segment)
        if subject_id is not None:
            stmt = stmt.where(s.c.subject_id == subject_id)
        if after_seq is not None:
            stmt = stmt.where(s.c.seq > after_seq)
        return [_Raw(str(r[0]), int(r[1]), int(r[2]), *(bytes(v) for v in r[3:]))
                for r in conn.execute(stmt)]

    def search(self, conn: Connection, subject_id: str, query: str | Sequence[float],
               k: int = 10, retrievable_only: bool = True,
               use_numpy: bool | None = None) -> list[tuple[str, float]]:
        """Up to ``k`` (atom_id, cosine) pairs of the subject, best first (exact search)."""
        qvec = self.embed_query(query) if isinstance(query, str) else list(query)
        rows = self._rows(conn, subject_id)
        return self._top(rows, qvec, k, {ON} if retrievable_only else {ON, OFF}, use_numpy)

    def search_scored(self, conn: Connection, subject_id: str, query: str | Sequence[float],
                      k: int, atom_ids: Sequence[str], retrievable_only: bool = True
                      ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """:meth:`search`, and the cosine of each of ``atom_ids`` that holds a vector
        (recall scores the keyword index's proposals on the vector signal too: ADR 0051),
        from one read of the subject's rows."""
        qvec = self.embed_query(query) if isinstance(query, str) else list(query)
        rows = self._rows(conn, subject_id)
        wanted = {ON} if retrievable_only else {ON, OFF}
        top = self._top(rows, qvec, k, wanted, None)
        ids = set(atom_ids) - {a for a, _ in top}
        scores = dict(top)
        if ids:
            every = self._top(rows, qvec, sum(len(r.flags) for r in rows), {ON, OFF}, None)
            scores.update((a, s) for a, s in every if a in ids)
        return top, {a: scores[a] for a in atom_ids if a in scores}

    def _top(self, rows: Sequence[_Raw], qvec: Sequence[float], k: int, wanted: set[int],
             use_numpy: bool | None) -> list[tuple[str, float]]:
        if k <= 0 or not rows:
            return []
        ids = b"".join(r.ids for r in rows)
        flags = b"".join(r.flags for r in rows)

        def atom(i: int) -> str:
            return ids[i * ID_WIDTH:(i + 1) * ID_WIDTH].decode("ascii")

        if self.dense:
            if _numpy() is None:  # pragma: no cover - numpy is a dependency
                raise RuntimeError("dense vectors need numpy")
            q32 = np.asarray(qvec, dtype=np.float32)
            vals = np.frombuffer(b"".join(r.vals for r in rows), dtype="<f4")
            scores = np.einsum("ij,j->i", vals.reshape(-1, self.dim), q32)  # one thread
            live = np.nonzero(np.isin(np.frombuffer(flags, dtype=np.uint8), list(wanted)))[0]
            if len(live) > k:
                kth = float(np.partition(scores[live], len(live) - k)[len(live) - k])
                live = live[scores[live] >= kth - 1e-6]
            pairs = [(atom(i), float(scores[i])) for i in live.tolist()]
        elif (_numpy() is not None) if use_numpy is None else use_numpy:
            q = np.asarray(qvec, dtype=np.float64)
            nnz = np.frombuffer(b"".join(r.nnz for r in rows), dtype="<u2")
            idx = np.frombuffer(b"".join(r.idx for r in rows), dtype="<u2")
            vals = np.frombuffer(b"".join(r.vals for r in rows), dtype="<f4")
            owner = np.repeat(np.arange(len(nnz)), nnz)
            # per slot, the sum of vals * q[idx] in component order (as the loop below)
            scores = np.bincount(owner, weights=vals.astype(np.float64) * q[idx],
                                 minlength=len(nnz))
            live = np.nonzero(np.isin(np.frombuffer(flags, dtype=np.uint8), list(wanted)))[0]
            if len(live) > k:
                kth = float(np.partition(scores[live], len(live) - k)[len(live) - k])
                live = live[scores[live] >= kth - 1e-9]
            pairs = [(atom(i), float(scores[i])) for i in live.tolist()]
        else:
            q = list(qvec)
            pairs = []
            slot = 0
            for r in rows:
                nnz_r, idx_r, vals_r = (_unpack("H", r.nnz), _unpack("H", r.idx),
                                        _unpack("f", r.vals))
                pos = 0
                for n in nnz_r:
                    if flags[slot] in wanted:
                        total = 0.0
                        for j in range(pos, pos + n):
                            total += vals_r[j] * q[idx_r[j]]
                        pairs.append((atom(slot), total))
                    pos += n
                    slot += 1
        return heapq.nsmallest(k, pairs, key=lambda p: (-round(p[1], 9), p[0]))

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        """Logical content (atom, subject, retrievable, dense vector), not slot positions."""
        out = []
        for r in self._rows(conn, None):
            nnz, idx, vals = _unpack("H", r.nnz), _unpack("H", r.idx), _unpack("f", r.vals)
            pos = 0
            for slot, flag in enumerate(r.flags):
                n = nnz[slot]
                if self.dense:
                    pos, n = slot * self.dim, 0
                    if flag != EMPTY:
                        out.append((r.ids[slot * ID_WIDTH:(slot + 1) * ID_WIDTH].decode(
                            "ascii"), r.subject_id, flag == ON,
                            to_bytes(vals[pos:pos + self.dim])))
                    continue
                if flag != EMPTY:
                    dense = [0.0] * self.dim
                    for j in range(pos, pos + n):
                        dense[idx[j]] = vals[j]
                    out.append((r.ids[slot * ID_WIDTH:(slot + 1) * ID_WIDTH].decode("ascii"),
                                r.subject_id, flag == ON, to_bytes(dense)))
                pos += n
        mapped = sorted((a, s, d) for a, s, _g, _i, d in dump_table(conn, self.slots))
        return {"proj_vec_segments": sorted(out), "proj_vec_slots": mapped}


class VectorRoute:
    """Stored embeddings of atoms (segment slots) and their slot mapping."""

    name = "vector-index"
    model = "vectors"

    def __init__(self, model: VectorIndex) -> None:
        self.m = model

    def purge(self, conn: Connection, item_id: str) -> int:
        m = self.m
        loc = conn.execute(sa.select(m.slots.c.subject_id, m.slots.c.segment, m.slots.c.slot)
                           .where(m.slots.c.atom_id == item_id)).first()
        if loc is None:
            return 0
        seg = m._load(conn, str(loc.subject_id), int(loc.segment))
        if seg is not None:
            seg.clear(int(loc.slot))
            m._flush(conn, [seg])
        conn.execute(m.slots.delete().where(m.slots.c.atom_id == item_id))
        return 1

    def purge_many(self, conn: Connection, item_ids: Sequence[str]) -> int:
        """Purge many atoms, rewriting each touched segment once."""
        m = self.m
        locs: list[tuple[str, int, int]] = []
        wanted = list(dict.fromkeys(item_ids))
        for start in range(0, len(wanted), 500):
            locs += [(str(s), int(g), int(i)) for s, g, i in conn.execute(
                sa.select(m.slots.c.subject_id, m.slots.c.segment, m.slots.c.slot)
                .where(m.slots.c.atom_id.in_(wanted[start:start + 500])))]
        segs: dict[tuple[str, int], _Segment] = {}
        for subject_id, number, slot in locs:
            key = (subject_id, number)
            if key not in segs:
                loaded = m._load(conn, subject_id, number)
                if loaded is None:
                    continue
                segs[key] = loaded
            segs[key].clear(slot)
        m._flush(conn, list(segs.values()))
        for start in range(0, len(wanted), 500):
            conn.execute(m.slots.delete().where(m.slots.c.atom_id.in_(wanted[start:start + 500])))
        return len(locs)

    def compact(self, conn: Connection) -> None:
        return None

    def content_tables(self) -> Sequence[str]:
        # proj_vec_slots holds the content digest of each atom's text: on PostgreSQL a
        # deleted slot row keeps it in the table's file and its digest index until
        # VACUUM FULL rewrites them (tests/test_copies_postgres.py)
        return ["proj_vec_segments", "proj_vec_slots"]

    def probe_many(self, items: Mapping[str, Sequence[str]]) -> list[ProbeResult]:
        """Probe many items with index lookups: slots mapped to each id, and slots whose
        embedded text has the digest of one of the item's texts (any id). The thorough
        per-item :meth:`probe` (segment bytes, near-duplicates) stays available to
        `ledger projections probe` (ADR 0012)."""
        m = self.m
        ids = list(items)
        found: dict[str, list[ProbeHit]] = {i: [] for i in ids}
        with m.store.engine.connect() as conn:
            if not m.store.table_exists(conn, m.slots.name):
                return [ProbeResult(self.name, i, ()) for i in ids]
            sl = m.slots
            for start in range(0, len(ids), 500):
                for a, in conn.execute(sa.select(sl.c.atom_id).where(
                        sl.c.atom_id.in_(ids[start:start + 500]))):
                    found[str(a)].append(ProbeHit(sl.name, "id", 1))
            wanted = {i: {content_digest(t) for t in texts if t} for i, texts in items.items()}
            every = sorted({d for v in wanted.values() for d in v})
            holders: dict[str, set[str]] = {}
            for start in range(0, len(every), 500):
                for a, d in conn.execute(sa.select(sl.c.atom_id, sl.c.digest).where(
                        sl.c.digest.in_(every[start:start + 500]))):
                    holders.setdefault(str(d), set()).add(str(a))
        for item, digests in wanted.items():
            other = sorted({h for d in digests for h in holders.get(d, ())})
            if other:
                found[item].append(ProbeHit(sl.name, "content", len(other),
                                            tuple(h for h in other if h != item)))
        return [ProbeResult(self.name, i, (sl.name,), tuple(found[i])) for i in ids]

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        m = self.m
        hits: list[ProbeHit] = []
        with m.store.engine.connect() as conn:
            if not m.store.table_exists(conn, m.segments.name):
                return ProbeResult(self.name, item_id, ())
            n = conn.execute(sa.select(sa.func.count()).select_from(m.slots)
                             .where(m.slots.c.atom_id == item_id)).scalar_one()
            if n:
                hits.append(ProbeHit(m.slots.name, "id", int(n)))
            rows = m._rows(conn, None)
        needle = item_id.encode("ascii", "replace")
        in_segments = sum(r.ids.count(needle) for r in rows)
        if in_segments:
            hits.append(ProbeHit(m.segments.name, "id", in_segments))
        if content:
            slots = sum(len(r.flags) for r in rows)
            near = [a for a, s in m._top(rows, m.embed_query(content), slots, {ON, OFF}, None)
                    if s >= PROBE_SIMILARITY]
            if near:
                hits.append(ProbeHit(m.segments.name, "content", len(near),
                                     tuple(a for a in near if a != item_id)))
        return ProbeResult(self.name, item_id, (m.segments.name, m.slots.name), tuple(hits))
