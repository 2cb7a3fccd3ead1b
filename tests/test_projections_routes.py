"""Routes: every read model holding content is registered, and a destroyed data key
leaves no trace in any of them (rows, FTS terms, vectors, the SQLite files)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from keys.datakeys import store_sqlite
from ledger.application import LedgerApp
from projections.routes import ProbeHit, ProbeResult, Reach, Route, RouteRegistry

from .conftest import files_under, pg_connect
from .test_projections_contract import Clock, projections


def _marker() -> str:
    # lower-case letters and digits, ending in a digit: one FTS token no stemmer alters
    return f"zq{uuid.uuid4().hex}7"


def _record_marked(app: LedgerApp, marker: str) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    sid = app.register_subject({"ref": "u1", "display_name": f"Name {marker}"})
    art = app.capture_artifact({"subject": "u1", "kind": "chat", "title": f"title {marker}",
                                "body": f"transcript mentioning {marker}"})
    atom = app.add_atom({"subject": "u1", "text": f"Has a rare condition {marker}",
                         "gist": f"gist {marker}", "tags": [marker, "health"],
                         "details": [{"content": f"seen at {marker}", "brightness": 0.9}],
                         "sensitivity": "medical"})
    return sid, art, atom


def test_every_read_model_that_holds_content_registers_a_route(app: LedgerApp) -> None:
    with projections(app) as p:
        content_models = {m.name for m in p.models if m.holds_content}
        assert content_models == {"atoms", "keyword", "vectors"}
        assert content_models <= p.registry.models()
        for route in p.registry.routes():
            assert isinstance(route, Route)
            assert route.model in {m.name for m in p.models} | {
                "store", "recall-cache", "recall-index"}


def test_models_found_holding_a_marker_are_declared_and_routed(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scan every model's rows for a marker: a new index that stores content but forgot
    to declare it (``holds_content``) and register a route fails here."""
    Clock(monkeypatch)
    marker = _marker()
    _record_marked(app, marker)
    with projections(app) as p:
        p.catch_up()
        with p.store.engine.connect() as conn:
            holding = {m.name for m in p.models if marker in repr(m.dump(conn)).lower()}
        assert {"atoms", "keyword"} <= holding
        for m in p.models:
            if m.name in holding:
                assert m.holds_content and m.name in p.registry.models(), m.name


def _proj_tables_with(marker: str, schema: str) -> list[str]:
    with pg_connect() as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name LIKE 'proj%%'", (schema,))]
        return [t for t in tables if conn.execute(
            f'SELECT count(*) FROM "{schema}"."{t}" t WHERE t::text ILIKE %s',
            (f"%{marker}%",)).fetchone() != (0,)]


