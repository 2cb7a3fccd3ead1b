"""Update or add (issue 28, ADR 0052): ``on_similar`` on ``ledger atom add``,
``POST /v1/atoms`` and the MCP ``remember`` tool, on SQLite and PostgreSQL.

Each value: ``add`` adds and names the similar memories, ``rehearse`` rehearses the most
similar one and adds nothing, ``supersede`` adds the new one superseding it, ``refuse``
writes nothing (exit 2 / 409 problem+json / tool error naming the similar ids, the home's
files and the event rows unchanged). Never across subjects: another subject's identical
memory is not similar, and its id never reaches a caller who cannot see it. Hard
negatives ("Prefers coffee", "Worked at Acme until 2024") are not similar. The decision
and its effect are one signed command; a target that changed under it refuses all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult

from ledger.application import LedgerApp
from ledger.errors import ConflictError, NotFound
from ledger.home import Config
from server.backend import Backend
from server.mcp_server import build_mcp, fixed_caller
from service.caller import Caller
from service.memory_cases import SimilarMemoryExists
from service.models import AtomIn
from service.root import close_service, open_service

from .conftest import RawStore, run_cli
from .serving import home_digest, issue, serving

ALICE = Caller(credential_id="tok_alice", role="assistant", subjects=frozenset({"alice"}))
BOB = Caller(credential_id="tok_bob", role="assistant", subjects=frozenset({"bob"}))


def _add(home: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    r = run_cli("--home", str(home), "atom", "add", *args, "--json")
    return r.code, (json.loads(r.out) if r.code == 0 else {}), r.err


def _show(home: Path, atom: str) -> dict[str, Any]:
    r = run_cli("--home", str(home), "atom", "show", atom, "--json")
    assert r.code == 0, r.err
    out: dict[str, Any] = json.loads(r.out)
    return out


def _count(home: Path, subject: str) -> int:
    r = run_cli("--home", str(home), "memory", "list", "--subject", subject, "--json")
    assert r.code == 0, r.err
    return len(json.loads(r.out))


def _seed(home: Path) -> dict[str, str]:
    h = str(home)
    for ref in ("alice", "bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    ids = {}
    for key, subject, text in (("tea", "alice", "Prefers tea"),
                               ("acme", "alice", "Works at Acme"),
                               ("bob_tea", "bob", "Prefers tea")):
        code, out, err = _add(home, "--subject", subject, "--text", text)
        assert code == 0, err
        ids[key] = out["atom_id"]
    return ids


# ----------------------------------------------------------------------------- CLI
def test_cli_each_on_similar_value(home: Path) -> None:
    ids = _seed(home)
    # add: added, the similar memory named, never bob's identical one
    code, out, err = _add(home, "--subject", "alice", "--text", "The user prefers tea.",
                          "--on-similar", "add")
    assert code == 0, err
    assert out["outcome"] == "added" and out["supersedes"] is None
    assert [s["atom_id"] for s in out["similar"]] == [ids["tea"]]
    assert 0.0 < out["similar"][0]["score"] <= 1.0
    assert ids["tea"] in err and ids["bob_tea"] not in json.dumps(out) + err
    second = out["atom_id"]
    # hard negatives: related, not the same
    for text in ("Prefers coffee", "Worked at Acme until 2024", "Does not prefer tea"):
        code, out, err = _add(home, "--subject", "alice", "--text", text,
                              "--on-similar", "add")
        assert code == 0, err
        assert out["similar"] == [], (text, out)
    n = _count(home, "alice")
    # rehearse: no new atom; the most similar one is rehearsed
    code, out, err = _add(home, "--subject", "alice", "--text", "Prefers tea",
                          "--on-similar", "rehearse")
    assert code == 0, err
    assert out["outcome"] == "rehearsed" and out["atom_id"] in (ids["tea"], second)
    assert out["atom_id"] == out["similar"][0]["atom_id"]
    assert "no atom was added" in err
    assert _count(home, "alice") == n
    assert _show(home, out["atom_id"])["rehearsal_count"] == 1
    # supersede: the new atom supersedes the most similar one, whose history stays
    code, out, err = _add(home, "--subject", "alice", "--text", "prefers tea",
                          "--on-similar", "supersede")
    assert code == 0, err
    assert out["outcome"] == "superseded"
    old = out["supersedes"]
    assert old == out["similar"][0]["atom_id"] and old in (ids["tea"], second)
    shown = _show(home, old)
    assert shown["status"] == "superseded" and shown["superseded_by"] == out["atom_id"]
    assert shown["text"] in ("Prefers tea", "The user prefers tea.")
    assert _count(home, "alice") == n + 1
    assert _show(home, ids["bob_tea"])["status"] == "active"
    # a memory with nothing similar is added whatever on_similar says
    for mode in ("rehearse", "supersede", "refuse"):
        code, out, err = _add(home, "--subject", "alice", "--text", f"Keeps {mode} notes",
                              "--on-similar", mode)
        assert code == 0 and out["outcome"] == "added" and out["similar"] == [], err


def _state(home: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The home's files by digest, and the read models' rows. Every CLI command that
    opens the read models bumps the counter of the store's schema lock (``proj_lock``,
    projections/store.py) in projections.sqlite, a plain `memory list` too: so that file
    is compared by its rows, less that counter; every other file byte for byte."""
    import sqlite3

    files = home_digest(home)
    rows: dict[str, list[str]] = {}
    db = home / "projections.sqlite"
    if db.exists():
        files.pop("projections.sqlite")
        conn = sqlite3.connect(db)
        try:
            for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                     "AND name != 'proj_lock'"):
                rows[t] = sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"')))
        finally:
            conn.close()
    return files, rows


