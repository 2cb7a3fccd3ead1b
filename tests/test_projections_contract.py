"""The read-model contract, run against every read model on SQLite and PostgreSQL.

* rebuild from zero equals incremental application (hypothesis, random commands);
* a position is never applied twice (check-and-skip under the tracking lock, also
  with two runners racing);
* a crash inside ``apply`` rolls the batch back and the next catch-up resumes with
  nothing lost and nothing doubled;
* a tampered event stops every model before it, and nothing changes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Connection

from ledger.application import LedgerApp
from ledger.clock import format_instant
from ledger.errors import LedgerError, VerificationFailed
from ledger.home import Config
from projections.embedder import HashingEmbedder
from projections.entries import LogEntry, decode
from projections.runner import Applied, Runner
from projections.service import Projections

from .conftest import RawStore

MODELS = ["atoms", "keyword", "vectors", "audit", "asof"]
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Clock:
    """Moves LEDGER_NOW forward; events get the times the test chooses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, start: datetime = T0) -> None:
        self.mp = monkeypatch
        self.now = start
        self.set(start)

    def set(self, t: datetime) -> datetime:
        self.now = t
        self.mp.setenv("LEDGER_NOW", t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
        return t

    def tick(self, **delta: float) -> datetime:
        return self.set(self.now + timedelta(**delta))


@contextmanager
def projections(app: LedgerApp, **kw: Any) -> Iterator[Projections]:
    p = Projections(app, **kw)
    try:
        yield p
    finally:
        p.close()


def seed(app: LedgerApp, clock: Clock, n: int = 6) -> list[Any]:
    """A small ledger with every kind of event: subjects, artifact, atoms, rehearsal,
    correction, expiry and a destroyed data key."""
    app.register_subject({"ref": "u1", "display_name": "Ann Example"})
    app.register_subject({"ref": "u2"})
    art = app.capture_artifact({"subject": "u1", "kind": "chat", "body": "chat transcript"})
    atoms = app.add_atoms([{"subject": "u1" if i % 2 else "u2",
                            "text": f"Fact {i} about gardening and tea",
                            "details": [{"content": f"detail {i}", "brightness": 0.6}],
                            "tags": ["t"]} for i in range(n)])
    clock.tick(hours=5)
    app.rehearse_atom(str(atoms[0]))
    clock.tick(hours=5)
    app.correct_atom(str(atoms[1]), {"text": "Corrected fact about coffee"})
    app.expire_atom(str(atoms[2]))
    app.destroy_data_key(atoms[3], "test")
    app.destroy_data_key(art, "test")
    return atoms


def fresh_dump(app: LedgerApp) -> dict[str, Any]:
    """The views a rebuild from zero produces."""
    with projections(app) as p:
        p.rebuild()
        return p.dump()


# ---------------------------------------------------------------------- property
WORDS = ["tea", "coffee", "garden", "Acme", "Berlin", "piano", "sister", "allergy"]

command = st.one_of(
    st.tuples(st.just("subject")),
    st.tuples(st.just("atom"), st.integers(0, 3), st.lists(st.sampled_from(WORDS), min_size=1,
                                                          max_size=3),
              st.sampled_from([0.1, 0.3, 0.6, 1.0]), st.sampled_from([-0.8, 0.0, 0.5]),
              st.booleans()),
    st.tuples(st.just("artifact"), st.integers(0, 3)),
    st.tuples(st.just("correct"), st.integers(0, 30)),
    st.tuples(st.just("rehearse"), st.integers(0, 30)),
    st.tuples(st.just("expire"), st.integers(0, 30)),
    st.tuples(st.just("shred"), st.integers(0, 30)),
    st.tuples(st.just("redact"), st.integers(0, 30), st.sampled_from(["soft", "archive"])),
    st.tuples(st.just("unredact"), st.integers(0, 30)),
    st.tuples(st.just("flag"), st.integers(0, 30), st.booleans()),
    st.tuples(st.just("tombstone"), st.integers(0, 30), st.sampled_from(["hard", "delete"])),
    st.tuples(st.just("tick"), st.integers(1, 400)),
)


class World:
    """The ledger the commands run against, kept across hypothesis examples."""

    def __init__(self, app: LedgerApp, clock: Clock) -> None:
        self.app, self.clock = app, clock
        self.subjects: list[str] = []
        self.atoms: list[str] = []
        self.items: list[Any] = []

    def run(self, cmd: tuple[Any, ...]) -> None:
        app, name = self.app, cmd[0]
        self.clock.tick(seconds=1)
        if name == "tick":
            self.clock.tick(hours=cmd[1])
            return
        if name == "subject" or not self.subjects:
            ref = f"s{len(self.subjects)}"
            self.items.append(app.register_subject({"ref": ref, "display_name": f"N {ref}"}))
            self.subjects.append(ref)
            if name == "subject":
                return
        try:
            if name == "atom":
                _, s, words, sal, val, det = cmd
                aid = app.add_atom({
                    "subject": self.subjects[s % len(self.subjects)], "text": " ".join(words),
                    "salience": sal, "emotional_valence": val, "tags": words[:1],
                    "details": [{"content": words[-1], "brightness": 0.5}] if det else []})
                self.atoms.append(str(aid))
                self.items.append(aid)
            elif name == "artifact":
                self.items.append(app.capture_artifact({
                    "subject": self.subjects[cmd[1] % len(self.subjects)], "kind": "chat",
                    "title": "t", "body": "b"}))
            elif self.atoms and name in ("correct", "rehearse", "expire"):
                aid = self.atoms[cmd[1] % len(self.atoms)]
                if name == "correct":
                    new = app.correct_atom(aid, {"text": "corrected " + WORDS[cmd[1] % 8]})
                    self.atoms.append(str(new))
                    self.items.append(new)
                elif name == "rehearse":
                    app.rehearse_atom(aid)
                else:
                    app.expire_atom(aid)
            elif name == "shred" and self.items:
                app.destroy_data_key(self.items[cmd[1] % len(self.items)], "erasure")
            elif self.atoms and name in ("redact", "unredact", "flag", "tombstone"):
                aid = self.atoms[cmd[1] % len(self.atoms)]
                if name == "redact":
                    app.redact(aid, cmd[2], "asked")
                elif name == "unredact":
                    app.unredact(aid, "undo")
                elif name == "flag":
                    if cmd[2]:
                        app.flag(UUID(aid), "unsourced", "test")
                    else:
                        app.resolve_flag(UUID(aid), "unsourced", "checked")
                else:  # hard erasure as governance does it: keys first, then the tombstone
                    app.shred([UUID(aid)], "erasure")
                    app.tombstone([UUID(aid)], [], cmd[2], "erasure", ["test"])
        except LedgerError:
            pass  # e.g. correcting a superseded atom: refused, nothing written


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(commands=st.lists(command, min_size=1, max_size=6))
@example(commands=[("atom", 0, ["tea", "garden"], 0.6, 0.5, True), ("redact", 0, "soft"),
                   ("tick", 30), ("unredact", 0), ("rehearse", 0), ("flag", 0, True),
                   ("correct", 0), ("tombstone", 1, "hard"), ("redact", 0, "archive")])
@example(commands=[("atom", 1, ["piano"], 1.0, -0.8, False), ("artifact", 0),
                   ("shred", 1), ("expire", 0), ("flag", 0, False), ("tombstone", 0, "delete")])
def test_rebuild_from_zero_equals_incremental(app: LedgerApp, monkeypatch: pytest.MonkeyPatch,
                                              commands: list[tuple[Any, ...]]) -> None:
    world = getattr(app, "_test_world", None)
    if world is None:
        world = World(app, Clock(monkeypatch))
        app._test_world = world  # type: ignore[attr-defined]
    with projections(app, batch_size=3, vector_segment_size=2) as p:
        for cmd in commands:
            world.run(cmd)
            p.catch_up()
        incremental = p.dump()
        assert {s.state for s in p.status()} == {"current"}
        p.rebuild()
        assert p.dump() == incremental


# ---------------------------------------------------------------------- never twice
def test_position_is_never_applied_twice(app: LedgerApp,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    seed(app, clock)
    with projections(app) as p:
        p.catch_up()
        before = p.dump()
        entries = decode(app.reader, list(app.reader.stored_records()))
        for model in p.models:
            assert p.runner.apply_entries(model, entries) == 0, model.name
        assert p.dump() == before
        # new events plus already applied ones: only the new ones are applied
        clock.tick(hours=1)
        app.add_atom({"subject": "u1", "text": "one more fact"})
        entries = decode(app.reader, list(app.reader.stored_records()))
        for model in p.models:
            assert p.runner.apply_entries(model, entries) == 1, model.name
        assert p.dump() == fresh_dump(app)


def test_two_runners_racing_apply_each_position_once(home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    apps = [LedgerApp(Config.load(home)) for _ in range(2)]
    try:
        seed(apps[0], clock, n=12)
        errors: list[BaseException] = []

        def run(a: LedgerApp) -> None:
            try:
                with projections(a, batch_size=2) as p:
                    p.catch_up()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(a,)) for a in apps]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        with projections(apps[0]) as p:
            dump = p.dump()
            head = p.runner.head()
            assert [s.position for s in p.status()] == [head] * len(MODELS)
            assert len(dump["audit"]["proj_audit"]) == head
        assert dump == fresh_dump(apps[0])
    finally:
        for a in apps:
            a.close()


# ---------------------------------------------------------------------- crash and resume
class Crash(RuntimeError):
    pass


class CrashingModel:
    """Wraps a read model; applies part of the batch that crosses ``after`` events, then
    raises, as a process killed mid-batch would (the transaction must roll it back)."""

    def __init__(self, inner: Any, after: int) -> None:
        self.inner, self.after, self.seen = inner, after, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        if self.seen + len(entries) > self.after:
            self.inner.apply(conn, entries[:self.after - self.seen])
            raise Crash(f"simulated crash after {self.after} events")
        self.seen += len(entries)
        result: Applied = self.inner.apply(conn, entries)
        return result


@pytest.mark.parametrize("name", MODELS)
def test_crash_between_batches_resumes_without_loss_or_duplicates(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    seed(app, Clock(monkeypatch))
    with projections(app) as p:
        models = [CrashingModel(m, after=9) if m.name == name else m for m in p.models]
        crashing = Runner(app.reader, p.store, models, p.registry, batch_size=4)  # type: ignore[arg-type]
        with pytest.raises(Crash):
            crashing.catch_up()
        status = {s.name: s for s in p.status()}
        assert status[name].position == 8  # two whole batches committed, the third rolled back
        assert status[name].state == "behind"
        view = p.dump()[name]
        if name == "audit":
            assert [r[0] for r in view["proj_audit"]] == list(range(1, 9))
        p.catch_up()  # resume
        assert {s.position for s in p.status()} == {p.runner.head()}
        assert p.dump() == fresh_dump(app)


# ---------------------------------------------------------------------- tampering
def test_tampered_event_stops_projection_and_changes_nothing(
        app: LedgerApp, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    app.add_atom({"subject": "u1", "text": "first fact"})
    with projections(app) as p:
        p.catch_up()
        before_dump, before_status = p.dump(), [s.position for s in p.status()]
        clock.tick(hours=1)
        app.add_atom({"subject": "u1", "text": "second fact"})
        raw = RawStore(home)
        position, *_rest, state = raw.rows()[-1]
        raw.set_state(position, state.replace(b"memory-ledger:atom.created.v1",
                                              b"memory-ledger:atom.created.v1 "))
        with pytest.raises(VerificationFailed, match="failed verification"):
            p.catch_up()
        assert p.dump() == before_dump
        assert [s.position for s in p.status()] == before_status


# ---------------------------------------------------------------------- versions and status
def test_changed_model_version_rebuilds_that_model(app: LedgerApp,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seed(app, Clock(monkeypatch))
    with projections(app) as p:
        p.catch_up()
        head = p.runner.head()
    with projections(app, embedder=HashingEmbedder(dim=64)) as p:
        status = {s.name: s for s in p.status()}
        assert status["vectors"].state == "stale" and status["atoms"].state == "current"
        report = p.catch_up()
        assert report.models["vectors"].events == head  # replayed from zero
        assert report.models["atoms"].events == 0
        vec = p.dump()["vectors"]["proj_vec_segments"]
        assert vec and all(len(row[3]) == 64 * 4 for row in vec)


def test_status_reports_position_and_lag(app: LedgerApp,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    with projections(app) as p:
        p.catch_up()
        head = p.runner.head()
        clock.tick(hours=1)
        app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(3)])
        rows = {s.name: s.as_json() for s in p.status()}
        assert rows["atoms"]["position"] == head and rows["atoms"]["lag"] == 3
        assert rows["atoms"]["state"] == "behind"
        p.catch_up()
        assert {s.lag for s in p.status()} == {0}


def test_audit_view_records_who_did_what_when(app: LedgerApp,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    atoms = seed(app, clock)
    writer = app.signer(None).kid
    with projections(app) as p:
        p.catch_up()
        with p.store.engine.connect() as conn:
            trail = p.audit.trail(conn, str(atoms[0]))
            everything = p.audit.between(conn)
            later = p.audit.between(conn, start=format_instant(T0 + timedelta(hours=1)))
        assert [r["topic"].split(":")[1] for r in trail] == ["atom.created.v1",
                                                            "atom.rehearsed.v1"]
        assert {r["signer"] for r in trail} == {writer}
        assert [r["position"] for r in everything] == list(range(1, p.runner.head() + 1))
        assert {r["kind"] for r in everything[:4]} == {"roster"}  # signed by the root key
        assert everything[0]["kid"] == app.config.root_kid
        assert later and all(r["timestamp"] >= "2030-01-01T01" for r in later)
        assert set(everything[0]) == {"position", "seq", "timestamp", "kid", "topic",
                                      "originator_id", "version", "kind"}  # no payload
