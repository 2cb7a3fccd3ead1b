"""The transparency log: an RFC 9162 Merkle tree over the event log, and checkpoints.

Leaf bytes (docs/spec/leaf.md) commit to a stored event — its sequence number,
aggregate id, version, topic, the SHA-256 of its stored state and its signature —
never to plaintext, so crypto-shredding leaves every leaf and proof valid.

The tree's complete-subtree nodes are stored in the event database (``tlog_tiles``);
they are a cache for O(log n) proofs, never a source of trust: ``ledger verify``
recomputes every leaf from the events and compares roots with signed checkpoints.
The tree is extended inside each command's write lock right after its events are
saved, and :meth:`TransparencyLog.catch_up` repairs a gap left by a crash between
the two (ADR 0009).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog
from sqlalchemy.engine import Connection, Engine

from keys.datakeys import make_engine
from keys.roster import RosterState
from keys.signing import Signer
from ledger import envelope
from ledger.checkpoint import Checkpoint, CheckpointError, sign_checkpoint, verify_checkpoint
from ledger.errors import ConflictError, NotFound, VerificationFailed
from ledger.home import StorageURL
from ledger.leaf import leaf_bytes, leaf_of
from ledger.merkle import HASH_SIZE, MerkleTree, NodeKey, appended_nodes, frontier_keys, leaf_hash

if TYPE_CHECKING:


    pass

_MAX_PARAMS = 500  # bound parameters per statement (SQLite before 3.32 allowed 999)

log = structlog.get_logger("transparency")


TILE_WIDTH = 64  # nodes per stored tile: 2 KiB of hashes, within one 4 KiB page
_NID = struct.Struct(">q")
_Tile = tuple[int, bytes, bytes | None]
"""A stored tile: its index in its level, its hashes, its leaves' notification ids."""
_TileRow = tuple[int, int, bytes, bytes | None]
"""A tile as written: level, index, hashes, notification ids (level 0 only)."""


def _end(tile: int, hashes: bytes) -> int:
    """How many nodes its level holds up to the end of tile ``tile``, whose hashes are
    ``hashes``: on the level's last tile, the level's length."""
    return tile * TILE_WIDTH + len(hashes) // HASH_SIZE


def _last_leaf_tile(conn: Connection, sql: str) -> _Tile | None:
    """The last tile of level 0 (``sql``: ``SqlTreeStore``'s query for it), if any."""
    row = conn.exec_driver_sql(sql).first()
    return None if row is None else (int(row[1]), bytes(row[2]),
                                     None if row[3] is None else bytes(row[3]))


def _node(tile: _Tile, index: int) -> bytes:
    """The hash of node ``index`` of its level, from the tile that holds it."""
    at = (index - tile[0] * TILE_WIDTH) * HASH_SIZE
    return tile[1][at:at + HASH_SIZE]