def test_cli_adds_and_names_the_similar_by_default(home: Path) -> None:
    """Without --on-similar, atom add looks, adds anyway and names what says the same."""
    ids = _seed(home)
    code, out, err = _add(home, "--subject", "alice", "--text", "Prefers tea")
    assert code == 0, err
    assert out["outcome"] == "added" and out["atom_id"] != ids["tea"]
    assert [s["atom_id"] for s in out["similar"]] == [ids["tea"]]
    assert f"say the same: {ids['tea']}" in err
    assert _count(home, "alice") == 3


def test_cli_on_similar_none_adds_without_looking(home: Path) -> None:
    """A quick add (ADR 0026): the read models are not opened, nothing is searched."""
    ids = _seed(home)
    read_models = home / "projections.sqlite"
    before = read_models.read_bytes() if read_models.exists() else None
    code, out, err = _add(home, "--subject", "alice", "--text", "Prefers tea",
                          "--on-similar", "none")
    assert code == 0, err
    assert out["outcome"] == "added" and out["similar"] == [] and out["atom_id"] != ids["tea"]
    if not Config.load(home).events.is_postgres:  # not opened: not a byte changed
        assert (read_models.read_bytes() if read_models.exists() else None) == before
    assert _count(home, "alice") == 3


def test_cli_refuse_writes_nothing(home: Path) -> None:
    ids = _seed(home)
    _count(home, "alice")  # the read models are current before the digest
    raw = RawStore(home)
    before, rows = _state(home), raw.rows()
    r = run_cli("--home", str(home), "atom", "add", "--subject", "alice", "--text",
                "Prefers tea", "--on-similar", "refuse")
    assert r.code == 2, r.err
    assert "error: the subject already has memories that say the same" in r.err
    assert ids["tea"] in r.err and ids["bob_tea"] not in r.err
    assert "nothing was written" in r.err and "hint:" in r.err
    r = run_cli("--home", str(home), "atom", "add", "--subject", "alice", "--text",
                "Prefers tea", "--on-similar", "merge")
    assert r.code == 2 and "on_similar must be one of add, rehearse, supersede, refuse" \
        in r.err, r.err
    r = run_cli("--home", str(home), "atom", "add", "--subject", "alice", "--text",
                "Prefers tea", "--on-similar", "add", "--artifact", "art_missing")
    assert r.code != 0 and "art_missing" in r.err, r.err
    assert _state(home) == before
    assert raw.rows() == rows


