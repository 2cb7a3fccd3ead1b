"""Recall's snapshot files (ADR 0059): a large subject's index, kept in the home and mapped
by the next process instead of read from the database.

Written by a recall, used by the next process (the same answers as warm, also in a
fresh Python process), brought up to date from the rows written since (the same index
as one read whole from the database), made stale by a rebuild (which gives the same
index again), and purged by an erasure: no byte of an erased atom's id or embedding is
left in the file. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ledger.application import LedgerApp
from projections import recall as recall_module
from projections.embedder import WordLlamaEmbedder
from projections.recall import SubjectIndex

from .test_projections_contract import Clock, projections

WORDS = ["nurse", "clinic", "cat", "peanuts", "sailing", "Oslo", "garden", "violin",
         "train", "coffee", "marathon", "chess", "kitchen", "umbrella", "printer"]
NOW = datetime(2030, 1, 1, tzinfo=UTC)
QUERIES = ["nurse at the clinic", "a cat and coffee", "sailing to Oslo", "chess marathon"]


@pytest.fixture(autouse=True)
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots for subjects of a few atoms, written after every refresh that read any."""
    monkeypatch.setattr(recall_module, "SNAPSHOT_MIN", 4)
    monkeypatch.setattr(recall_module, "SAVE_EVERY", 1)
    monkeypatch.setattr(recall_module, "EXACT_LIMIT", 8)  # the sign-bit path too
    monkeypatch.setattr(recall_module, "SHORTLIST", 8)


def _seed(app: LedgerApp, n: int = 40, start: int = 0, ref: str = "u1") -> list[str]:
    rng = np.random.default_rng(59 + start)
    texts = [" ".join(rng.choice(WORDS, 4)) + f" note {start + i}" for i in range(n)]
    return [str(a) for a in app.add_atoms([{"subject": ref, "text": t} for t in texts])]


def _answers(p: Any) -> list[tuple[list[str], list[float]]]:
    out = []
    for q in QUERIES:
        r = p.recall(q, "u1", k=5, now=NOW, refresh=False)
        out.append((r.atom_ids, [round(i.score, 9) for i in r.items]))
    p.index.wait()  # the snapshot file, written on a thread of its own
    return out


def _entry(p: Any, app: LedgerApp) -> SubjectIndex:
    sid = str(app.reader.resolve_subject("u1"))
    with p.store.engine.connect() as conn:
        entry = p.index.get(conn, sid, p._positions(conn))
    p.index.wait()
    return entry  # type: ignore[no-any-return]


def _content(entry: SubjectIndex) -> dict[str, Any]:
    """What the index holds, by atom id (not by slot or atom position)."""
    out: dict[str, Any] = {}
    for slot in range(entry.used):
        atom_id = entry.slot_ids[slot]
        if atom_id is None:
            continue
        i = entry.pos[atom_id]
        out[atom_id] = (entry.matrix[slot].tobytes(), int(entry.flags[slot]),
                        tuple(float(entry.arrays[c][i]) for c in entry._cols))
    return out


def test_written_then_mapped_with_the_answers_of_warm(app: LedgerApp, home: Path) -> None:
    app.register_subject({"ref": "u1"})
    _seed(app)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        warm = _answers(p)
        path = p.index.path(str(app.reader.resolve_subject("u1")))
        assert path is not None and path.parent == home / "recall-index"
        assert path.is_file()
        entry = _entry(p, app)
        assert entry._mm is None  # read from the database
        full = _content(entry)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        assert _answers(p) == warm
        entry = _entry(p, app)
        assert entry._mm is not None  # mapped from the file
        assert _content(entry) == full
        assert entry._centered == 40  # centred before it was written: not per process
    # a fresh process: the same answers, from the file
    script = (
        "import json, sys\n"
        "from datetime import datetime\n"
        "from pathlib import Path\n"
        "from ledger.application import LedgerApp\n"
        "from ledger.home import Config\n"
        "from projections.embedder import WordLlamaEmbedder\n"
        "from projections.service import Projections\n"
        "app = LedgerApp(Config.load(Path(sys.argv[1])))\n"
        "now = datetime.fromisoformat(sys.argv[2])\n"
        "with Projections(app, embedder=WordLlamaEmbedder()) as p:\n"
        "    out = []\n"
        "    for q in json.loads(sys.argv[3]):\n"
        "        r = p.recall(q, 'u1', k=5, now=now, refresh=False)\n"
        "        out.append([r.atom_ids, [round(i.score, 9) for i in r.items]])\n"
        "    mapped = all(e._mm is not None for e in p.index._entries.values())\n"
        "    print(json.dumps({'answers': out, 'mapped': mapped}))\n"
        "app.close()\n")
    done = subprocess.run([sys.executable, "-c", script, str(home), NOW.isoformat(),
                           json.dumps(QUERIES)], capture_output=True, text=True,
                          check=True, timeout=300, cwd=Path(__file__).parent.parent)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["mapped"] is True
    assert [(a, s) for a, s in got["answers"]] == warm


