"""`ledger serve` driven over HTTP by real clients (httpx, and the typed client of ADR 0057
for the memory and erasure flows): every endpoint, results equal to the CLI's for the same
ledger, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import signal
import zipfile
from pathlib import Path

import httpx
import pytest

from memory_ledger_client import Client, Conflict, InvalidRequest
from service.models import AtomIn

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
    with serving(home) as server, server.client(asst) as c, \
            Client(server.url, token=asst) as cc, Client(server.url, token=op) as oc, \
            Client(server.url, token=aud) as ac:
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
        # atoms: one, a batch, show, history, correct, rehearse (the typed client)
        added = cc.add_atom(AtomIn(subject="user_9f4e", ref="atom_001",
                                   text="Prefers direct feedback", derivation="inferred",
                                   artifact_ids=["art_101"], extractor="claude-opus-4"))
        atom_id = added.atom_id
        batch_added = cc.add_atoms([
            AtomIn(subject="user_7a1c", text="Prefers aisle seats on long flights"),
            AtomIn(subject="user_7a1c", text="Drinks green tea in the morning")])
        assert len(batch_added.atom_ids) == 2
        shown = cc.get_atom("atom_001").model_dump(mode="json")
        cli_atom = _cli_json(home, "atom", "show", "atom_001")
        assert isinstance(cli_atom, dict)
        assert {k: shown[k] for k in cli_atom} == cli_atom
        assert [e.model_dump(mode="json") for e in cc.history(atom_id)] == \
            _cli_json(home, "atom", "history", "atom_001")
        new_id = cc.correct_atom("atom_001", text="Prefers direct feedback, in writing",
                                 reason="asked").new_atom_id
        assert len(cc.rehearse([new_id], session_id="s-1").event_ids) == 1
        # recall, memories, state
        got = cc.recall("feedback style", subject="user_9f4e", k=3, rehearse=False)
        cli_recall = _cli_json(home, "recall", "feedback style", "--subject", "user_9f4e",
                               "-k", "3", "--no-rehearse")
        if isinstance(cli_recall, dict):  # recall --json prints an object with its items
            cli_recall = cli_recall["items"]
        assert isinstance(cli_recall, list)
        assert [i.atom_id for i in got.items] == [i["atom_id"] for i in cli_recall]
        assert [i.text for i in got.items] == [i["text"] for i in cli_recall]
        assert "Prefers direct feedback, in writing" in got.prompt
        listed = [m.model_dump(mode="json") for m in cc.memories("user_9f4e")]
        cli_list = _cli_json(home, "memory", "list", "--subject", "user_9f4e")
        assert isinstance(cli_list, list)
        assert sorted(m["atom_id"] for m in listed) == sorted(m["atom_id"] for m in cli_list)
        assert "link" not in c.get("/v1/memories", params={"subject": "user_9f4e"}).headers
        # a listing comes in bounded pages: the Link header (rel=next) names the next one
        r = c.get("/v1/memories", params={"subject": "user_9f4e", "limit": 1})
        assert len(r.json()) == 1 and r.headers["link"].endswith('; rel="next"'), r.text
        paged = [m.model_dump(mode="json") for m in cc.memories("user_9f4e", page_size=1)]

        def steady(rows: list[dict[str, object]]) -> list[dict[str, object]]:
            return [{k: v for k, v in r.items() if k != "salience_now"} for r in rows]

        # (salience decays between the two listings: 0.7 then 0.699999)
        assert len(listed) == 2 and steady(paged) == steady(listed)
        r = c.get("/v1/memories", params={"subject": "user_9f4e", "after": "atom_none"})
        assert r.status_code == 400 and "after:" in r.json()["detail"], r.text
        with pytest.raises(InvalidRequest):
            list(cc.memories("user_9f4e", page_size=1001))
        inspected = cc.inspect_memory(new_id)
        assert inspected["atom_id"] == new_id and inspected["rehearsal_count"] == 1
        state = cc.state("user_9f4e")
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
        filed = cc.file_request("user_7a1c", "GDPR Art. 17", legal_basis="GDPR Art. 17(1)(a)")
        rid = filed.request_id
        assert filed.status == "open"
        assert cc.request_status(rid).request_id == rid
        assert [x.request_id for x in oc.requests()] == \
            [x["request_id"] for x in _cli_json(home, "requests", "list")]  # type: ignore
        plan = ac.plan(rid)
        theirs = list(cc.memories("user_7a1c"))
        assert sorted(plan.targets["atoms"]) == sorted(m.atom_id for m in theirs)
        with pytest.raises(Conflict) as stale:
            oc.execute(rid, "sha256:" + "0" * 64)
        assert stale.value.status == 409 and "nothing was written" in stale.value.detail
        batch = oc.execute(rid, plan.plan_digest).batch_id
        assert batch is not None
        assert cc.request_status(rid).status == "completed"
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
        (tmp_path / "pack.zip").write_bytes(oc.evidence_pack(batch))
        v = run_cli("verify-pack", str(tmp_path / "pack.zip"), "--root-key",
                    str(home / "keys" / "root.pub"))
        assert v.code == 0, v.err
        # deletion and redaction of single atoms, artifact deletion
        # the reason goes in the body, never in the URL (ADR 0043)
        gone = cc.delete_atom(new_id, "asked to forget")
        assert gone.tombstone_ids and gone.batch_id
        assert cc.get_atom(new_id).content_erased is True
        extra = cc.remember("Reads on the train", subject="user_9f4e").atom_id
        assert oc.redact_atom(extra, "soft", "review").model_dump()["mode"] == "soft"
        assert c.post(f"/v1/atoms/{extra}/deletions", json={}).status_code == 422
        cascade = cc.delete_artifact("art_101", "user removed the chat")
        assert set(cascade.model_dump()["cascade"]) >= {"deleted_atoms", "kept_atoms"}
        # the deprecated form, reason in the query string, still works
        r = c.delete(f"/v1/atoms/{extra}", params={"reason": "asked to forget"})
        assert r.status_code == 200, r.text
        assert cc.get_atom(extra).content_erased is True
        # integrity
        note = c.get("/v1/checkpoint")
        assert note.headers["content-type"].startswith("text/plain")
        assert cc.checkpoint().splitlines()[0].startswith("memory-ledger/")
        assert ac.verification().ok is True
        keys = ac.keys()
        assert {k.kid for k in keys} == {k["kid"] for k in _cli_json(home, "keys", "list")}  # type: ignore
        assert server.stop()
    assert run_cli("--home", h, "verify").code == 0


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # a document of the routes
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


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # refused before any store
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
