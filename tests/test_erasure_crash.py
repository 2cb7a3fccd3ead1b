"""Issue 20, item 1: `redact-user` killed (SIGKILL) at every step boundary, then resumed.

The erasure runs in a child process with ``LEDGER_FAULT=STEP[:N]`` (ledger/faults.py),
which kills itself there; the same `redact-user` is then run again. After each point:
the same request is completed and closed (one request for the subject, none open),
every destroyed key's bytes are in no file under the home, the erased texts are in no
file in any of their encodings (UTF-8, UTF-16, JSON-escaped, lower case), `verify`
passes, `requests list --overdue` is clean (at a time past every deadline) and the
Evidence Pack verifies (ADR 0019).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.application import LedgerApp
from ledger.home import Config
from rawfiles.bytescan import ByteMatcher
from tests.conftest import run_cli

ATOMS = 120
SQLITE_CHUNK = 40
# (step, expected kill): every boundary of governance/erasure.py STEPS; key:N and
# tombstone:N stop after the commit (SQLITE_CHUNK items each instead of
# erasure_steps.CHUNK, 100: the same three commits of a phase at less than half the
# cost) that reached the Nth item
SQLITE_POINTS = ["start", "after-receipt", "after-approval", "key:1", "key:60",
                 "keys-deleted", "subject-key", "after-purge", "probes", "scan",
                 "tombstone:1", "tombstone:60", f"tombstone:{ATOMS + 1}", "after-execute",
                 "after-close"]
# PostgreSQL: every one of the 15 points applies (the same steps, the keystore, event
# store and read models in the database; the raw scan reads the home's own files). A
# smaller subject, committed PG_CHUNK items at a time instead of erasure_steps.CHUNK (100), so
# that key:N and tombstone:N still stop between commits of one phase (first, middle,
# last) at a fraction of the cost: 24 atoms and the artifact are three commits each
PG_ATOMS = 24
PG_CHUNK = 10
PG_POINTS = ["start", "after-receipt", "after-approval", "key:1", "key:12",
             "keys-deleted", "subject-key", "after-purge", "probes", "scan",
             "tombstone:1", "tombstone:12", f"tombstone:{PG_ATOMS + 1}", "after-execute",
             "after-close"]
CHILD = "import sys; from cli.main import main; sys.exit(main(sys.argv[1:]))"
LATE = "2099-01-01T00:00:00Z"  # after every deadline: an open request would be overdue


def marker(i: int) -> str:
    return f"Zoë Quintrell-Aubépine secret {i:03d} takes penicillin"


def build(home: Path, db: str | None, atoms: int) -> None:
    LedgerApp.initialize(home, db=db)
    app = LedgerApp(Config.load(home))
    try:
        app.import_records(
            [{"ref": "target", "display_name": "Zoë Quintrell-Aubépine"}, {"ref": "other"}],
            [{"ref": "chat-1", "subject": "target", "kind": "chat",
              "title": "Chat with Zoë Quintrell-Aubépine", "body": marker(999)}],
            [{"subject": "target", "text": marker(i), "session_id": "sess:zq",
              **({"gist": f"Gist of Zoë Quintrell-Aubépine number {i}"} if i % 10 == 0
                 else {})} for i in range(atoms)]
            + [{"subject": "other", "text": f"Other person's memory {i}"} for i in range(5)])
    finally:
        app.close()


def needles(atoms: int) -> list[bytes]:
    texts = [marker(i) for i in (*range(atoms), 999)]
    texts += [f"Gist of Zoë Quintrell-Aubépine number {i}" for i in range(0, atoms, 10)]
    texts += ["Zoë Quintrell-Aubépine"]
    out: set[bytes] = set()
    for t in texts:
        for form in (t, t.lower()):
            out.update({form.encode("utf-8"), form.encode("utf-16-le"),
                        form.encode("utf-16-be"), json.dumps(form)[1:-1].encode()})
    return sorted(out)


def files(home: Path) -> list[Path]:
    return [p for p in sorted(home.rglob("*")) if p.is_file()]


def keystore_keys(home: Path) -> dict[str, bytes]:
    """Every data key in the keystore (SQLite homes; opened on a copy, so this process
    never holds the home's own files)."""
    path = home / "keystore.sqlite"
    if not path.exists():
        return {}
    tmp = home.parent / f"ks-copy-{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    for p in home.glob("keystore.sqlite*"):
        shutil.copy(p, tmp / p.name)
    conn = sqlite3.connect(tmp / "keystore.sqlite")
    try:
        return {k: bytes(v) for k, v in conn.execute(
            "SELECT key_id, key_material FROM data_keys")}
    finally:
        conn.close()
        shutil.rmtree(tmp)


def pg_keys(home: Path) -> dict[str, bytes]:
    """Every data key in the keystore, through the ledger's own engine (PostgreSQL)."""
    import sqlalchemy as sa

    app = LedgerApp(Config.load(home))
    try:
        ks = app.datakeys
        with ks.engine.connect() as conn:
            return {r[0]: bytes(r[1]) for r in conn.execute(
                sa.select(ks.keys.c.key_id, ks.keys.c.key_material))}
    finally:
        app.close()


def destroyed_ids(app: LedgerApp) -> set[str]:
    import sqlalchemy as sa

    ks = app.datakeys
    with ks.engine.connect() as conn:
        return {r[0] for r in conn.execute(sa.select(ks.destroyed.c.key_id))}


def crash(home: Path, point: str, chunk: int | None = None
          ) -> subprocess.CompletedProcess[str]:
    """`redact-user` in a child process that kills itself at ``point`` (``chunk``: items
    per commit of the key and tombstone phases, instead of ``erasure_steps.CHUNK``)."""
    env = {**os.environ, "LEDGER_FAULT": point, "LEDGER_HOME": str(home),
           "LEDGER_LOG_LEVEL": "warning"}
    env.pop("LEDGER_NOW", None)
    child = CHILD if chunk is None else \
        f"import governance.erasure_steps as e; e.CHUNK = {int(chunk)}; {CHILD}"
    return subprocess.run([sys.executable, "-c", child, "redact-user", "target",
                           "--reason", "GDPR Art. 17 request of Zoë", "--operator",
                           "operator"], env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def check_point(tmp: Path, template: Path, point: str, db: str | None, atoms: int,
                monkeypatch: pytest.MonkeyPatch, chunk: int | None = None,
                destroyed: int | None = None) -> dict[str, Any]:
    """Kill `redact-user` at ``point``, then check_resumed; ``destroyed``: how many data
    keys the killed run must have destroyed (where it stopped)."""
    home = tmp / f"home-{point.replace(':', '-')}"
    shutil.copytree(template, home)
    known = keystore_keys(home) if db is None else pg_keys(home)
    r = crash(home, point, chunk)
    assert r.returncode == -9, (point, r.returncode, r.stderr[-2000:])
    if destroyed is not None:
        app = LedgerApp(Config.load(home))
        try:
            assert len(destroyed_ids(app)) == destroyed, point
        finally:
            app.close()
    known.update(keystore_keys(home) if db is None else pg_keys(home))
    return check_resumed(tmp, home, point, atoms, known, monkeypatch)


def check_resumed(tmp: Path, home: Path, point: str, atoms: int, known: dict[str, bytes],
                  monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the same `redact-user` again in ``home`` (an erasure stopped at ``point``) and
    check that it finished the same request and left nothing behind (``known``: every
    data key the keystore held before and after the stop)."""
    monkeypatch.setenv("LEDGER_HOME", str(home))
    monkeypatch.delenv("LEDGER_FAULT", raising=False)
    again = run_cli("redact-user", "target", "--reason", "GDPR Art. 17 request of Zoë",
                    "--operator", "operator", "--json")
    assert again.code == 0, (point, again.err[-2000:])
    data = json.loads(again.out)
    assert data["status"] in ("completed", "already-completed"), point
    app = LedgerApp(Config.load(home))
    try:
        from governance.requests import list_requests

        rows = [r for r in list_requests(app) if r["subject_ref"] == "target"]
        assert len(rows) == 1 and rows[0]["status"] == "completed", (point, rows)
        assert rows[0]["request_id"] == data["request_id"]
        batch_id = rows[0]["batch_id"]
        gone = destroyed_ids(app)
        items = [*data["targets"]["atoms"], *data["targets"]["artifacts"],
                 *data["targets"]["subjects"]] if data["status"] == "completed" else []
        assert set(items) <= gone, point
        assert rows[0]["request_id"] in gone and batch_id in gone, point
        assert app.datakeys.present(gone) == set()
        assert app.datakeys.open_note(batch_id) is None
    finally:
        app.close()
    # no destroyed key's bytes, no erased text in any encoding, in any file of the home
    material = [known[k] for k in gone if k in known]
    assert len(material) >= atoms + 2, point  # the atoms', the artifact's, the subject's
    for matcher, what in ((ByteMatcher(material), "destroyed key"),
                          (ByteMatcher(needles(atoms)), "erased text")):
        hits = [str(p.relative_to(home)) for p in files(home) if matcher.file_found(p)]
        assert hits == [], (point, what, hits)
    assert run_cli("verify").code == 0, point
    monkeypatch.setenv("LEDGER_NOW", LATE)
    late = run_cli("requests", "list", "--overdue")
    monkeypatch.delenv("LEDGER_NOW")
    assert late.code == 0, (point, late.err)
    pack = tmp / f"pack-{point.replace(':', '-')}"
    assert run_cli("evidence-pack", batch_id, "--out", str(pack)).code == 0, point
    verified = run_cli("verify-pack", str(pack))
    assert verified.code == 0, (point, verified.err)
    report = (pack / "report.html").read_text("utf-8")
    assert "Zoë" not in report and "GDPR Art. 17 request" not in report
    shutil.rmtree(home)
    shutil.rmtree(pack)
    return data


@pytest.mark.slow
def test_crash_matrix_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """15 kill points on SQLite, a subject with 120 atoms and an artifact, committed 40
    items at a time (in the killed run and in the resumed one)."""
    from governance import erasure_steps as erasure

    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.setattr(erasure, "CHUNK", SQLITE_CHUNK)
    template = tmp_path / "template"
    build(template, None, ATOMS)
    resumed = 0
    for point in SQLITE_POINTS:
        data = check_point(tmp_path, template, point, None, ATOMS, monkeypatch,
                           chunk=SQLITE_CHUNK, destroyed={"key:1": SQLITE_CHUNK,
                                                          "key:60": 2 * SQLITE_CHUNK}.get(point))
        if point == "after-close":  # everything was recorded: the re-run has nothing to do
            assert data["status"] == "already-completed" and data["no_op"]
        elif point != "start":
            assert data.get("resumed"), point  # the same request, continued
            resumed += 1
    assert resumed == len(SQLITE_POINTS) - 2


@pytest.mark.slow
def test_crash_matrix_postgres(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 15 kill points on PostgreSQL (event store, keystore and read models there;
    the home holds config and keys), a subject of 24 atoms and an artifact committed 10
    items at a time (PG_CHUNK, in the killed run and in the resumed one): key:1 and
    tombstone:1 stop after the first of three commits, key:12 and tombstone:12 after the
    second, tombstone:25 after the artifact's."""
    import uuid

    from governance import erasure_steps as erasure
    from tests.conftest import PG_URL, drop_schema

    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.setattr(erasure, "CHUNK", PG_CHUNK)
    resumed = 0
    for point in PG_POINTS:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        db = f"{PG_URL}?schema={schema}"
        try:
            template = tmp_path / f"template-{point.replace(':', '-')}"
            build(template, db, PG_ATOMS)
            data = check_point(tmp_path, template, point, db, PG_ATOMS, monkeypatch,
                               chunk=PG_CHUNK, destroyed={"key:1": PG_CHUNK,
                                                          "key:12": 2 * PG_CHUNK}.get(point))
            if point == "after-close":
                assert data["status"] == "already-completed" and data["no_op"]
            elif point != "start":
                assert data.get("resumed"), point
                resumed += 1
        finally:
            drop_schema(schema)
    assert resumed == len(PG_POINTS) - 2


def test_requests_resume_and_redact_user_resume(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`ledger requests resume REQUEST` finishes a request killed after its first key
    destruction; `redact-user --resume` finishes one killed after approval, and refuses
    (exit 2, nothing written) when the subject has nothing to resume."""
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    home = tmp_path / "home"
    build(home, None, 12)
    monkeypatch.setenv("LEDGER_HOME", str(home))
    monkeypatch.delenv("LEDGER_FAULT", raising=False)
    assert crash(home, "key:1").returncode == -9
    app = LedgerApp(Config.load(home))
    try:
        from governance.requests import list_requests

        [row] = list_requests(app)
        assert row["status"] == "open"
    finally:
        app.close()
    r = run_cli("requests", "resume", row["request_id"], "--json")
    assert r.code == 0, r.err[-1500:]
    assert json.loads(r.out)["request_id"] == row["request_id"]
    again = run_cli("requests", "resume", row["request_id"], "--json")
    assert again.code == 0 and json.loads(again.out)["no_op"]
    before = {p.name: p.read_bytes() for p in files(home)}
    ok = run_cli("redact-user", "other", "--resume", "--operator", "operator")
    assert ok.code == 2 and "no erasure request to resume" in ok.err
    assert run_cli("requests", "resume", "not-a-request").code == 2
    assert {p.name: p.read_bytes() for p in files(home)} == before
    assert run_cli("verify").code == 0
    second = tmp_path / "second"
    build(second, None, 12)
    monkeypatch.setenv("LEDGER_HOME", str(second))
    assert crash(second, "after-approval").returncode == -9
    r = run_cli("redact-user", "target", "--resume", "--operator", "operator", "--json")
    assert r.code == 0 and json.loads(r.out)["resumed"], r.err[-1500:]


SCAN_CHILD = r"""
import os, signal, sys
from pathlib import Path
import governance.scan as scan
scan.PARALLEL_FROM = 0  # a pool even for this small folder
t = scan.TreeScan(Path(sys.argv[1]), [b"needle-of-the-test"], workers=2)
t.start([Path(sys.argv[1]) / "f"])
print(" ".join(str(p) for p in t._pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_scan_workers_die_with_a_killed_erasure(tmp_path: Path) -> None:
    """A `kill -9` of an erasure whose raw scan had started its worker pool: the workers
    end too (before, they waited on their task pipe for ever, holding the home's files
    and the caller's stdout open, so `subprocess.run` of a killed erasure never
    returned)."""
    import time

    (tmp_path / "f").write_bytes(b"x" * 4096)
    child = subprocess.Popen([sys.executable, "-c", SCAN_CHILD, str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, _err = child.communicate(timeout=60)  # EOF: no worker holds the pipes
    assert child.returncode == -9
    workers = [int(p) for p in out.split()]
    assert len(workers) == 2
    deadline = time.monotonic() + 10
    alive = workers
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists()
                 and "State:\tZ" not in Path(f"/proc/{p}/status").read_text()]
        time.sleep(0.1)
    assert alive == []