def test_brought_up_to_date_and_rebuilt_consistently(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    ids = _seed(app)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        _answers(p)  # the file, as of now
    # later: more atoms, a rehearsal, an erasure by the log
    more = _seed(app, 20, start=100)
    clock.tick(hours=2)
    app.rehearse_atom(ids[3])
    app.destroy_data_key(uuid.UUID(ids[5]), "test")
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        path = Path(str(p.index.path(str(app.reader.resolve_subject("u1")))))
        entry = _entry(p, app)
        assert entry._mm is not None  # the file, and the rows since
        assert ids[5] not in entry.slot_of and more[-1] in entry.slot_of
        incremental = _content(entry)
        answers = _answers(p)
        p.index.folder = None  # the same, read whole from the database
        p.index.clear()
        p.cache._entries.clear()
        assert _content(_entry(p, app)) == incremental
        assert _answers(p) == answers
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.rebuild()
        assert path.is_file()  # of the generation before the rebuild
        entry = _entry(p, app)
        assert entry._mm is None  # so not used (and replaced)
        assert _content(entry) == incremental
        assert _answers(p) == answers
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        entry = _entry(p, app)
        assert entry._mm is not None and _content(entry) == incremental
        assert _answers(p) == answers


def test_erasure_leaves_no_byte_of_the_atom_in_the_file(app: LedgerApp, home: Path) -> None:
    from governance.erasure import Targets, hard_erase

    marker = f"zq{uuid.uuid4().hex}7"
    app.register_subject({"ref": "u1"})
    ids = _seed(app)
    gone = str(app.add_atom({"subject": "u1", "text": f"nurse at the clinic {marker}"}))
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        _answers(p)
        entry = _entry(p, app)
        vector = entry.matrix[entry.slot_of[gone]].tobytes()
        path = Path(str(p.index.path(str(app.reader.resolve_subject("u1")))))
        data = path.read_bytes()
        assert gone.encode() in data and vector in data
        assert {r.route: r for r in p.probe(gone, None)}["recall-index"].hits
        res = hard_erase(app, proj=p, targets=Targets(atoms=[gone]), mode="delete",
                         reason="asked", operator="operator")
        assert res["batch_id"]
        data = path.read_bytes()
        assert gone.encode() not in data and vector not in data
        assert marker.encode() not in data
        assert not {r.route: r for r in p.probe(gone, None)}["recall-index"].hits
        assert ids[0].encode() in data  # the others stay
    # every file of the home: the id and the embedding nowhere in the index folder
    for f in (home / "recall-index").iterdir():
        raw = f.read_bytes()
        assert gone.encode() not in raw and vector not in raw
    with projections(app, embedder=WordLlamaEmbedder()) as p:  # the purged file still maps
        entry = _entry(p, app)
        assert entry._mm is not None and gone not in entry.slot_of
        assert len(entry.live()) == len(ids)
        assert gone not in [a for r in (p.recall("nurse clinic", "u1", k=10, now=NOW),)
                            for a in r.atom_ids]


def test_an_erasure_in_another_process_is_purged_from_the_file_on_refresh(
        app: LedgerApp) -> None:
    """A purge that reached the database but not this home's file (another host, or a
    save that raced it) is found when the rows written since are read: the file is
    purged then."""
    app.register_subject({"ref": "u1"})
    ids = _seed(app)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        _answers(p)
        path = Path(str(p.index.path(str(app.reader.resolve_subject("u1")))))
        entry = _entry(p, app)
        vector = entry.matrix[entry.slot_of[ids[7]]].tobytes()
        folder, p.index.folder = p.index.folder, None  # this process does not reach it
        app.destroy_data_key(uuid.UUID(ids[7]), "test")
        p.catch_up()
        p.index.folder = folder
    assert vector in path.read_bytes()
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        entry = _entry(p, app)
        assert ids[7] not in entry.slot_of
    data = path.read_bytes()
    assert vector not in data and ids[7].encode() not in data


def test_a_snapshot_that_cannot_be_written_leaves_recall_working(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app.register_subject({"ref": "u1"})
    _seed(app)

    def refused(*_a: Any, **_k: Any) -> int:
        raise PermissionError("read-only home")

    monkeypatch.setattr(SubjectIndex, "snapshot", refused)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        assert all(ids for ids, _ in _answers(p))
        assert not list((p.index.folder or Path("/nonexistent")).glob("*.idx"))


def test_a_purge_during_a_save_waits_for_it_then_purges_the_new_file(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    app.register_subject({"ref": "u1"})
    ids = _seed(app)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        _answers(p)
    _seed(app, 10, start=200)  # rows since the file: the next process writes it again
    started, go = threading.Event(), threading.Event()
    real = recall_module._write_snapshot

    def slow(*a: Any, **k: Any) -> int:
        started.set()
        assert go.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(recall_module, "_write_snapshot", slow)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        sid = str(app.reader.resolve_subject("u1"))
        with p.store.engine.connect() as conn:
            entry = p.index.get(conn, sid, p._positions(conn))
        vector = entry.matrix[entry.slot_of[ids[3]]].tobytes()
        assert started.wait(60)  # the save holds the lock, its data taken before the purge
        purge = threading.Thread(target=p.index.purge, args=(None, ids[3]))
        purge.start()
        purge.join(0.5)
        assert purge.is_alive()  # waiting for the rename
        go.set()
        purge.join(60)
        p.index.wait()
        data = Path(str(p.index.path(sid))).read_bytes()
        assert vector not in data and ids[3].encode() not in data
        assert ids[4].encode() in data