# ----------------------------------------------------------------------------- facade
def test_proposals_in_one_command_and_a_stale_target_refuses_all(home: Path) -> None:
    ids = _seed(home)
    svc = open_service(home)
    try:
        head = svc.app.reader.head_position()
        added = svc.remember_atoms(ALICE, [
            AtomIn(subject="alice", text="Prefers tea", on_similar="rehearse"),
            AtomIn(subject="alice", text="Works at Acme.", on_similar="supersede"),
            AtomIn(subject="alice", text="Has a dog named Rex")])
        assert [a.outcome for a in added] == ["rehearsed", "superseded", "added"]
        assert added[0].atom_id == ids["tea"] and added[1].supersedes == ids["acme"]
        # one signed command: the rehearsal, the supersession and both new atoms
        assert svc.app.reader.head_position() == head + 4
        # one refusal refuses every proposal
        head = svc.app.reader.head_position()
        with pytest.raises(SimilarMemoryExists) as e:
            svc.remember_atoms(ALICE, [
                AtomIn(subject="alice", text="Has a cat named Tom"),
                AtomIn(subject="alice", text="Has a dog named Rex", on_similar="refuse")])
        assert added[2].atom_id in str(e.value) and "(proposals 1)" in str(e.value)
        assert svc.app.reader.head_position() == head
        # bob's caller never sees alice's memory as similar, nor alice's id
        got = svc.remember_atoms(BOB, [AtomIn(subject="bob", text="Works at Acme")])
        assert got[0].similar == []
        # a target superseded after it was found similar: nothing is written
        cmd = {"subject": "alice", "text": "Prefers tea"}
        with pytest.raises(ConflictError, match="it changed since it was found similar"):
            svc.app.remember_atoms([cmd, {"subject": "alice", "text": "Likes rain"}],
                                   [("rehearse", ids["acme"]), ("add", None)])
        with pytest.raises(ConflictError, match="not of the proposal's subject"):
            svc.app.remember_atoms([{"subject": "bob", "text": "Prefers tea"}],
                                   [("supersede", ids["tea"])])
        assert svc.app.reader.head_position() == head + 1  # bob's add only
    finally:
        close_service(svc)


def test_grouped_adds_keep_working_with_on_similar(home: Path) -> None:
    """The server's group commit: plain adds go in one command and answer their similar
    memories; an add with another decision runs alone; one failing item fails alone."""
    ids = _seed(home)
    svc = open_service(home)
    try:
        results = svc.add_atoms_grouped([
            (ALICE, AtomIn(subject="alice", text="Prefers tea")),
            (ALICE, AtomIn(subject="alice", text="Prefers tea", on_similar="rehearse")),
            (BOB, AtomIn(subject="bob", text="Likes jazz")),
            (BOB, AtomIn(subject="alice", text="Prefers tea")),
            (ALICE, AtomIn(subject="alice", text="Prefers tea", on_similar="refuse"))])
        first, rehearsed, jazz, foreign, refused = results
        assert not isinstance(first, BaseException) and first.outcome == "added"
        assert [s.atom_id for s in first.similar] == [ids["tea"]]
        assert not isinstance(rehearsed, BaseException)
        assert rehearsed.outcome == "rehearsed" and rehearsed.atom_id == ids["tea"]
        assert not isinstance(jazz, BaseException) and jazz.similar == []
        assert isinstance(foreign, NotFound) and "no subject 'alice'" in str(foreign)
        assert isinstance(refused, SimilarMemoryExists)
    finally:
        close_service(svc)


# ----------------------------------------------------------------------------- MCP
def _tool_ok(r: CallToolResult) -> dict[str, Any]:
    assert not r.is_error, r.content
    assert r.structured_content is not None
    return dict(r.structured_content)


def test_mcp_remember_each_on_similar_value(home: Path) -> None:
    ids = _seed(home)
    raw = RawStore(home)

    async def run() -> None:
        backend = Backend(home)
        await anyio.to_thread.run_sync(backend.start)
        try:
            async with Client(build_mcp(backend, fixed_caller(ALICE))) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                desc = tools["remember"].description or ""
                assert "on_similar" in desc and "'rehearse'" in desc and "'supersede'" in desc
                schema = tools["remember"].input_schema["properties"]["on_similar"]
                assert schema["default"] == "add"
                out = _tool_ok(await c.call_tool("remember", {"subject": "alice",
                                                              "text": "Prefers tea"}))
                assert out["outcome"] == "added"
                assert [s["atom_id"] for s in out["similar"]] == [ids["tea"]]
                assert ids["bob_tea"] not in json.dumps(out)
                out = _tool_ok(await c.call_tool("remember", {
                    "subject": "alice", "text": "Prefers tea", "on_similar": "rehearse"}))
                assert out["outcome"] == "rehearsed"
                sup = _tool_ok(await c.call_tool("remember", {
                    "subject": "alice", "text": "Works at Acme.", "on_similar": "supersede",
                    "artifact": {"kind": "chat", "body": "I still work at Acme"}}))
                assert sup["outcome"] == "superseded" and sup["supersedes"] == ids["acme"]
                assert sup["artifact_id"] is not None
                reh = _tool_ok(await c.call_tool("remember", {
                    "subject": "alice", "text": "Works at Acme", "on_similar": "rehearse",
                    "artifact": {"kind": "chat", "body": "Acme again"}}))
                assert reh["outcome"] == "rehearsed" and reh["artifact_id"] is None
                await anyio.to_thread.run_sync(lambda: _count(home, "alice"))
                before, rows = home_digest(home), raw.rows()
                r = await c.call_tool("remember", {"subject": "alice", "text": "Prefers tea",
                                                   "on_similar": "refuse"})
                assert r.is_error
                block = r.content[0]
                assert block.type == "text"
                assert block.text.startswith("error: the subject already has memories")
                assert ids["tea"] in block.text and ids["bob_tea"] not in block.text
                assert home_digest(home) == before and raw.rows() == rows
        finally:
            await anyio.to_thread.run_sync(backend.close)

    anyio.run(run)


