"""The stored Merkle tree in tiles (ledger/transparency.py SqlTreeStore, ADR 0008 third
round): the TreeStore contract on SQLite and PostgreSQL, notification ids per leaf, and
the conversion of a ledger whose tree is still in one row per node (``tlog_nodes``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from keys.datakeys import make_engine
from ledger.application import LedgerApp
from ledger.errors import VerificationFailed
from ledger.home import Config, StorageURL
from ledger.merkle import MemoryTreeStore, MerkleTree, TreeStore, leaf_hash, root_from_leaves
from ledger.transparency import TILE_WIDTH, SqlTreeStore

from .conftest import BACKENDS, PG_URL, drop_schema, run_cli
from .test_merkle import TreeStoreContract


class _Engines:
    def __init__(self, backend: str, tmp_path: Path) -> None:
        self.backend, self.tmp_path = backend, tmp_path
        self.schemas: list[str] = []
        self.engines: list[Engine] = []

    def new(self) -> tuple[Engine, str | None]:
        if self.backend == "sqlite":
            path = self.tmp_path / f"tree-{len(self.engines)}.sqlite"
            engine, schema = make_engine(f"sqlite:///{path}", pooled=True), None
        else:
            schema = f"t_{uuid.uuid4().hex[:12]}"
            self.schemas.append(schema)
            url = StorageURL(f"{PG_URL}?schema={schema}", self.tmp_path)
            engine = make_engine(url.sqlalchemy_url(), schema)
        self.engines.append(engine)
        return engine, schema

    def close(self) -> None:
        for engine in self.engines:
            engine.dispose()
        for schema in self.schemas:
            drop_schema(schema)


@pytest.fixture(params=BACKENDS)
def engines(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Engines]:
    made = _Engines(str(request.param), tmp_path)
    yield made
    made.close()


class TestSqlTreeStore(TreeStoreContract):
    @pytest.fixture(autouse=True)
    def _backend(self, engines: _Engines) -> None:
        self.engines = engines

    def make_store(self) -> TreeStore:
        return SqlTreeStore(*self.engines.new())

    def test_tiles_hold_every_node_and_the_notification_ids(self) -> None:
        store = SqlTreeStore(*self.engines.new())
        tree, memory = MerkleTree(store), MemoryTreeStore()
        hashes = [leaf_hash(b"%d" % i) for i in range(3 * TILE_WIDTH + 5)]
        pos = 0
        for step in (1, TILE_WIDTH - 1, 2, 3 * TILE_WIDTH):  # across tile boundaries
            batch = hashes[pos:pos + step]
            store.leaf_notifications = {i: 1000 + 3 * i for i in range(pos, pos + len(batch))}
            tree.extend(batch)
            pos += len(batch)
        MerkleTree(memory).extend(hashes)
        n = len(hashes)
        keys = [(level, i) for level in range(n.bit_length()) for i in range(n >> level)]
        assert store.get_many(keys) == memory.get_many(keys)
        assert store.size() == n
        assert tree.root() == root_from_leaves(hashes)
        assert store.leaf_hashes(3, n - 2) == hashes[3:n - 2]
        assert store.last_notification_id() == 1000 + 3 * (n - 1)
        assert store.last_notification_id_of(TILE_WIDTH) == 1000 + 3 * TILE_WIDTH
        with pytest.raises(KeyError):
            store.last_notification_id_of(n)
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(store.tiles)).scalar()
        assert rows == sum(-(-(n >> level) // TILE_WIDTH) for level in range(n.bit_length()))


    def test_appends_keep_the_right_edge_and_read_it_again_after_another_writer(self) -> None:
        """``append_leaves`` (ADR 0080): every node equals the in-memory tree's, across
        tile boundaries, whether this store wrote the edge last, another store on the same
        database appended in between, or a lost tail of tiles was written back; one
        SELECT per append while this store wrote last."""
        engine, schema = self.engines.new()
        mine, other = SqlTreeStore(engine, schema), SqlTreeStore(engine, schema)
        selects: list[str] = []
        sa.event.listen(engine, "before_cursor_execute",
                        lambda _c, _cur, stmt, *_a: selects.append(stmt)
                        if stmt.lstrip().upper().startswith("SELECT") else None)
        hashes = [leaf_hash(b"%d" % i) for i in range(5 * TILE_WIDTH + 7)]
        pos = 0
        plan = [(mine, 1), (mine, 1), (mine, TILE_WIDTH - 3), (mine, 2), (other, 5),
                (mine, 3), (mine, 2 * TILE_WIDTH), ("lose", 0), (mine, 4), (other, 1),
                (other, TILE_WIDTH), (mine, 7), (mine, len(hashes))]
        kept: list[dict[str, object]] = []
        reads: list[int] = []
        for who, step in plan:
            if who == "lose":  # the tiles as they were two appends ago: a lost tail
                with engine.begin() as conn:
                    conn.execute(mine.tiles.delete())
                    conn.execute(mine.tiles.insert(), kept)
                pos = int(mine.size())
                continue
            with engine.connect() as conn:
                kept = [dict(r._mapping) for r in conn.execute(sa.select(mine.tiles))] \
                    if who is mine and step == 3 else kept
            batch = hashes[pos:pos + step]
            assert isinstance(who, SqlTreeStore)
            who.leaf_notifications = {i: 7 + i for i in range(pos, pos + len(batch))}
            selects.clear()
            assert who.append_leaves(batch, pos) == pos + len(batch)
            reads.append(len(selects))
            pos += len(batch)
            assert who.append_leaves([], pos - 1) is None  # another size: nothing written
        with pytest.raises(ValueError, match="no longer has"):  # a caller's stale size
            MerkleTree(other).extend([leaf_hash(b"late")], size=pos - 1)
        assert mine.size() == pos
        memory = MemoryTreeStore()
        MerkleTree(memory).extend(hashes[:pos])
        keys = [(level, i) for level in range(pos.bit_length()) for i in range(pos >> level)]
        assert mine.get_many(keys) == memory.get_many(keys)
        assert mine.last_notification_id_of(pos - 1) == 7 + pos - 1
        # one read for each append by the store that wrote last; the first append of a
        # store, one after the other store's, and one after the lost tail read the edge
        assert reads == [1, 1, 1, 1, 2, 2, 1, 2, 2, 1, 2, 1]


def _as_node_rows(app: LedgerApp) -> int:
    """Turn the app's tiles back into a pre-tile ``tlog_nodes`` table; returns its rows."""
    store = app.tlog.store
    md = sa.MetaData(schema=store.tiles.schema)
    nodes = sa.Table("tlog_nodes", md,
                     sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
                     sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
                     sa.Column("hash", sa.LargeBinary, nullable=False),
                     sa.Column("notification_id", sa.BigInteger, nullable=True))
    size = store.size()
    keys = [(level, i) for level in range(size.bit_length()) for i in range(size >> level)]
    values = store.get_many(keys)
    rows = [{"level": lv, "idx": ix, "hash": h,
             "notification_id": store.last_notification_id_of(ix) if lv == 0 else None}
            for (lv, ix), h in zip(keys, values, strict=True)]
    with store.engine.begin() as conn:
        md.create_all(conn)
        conn.execute(nodes.insert(), rows)
        conn.execute(store.tiles.delete())
    return len(rows)


