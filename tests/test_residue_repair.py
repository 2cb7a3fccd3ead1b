"""Erased bytes left in SQLite page free space are removed by rebuilding the b-tree that
owns the page, not the whole file; FTS5 secure-delete drops erased words without optimize.

SQLite only: these are about the projections file's pages (on PostgreSQL the projections
are not files under the home; the erasure tests of test_governance.py run on both).
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import governance.erasure_reach as erasure
from governance.erasure import Targets, hard_erase
from keys.datakeys import store_sqlite
from ledger.application import LedgerApp
from ledger.home import Config
from projections.service import Projections
from projections.store import FREE_PAGE, Store

from .conftest import files_under

WORDS = ("apple river doctor allergy garden monday coffee passport salary violin "
         "brother dentist friday mortgage bicycle nurse school tuesday wedding").split()


@pytest.fixture
def sqlite_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LedgerApp]:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    LedgerApp.initialize(tmp_path / "home")
    app = LedgerApp(Config.load(tmp_path / "home"))
    yield app
    app.close()


@pytest.fixture
def proj(sqlite_app: LedgerApp) -> Iterator[Projections]:
    p = Projections(sqlite_app)
    yield p
    p.close()


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(6)) + f" item {i}" for i in range(n)]


def _in_files(home: Path, needle: bytes) -> list[str]:
    return [p.name for p in files_under(home) if needle in p.read_bytes()]


def _pages(store: Store, name: str) -> list[int]:
    with store.engine.connect() as c:
        return [int(r[0]) for r in c.exec_driver_sql(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf'", (name,))]


def _gap(data: bytes | bytearray, page_size: int, pgno: int) -> tuple[int, int]:
    """File offsets [start, end) of a b-tree leaf page's unallocated gap."""
    base = (pgno - 1) * page_size
    h = base + (100 if pgno == 1 else 0)
    assert data[h] in (10, 13), "not a leaf page"
    ncell, content = struct.unpack(">HH", data[h + 3:h + 7])
    return h + 8 + 2 * ncell, base + (content or 65536)


def _plant(store: Store, needle: bytes, pgno: int) -> int:
    """Write ``needle`` into the unallocated gap of page ``pgno``, as SQLite's rebalance
    leaves an old copy of a moved cell there. Returns the file offset."""
    path = store.sqlite_path
    assert path is not None
    store.compact(())  # everything in the file, the WAL empty
    data = bytearray(path.read_bytes())
    page_size = 4096
    start, end = _gap(data, page_size, pgno)
    assert end - start >= len(needle) + 8, "gap too small for the planted bytes"
    at = start + 4
    data[at:at + len(needle)] = needle
    path.write_bytes(bytes(data))
    return at