# ----------------------------------------------------------------------------- HTTP
@pytest.mark.slow
def test_http_each_on_similar_value(home: Path) -> None:
    ids = _seed(home)
    raw = RawStore(home)
    _, alice = issue(home, "assistant-a", "assistant", ["alice"])
    with serving(home) as server, server.client(alice) as c:
        r = c.post("/v1/atoms", json={"subject": "alice", "text": "The user prefers tea"})
        assert r.status_code == 201, r.text
        body = r.json()
        assert body["outcome"] == "added"
        assert [s["atom_id"] for s in body["similar"]] == [ids["tea"]]
        assert ids["bob_tea"] not in r.text
        r = c.post("/v1/atoms", json={"subject": "alice", "text": "Prefers tea",
                                      "on_similar": "rehearse"})
        assert r.status_code == 200, r.text
        assert r.json()["outcome"] == "rehearsed"
        r = c.post("/v1/atoms", json={"subject": "alice", "text": "Works at Acme.",
                                      "on_similar": "supersede"})
        assert r.status_code == 201 and r.json()["supersedes"] == ids["acme"], r.text
        assert c.get(f"/v1/atoms/{ids['acme']}").json()["status"] == "superseded"
        r = c.post("/v1/atoms", json={"subject": "alice", "text": "x",
                                      "on_similar": "merge"})
        assert r.status_code == 422
        c.get("/v1/memories", params={"subject": "alice"})  # read models current
        before, rows = home_digest(home), raw.rows()
        r = c.post("/v1/atoms", json={"subject": "alice", "text": "Prefers tea",
                                      "on_similar": "refuse"})
        assert r.status_code == 409, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        problem = r.json()
        assert problem["type"].endswith("/similar-memory")
        similar = {s["atom_id"] for s in problem["similar"]}
        assert ids["tea"] in similar and ids["bob_tea"] not in r.text
        assert all(s in problem["detail"] for s in similar)
        assert home_digest(home) == before and raw.rows() == rows
        # bulk adds still work (the batch adds every item)
        r = c.post("/v1/atoms/batch", json=[{"subject": "alice", "text": "Likes jazz"},
                                            {"subject": "alice", "text": "Likes jazz"}])
        assert r.status_code == 201 and len(r.json()["atom_ids"]) == 2, r.text
        r = c.post("/v1/atoms/batch", json=[{"subject": "alice", "text": "Likes jazz",
                                             "on_similar": "refuse"}])
        assert r.status_code == 400 and "one atom at a time" in r.text


# ----------------------------------------------------------------------------- benchmark
def test_dedup_benchmark_measures_the_rule() -> None:
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import dedup_quality
    finally:
        sys.path.pop(0)
    result = dedup_quality.measure("hashing")
    assert result["threshold"] == 0.5
    assert result["pairs"]["duplicate"] > 100 and result["pairs"]["related"] > 100
    assert result["precision"] >= 0.9 and result["recall"] >= 0.5
    assert result["held_out"]["precision"] >= 0.9
    assert [row["threshold"] for row in result["sweep"]] == list(dedup_quality.SWEEP)
    # the keyword check is what keeps the hard negatives out
    at = next(row for row in result["sweep"] if row["threshold"] == 0.5)
    assert at["precision"] > at["cosine_only"]["precision"]


def test_similar_is_scoped_to_the_subject_in_the_read_models(home: Path) -> None:
    _seed(home)
    app = LedgerApp(Config.load(home))
    try:
        from projections.service import Projections
        from projections.similar import find_similar

        with Projections(app) as proj:
            proj.catch_up()
            alice = str(app.reader.resolve_subject("alice"))
            bob = str(app.reader.resolve_subject("bob"))
            a, = find_similar(proj, alice, ["Prefers tea"])
            b, = find_similar(proj, bob, ["Prefers tea"])
            assert len(a) == 1 and len(b) == 1 and a[0].atom_id != b[0].atom_id
            assert find_similar(proj, bob, ["Works at Acme"]) == [[]]
    finally:
        app.close()