class SqlTreeStore:
    """The :class:`ledger.merkle.TreeStore` contract on SQLAlchemy Core (SQLite, PostgreSQL).

    Nodes are stored in tiles: one row per level and run of :data:`TILE_WIDTH`
    consecutive nodes, ``hashes`` their 32-byte hashes concatenated (the right-most tile
    of a level is partial and grows). Level-0 tiles also hold the notification id of each
    leaf's event (8 bytes, big-endian; 0 when unknown), so the tree knows where in the
    notification log to resume. A bulk command of 1,000 events writes about a dozen tile
    rows instead of about 2,000 node rows (ADR 0008, third round). A ledger created
    before tiles has a ``tlog_nodes`` table of one row per node; it is converted on
    open, in one transaction.
    """

    def __init__(self, engine: Engine, schema: str | None,
                 tile_writer: Engine | None = None) -> None:
        self.engine = engine
        # the tiles are derived from the events (:meth:`TransparencyLog.catch_up`
        # rebuilds a lost tail): their writes may use an engine that does not wait for
        # the disk (ADR 0039)
        self.tile_writer = tile_writer or engine
        md = sa.MetaData(schema=schema)
        self.tiles = sa.Table(
            "tlog_tiles", md,
            sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("tile", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("hashes", sa.LargeBinary, nullable=False),
            sa.Column("notification_ids", sa.LargeBinary, nullable=True),
        )
        self.checkpoints = sa.Table(
            "tlog_checkpoints", md,
            sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("root", sa.LargeBinary, nullable=False),
            sa.Column("note", sa.Text, nullable=False),
            sa.Column("created_at", sa.String(40), nullable=False),
        )
        self.cosignatures = sa.Table(
            "tlog_cosignatures", md,
            sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
            sa.Column("witness", sa.String(400), primary_key=True),
            sa.Column("line", sa.Text, nullable=False),
            sa.Column("timestamp", sa.BigInteger, nullable=False),
        )
        self.witness_sizes = sa.Table(
            "tlog_witness_sizes", md,
            sa.Column("witness", sa.String(400), primary_key=True),
            sa.Column("size", sa.BigInteger, nullable=False),
            sa.Column("status", sa.String(40), nullable=False),
            sa.Column("detail", sa.Text, nullable=False),
            sa.Column("updated_at", sa.String(40), nullable=False),
        )
        md.create_all(engine)
        self.leaf_notifications: dict[int, int] = {}
        self._edge: dict[int, _Tile] | None = None  # the right edge (append_leaves)
        prep = engine.dialect.identifier_preparer
        table = prep.format_table(self.tiles)
        ph = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._placeholder = ph
        # Plain SQL: SQLAlchemy's statement construction cost more than these queries,
        # and every command reads the right edge and writes a few tiles (ADR 0008).
        self._select_sql = f"SELECT level, tile, hashes, notification_ids FROM {table}"  # noqa: S608
        self._last_leaf_tile_sql = (
            f"{self._select_sql} WHERE level = 0 ORDER BY tile DESC LIMIT 1")
        self._upsert_sql = (
            f"INSERT INTO {table} (level, tile, hashes, notification_ids) "  # noqa: S608
            f"VALUES ({ph}, {ph}, {ph}, {ph}) ON CONFLICT (level, tile) DO UPDATE SET "
            "hashes = excluded.hashes, notification_ids = excluded.notification_ids")
        self._convert_node_rows(md)

    def _convert_node_rows(self, md: sa.MetaData) -> None:
        """Move a pre-tile ledger's ``tlog_nodes`` rows into tiles, then drop the table."""
        if not sa.inspect(self.engine).has_table("tlog_nodes", schema=md.schema):
            return
        old = sa.Table("tlog_nodes", md, autoload_with=self.engine)
        with self.engine.begin() as conn:
            tiles: dict[tuple[int, int], tuple[list[bytes], list[int]]] = {}
            rows = conn.execute(sa.select(old.c.level, old.c.idx, old.c.hash,
                                          old.c.notification_id)
                                .order_by(old.c.level, old.c.idx))
            expected: dict[int, int] = {}
            for level, idx, value, nid in rows:
                level, idx = int(level), int(idx)
                if idx != expected.get(level, 0):
                    raise VerificationFailed(
                        f"cannot convert the stored Merkle tree: level {level} has no node "
                        f"{expected.get(level, 0)}",
                        hint="run `ledger verify`; the tree is rebuilt from the events by "
                             "deleting the tlog_nodes table")
                expected[level] = idx + 1
                hashes, nids = tiles.setdefault((level, idx // TILE_WIDTH), ([], []))
                hashes.append(bytes(value))
                nids.append(int(nid or 0))
            if tiles and conn.execute(sa.select(sa.func.count()).select_from(self.tiles)
                                      ).scalar():
                raise VerificationFailed(
                    "the event database holds both the old tlog_nodes table and tiles",
                    hint="drop one of them; the tree is rebuilt from the events if both go")
            conn.exec_driver_sql(self._upsert_sql, [
                (level, tile, b"".join(hashes),
                 b"".join(map(_NID.pack, nids)) if level == 0 else None)
                for (level, tile), (hashes, nids) in tiles.items()])
            old.drop(conn)
        log.info("tlog.tiles_converted", tiles=len(tiles))

    def _read(self, conn: Connection, wanted: dict[int, set[int]] | None = None,
              from_tile: dict[int, int] | None = None
              ) -> dict[tuple[int, int], tuple[bytes, bytes | None]]:
        """Tiles by ``(level, tile)``: the ``wanted`` ones, and for ``from_tile`` every
        tile of a level from the given one on."""
        ph = self._placeholder
        statements: list[tuple[list[str], list[int]]] = [([], [])]

        def add(term: str, params: Sequence[int]) -> None:
            terms, current = statements[-1]
            if current and len(current) + len(params) > _MAX_PARAMS:
                statements.append(([], []))
                terms, current = statements[-1]
            terms.append(term)
            current.extend(params)

        for level, tiles in (wanted or {}).items():
            ordered = sorted(tiles)
            for i in range(0, len(ordered), _MAX_PARAMS - 1):
                chunk = ordered[i:i + _MAX_PARAMS - 1]
                add(f"(level = {ph} AND tile IN ({', '.join([ph] * len(chunk))}))",
                    (level, *chunk))
        for level, tile in (from_tile or {}).items():
            add(f"(level = {ph} AND tile >= {ph})", (level, tile))
        found: dict[tuple[int, int], tuple[bytes, bytes | None]] = {}
        for terms, params in statements:
            if terms:
                for level, tile, hashes, nids in conn.exec_driver_sql(
                        f"{self._select_sql} WHERE {' OR '.join(terms)}", tuple(params)):
                    found[int(level), int(tile)] = (
                        bytes(hashes), None if nids is None else bytes(nids))
        return found

    def _last_leaf_tile(self) -> _Tile | None:
        with self.engine.connect() as conn:
            return _last_leaf_tile(conn, self._last_leaf_tile_sql)

    def size(self) -> int:
        last = self._last_leaf_tile()
        return 0 if last is None else _end(last[0], last[1])

    def last_notification_id(self) -> int:
        last = self._last_leaf_tile()
        if last is None or not last[2]:
            return 0
        return int(_NID.unpack_from(last[2], len(last[2]) - _NID.size)[0])

    def get_many(self, keys: Sequence[NodeKey]) -> list[bytes]:
        wanted: dict[int, set[int]] = {}
        for level, index in keys:
            wanted.setdefault(level, set()).add(index // TILE_WIDTH)
        with self.engine.connect() as conn:
            found = self._read(conn, wanted)
        out: list[bytes] = []
        for level, index in keys:
            tile = found.get((level, index // TILE_WIDTH))
            at = index % TILE_WIDTH * HASH_SIZE
            if index < 0 or tile is None or at + HASH_SIZE > len(tile[0]):
                raise KeyError(f"no Merkle node at level {level} index {index}")
            out.append(tile[0][at:at + HASH_SIZE])
        return out

    def put_many(self, nodes: Sequence[tuple[NodeKey, bytes]]) -> None:
        """Append ``nodes`` (the contract of :class:`ledger.merkle.TreeStore`): the whole
        batch is checked against the stored tiles before any tile is written."""
        levels: dict[int, tuple[list[int], list[bytes]]] = {}
        for (level, index), value in nodes:
            entry = levels.get(level)
            if entry is None:
                entry = levels[level] = ([], [])
            entry[0].append(index)
            entry[1].append(value)
        for level, (indexes, values) in levels.items():
            if set(map(type, values)) != {bytes} or set(map(len, values)) != {HASH_SIZE}:
                raise ValueError(f"a node of level {level} is not a {HASH_SIZE}-byte hash")
            if level < 0 or min(indexes) < 0:
                raise ValueError(f"a node of level {level} is out of range")
        with self.tile_writer.begin() as conn:
            # From the tile before each level's first one: a level's length is known from
            # its last tile at or after that one (none at all: the level is shorter).
            stored = self._read(conn, from_tile={
                level: max(indexes[0] // TILE_WIDTH - 1, 0)
                for level, (indexes, _) in levels.items()})
            length: dict[int, int] = {}
            for (level, tile), (blob, _) in stored.items():
                length[level] = max(length.get(level, 0), _end(tile, blob))
            rows = []
            for level, (indexes, values) in levels.items():
                have = length.get(level, 0)
                old = 0  # nodes already stored: the same hash is a no-op
                while old < len(indexes) and indexes[old] < have:
                    index = indexes[old]
                    known = stored.get((level, index // TILE_WIDTH))
                    at = index % TILE_WIDTH * HASH_SIZE
                    if known is None or known[0][at:at + HASH_SIZE] != values[old]:
                        raise ValueError(f"node ({level}, {index}) already stored with "
                                         f"another hash" if known else
                                         f"node ({level}, {index}) is before the stored "
                                         f"tiles of level {level}")
                    old += 1
                new = len(indexes) - old
                if indexes[old:] != list(range(have, have + new)):
                    raise ValueError(f"nodes of level {level} are not the next ones "
                                     f"(expected indexes from {have} on, in order)")
                if new:
                    rows.extend(self._tile_rows(level, have, values[old:],
                                                stored.get((level, have // TILE_WIDTH))))
            if rows:
                conn.exec_driver_sql(self._upsert_sql, rows)

    def _tile_rows(self, level: int, have: int, values: Sequence[bytes],
                   prior: tuple[bytes, bytes | None] | None) -> list[_TileRow]:
        """The tile rows that store ``values``, the nodes of ``level`` from index ``have``
        on; ``prior``: the stored tile that holds index ``have`` (partial), if any."""
        new = len(values)
        data = b"".join(values)
        nids = b""
        if level == 0:
            get = self.leaf_notifications.get
            nids = struct.pack(f">{new}q", *[get(i, 0) for i in range(have, have + new)])
        rows: list[_TileRow] = []
        pos = have
        while pos < have + new:
            tile = pos // TILE_WIDTH
            stop = min((tile + 1) * TILE_WIDTH, have + new)
            part = data[(pos - have) * HASH_SIZE:(stop - have) * HASH_SIZE]
            before = prior if pos % TILE_WIDTH else None
            nid_part = None
            if level == 0:
                nid_part = nids[(pos - have) * _NID.size:(stop - have) * _NID.size]
                nid_part = (before[1] or b"") + nid_part if before else nid_part
            rows.append((level, tile, before[0] + part if before else part, nid_part))
            pos = stop
        return rows

    def append_leaves(self, hashes: Sequence[bytes], size: int | None = None) -> int | None:
        """Append leaf hashes in one transaction of the tile writer (the contract of
        :class:`ledger.merkle.EdgeAppender`): one read of the last leaf tile, the tiles of
        the right edge read only when this store did not write them last, one write.

        The right edge (the last tile of every level) is kept from one append to the
        next. It is used only while the stored last leaf tile is the one this store wrote:
        an append by another process, or a tail of tiles lost in a crash and rebuilt,
        changes that tile, and the edge is read again. The tiles are derived from the
        events and never trusted (``ledger verify`` recomputes every leaf), as when they
        are read."""
        with self.tile_writer.begin() as conn:
            leaf_tile = _last_leaf_tile(conn, self._last_leaf_tile_sql)
            n = 0 if leaf_tile is None else _end(leaf_tile[0], leaf_tile[1])
            if size is not None and n != size:
                return None
            if not hashes:
                return n
            edge, self._edge = self._edge, None  # until this transaction has committed
            if edge is None or edge.get(0) != leaf_tile:
                edge = self._edge_of(conn, n, leaf_tile)
            frontier = {level: _node(edge[level], index)
                        for level, index in frontier_keys(n)}
            levels: dict[int, list[bytes]] = {}
            for (level, _), value in appended_nodes(n, frontier, hashes):
                levels.setdefault(level, []).append(value)
            rows: list[_TileRow] = []
            for level, values in levels.items():
                have = n >> level
                last_tile = edge.get(level)
                prior = None if last_tile is None or last_tile[0] != have // TILE_WIDTH \
                    else last_tile[1:]
                rows.extend(self._tile_rows(level, have, values, prior))
            conn.exec_driver_sql(self._upsert_sql, rows)
        for level, tile, blob, nids in rows:  # the last row of each level is its last tile
            edge[level] = (tile, blob, nids)
        self._edge = edge
        return n + len(hashes)

    def _edge_of(self, conn: Connection, n: int, leaf_tile: _Tile | None) -> dict[int, _Tile]:
        """The last stored tile of each level of a tree of ``n`` leaves, level 0's given."""
        edge: dict[int, _Tile] = {} if leaf_tile is None else {0: leaf_tile}
        wanted = {level: {((n >> level) - 1) // TILE_WIDTH}
                  for level in range(1, n.bit_length())}
        for (level, tile), (blob, nids) in self._read(conn, wanted).items():
            edge[level] = (tile, blob, nids)
        for level in range(n.bit_length()):
            count = n >> level
            found = edge.get(level)
            if found is None or _end(found[0], found[1]) != count:
                raise KeyError(f"the stored tiles of level {level} do not end at node "
                               f"{count - 1}")
        return edge

    def last_notification_id_of(self, index: int) -> int:
        with self.engine.connect() as conn:
            found = self._read(conn, {0: {index // TILE_WIDTH}})
        tile = found.get((0, index // TILE_WIDTH))
        at = index % TILE_WIDTH * _NID.size
        if index < 0 or tile is None or tile[1] is None or at + _NID.size > len(tile[1]):
            raise KeyError(f"no leaf {index} in the stored tree")
        value = int(_NID.unpack_from(tile[1], at)[0])
        if not value:
            raise KeyError(f"leaf {index} of the stored tree has no notification id")
        return value

    def leaf_hashes(self, start: int, stop: int) -> list[bytes]:
        if stop <= start:
            return []
        with self.engine.connect() as conn:
            found = self._read(conn, {0: set(range(start // TILE_WIDTH,
                                                   (stop - 1) // TILE_WIDTH + 1))})
        out: list[bytes] = []
        for tile in range(start // TILE_WIDTH, (stop - 1) // TILE_WIDTH + 1):
            hashes = found.get((0, tile), (b"", None))[0]
            lo = max(start - tile * TILE_WIDTH, 0)
            hi = min(stop - tile * TILE_WIDTH, len(hashes) // HASH_SIZE)
            out.extend(hashes[i * HASH_SIZE:(i + 1) * HASH_SIZE] for i in range(lo, hi))
        return out


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


def verify_with_roster(note: str, origin: str, roster: RosterState,
                       at: datetime | None = None) -> SignedCheckpoint:
    """A checkpoint note is valid if a key holding the ``log`` role signed it.

    ``at``: a time the checkpoint was signed at or after (for example the time of the
    newest event it covers): only keys that held the role then count
    (:meth:`RosterState.holders`, the one role check), so a key revoked earlier is
    refused. Without it (a checkpoint of unknown time), any key that ever held the role.
    """
    if at is not None:
        log_keys = list(roster.holders(("log",), at).values())
    else:
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


def _without_own_flush(engine: Engine) -> Engine:
    """``engine`` whose commits return without waiting for the disk: for the Merkle tiles
    only, which are derived from the events (ADR 0039). On SQLite (WAL), the tiles' frames
    reach the disk with the next durable commit to the same file, the next command's
    events; on PostgreSQL, with the next synchronous commit. A crash of the process loses
    nothing; a crash of the machine may lose the last tiles, which the next append or
    checkpoint finds short and rebuilds from the events (``catch_up``). Checkpoints,
    cosignatures and the events themselves keep their own flush."""
    from sqlalchemy import event

    postgres = engine.dialect.name.startswith("postgres")

    @event.listens_for(engine, "connect")
    def _no_wait(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("SET synchronous_commit TO off" if postgres
                    else "PRAGMA synchronous=NORMAL")
        cur.close()
        if postgres:
            dbapi_conn.commit()  # psycopg opened a transaction for the SET

    engine.dispose()  # a connection pooled before the listener (make_engine's schema)
    return engine


class TransparencyLog:
    """The tree and checkpoints of one ledger, stored beside its events."""

    def __init__(self, events_url: StorageURL, origin: str) -> None:
        self.origin = origin
        self.engine = make_engine(events_url.sqlalchemy_url(), events_url.schema, pooled=True)
        self.tile_engine = _without_own_flush(
            make_engine(events_url.sqlalchemy_url(), events_url.schema, pooled=True))
        self.store = SqlTreeStore(self.engine, events_url.schema, tile_writer=self.tile_engine)
        self.tree = MerkleTree(self.store)

    def close(self) -> None:
        self.tile_engine.dispose()
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
            size = self.tree.extend(hashes, size=size)  # refused if the tree moved on
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
        return self.tree.extend(hashes, size=size)

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
        size = recorded[0][0] - 1  # the tree's size before them, checked as they append
        notification_ids: dict[int, int] = {}
        hashes: list[bytes] = []
        for index, (seq, nid, s, signature) in enumerate(recorded, start=size):
            if nid is None or seq != index + 1:
                return self.catch_up(recorder)
            notification_ids[index] = nid
            hashes.append(leaf_hash(leaf_bytes(seq, s.originator_id, s.originator_version,
                                               s.topic, s.state, signature)))
        self.store.leaf_notifications = notification_ids
        appended = self.store.append_leaves(hashes, size)
        return self.catch_up(recorder) if appended is None else appended

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

    def recorded(self, size: int | None = None, *, before: int | None = None
                 ) -> SignedCheckpoint | None:
        """The recorded checkpoint of ``size``, or the largest one that ends before the
        event of sequence number ``before``, or the latest one (unverified), with its
        cosignatures."""
        t = self.store.checkpoints
        q = sa.select(t.c.note)
        if size is not None:
            q = q.where(t.c.size == size)
        else:
            if before is not None:
                q = q.where(t.c.size < before)
            q = q.order_by(t.c.size.desc()).limit(1)
        with self.engine.connect() as conn:
            note = conn.execute(q).scalar()
        if note is None:
            return None
        from ledger.checkpoint import parse_body, parse_note

        body, _ = parse_note(note)
        cp = parse_body(body)
        return SignedCheckpoint(cp, self.with_cosignatures(cp.size, note))

    def recorded_notes(self) -> list[tuple[int, str, str]]:
        """(size, note, created_at) of every recorded checkpoint, smallest first."""
        t = self.store.checkpoints
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.size, t.c.note, t.c.created_at).order_by(t.c.size))
            return [(int(r.size), str(r.note), str(r.created_at)) for r in rows]

    # ------------------------------------------------------------------ witnesses
    def with_cosignatures(self, size: int, note: str) -> str:
        """``note`` with the witness cosignature lines recorded for its size appended."""
        lines = [line for line, _ in self.cosignature_rows(size)]
        return note + "".join(line for line in lines if line not in note)

    def cosignature_rows(self, size: int) -> list[tuple[str, str]]:
        """``(line, witness vkey)`` of each cosignature recorded for the checkpoint of size."""
        t = self.store.cosignatures
        with self.engine.connect() as conn:
            return [(r.line, r.witness) for r in conn.execute(
                sa.select(t.c.line, t.c.witness).where(t.c.size == size).order_by(t.c.witness))]

    def cosignatures_since(self, size: int) -> list[Any]:
        """``(size, witness, timestamp, root)`` of each cosignature recorded for a
        checkpoint of ``size`` or more, by size then witness."""
        cos, cps = self.store.cosignatures, self.store.checkpoints
        with self.engine.connect() as conn:
            return list(conn.execute(
                sa.select(cos.c.size, cos.c.witness, cos.c.timestamp, cps.c.root)
                .select_from(cos.join(cps, cps.c.size == cos.c.size))
                .where(cos.c.size >= size).order_by(cos.c.size, cos.c.witness)).all())

    def latest_cosignature(self) -> tuple[int, int] | None:
        """``(size, unix time)`` of the largest checkpoint any witness cosigned, with
        the latest time a witness cosigned it; None when no witness ever did."""
        t = self.store.cosignatures
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(t.c.size, sa.func.max(t.c.timestamp))
                               .group_by(t.c.size).order_by(t.c.size.desc()).limit(1)).first()
        return None if row is None else (int(row[0]), int(row[1]))

    def witness_sizes(self) -> dict[str, int]:
        t = self.store.witness_sizes
        with self.engine.connect() as conn:
            return {r.witness: int(r.size) for r in conn.execute(sa.select(t.c.witness,
                                                                           t.c.size))}

    def record_witnessing(self, size: int, results: Sequence[Any], at: str) -> None:
        """Store each witness's outcome; a cosignature is kept with its checkpoint's size."""
        cos, sizes = self.store.cosignatures, self.store.witness_sizes
        with self.engine.begin() as conn:
            for r in results:
                if r.line is not None:
                    conn.execute(cos.delete().where(cos.c.size == size,
                                                    cos.c.witness == r.vkey))
                    conn.execute(cos.insert(), [{"size": size, "witness": r.vkey,
                                                 "line": r.line, "timestamp": r.timestamp}])
                conn.execute(sizes.delete().where(sizes.c.witness == r.vkey))
                conn.execute(sizes.insert(), [{"witness": r.vkey, "size": r.size,
                                               "status": r.status, "detail": r.detail[:500],
                                               "updated_at": at}])

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