def _count_sql(store: Store, statements: list[str]) -> None:
    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def _seen(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        statements.append(statement)


@pytest.mark.parametrize("dbpage", [True, False], ids=["scrub", "no-sqlite_dbpage"])
def test_residue_in_a_content_page_is_removed_from_that_page_or_table_only(
        sqlite_app: LedgerApp, proj: Projections, monkeypatch: pytest.MonkeyPatch,
        dbpage: bool) -> None:
    """The planted copy of the erased row is found by the raw scan; with sqlite_dbpage the
    one page is scrubbed (every other byte of the file unchanged); without it, the table
    that owns the page is rebuilt; the whole file is never vacuumed."""
    app = sqlite_app
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    marker = f"zq{uuid.uuid4().hex[:12]}"
    secret = f"Hides the spare key under the blue pot {marker}"
    doomed = str(app.add_atom({"subject": "u1", "text": secret}))
    app.add_atoms([{"subject": "u2", "text": t} for t in _texts(300, 1)])
    proj.catch_up()
    with proj.store.engine.connect() as c:
        before = {str(r[0]): str(r[1]) for r in c.exec_driver_sql(
            "SELECT atom_id, text FROM proj_atom_content WHERE atom_id != ?", (doomed,))}
    pages = _pages(proj.store, "proj_atom_content")
    assert len(pages) > 3
    proj.store.compact(())
    path = proj.store.sqlite_path
    assert path is not None
    data = path.read_bytes()
    roomy = max(pages, key=lambda p: (lambda g: g[1] - g[0])(_gap(data, 4096, p)))

    real_scan, real_rebuild = erasure.scan_files, proj.store.rebuild
    scans: list[list[dict[str, Any]]] = []
    planted: list[bytes] = []
    rebuilt: list[str] = []

    def scan_with_residue(folder: Path, needles: Any, started: Any = None) -> dict[str, Any]:
        if not planted:  # after the purge: as if a rebalance had kept a copy of the row
            _plant(proj.store, secret.encode(), roomy)
        planted.append(path.read_bytes())  # the file as each scan sees it
        result = real_scan(folder, needles, started)
        scans.append(result["hits"])
        return result

    def no_vacuum() -> None:
        raise AssertionError("VACUUM of the whole file")

    def rebuild(name: str) -> str:
        rebuilt.append(name)
        return real_rebuild(name)

    monkeypatch.setattr(erasure, "scan_files", scan_with_residue)
    monkeypatch.setattr(proj.store, "vacuum", no_vacuum)
    monkeypatch.setattr(proj.store, "rebuild", rebuild)
    if not dbpage:  # as with an SQLite built without the sqlite_dbpage table
        monkeypatch.setattr(proj.store, "scrub", lambda offsets: None)
    done = hard_erase(app, proj, Targets(atoms=[doomed]), mode="hard", reason="test",
                      operator="operator")
    assert scans[0] == [{"file": "projections.sqlite", "count": 1}]  # the plant was seen
    assert scans[1:] == [[]] and done["reach"]["raw_scan"]["hits"] == []
    repaired = done["reach"]["raw_scan"]["repaired"]
    assert repaired["files"] == ["projections.sqlite"]
    if dbpage:
        assert repaired["action"] == "scrub 1 page" and rebuilt == []
        assert [(s["action"], s["table"]) for s in done["repairs"]] == [("scrub 1 page", None)]
        # between the two scans only that page changed: no other table was touched
        first, second = planted
        changed = {i // 4096 + 1 for i in range(0, len(second), 64)
                   if second[i:i + 64] != first[i:i + 64]}
        assert changed == {roomy} and len(first) == len(second)
    else:
        assert repaired["action"] == "rebuild proj_atom_content"
        assert rebuilt == ["proj_atom_content"]
        assert [(s["action"], s["table"]) for s in done["repairs"]] == [
            ("rebuild", "proj_atom_content")]
    assert _in_files(app.config.home, marker.encode()) == []
    # every other row is intact, and the table's index still answers
    with proj.store.engine.connect() as c:
        after = {str(r[0]): str(r[1]) for r in c.exec_driver_sql(
            "SELECT atom_id, text FROM proj_atom_content")}
        assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        some = sorted(before)[7]
        row = proj.atoms.atom(c, some)
    assert after == before
    assert row is not None and row["text"] == before[some]


def test_residue_on_a_free_page_is_scrubbed(
        sqlite_app: LedgerApp, proj: Projections, monkeypatch: pytest.MonkeyPatch) -> None:
    app = sqlite_app
    app.register_subject({"ref": "u1"})
    secret = f"Keeps a diary in the attic zq{uuid.uuid4().hex[:12]}"
    doomed = str(app.add_atom({"subject": "u1", "text": secret}))
    proj.catch_up()
    with proj.store.engine.begin() as c:  # make free pages: a table created and dropped
        c.exec_driver_sql("CREATE TABLE scratch (x TEXT)")
        c.exec_driver_sql("INSERT INTO scratch VALUES (?)", ("x" * 20000,))
        c.exec_driver_sql("DROP TABLE scratch")
    proj.store.compact(())
    path = proj.store.sqlite_path
    assert path is not None
    free = sorted(proj.store._freelist(4096))
    assert free, "no free page to plant in"
    real_scan = erasure.scan_files
    seen: dict[str, Any] = {}

    def scan_with_residue(folder: Path, needles: Any, started: Any = None) -> dict[str, Any]:
        if "owners" not in seen:
            data = bytearray(path.read_bytes())
            at = (free[-1] - 1) * 4096 + 200
            data[at:at + len(secret)] = secret.encode()
            path.write_bytes(bytes(data))
            seen["owners"] = proj.store.page_owners([at])
        return real_scan(folder, needles, started)

    monkeypatch.setattr(erasure, "scan_files", scan_with_residue)
    monkeypatch.setattr(proj.store, "vacuum", lambda: pytest.fail("VACUUM"))
    done = hard_erase(app, proj, Targets(atoms=[doomed]), mode="hard", reason="test",
                      operator="operator")
    assert seen["owners"] == {free[-1]: FREE_PAGE}
    assert done["reach"]["raw_scan"]["repaired"]["action"] == "scrub 1 page"
    assert done["reach"]["raw_scan"]["hits"] == []
    assert _in_files(app.config.home, secret.encode()) == []
    with proj.store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


def test_scrub_zeroes_only_what_no_row_uses(proj: Projections, sqlite_app: LedgerApp) -> None:
    """Gap and free-block bodies zeroed; cells, header and cell pointers byte-identical."""
    app = sqlite_app
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": t} for t in _texts(200, 4)])
    proj.catch_up()
    store = proj.store
    with store.engine.begin() as c:  # free blocks inside pages: delete every third row
        c.exec_driver_sql("DELETE FROM proj_atom_content WHERE rowid % 3 = 0")
    store.compact(())
    path = store.sqlite_path
    assert path is not None
    pages = _pages(store, "proj_atom_content")
    data = bytearray(path.read_bytes())
    for p in pages:  # junk in every unused byte (what a rebalance could leave)
        start, end = _gap(data, 4096, p)
        data[start:end] = b"J" * (end - start)
    path.write_bytes(bytes(data))
    with store.engine.connect() as c:
        rows = [tuple(r) for r in c.exec_driver_sql("SELECT * FROM proj_atom_content")]
    assert store.scrub([(p - 1) * 4096 for p in pages]) == len(pages)
    scrubbed = path.read_bytes()
    assert b"J" * 16 not in scrubbed
    for p in pages:
        start, end = _gap(scrubbed, 4096, p)
        assert scrubbed[start:end] == bytes(end - start)
    with store.engine.connect() as c:
        assert [tuple(r) for r in c.exec_driver_sql("SELECT * FROM proj_atom_content")] == rows
        assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


def test_rebuild_keeps_every_row_rowid_and_index_of_each_kind_of_table(
        proj: Projections, sqlite_app: LedgerApp) -> None:
    """Rowid tables (with an automatic index), an INTEGER PRIMARY KEY table, a WITHOUT
    ROWID table and FTS5 shadow tables come back identical and consistent."""
    app = sqlite_app
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": t} for t in _texts(400, 2)])
    proj.catch_up()
    store = proj.store
    with store.engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE wr (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID")
        c.exec_driver_sql("INSERT INTO wr VALUES ('b', 'two'), ('a', 'one')")
        c.exec_driver_sql("DELETE FROM proj_atom_content WHERE rowid % 7 = 0")  # gaps
    tables = ["proj_atom_content", "proj_kw_docs", "wr", "proj_kw_fts_data",
              "proj_kw_fts_idx", "proj_kw_fts_content", "proj_kw_fts_docsize"]

    def dump() -> dict[str, list[tuple[Any, ...]]]:
        with store.engine.connect() as c:
            out = {}
            for t in tables:
                rid = "rowid, " if t not in ("wr", "proj_kw_fts_idx") else ""
                out[t] = [tuple(r) for r in c.exec_driver_sql(
                    f'SELECT {rid}* FROM "{t}" ORDER BY 1, 2')]
            return out

    before = dump()
    assert all(before[t] for t in tables)
    done = [store.rebuild(t) for t in tables] + [store.rebuild("proj_atoms_subject")]
    assert done == ["rebuild"] * len(tables) + ["reindex"]
    assert dump() == before
    with store.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
        c.exec_driver_sql("INSERT INTO proj_kw_fts(proj_kw_fts) VALUES ('integrity-check')")
        sid = str(app.reader.resolve_subject("u1"))
        assert len(proj.keyword.search(c, sid, "violin", k=500)) > 10
    with pytest.raises(ValueError, match="no table or index"):
        store.rebuild("no_such_table")


def test_erased_words_leave_the_keyword_index_without_optimize(
        sqlite_app: LedgerApp, proj: Projections) -> None:
    """FTS5 secure-delete (SQLite 3.44+): a hard erasure removes the atom's terms from the
    index leaves on delete; no 'optimize' runs, and no file keeps the word."""
    app = sqlite_app
    assert proj.store.sqlite_version() >= (3, 44, 0) and proj.keyword.secure_delete
    app.register_subject({"ref": "u1"})
    rng = random.Random(5)
    word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(11))  # one token
    doomed = str(app.add_atom({"subject": "u1",
                               "text": f"Met {word} at the garden party"}))
    for start in range(0, 1200, 300):  # several segments, as a real index has
        app.add_atoms([{"subject": "u1", "text": t} for t in _texts(300, start)])
        proj.catch_up()
    sid = str(app.reader.resolve_subject("u1"))
    with proj.store.engine.connect() as c:
        assert [a for a, _ in proj.keyword.search(c, sid, word)] == [doomed]
        segments = c.exec_driver_sql("SELECT count(DISTINCT segid) FROM proj_kw_fts_idx")
        assert segments.scalar_one() >= 1
    proj.store.compact(())
    assert _in_files(app.config.home, word.encode()) == ["projections.sqlite"]
    statements: list[str] = []
    _count_sql(proj.store, statements)
    hard_erase(app, proj, Targets(atoms=[doomed]), mode="hard", reason="test",
               operator="operator")
    assert not [s for s in statements if "optimize" in s]
    assert _in_files(app.config.home, word.encode()) == []
    with proj.store.engine.connect() as c:
        assert proj.keyword.search(c, sid, word) == []
        assert len(proj.keyword.search(c, sid, "violin", k=50)) == 50  # the rest is there
        c.exec_driver_sql("INSERT INTO proj_kw_fts(proj_kw_fts) VALUES ('integrity-check')")


def test_without_secure_delete_the_word_stays_until_optimize(tmp_path: Path) -> None:
    """The control for the test above: the same delete on an FTS5 table without the
    option leaves the word in the index's pages (so that test can fail)."""
    db = store_sqlite().connect(str(tmp_path / "f.sqlite"), isolation_level=None)
    db.execute("PRAGMA secure_delete=ON")
    db.execute("CREATE VIRTUAL TABLE ft USING fts5(body)")
    rng = random.Random(5)
    word = "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(11))
    db.execute("INSERT INTO ft(rowid, body) VALUES (1, ?)", (f"Met {word} at the party",))
    for i, t in enumerate(_texts(1200, 9), start=2):
        db.execute("INSERT INTO ft(rowid, body) VALUES (?, ?)", (i, t))
    db.execute("DELETE FROM ft WHERE rowid = 1")
    blocks = b"".join(r[0] for r in db.execute("SELECT block FROM ft_data"))
    assert word.encode() in blocks  # still in a segment: only a merge would drop it
    db.execute("INSERT INTO ft(ft) VALUES ('optimize')")
    blocks = b"".join(r[0] for r in db.execute("SELECT block FROM ft_data"))
    assert word.encode() not in blocks
    db.close()


def test_an_index_made_by_an_older_sqlite_is_migrated_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword index made with the standard library's SQLite (3.40: a normal FTS5 table,
    version 2/fts5) gets secure-delete on open, without a rebuild."""
    import sqlite3

    if sqlite3.sqlite_version_info >= (3, 44, 0):
        pytest.skip("the standard library's SQLite already has secure-delete")
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        app.add_atoms([{"subject": "u1", "text": t} for t in _texts(50, 3)])
        monkeypatch.setenv("LEDGER_STORE_SQLITE", "sqlite3")
        old = Projections(app)
        old.catch_up()
        assert old.keyword.version == "2/fts5"
        old.close()
        monkeypatch.delenv("LEDGER_STORE_SQLITE")
        new = Projections(app)
        assert new.keyword.version == "2/fts5-secure-delete"
        report = new.catch_up()
        assert report.models["keyword"].events == 0  # nothing replayed: not rebuilt
        status = {s.name: s for s in new.status()}["keyword"]
        assert status.state == "current" and status.version == "2/fts5-secure-delete"
        with new.store.engine.connect() as c:
            assert c.exec_driver_sql("SELECT v FROM proj_kw_fts_config "
                                     "WHERE k = 'secure-delete'").scalar() == 1
            sid = str(app.reader.resolve_subject("u1"))
            assert len(new.keyword.search(c, sid, "violin", k=100)) > 3
        new.close()
    finally:
        app.close()


def _erase_with_early_scan(app: LedgerApp, proj: Projections, monkeypatch: pytest.MonkeyPatch,
                           n: int = 30) -> tuple[dict[str, Any], list[bytes]]:
    """An erasure whose raw scan starts early, as on a large home (one worker while the
    erasure runs), of ``n`` atoms among 400 others'."""
    from governance import scan

    monkeypatch.setattr(scan, "PARALLEL_FROM", 0)
    monkeypatch.setattr(scan, "SETTLE_NS", 1_000_000)
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    markers = [f"zq{uuid.uuid4().hex[:12]}" for _ in range(n)]
    doomed = [str(a) for a in app.add_atoms(
        [{"subject": "u1", "text": f"{t} {m}"} for t, m in zip(_texts(n, 3), markers,
                                                               strict=True)])]
    app.add_atoms([{"subject": "u2", "text": t} for t in _texts(400, 4)])
    proj.catch_up()
    done = hard_erase(app, proj, Targets(atoms=doomed), mode="hard", reason="test",
                      operator="operator")
    return done, [m.encode() for m in markers]


