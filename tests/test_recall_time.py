"""Issue 28 (ADR 0051): time-aware recall. An imported memory is ranked and filtered by
when it was true or said (its valid_from, else the source's own created_at), not by the
import's time; ``since``/``until`` filter by that time through the CLI, the facade, the
HTTP API and the MCP tool; refused windows change nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from ledger.application import LedgerApp
from ledger.errors import InputError
from ledger.home import Config
from projections.service import Projections
from server.backend import Backend
from server.mcp_server import build_mcp, fixed_caller
from service.caller import Caller

from .conftest import run_cli
from .serving import home_digest, issue, serving

DOC: dict[str, Any] = {
    "export_version": "0.1.0", "exported_at": "2026-03-01T00:00:00Z",
    "source_provider": "konshus", "subject": {"subject_id": "u1"}, "artifacts": [],
    "atoms": [
        {"atom_id": "summer", "kind": "fact", "sensitivity": "public",
         "text": "Went sailing on Lake Garda with her sister",
         "created_at": "2025-07-15T10:00:00Z", "provenance": {"derivation": "stated"}},
        {"atom_id": "winter", "kind": "fact", "sensitivity": "public",
         "text": "Went skiing in the Dolomites with her sister",
         "created_at": "2026-01-10T09:00:00Z", "provenance": {"derivation": "stated"}},
        {"atom_id": "lessons", "kind": "fact", "sensitivity": "public",
         "text": "Took sailing lessons at the harbour with her sister",
         "valid_from": "2025-08-02T00:00:00Z", "created_at": "2026-02-01T00:00:00Z",
         "provenance": {"derivation": "stated"}},
    ],
}
QUERY = "sailing skiing sister"
SUMMER = ("--since", "2025-06-01", "--until", "2025-08-31")


def _cli(home: Path, *args: str, code: int = 0) -> Any:
    r = run_cli("--home", str(home), *args)
    assert r.code == code, r.err
    return r


@pytest.fixture
def imported(home: Path, tmp_path: Path) -> dict[str, str]:
    """The document imported, and one memory recorded now; atom ids by name."""
    src = tmp_path / "u1.konshus.json"
    src.write_text(json.dumps(DOC))
    _cli(home, "import", str(src), "--format", "konshus")
    _cli(home, "atom", "add", "--subject", "u1", "--ref", "plans",
         "--text", "Plans to go sailing with her sister again")
    app = LedgerApp(Config.load(home))
    try:
        ids = {name: str(app.reader.get_atom(f"u1:{name}").id)
               for name in ("summer", "winter", "lessons")}
        ids["plans"] = str(app.reader.get_atom("plans").id)
    finally:
        app.close()
    # the read models catch up once, so that refused requests below can change nothing
    _cli(home, "recall", QUERY, "--subject", "u1", "--no-rehearse")
    return ids


def _state(home: Path) -> tuple[dict[str, str], list[str], int]:
    """The home's files, the projections' rows (SQLite: each CLI run counts its opening
    in ``proj_lock``, left out) and the log's head: what a refused recall must not
    change (no rehearsal event, no read model write)."""
    files = home_digest(home)
    rows: list[str] = []
    db = home / "projections.sqlite"
    if db.exists():
        files.pop("projections.sqlite")
        conn = sqlite3.connect(db)
        try:
            rows = [r for r in conn.iterdump() if "proj_lock" not in r]
        finally:
            conn.close()
    app = LedgerApp(Config.load(home))
    try:
        head = app.reader.head_position()
    finally:
        app.close()
    return files, rows, head


def _recall(home: Path, *args: str) -> dict[str, Any]:
    r = _cli(home, "recall", QUERY, "--subject", "u1", "-k", "10", "--no-rehearse",
             "--json", *args)
    data: dict[str, Any] = json.loads(r.out)
    return data


def test_imported_memories_rank_by_when_they_were_said(home: Path,
                                                       imported: dict[str, str]) -> None:
    data = _recall(home)
    said = {i["atom_id"]: i["said_at"] for i in data["items"]}
    assert said[imported["summer"]] == "2025-07-15T10:00:00.000000Z"  # the source's time
    assert said[imported["winter"]] == "2026-01-10T09:00:00.000000Z"
    assert said[imported["lessons"]] == "2025-08-02T00:00:00.000000Z"  # its valid_from
    recency = {i["atom_id"]: i["recency"] for i in data["items"]}
    markers = {i["atom_id"]: i["marker"] for i in data["items"]}
    # recorded now: recent; imported months after it was said: not recent at all
    assert recency[imported["plans"]] > 0.99 and "recent" in markers[imported["plans"]]
    for name in ("summer", "winter", "lessons"):
        assert recency[imported[name]] < 1e-6 and "recent" not in markers[imported[name]]


def test_since_and_until_filter_by_that_time(home: Path, imported: dict[str, str]) -> None:
    data = _recall(home, *SUMMER)
    assert sorted(i["atom_id"] for i in data["items"]) == sorted(
        [imported["summer"], imported["lessons"]])
    assert sorted(data["omitted"], key=lambda o: o["atom_id"]) == sorted(
        [{"atom_id": imported[n], "reason": "outside-since-until"}
         for n in ("winter", "plans")], key=lambda o: o["atom_id"])
    assert data["omitted_counts"] == {"outside-since-until": 2}
    # a date alone as until takes its whole day; an instant is taken as it is
    day = _recall(home, "--until", "2025-07-15")
    assert [i["atom_id"] for i in day["items"]] == [imported["summer"]]
    assert _recall(home, "--until", "2025-07-15T09:59:59Z")["items"] == []
    assert [i["atom_id"] for i in _recall(home, "--since", "2026-01-10T09:00:00Z",
                                          "--until", "2026-01-10T09:00:00Z")["items"]] == \
        [imported["winter"]]
    # the same through the facade's read models
    app = LedgerApp(Config.load(home))
    try:
        with Projections(app) as p:
            got = p.recall(QUERY, "u1", k=10, since="2025-06-01", until="2025-08-31")
            assert sorted(got.atom_ids) == sorted(i["atom_id"] for i in data["items"])
            with pytest.raises(InputError, match="after until"):
                p.recall(QUERY, "u1", since="2025-09-01", until="2025-08-31")
    finally:
        app.close()


def test_refused_windows_change_nothing(home: Path, imported: dict[str, str]) -> None:
    before = _state(home)
    r = _cli(home, "recall", QUERY, "--subject", "u1", "--since", "last summer", code=2)
    assert "since 'last summer' is not an ISO 8601 date or time" in r.err
    assert "2025-07-01" in r.err  # the hint: a form that works
    r = _cli(home, "recall", QUERY, "--subject", "u1", "--since", "2025-09-01",
             "--until", "2025-08-31", code=2)
    assert "since (2025-09-01T00:00:00.000000Z) is after until" in r.err
    assert _state(home) == before


@pytest.mark.slow
def test_http_api_takes_since_and_until(home: Path, imported: dict[str, str]) -> None:
    cli = _recall(home, *SUMMER)
    _, token = issue(home, "asst", "assistant", ["u1"])
    with serving(home) as server, server.client(token) as c:
        body = {"subject": "u1", "query": QUERY, "k": 10, "rehearse": False,
                "since": "2025-06-01", "until": "2025-08-31"}
        r = c.post("/v1/recall", json=body)
        assert r.status_code == 200, r.text
        got = r.json()
        assert [i["atom_id"] for i in got["items"]] == [i["atom_id"] for i in cli["items"]]
        assert got["omitted"] == cli["omitted"]
        assert got["omitted_counts"] == {"outside-since-until": 2}
        assert "Dolomites" not in r.text  # an omitted memory's text is never shown
        before = home_digest(home)
        bad = c.post("/v1/recall", json={**body, "since": "last summer"})
        assert bad.status_code == 400, bad.text
        assert "is not an ISO 8601 date or time" in bad.json()["detail"]
        assert c.post("/v1/recall", json={**body, "since": "2025-09-01"}).status_code == 400
        assert home_digest(home) == before


def test_mcp_recall_takes_since_and_until(home: Path, imported: dict[str, str]) -> None:
    cli = _recall(home, *SUMMER)
    caller = Caller(credential_id="tok_u1", role="assistant", subjects=frozenset({"u1"}))

    async def main() -> None:
        backend = Backend(home)
        await anyio.to_thread.run_sync(backend.start)
        try:
            async with Client(build_mcp(backend, fixed_caller(caller))) as c:
                args = {"subject": "u1", "query": QUERY, "k": 10, "rehearse": False,
                        "since": "2025-06-01", "until": "2025-08-31"}
                r = await c.call_tool("recall", args)
                assert not r.is_error and r.structured_content is not None
                got = r.structured_content
                assert [i["atom_id"] for i in got["items"]] == \
                    [i["atom_id"] for i in cli["items"]]
                assert got["omitted"] == cli["omitted"]
                before = home_digest(home)
                bad = await c.call_tool("recall", {**args, "until": "someday"})
                assert bad.is_error
                assert home_digest(home) == before
        finally:
            await anyio.to_thread.run_sync(backend.close)

    anyio.run(main)
