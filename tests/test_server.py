"""`ledger serve` driven over HTTP by a real client: every endpoint, results equal to the
CLI's for the same ledger, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import signal
import zipfile
from pathlib import Path

import httpx
import pytest

from .conftest import run_cli
from .serving import issue, serving

OPENAPI = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def _cli_json(home: Path, *args: str) -> object:
    r = run_cli("--home", str(home), *args, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_every_endpoint_answers_like_the_cli(home: Path, tmp_path: Path) -> None:
    h = str(home)
    assert run_cli("--home", h, "subject", "add", "user_9f4e", "--name", "J. Miller").code == 0
    op_id, op = issue(home, "operator-1", "operator")
    _, aud = issue(home, "auditor-1", "auditor")
    _, asst = issue(home, "assistant-1", "assistant", ["user_9f4e", "user_7a1c"])
    with serving(home) as server, server.client(asst) as c, server.client(op) as o, \
            server.client(aud) as a:
        # subjects
        r = c.post("/v1/subjects", json={"ref": "user_7a1c", "display_name": "K. Ito"})
        assert r.status_code == 201, r.text
        assert r.json()["ref"] == "user_7a1c"
        assert c.get("/v1/subjects/user_7a1c").json() == r.json()
        assert c.get("/v1/subjects/user_9f4e").json() == _cli_json(home, "subject", "show",
                                                                  "user_9f4e")
        # artifacts
        r = c.post("/v1/artifacts", json={"subject": "user_9f4e", "kind": "chat",
                                          "ref": "art_101", "body": "Board prep: blunt notes"})
        assert r.status_code == 201, r.text
        art = r.json()
        cli_art = _cli_json(home, "artifact", "show", "art_101")
        assert isinstance(cli_art, dict)
        assert {k: art[k] for k in cli_art} == cli_art
        # atoms: one, a batch, show, history, correct, rehearse
        r = c.post("/v1/atoms", json={"subject": "user_9f4e", "ref": "atom_001",
                                      "text": "Prefers direct feedback",
                                      "derivation": "inferred", "artifact_ids": ["art_101"],
                                      "extractor": "claude-opus-4"})
        assert r.status_code == 201, r.text
        atom_id = r.json()["atom_id"]
        r = c.post("/v1/atoms/batch", json=[
            {"subject": "user_7a1c", "text": "Prefers aisle seats on long flights"},
            {"subject": "user_7a1c", "text": "Drinks green tea in the morning"}])
        assert r.status_code == 201 and len(r.json()["atom_ids"]) == 2
        shown = c.get("/v1/atoms/atom_001").json()
        cli_atom = _cli_json(home, "atom", "show", "atom_001")
        assert isinstance(cli_atom, dict)
        assert {k: shown[k] for k in cli_atom} == cli_atom
        assert c.get(f"/v1/atoms/{atom_id}/history").json() == \
            _cli_json(home, "atom", "history", "atom_001")
        r = c.post("/v1/atoms/atom_001/corrections",
                   json={"text": "Prefers direct feedback, in writing", "reason": "asked"})
        assert r.status_code == 201, r.text
        new_id = r.json()["new_atom_id"]
        r = c.post("/v1/rehearsals", json={"atom_ids": [new_id], "session_id": "s-1"})
        assert r.status_code == 201 and len(r.json()["event_ids"]) == 1
        # recall, memories, state
        r = c.post("/v1/recall", json={"subject": "user_9f4e", "query": "feedback style",
                                       "k": 3, "rehearse": False})
        assert r.status_code == 200, r.text
        cli_recall = _cli_json(home, "recall", "feedback style", "--subject", "user_9f4e",
                               "-k", "3", "--no-rehearse")
        assert isinstance(cli_recall, list)
        got = r.json()
        assert [i["atom_id"] for i in got["items"]] == [i["atom_id"] for i in cli_recall]
        assert [i["text"] for i in got["items"]] == [i["text"] for i in cli_recall]
        assert "Prefers direct feedback, in writing" in got["prompt"]
        listed = c.get("/v1/memories", params={"subject": "user_9f4e"}).json()
        cli_list = _cli_json(home, "memory", "list", "--subject", "user_9f4e")
        assert isinstance(cli_list, list)
        assert sorted(m["atom_id"] for m in listed) == sorted(m["atom_id"] for m in cli_list)
        assert "link" not in c.get("/v1/memories", params={"subject": "user_9f4e"}).headers
        # a listing comes in bounded pages: the Link header (rel=next) names the next one
        paged, url = [], "/v1/memories?subject=user_9f4e&limit=1"
        while url:
            r = c.get(url)
            assert r.status_code == 200 and len(r.json()) == 1, r.text
            paged += r.json()
            link = r.headers.get("link")
            url = link.split(">")[0].lstrip("<") if link else ""
            assert not link or link.endswith('; rel="next"')
        def steady(rows: list[dict[str, object]]) -> list[dict[str, object]]:
            return [{k: v for k, v in r.items() if k != "salience_now"} for r in rows]

        # (salience decays between the two listings: 0.7 then 0.699999)
        assert len(listed) == 2 and steady(paged) == steady(listed)
        r = c.get("/v1/memories", params={"subject": "user_9f4e", "after": "atom_none"})
        assert r.status_code == 400 and "after:" in r.json()["detail"], r.text
        assert c.get("/v1/memories", params={"subject": "user_9f4e",
                                             "limit": 1001}).status_code == 422
        inspected = c.get(f"/v1/memories/{new_id}").json()
        assert inspected["atom_id"] == new_id and inspected["rehearsal_count"] == 1
        state = c.get("/v1/subjects/user_9f4e/state").json()
        assert [x["atom_id"] for x in state["valid"]] == [new_id]
        # export in all three formats; import back into the server (dry run and for real)
        konshus = c.get("/v1/subjects/user_7a1c/export", params={"format": "konshus"})
        assert konshus.status_code == 200
        assert konshus.headers["content-type"].startswith("application/json")
        cli_out = tmp_path / "k.json"
        run_cli("--home", h, "export", "--format", "konshus", "--subject", "user_7a1c",
                "--out", str(cli_out))
        doc, cli_doc = konshus.json(), json.loads(cli_out.read_text())
        for d in (doc, cli_doc):  # the export's own time differs between two runs
            d.pop("exported_at", None)
        assert doc == cli_doc
        persona = c.get("/v1/subjects/user_7a1c/export", params={"format": "persona"})
        assert persona.status_code == 200 and persona.json()
        mem = c.get("/v1/subjects/user_7a1c/export", params={"format": "mem"})
        assert mem.headers["content-type"] == "application/zip"
        names = zipfile.ZipFile(io.BytesIO(mem.content)).namelist()
        assert "manifest.json" in names
        r = c.post("/v1/imports", params={"format": "konshus", "subject": "user_7a1c",
                                          "dry_run": "true"}, content=konshus.content,
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        cli_dry = _cli_json(home, "import", str(cli_out), "--format", "konshus", "--subject",
                            "user_7a1c", "--dry-run")
        assert isinstance(cli_dry, dict)
        assert {k: r.json()[k] for k in ("created", "skipped", "refused")} == \
            {k: cli_dry[k] for k in ("created", "skipped", "refused")}
        r = c.post("/v1/imports", params={"format": "mem", "subject": "user_7a1c"},
                   content=mem.content, headers={"Content-Type": "application/zip"})
        assert r.status_code == 200, r.text
        # erasure: file (assistant), plan and execute (operator), pack (operator)
        r = c.post("/v1/requests", json={"subject": "user_7a1c", "reason": "GDPR Art. 17",
                                         "legal_basis": "GDPR Art. 17(1)(a)"})
        assert r.status_code == 201, r.text
        rid = r.json()["request_id"]
        assert r.json()["status"] == "open"
        assert c.get(f"/v1/requests/{rid}").json()["request_id"] == rid
        assert [x["request_id"] for x in o.get("/v1/requests").json()] == \
            [x["request_id"] for x in _cli_json(home, "requests", "list")]  # type: ignore
        plan = a.get(f"/v1/requests/{rid}/plan").json()
        theirs = c.get("/v1/memories", params={"subject": "user_7a1c"}).json()
        assert sorted(plan["targets"]["atoms"]) == sorted(m["atom_id"] for m in theirs)
        r = o.post(f"/v1/requests/{rid}/execute", json={"plan_digest": "sha256:" + "0" * 64})
        assert r.status_code == 409 and "nothing was written" in r.json()["detail"]
        r = o.post(f"/v1/requests/{rid}/execute", json={"plan_digest": plan["plan_digest"]})
        assert r.status_code == 200, r.text
        batch = r.json()["batch_id"]
        assert c.get(f"/v1/requests/{rid}").json()["status"] == "completed"
        assert c.get("/v1/atoms", params={}).status_code in (404, 405)
        # the signed request and approval record which credential acted, never its secret
        from ledger import envelope

        from .conftest import RawStore

        rows = RawStore(home).rows()
        approved = [envelope.open_state(r[4]).envelope["payload"] for r in rows
                    if r[3] == "memory-ledger:batch.approved.v1"]
        assert approved[-1]["credential"] == op_id
        received = [envelope.open_state(r[4]).envelope["payload"] for r in rows
                    if r[3] == "memory-ledger:request.received.v1"]
        assert received[-1]["credential"].startswith("tok_")
        assert not any(op.encode() in r[4] or asst.encode() in r[4] for r in rows)
        pack = o.post(f"/v1/batches/{batch}/evidence-pack")
        assert pack.status_code == 200 and pack.headers["content-type"] == "application/zip"
        (tmp_path / "pack.zip").write_bytes(pack.content)
        v = run_cli("verify-pack", str(tmp_path / "pack.zip"), "--root-key",
                    str(home / "keys" / "root.pub"))
        assert v.code == 0, v.err
        # deletion and redaction of single atoms, artifact deletion
        # the reason goes in the body, never in the URL (ADR 0043)
        r = c.post(f"/v1/atoms/{new_id}/deletions", json={"reason": "asked to forget"})
        assert r.status_code == 200, r.text
        assert r.json()["tombstone_ids"] and r.json()["batch_id"]
        assert c.get(f"/v1/atoms/{new_id}").json()["content_erased"] is True
        r = c.post("/v1/atoms", json={"subject": "user_9f4e", "text": "Reads on the train"})
        extra = r.json()["atom_id"]
        r = o.post(f"/v1/atoms/{extra}/redactions", json={"mode": "soft", "reason": "review"})
        assert r.status_code == 200 and r.json()["mode"] == "soft"
        assert c.post(f"/v1/atoms/{extra}/deletions", json={}).status_code == 422
        r = c.post("/v1/artifacts/art_101/deletions", json={"reason": "user removed the chat"})
        assert r.status_code == 200, r.text
        assert set(r.json()["cascade"]) >= {"deleted_atoms", "kept_atoms"}
        # the deprecated form, reason in the query string, still works
        r = c.delete(f"/v1/atoms/{extra}", params={"reason": "asked to forget"})
        assert r.status_code == 200, r.text
        assert c.get(f"/v1/atoms/{extra}").json()["content_erased"] is True
        # integrity
        note = c.get("/v1/checkpoint")
        assert note.headers["content-type"].startswith("text/plain")
        assert note.text.splitlines()[0].startswith("memory-ledger/")
        ver = a.get("/v1/verification").json()
        assert ver["ok"] is True
        keys = a.get("/v1/keys").json()
        assert {k["kid"] for k in keys} == {k["kid"] for k in _cli_json(home, "keys", "list")}  # type: ignore
        assert server.stop()
    assert run_cli("--home", h, "verify").code == 0


def test_openapi_document_is_committed_and_current(home: Path) -> None:
    _, _tok = issue(home, "a", "assistant", ["x"])
    with serving(home) as server:
        served = httpx.get(f"{server.url}/v1/openapi.json", timeout=30).json()
    assert OPENAPI.exists(), "run: python -m server.openapi > docs/openapi.json"
    assert json.loads(OPENAPI.read_text()) == served, \
        "docs/openapi.json is stale: python -m server.openapi > docs/openapi.json"
    assert served["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path in ("/v1/atoms/{atom}", "/v1/artifacts/{artifact}"):  # reason in the URL
        assert served["paths"][path]["delete"]["deprecated"] is True
        assert "deprecated" not in served["paths"][f"{path}/deletions"]["post"]


def test_server_refuses_to_start_without_a_credential(home: Path) -> None:
    from .serving import home_digest

    before = home_digest(home)
    r = run_cli("--home", str(home), "serve", "--port", "1")
    assert r.code == 3
    assert "refuses to start without one" in r.err and "ledger tokens create" in r.err
    assert home_digest(home) == before


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_several_workers_serve_one_ledger_and_say_what_the_console_needs(home: Path) -> None:
    """`ledger serve --workers 2`: uvicorn's processes each build the app from the factory;
    concurrent adds from several connections are all in the log once, and the start says
    that console sign-ins need sticky routing (ADR 0032)."""
    import threading

    run_cli("--home", str(home), "subject", "add", "u1")
    _, tok = issue(home, "a", "assistant", ["u1"])
    acked: list[str] = []
    with serving(home, "--workers", "2") as server:
        def client(n: int) -> None:
            with server.client(tok) as c:
                for i in range(10):
                    r = c.post("/v1/atoms", json={"subject": "u1", "text": f"fact {n}-{i}"})
                    assert r.status_code == 201, r.text
                    acked.append(r.json()["atom_id"])
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert "note: with --workers 2, a console sign-in lives in the process" in \
            server.output()
    assert len(set(acked)) == 80
    listed = _cli_json(home, "memory", "list", "--subject", "u1")
    assert isinstance(listed, list) and len(listed) == 80
    assert run_cli("--home", str(home), "verify").code == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sigterm_lets_requests_in_flight_finish(home: Path) -> None:
    """Graceful shutdown: adds in flight when SIGTERM arrives are answered and in the log;
    none is half-written."""
    import threading

    run_cli("--home", str(home), "subject", "add", "u1")
    _, tok = issue(home, "a", "assistant", ["u1"])
    acked: list[str] = []
    errors: list[str] = []
    with serving(home) as server:
        def client(n: int) -> None:
            with server.client(tok) as c:
                for i in range(40):
                    try:
                        r = c.post("/v1/atoms", json={"subject": "u1", "text": f"memory {n}-{i}"})
                    except httpx.HTTPError:
                        return
                    if r.status_code == 201:
                        acked.append(r.json()["atom_id"])
                    else:
                        errors.append(str(r.status_code))
        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        import time

        while len(acked) < 20:
            time.sleep(0.01)
        assert server.stop(signal.SIGTERM)
        for t in threads:
            t.join()
    assert not [e for e in errors if e not in ("503",)], errors
    listed = _cli_json(home, "memory", "list", "--subject", "u1")
    assert isinstance(listed, list)
    logged = {m["atom_id"] for m in listed}
    assert set(acked) <= logged, "an acknowledged add is missing from the log"
    assert run_cli("--home", str(home), "verify").code == 0