def test_the_projections_file_is_read_early_and_only_its_changed_pages_after(
        sqlite_app: LedgerApp, proj: Projections, monkeypatch: pytest.MonkeyPatch) -> None:
    """The projections file is read while the erasure purges (its changes held in the
    WAL); the checkpoint's pages are read after it, not the file; the answer is the one
    a full scan of the home gives, and no marker is in any file."""
    from governance.scan import scan_tree

    app = sqlite_app
    path = proj.store.sqlite_path
    assert path is not None
    done, markers = _erase_with_early_scan(app, proj, monkeypatch)
    assert done["reach"]["raw_scan"]["hits"] == []
    assert done["scanned_early_bytes"] >= path.stat().st_size
    assert done["rescanned_bytes"] < path.stat().st_size  # the file was not read again
    assert 0 < done["patched_bytes"] < path.stat().st_size
    assert scan_tree(app.config.home, markers)["hits"] == []
    assert [m for m in markers if _in_files(app.config.home, m)] == []


def test_a_checkpoint_that_cannot_name_its_pages_makes_the_scan_read_the_file_again(
        sqlite_app: LedgerApp, proj: Projections, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the checkpoint cannot say which pages it copied (here: as when a reader on
    an older snapshot kept it partial), nothing is claimed: the file, changed since its
    early read, is read again in full, and the answer is the same."""
    app = sqlite_app
    path = proj.store.sqlite_path
    assert path is not None
    real = proj.store.checkpoint_pages
    sizes: list[int] = []

    def unnamed() -> None:
        real()  # the checkpoint and the WAL truncation still happen
        sizes.append(path.stat().st_size)
        return None

    monkeypatch.setattr(proj.store, "checkpoint_pages", unnamed)
    done, markers = _erase_with_early_scan(app, proj, monkeypatch)
    assert done["reach"]["raw_scan"]["hits"] == []
    assert done["rescanned_bytes"] >= sizes[0] and done["patched_bytes"] == 0
    assert [m for m in markers if _in_files(app.config.home, m)] == []


def test_checkpoint_pages_names_exactly_the_pages_the_checkpoint_writes(
        proj: Projections) -> None:
    """The WAL's frame headers name every page the checkpoint copies into the file, no
    other; a reader on an older snapshot makes the checkpoint partial: nothing claimed."""
    from keys.datakeys import store_sqlite

    path = proj.store.sqlite_path
    assert path is not None
    with proj.store.engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE t (x BLOB)")
        c.exec_driver_sql("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                          "WHERE i < 3000) INSERT INTO t SELECT randomblob(300) FROM n")
    proj.store.compact(())
    with proj.store.checkpoints_held():
        before = path.read_bytes()
        with proj.store.engine.begin() as c:
            c.exec_driver_sql("DELETE FROM t WHERE rowid % 37 = 0")
            c.exec_driver_sql("UPDATE t SET x = randomblob(300) WHERE rowid % 401 = 0")
        assert path.read_bytes() == before  # held: every write is still in the WAL
        named = proj.store.checkpoint_pages()
    assert named is not None
    ident_before, ident_after, pages, size = named
    after = path.read_bytes()
    changed = {i // size + 1 for i in range(0, max(len(before), len(after)), size)
               if before[i:i + size] != after[i:i + size]}
    assert changed and changed <= pages and ident_before[0] == len(before)
    assert ident_after[0] == len(after)
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # emptied

    # the reader ends its transaction a second later, within the busy timeout: the
    # checkpoint that empties the WAL waits for it and succeeds (a reader that stays
    # makes it raise: test_erasure_readers.py)
    import threading
    import time

    reader = store_sqlite().connect(str(path), isolation_level=None,
                                    check_same_thread=False)
    try:
        with proj.store.checkpoints_held():
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM t").fetchall()  # an older snapshot
            with proj.store.engine.begin() as c:
                c.exec_driver_sql("DELETE FROM t WHERE rowid % 41 = 0")
            later = threading.Timer(1.0, reader.execute, ("ROLLBACK",))
            t0 = time.monotonic()
            later.start()
            assert proj.store.checkpoint_pages() is None
            assert time.monotonic() - t0 >= 1.0
            later.join()
    finally:
        reader.close()
    assert not wal.exists() or wal.stat().st_size == 0


def test_checkpoint_pages_claims_nothing_when_the_write_lock_cannot_be_had(
        proj: Projections, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer holding the projections past the busy timeout: no pages named (the
    scan then reads the file again), and the WAL is still emptied."""
    import contextlib

    import projections.store as store_module

    path = proj.store.sqlite_path
    assert path is not None

    @contextlib.contextmanager
    def locked(_engine: Any) -> Iterator[Any]:
        raise sa.exc.OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked"))
        yield  # pragma: no cover

    with proj.store.checkpoints_held():
        with proj.store.engine.begin() as c:
            c.exec_driver_sql("CREATE TABLE t (x TEXT)")
            c.exec_driver_sql("INSERT INTO t VALUES ('row')")
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 0
        monkeypatch.setattr(store_module, "write_transaction", locked)
        assert proj.store.checkpoint_pages() is None
        assert wal.stat().st_size == 0