def test_destroyed_data_key_purges_every_route_and_no_file_keeps_the_marker(
        app: LedgerApp, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    marker = _marker()
    sid, art, atom = _record_marked(app, marker)
    keep = app.add_atom({"subject": "u1", "text": "Enjoys sailing on weekends"})
    with projections(app) as p, contextlib.ExitStack() as stack:
        p.catch_up()
        if p.store.sqlite_path is not None:
            # An idle second connection, as another process would hold: SQLite then does not
            # checkpoint and delete the WAL on close, so only our compaction can empty it.
            # Through the store's own SQLite library: one file must never be open through
            # two SQLite libraries in one process (each has its own POSIX lock table).
            other = store_sqlite().connect(p.store.sqlite_path, isolation_level=None)
            stack.callback(other.close)
            other.execute("SELECT count(*) FROM proj_tracking").fetchone()
        before = {r.route: r for r in p.probe(str(atom), marker)}
        # the probes can see the content while it is there, so "nothing found" means something
        assert before["atom-store"].reach is Reach.REACHABLE
        assert before["keyword-index"].reach is Reach.REACHABLE
        assert before["vector-index"].reach is Reach.REACHABLE  # found by id
        if p.store.is_sqlite:
            assert before["sqlite-files"].reach is Reach.REACHABLE

        clock.tick(hours=1)
        for item in (atom, art, sid):
            app.destroy_data_key(item, "right to be forgotten")
        report = p.catch_up()
        assert report.compaction is not None and report.compaction.complete
        assert {s.compact_pending for s in p.status()} == {False}

        for item in (atom, art, sid):
            results = p.probe(str(item), marker)
            assert all(isinstance(r, ProbeResult) for r in results)
            assert [r.as_json() for r in results if r.reach is not Reach.NOT_REACHABLE] == []
        # the purge was targeted: the other atom is still searchable by both indexes
        with p.store.engine.connect() as conn:
            assert [a for a, _ in p.keyword.search(conn, str(sid), "sailing")] == [str(keep)]
            assert [a for a, _ in p.vectors.search(conn, str(sid), "sailing weekends")][:1] == [
                str(keep)]
            row = p.atoms.atom(conn, str(atom))
        assert row is not None and row["content_erased"] and row["text"] is None
        assert row["sensitivity"] == "medical"  # the tombstone keeps non-content fields

        if p.store.is_sqlite:
            names = {f.name for f in p.store.files()}
            assert "projections.sqlite" in names
            for needle in (marker.encode(), marker.upper().encode(), marker[-12:].encode()):
                assert [str(f) for f in files_under(home) if needle in f.read_bytes()] == []
        else:
            assert p.store.schema is not None
            assert _proj_tables_with(marker, p.store.schema) == []


def test_erasure_logs_ids_and_counts_only(app: LedgerApp,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    Clock(monkeypatch)
    marker = _marker()
    _, _, atom = _record_marked(app, marker)
    with capture_logs() as logs, projections(app) as p:
        p.catch_up()
        app.destroy_data_key(atom, "erasure")
        p.catch_up()
        p.recall(f"rare condition {marker}", "u1")
        p.memory_list()
    events = {e["event"] for e in logs}
    assert {"projections.purged", "projections.compacted", "projections.recalled"} <= events
    assert marker not in repr(logs)
    assert str(atom) in repr(logs)


def test_direct_purge_removes_content_from_every_route(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Projections.purge`` (for governance) works without an event, and is idempotent."""
    Clock(monkeypatch)
    marker = _marker()
    app.register_subject({"ref": "u1"})
    atom = app.add_atom({"subject": "u1", "text": f"Has a rare condition {marker}"})
    with projections(app) as p:
        p.catch_up()
        report = p.purge(str(atom))
        # atom-store: the content row and the digest row of its one text
        assert report.rows["atom-store"] == 2 and report.rows["keyword-index"] == 1
        assert report.rows["vector-index"] == 1 and report.compaction.complete
        assert all(r.reach is Reach.NOT_REACHABLE for r in p.probe(str(atom), marker))
        again = p.purge(str(atom))
        assert sum(again.rows.values()) == 0


def test_registry_refuses_duplicates_and_non_routes() -> None:
    class Fake:
        name, model = "x", "m"

        def purge(self, conn: sa.Connection, item_id: str) -> int:
            return 0

        def compact(self, conn: sa.Connection) -> None:
            return None

        def content_tables(self) -> list[str]:
            return []

        def probe(self, item_id: str, content: str | None) -> ProbeResult:
            return ProbeResult(self.name, item_id, ("nothing",),
                               (ProbeHit("t", "id", 1),))

    reg = RouteRegistry()
    reg.register(Fake())
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Fake())
    with pytest.raises(TypeError):
        reg.register(object())  # type: ignore[arg-type]
    (result,) = reg.probe("id-1", None)
    assert result.reach is Reach.REACHABLE
    assert result.as_json()["hits"] == [{"where": "t", "by": "id", "count": 1, "other_ids": []}]


def test_hard_tombstone_and_artifact_deletion_purge_every_route(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hard or delete tombstone purges content even where no key was destroyed yet."""
    Clock(monkeypatch)
    marker = _marker()
    app.register_subject({"ref": "u1"})
    atom = app.add_atom({"subject": "u1", "text": f"Remembers {marker}"})
    art = app.capture_artifact({"subject": "u1", "kind": "chat", "body": f"says {marker}"})
    with projections(app) as p:
        p.catch_up()
        app.tombstone([atom], [art], "delete", "removed by the subject", ["test"])
        p.catch_up()
        for item in (atom, art):
            assert all(r.reach is Reach.NOT_REACHABLE for r in p.probe(str(item), marker))
        with p.store.engine.connect() as conn:
            (artifact,) = p.atoms.artifacts_of(conn, str(app.reader.subject_id("u1")))
            assert artifact["status"] == "deleted" and artifact["body"] is None
            assert p.atoms.atom(conn, str(atom))["status"] == "deleted"  # type: ignore[index]


def test_a_file_kept_open_keeps_its_wal_and_an_erasure_still_empties_it(
        app: LedgerApp) -> None:
    """ADR 0078: while a server's writer process keeps the read models' file open, the
    closes of its other connections leave the WAL in place (none is the last), and the
    compaction after a purge still checkpoints and empties it: the kept connection holds
    no snapshot. The WAL goes when the last connection closes."""
    marker = _marker()
    app.register_subject({"ref": "u1"})
    atom = app.add_atom({"subject": "u1", "text": f"Has a rare condition {marker}"})
    with projections(app) as p:
        wal = p.store.sqlite_path.with_name(p.store.sqlite_path.name + "-wal") \
            if p.store.sqlite_path is not None else None
        with p.store.kept_open():
            p.catch_up()
            if wal is not None:
                assert wal.exists() and wal.stat().st_size > 0
                assert p.store.scan_files([marker.encode()])  # the marker is in the files
            app.destroy_data_key(atom, "test")
            report = p.catch_up()
            assert report.compaction is not None and report.compaction.complete
            assert p.store.scan_files([marker.encode()]) == {}
            # emptied by the compaction (not blocked by the kept connection); what is in
            # it now is the tracking row written after it
            assert wal is None or 0 < wal.stat().st_size <= 32 + 2 * (24 + 4096)
    assert wal is None or not wal.exists()


def test_projections_database_is_owner_only(app: LedgerApp) -> None:
    """The projections file holds decrypted content: mode 0600, like the event store."""
    with projections(app) as p:
        p.catch_up()
        files = p.store.files()
    for path in files:
        assert path.stat().st_mode & 0o777 == 0o600, path