def test_a_ledger_with_node_rows_is_converted_on_open(home: Path) -> None:
    app = LedgerApp(Config.load(home))
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(300)])
    size = app.checkpoint().size
    root, proof = app.tlog.tree.root(size), app.tlog.inclusion(17, size)
    last = app.tlog.store.last_notification_id()
    assert _as_node_rows(app) > size
    app.close()
    app = LedgerApp(Config.load(home))
    try:
        store = app.tlog.store
        assert not sa.inspect(store.engine).has_table("tlog_nodes", schema=store.tiles.schema)
        assert (store.size(), app.tlog.tree.root(size)) == (size, root)
        assert app.tlog.inclusion(17, size) == proof
        assert store.last_notification_id() == last
        app.add_atoms([{"subject": "u1", "text": "after"}])
        assert app.checkpoint().size == size + 1
    finally:
        app.close()
    assert run_cli("--home", str(home), "verify").code == 0


def test_node_rows_with_a_gap_are_refused_and_left_as_they_were(home: Path) -> None:
    app = LedgerApp(Config.load(home))
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(40)])
    rows = _as_node_rows(app)
    store = app.tlog.store
    old = sa.Table("tlog_nodes", sa.MetaData(schema=store.tiles.schema),
                   autoload_with=store.engine)
    with store.engine.begin() as conn:
        conn.execute(old.delete().where(old.c.level == 0, old.c.idx == 7))
    app.close()
    with pytest.raises(VerificationFailed, match="level 0 has no node 7"):
        LedgerApp(Config.load(home))
    with store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(old)).scalar() == rows - 1
        assert conn.execute(sa.select(sa.func.count()).select_from(store.tiles)).scalar() == 0


def test_tiles_commit_without_their_own_flush_and_checkpoints_with_it(app: LedgerApp) -> None:
    """ADR 0039: the tiles are derived from the events, so their commits do not wait for
    the disk; the checkpoints (signed, handed to witnesses) and the events still do."""
    postgres = app.tlog.engine.dialect.name.startswith("postgres")
    query = "SHOW synchronous_commit" if postgres else "PRAGMA synchronous"
    with app.tlog.tile_engine.connect() as tiles, app.tlog.engine.connect() as checkpoints:
        lazy = tiles.exec_driver_sql(query).scalar_one()
        full = checkpoints.exec_driver_sql(query).scalar_one()
    if postgres:  # the checkpoints' engine keeps the server's setting, whatever it is
        with psycopg.connect(PG_URL) as plain:
            server_default = plain.execute("SHOW synchronous_commit").fetchone()
        assert (lazy, (full,)) == ("off", server_default)
    else:
        assert (lazy, full) == (1, 2)  # NORMAL, FULL


def test_a_lost_tail_of_tiles_is_rebuilt_from_the_events(home: Path) -> None:
    """What a machine crash may leave (the last tile writes lost, the events kept): the
    next command finds the tree short, rebuilds the tail from the events, and the ledger
    verifies."""
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        app.add_atoms([{"subject": "u1", "text": f"kept {i}"} for i in range(3)])
        tiles = app.tlog.store.tiles
        with app.tlog.engine.connect() as conn:
            before = [dict(r._mapping) for r in conn.execute(sa.select(tiles))]
        size_before = app.tlog.store.size()
        app.add_atoms([{"subject": "u1", "text": f"tail {i}"} for i in range(2)])
        assert app.tlog.store.size() == size_before + 2
        with app.tlog.engine.begin() as conn:  # the tiles as they were before: tail lost
            conn.execute(tiles.delete())
            conn.execute(tiles.insert(), before)
        app.tlog.tree = MerkleTree(app.tlog.store)  # no cached node survives a crash
        assert app.tlog.store.size() == size_before
        app.add_atom({"subject": "u1", "text": "after the crash"})
        assert app.tlog.store.size() == size_before + 3
        app.checkpoint(witnesses=[])
    finally:
        app.close()
    r = run_cli("--home", str(home), "verify", "--json")
    assert r.code == 0, r.out + r.err
