"""The MCP server (server/mcp_server.py) driven by the `mcp` SDK's own client: in process,
over stdio (`ledger mcp` as a subprocess) and over streamable HTTP (`ledger serve` at
/mcp). Every tool and resource; results equal to the facade's and the CLI's for the same
ledger; a credential for one subject sees nothing of another (not found, the home's files
unchanged); a missing or bad credential is refused. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import LATEST_PROTOCOL_VERSION, CallToolResult

from ledger import clock
from server.backend import Backend
from server.mcp_server import SourceIn, build_mcp, fixed_caller
from service.caller import Caller
from service.models import AtomCorrectionIn, AtomIn, ErasureRequestIn, RecallIn

from .conftest import run_cli
from .serving import LEDGER, Server, home_digest, issue, revoke, serving

NOW = "2030-01-02T03:04:05Z"  # one clock for the server and the CLI: equal scores
TOOLS = {  # name: (readOnly, destructive, idempotent)
    "remember": (False, False, False),
    "recall": (False, False, False),  # records signed rehearsal events
    "list_memories": (True, False, True),
    "get_memory": (True, False, True),
    "correct_memory": (False, False, False),
    "forget_memory": (False, True, True),
    "export_memories": (True, False, True),
    "file_erasure_request": (False, False, False),
    "extract_memories": (False, False, False),  # asks the client's model (ADR 0053)
}
ALICE = Caller(credential_id="tok_alice", role="assistant", subjects=frozenset({"alice"}))


def _cli_json(home: Path, *args: str) -> Any:
    r = run_cli("--home", str(home), *args, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def _seed(home: Path) -> None:
    h = str(home)
    for ref in ("alice", "bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    r = run_cli("--home", h, "atom", "add", "--subject", "bob", "--ref", "bob_1",
                "--text", "Keeps bees on the roof")
    assert r.code == 0, r.err


def _leaves(group: BaseException) -> list[BaseException]:
    if isinstance(group, BaseExceptionGroup):
        return [leaf for e in group.exceptions for leaf in _leaves(e)]
    return [group]


def _ok(r: CallToolResult) -> dict[str, Any]:
    assert not r.is_error, r.content
    assert r.structured_content is not None
    data: dict[str, Any] = r.structured_content
    return data


def _text(r: CallToolResult) -> str:
    block = r.content[0]
    assert block.type == "text"
    return block.text


def _refused(r: CallToolResult, *words: str) -> str:
    assert r.is_error, r.structured_content
    text = _text(r)
    assert text.startswith("error: "), text
    assert "Traceback" not in text
    for w in words:
        assert w in text, text
    return text


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", NOW)


@asynccontextmanager
async def in_process(home: Path, caller: Caller) -> AsyncIterator[Client]:
    backend = Backend(home)
    await anyio.to_thread.run_sync(backend.start)
    try:
        async with Client(build_mcp(backend, fixed_caller(caller))) as client:
            yield client
    finally:
        await anyio.to_thread.run_sync(backend.close)


async def _walk_every_tool(c: Client, home: Path, tmp_path: Path) -> dict[str, Any]:
    """Every tool and resource once, each result checked against the CLI's."""
    seen: dict[str, Any] = {}
    # remember, with its source artifact in the same call, and without
    r = _ok(await c.call_tool("remember", {
        "subject": "alice", "ref": "atom_001", "text": "Prefers direct feedback",
        "derivation": "inferred", "extractor": "claude-opus-4",
        "artifact": {"kind": "chat", "ref": "art_101",
                     "body": "Q4 board prep: she wants blunt notes, in writing."}}))
    assert r["artifact_id"] and r["archived"] == []
    atom_id = r["atom_id"]
    assert _cli_json(home, "artifact", "show", "art_101")["artifact_id"] == r["artifact_id"]
    shown = _cli_json(home, "atom", "show", "atom_001")
    assert shown["atom_id"] == atom_id and shown["artifact_ids"] == [r["artifact_id"]]
    r2 = _ok(await c.call_tool("remember", {"subject": "alice",
                                            "text": "Drinks green tea in the morning",
                                            "kind": "preference", "tags": ["tea"]}))
    assert r2["artifact_id"] is None
    # one signed command: a memory refused (its ref is taken) leaves no artifact behind
    before = _cli_json(home, "memory", "list", "--subject", "alice")
    refused = await c.call_tool("remember", {
        "subject": "alice", "ref": "atom_001", "text": "Another memory under a taken ref",
        "artifact": {"kind": "chat", "ref": "art_102", "body": "would be orphaned"}})
    assert refused.is_error and "atom_001" in _text(refused)
    assert run_cli("--home", str(home), "artifact", "show", "art_102").code != 0
    assert _cli_json(home, "memory", "list", "--subject", "alice") == before
    # get_memory = `ledger atom show --json`
    got = _ok(await c.call_tool("get_memory", {"atom_id": "atom_001"}))
    assert {k: got[k] for k in shown} == shown
    # correct_memory
    corr = _ok(await c.call_tool("correct_memory", {
        "atom_id": "atom_001", "text": "Prefers direct feedback, in writing", "reason": "asked"}))
    assert corr["atom_id"] == atom_id
    new_id = corr["new_atom_id"]
    assert _cli_json(home, "atom", "show", atom_id)["superseded_by"] == new_id
    # recall = `ledger recall --json` (items) and `ledger recall` (the block)
    rec = await c.call_tool("recall", {"subject": "alice", "query": "feedback style", "k": 3,
                                       "rehearse": False})
    cli_items = _cli_json(home, "recall", "feedback style", "--subject", "alice", "-k", "3",
                          "--no-rehearse")["items"]
    assert _ok(rec)["items"] == cli_items and cli_items
    cli_block = run_cli("--home", str(home), "recall", "feedback style", "--subject",
                        "alice", "-k", "3", "--no-rehearse")
    assert _text(rec) == cli_block.out == _ok(rec)["prompt"]
    assert "Prefers direct feedback, in writing" in _text(rec)
    rehearsed = _ok(await c.call_tool("recall", {"subject": "alice", "query": "green tea",
                                                 "session_id": "s-1"}))
    assert rehearsed["items"] and all(i["rehearsed"] for i in rehearsed["items"])
    history = _cli_json(home, "atom", "history", rehearsed["items"][0]["atom_id"])
    assert "atom.rehearsed" in history[-1]["topic"]
    # list_memories = `ledger memory list --json`
    listed = _ok(await c.call_tool("list_memories", {"subject": "alice"}))
    cli_list = _cli_json(home, "memory", "list", "--subject", "alice")
    assert listed["memories"] == cli_list and listed["next_after"] is None
    # in pages: one memory at a time, next_after naming where the next page starts
    paged, after = [], None
    while True:
        page = _ok(await c.call_tool("list_memories", {"subject": "alice", "limit": 1,
                                                       "after": after}))
        paged += page["memories"]
        after = page["next_after"]
        if after is None:
            break
        assert len(page["memories"]) == 1 and after == page["memories"][0]["atom_id"]
    assert len(cli_list) > 1 and [m["atom_id"] for m in paged] == \
        [m["atom_id"] for m in cli_list]  # (salience_now decays between the listings)
    # the memories resource says the same
    res = await c.read_resource("memory://subjects/alice/memories")
    assert res.contents[0].mime_type == "application/json"
    assert json.loads(res.contents[0].text)["memories"] == cli_list  # type: ignore[union-attr]
    # export_memories = `ledger export --format konshus` (less its own time)
    exp = await c.call_tool("export_memories", {"subject": "alice", "format": "konshus"})
    meta = _ok(exp)
    assert meta["format"] == "konshus" and meta["counts"]["atoms"] >= 2
    out = tmp_path / "alice.json"
    assert run_cli("--home", str(home), "export", "--format", "konshus", "--subject",
                   "alice", "--out", str(out)).code == 0
    doc, cli_doc = json.loads(_text(exp)), json.loads(out.read_text())
    for d in (doc, cli_doc):
        d.pop("exported_at", None)
    assert doc == cli_doc
    persona = await c.call_tool("export_memories", {"subject": "alice", "format": "persona"})
    assert _ok(persona)["format"] == "persona" and json.loads(_text(persona))
    # forget_memory: `ledger delete`'s path; the tombstone is the atom's own signed event
    gone = _ok(await c.call_tool("forget_memory", {"atom_id": new_id, "reason": "asked"}))
    assert gone["atom_id"] == new_id and gone["tombstone_id"].startswith(f"{new_id}/")
    assert gone["tombstone_id"] in gone["event_ids"]
    after = _cli_json(home, "atom", "show", new_id)
    assert after["content_erased"] is True and after["redaction_mode"] == "delete"
    tomb = [h for h in _cli_json(home, "atom", "history", new_id)
            if h["event_id"] == gone["tombstone_id"]]
    assert len(tomb) == 1
    # the checkpoint resource: the signed note `ledger checkpoint` keeps
    cp = await c.read_resource("ledger://checkpoint")
    note = cp.contents[0].text  # type: ignore[union-attr]
    assert cp.contents[0].mime_type == "text/plain" and "\n\n— " in note
    kept = tmp_path / "kept.checkpoint"
    kept.write_text(note)
    v = run_cli("--home", str(home), "verify", "--checkpoint", str(kept))
    assert v.code == 0, v.err
    # file_erasure_request: filed (open, with its deadlines), not executed
    req = _ok(await c.call_tool("file_erasure_request", {
        "subject": "alice", "reason": "GDPR Art. 17", "legal_basis": "GDPR Art. 17(1)(a)"}))
    assert req["status"] == "open" and req["complete_due"]
    listed_requests = _cli_json(home, "requests", "list")
    assert [x["request_id"] for x in listed_requests] == [req["request_id"]]
    assert _cli_json(home, "atom", "show", atom_id)["content_erased"] is False
    seen.update(atom_id=atom_id, new_id=new_id)
    return seen


# ----------------------------------------------------------------------------- listing
def test_tools_resources_schemas_and_hints(home: Path) -> None:
    async def run() -> None:
        async with in_process(home, ALICE) as c:
            assert c.protocol_version == LATEST_PROTOCOL_VERSION
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == set(TOOLS)
            for name, (ro, destructive, idem) in TOOLS.items():
                a = tools[name].annotations
                assert a is not None
                assert (a.read_only_hint, a.destructive_hint, a.idempotent_hint,
                        a.open_world_hint) == (ro, destructive, idem, False), name
                assert tools[name].output_schema is not None, name
                assert tools[name].description
            # the input schemas are the facade's models'
            props = tools["remember"].input_schema["properties"]
            assert set(props) == set(AtomIn.model_fields) | {"artifact"}
            assert props["text"]["maxLength"] == AtomIn.model_fields["text"].metadata[1].max_length
            assert tools["remember"].input_schema["required"] == ["text"]  # subject: see ADR 0057
            source = tools["remember"].input_schema["$defs"]["SourceIn"]
            assert set(source["properties"]) == set(SourceIn.model_fields)
            assert set(tools["recall"].input_schema["properties"]) == set(RecallIn.model_fields)
            assert set(tools["correct_memory"].input_schema["properties"]) == \
                {"atom_id", *AtomCorrectionIn.model_fields}
            assert set(tools["file_erasure_request"].input_schema["properties"]) == \
                set(ErasureRequestIn.model_fields)
            assert tools["export_memories"].input_schema["properties"]["format"]["enum"] == \
                ["konshus", "persona"]
            resources = (await c.list_resources()).resources
            assert [(str(r.uri), r.mime_type) for r in resources] == \
                [("ledger://checkpoint", "text/plain")]
            templates = (await c.list_resource_templates()).resource_templates
            assert [(t.uri_template, t.mime_type) for t in templates] == \
                [("memory://subjects/{subject}/memories", "application/json")]

    anyio.run(run)


# ----------------------------------------------------------------------------- in process
def test_every_tool_in_process_equals_the_cli(home: Path, tmp_path: Path,
                                              pinned: None) -> None:
    _seed(home)

    async def run() -> None:
        async with in_process(home, ALICE) as c:
            await _walk_every_tool(c, home, tmp_path)

    anyio.run(run)


def _foreign_calls(bob_atom: str) -> list[tuple[str, dict[str, Any]]]:
    """A call of every tool that names bob (or bob's memory) for an alice-only caller."""
    return [
        ("remember", {"subject": "bob", "text": "Is allergic to bees"}),
        ("remember", {"subject": "alice", "text": "x", "artifact_ids": ["art_bob"]}),
        ("remember", {"subject": "bob", "text": "x", "artifact": {"kind": "chat", "body": "b"}}),
        ("recall", {"subject": "bob", "query": "bees"}),
        ("list_memories", {"subject": "bob"}),
        ("get_memory", {"atom_id": "bob_1"}),
        ("get_memory", {"atom_id": bob_atom}),
        ("correct_memory", {"atom_id": "bob_1", "text": "Keeps wasps", "reason": "r"}),
        ("forget_memory", {"atom_id": "bob_1", "reason": "r"}),
        ("forget_memory", {"atom_id": bob_atom, "reason": "r"}),
        ("export_memories", {"subject": "bob"}),
        ("file_erasure_request", {"subject": "bob", "reason": "r"}),
    ]


WRITES: list[tuple[str, dict[str, Any]]] = [  # every tool that writes, with arguments valid for bob
    ("remember", {"subject": "bob", "text": "Is allergic to bees"}),
    ("remember", {"subject": "bob", "text": "x", "artifact": {"kind": "chat", "body": "b"}}),
    ("correct_memory", {"atom_id": "bob_1", "text": "Keeps wasps", "reason": "r"}),
    ("forget_memory", {"atom_id": "bob_1", "reason": "r"}),
    ("file_erasure_request", {"subject": "bob", "reason": "r"}),
]


def test_a_credential_for_alice_sees_nothing_of_bob(home: Path) -> None:
    _seed(home)
    h = str(home)
    r = run_cli("--home", h, "artifact", "add", "--subject", "bob", "--kind", "chat",
                "--ref", "art_bob", "--body", "bees")
    assert r.code == 0, r.err
    bob_atom = _cli_json(home, "atom", "show", "bob_1")["atom_id"]
    nobody = Caller(credential_id="tok_none", role="assistant", subjects=frozenset())

    async def run() -> None:
        async with in_process(home, ALICE) as c:
            before = home_digest(home)
            for name, args in _foreign_calls(bob_atom):
                result = await c.call_tool(name, args)
                text = _refused(result)
                assert "Keeps bees" not in text, text
                if name != "list_memories" or args:
                    assert text.split("\n")[0].startswith("error: no "), (name, text)
                assert home_digest(home) == before, (name, args)
            with pytest.raises(MCPError) as e:
                await c.read_resource("memory://subjects/bob/memories")
            assert "no subject 'bob'" in str(e.value)
            # unknown and out of scope read the same
            unknown = _text(await c.call_tool("get_memory", {"atom_id": "nobody_1"}))
            foreign = _text(await c.call_tool("get_memory", {"atom_id": "bob_1"}))
            assert foreign == unknown.replace("nobody_1", "bob_1")
            assert home_digest(home) == before
            # no subject named: the credential's only one, alice (ADR 0057), never bob
            mine = _ok(await c.call_tool("list_memories", {}))
            assert mine["subject"] is None and mine["memories"] == []
        async with in_process(home, nobody) as c:
            before = home_digest(home)
            text = _refused(await c.call_tool("remember", {"subject": "alice", "text": "x"}))
            assert "no subject 'alice'" in text
            assert home_digest(home) == before

    anyio.run(run)


def test_role_and_argument_refusals_change_nothing(home: Path) -> None:
    _seed(home)
    aud = Caller(credential_id="tok_aud", role="auditor")

    async def run() -> None:
        async with in_process(home, aud) as c:
            listed = _ok(await c.call_tool("list_memories", {"subject": "bob"}))
            assert [m["text"] for m in listed["memories"]] == ["Keeps bees on the roof"]
            before = home_digest(home)  # after the read: the read models have caught up
            text = _refused(await c.call_tool("remember", {"subject": "alice", "text": "x"}),
                            "auditor credential may not do this", "hint: ")
            assert "\nhint: use a credential with the assistant or operator role" in text
            assert home_digest(home) == before
        async with in_process(home, ALICE) as c:
            before = home_digest(home)
            for args in ({"subject": "alice", "text": ""},
                         {"subject": "alice", "text": "x", "salience": 7},
                         {"subject": "alice", "text": "x", "ref": "bad ref"},
                         {"subject": "alice"}):
                text = _refused(await c.call_tool("remember", args), "invalid arguments")
                assert "pydantic" not in text and "input_value" not in text
            _refused(await c.call_tool("forget_memory", {"atom_id": "bob_1", "reason": ""}),
                     "reason")
            assert home_digest(home) == before
        both = Caller(credential_id="tok_both", role="assistant",
                      subjects=frozenset({"alice", "bob"}))
        async with in_process(home, both) as c:  # two subjects: it must name one
            for tool, args in (("remember", {"text": "x"}), ("recall", {"query": "bees"})):
                _refused(await c.call_tool(tool, args), "name the subject", "2 subjects")
            assert home_digest(home) == before

    anyio.run(run)


# ----------------------------------------------------------------------------- stdio
@asynccontextmanager
async def over_stdio(home: Path, token: str | None, errlog: Any,
                     extra_env: dict[str, str] | None = None) -> AsyncIterator[Client]:
    env = {"LEDGER_NOW": NOW, "LEDGER_LOG_LEVEL": "info", **(extra_env or {})}
    if token is not None:
        env["LEDGER_TOKEN"] = token
    for k in ("LEDGER_TEST_PG", "PATH", "HOME"):
        if k in os.environ:
            env.setdefault(k, os.environ[k])
    params = StdioServerParameters(command=LEDGER, args=["--home", str(home), "mcp"], env=env)
    async with Client(stdio_client(params, errlog=errlog)) as client:
        yield client


@pytest.mark.slow
def test_stdio_every_tool_equals_the_cli(home: Path, tmp_path: Path, pinned: None) -> None:
    _seed(home)
    token_id, token = issue(home, "desktop", "assistant", ["alice"])
    log = tmp_path / "mcp-stderr.log"

    async def run() -> None:
        with log.open("w") as errlog:
            async with over_stdio(home, token, errlog) as c:
                assert c.protocol_version == LATEST_PROTOCOL_VERSION
                await _walk_every_tool(c, home, tmp_path)
                before = home_digest(home)
                text = _refused(await c.call_tool("get_memory", {"atom_id": "bob_1"}))
                assert text.startswith("error: no atom 'bob_1'")
                assert home_digest(home) == before
                # revoked mid-session: the next request is refused
                revoke(home, token_id)
                with pytest.raises(MCPError) as e:
                    await c.call_tool("list_memories", {"subject": "alice"})
                assert "revoked" in str(e.value)

    anyio.run(run)
    err = log.read_text()
    assert token not in err
    for content in ("Prefers direct feedback", "green tea", "blunt notes", "Keeps bees"):
        assert content not in err


def test_ledger_mcp_writes_nothing_but_protocol_on_stdout(home: Path) -> None:
    """Raw JSON-RPC lines over the pipe, debug logging on: every stdout line is a JSON-RPC
    message answering ours; the logs (stderr) hold neither the token nor any content; the
    server ends cleanly when its input closes."""
    _seed(home)
    _, token = issue(home, "desktop", "assistant", ["alice"])
    env = {**os.environ, "LEDGER_TOKEN": token, "LEDGER_LOG_LEVEL": "debug"}
    proc = subprocess.Popen([LEDGER, "--home", str(home), "mcp"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    lines: queue.Queue[bytes] = queue.Queue()
    out = proc.stdout

    def read() -> None:
        for line in out:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()

    def send(message: dict[str, Any]) -> dict[str, Any] | None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()
        if "id" not in message:
            return None
        answer: dict[str, Any] = json.loads(lines.get(timeout=60))
        assert answer["jsonrpc"] == "2.0" and answer["id"] == message["id"], answer
        return answer

    try:
        init = send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert init is not None and init["result"]["protocolVersion"] == "2025-11-25"
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        added = send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"subject": "alice",
                                              "text": "Sings in a choir on Thursdays"}}})
        assert added is not None and not added["result"].get("isError"), added
        foreign = send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "get_memory", "arguments": {"atom_id": "bob_1"}}})
        assert foreign is not None and foreign["result"]["isError"] is True
        cp = send({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                   "params": {"uri": "ledger://checkpoint"}})
        assert cp is not None and cp["result"]["contents"][0]["mimeType"] == "text/plain"
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert lines.empty()  # nothing but the four answers
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert token not in err and "choir" not in err and "Keeps bees" not in err


@pytest.mark.slow
def test_stdio_legacy_handshake_works_too(home: Path, tmp_path: Path) -> None:
    _seed(home)
    _, token = issue(home, "desktop", "assistant", ["bob"])

    async def run() -> None:
        env = {"LEDGER_TOKEN": token, "PATH": os.environ.get("PATH", "")}
        params = StdioServerParameters(command=LEDGER, args=["--home", str(home), "mcp"],
                                       env=env)
        async with Client(params, mode="legacy") as c:
            assert c.protocol_version == "2025-11-25"
            listed = _ok(await c.call_tool("list_memories", {"subject": "bob"}))
            assert [m["text"] for m in listed["memories"]] == ["Keeps bees on the roof"]

    anyio.run(run)


def test_ledger_mcp_refuses_to_start_without_a_good_token(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    revoked_id, revoked = issue(home, "gone", "assistant", ["alice"])
    revoke(home, revoked_id)
    monkeypatch.delenv("LEDGER_TOKEN", raising=False)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    before = home_digest(home)
    r = run_cli("--home", str(home), "mcp")
    assert r.code == 3 and r.out == ""
    assert "refuses to start without a token" in r.err and "hint: set LEDGER_TOKEN" in r.err
    monkeypatch.setenv("LEDGER_TOKEN", "mlt_not-a-real-token")
    r = run_cli("--home", str(home), "mcp")
    assert r.code == 2 and r.out == "" and "mlt_not" not in r.err, r
    monkeypatch.setenv("LEDGER_TOKEN", revoked)
    r = run_cli("--home", str(home), "mcp")
    assert r.code == 2 and "revoked" in r.err and revoked not in r.err
    monkeypatch.delenv("LEDGER_TOKEN")
    r = run_cli("--home", str(home), "mcp", "--token-file", str(tmp_path / "missing"))
    assert r.code == 2 and "cannot read the token file" in r.err
    r = run_cli("--home", str(home), "mcp", "--token-file", str(empty))
    assert r.code == 2 and "is empty" in r.err
    assert home_digest(home) == before


# ----------------------------------------------------------------------------- HTTP
def _http_transport(url: str, token: str | None, header: str | None = None) -> Any:
    headers = {}
    if header is not None:
        headers["Authorization"] = header
    elif token is not None:
        headers["Authorization"] = f"Bearer {token}"
    import httpx2

    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers,
                                                                      timeout=60))


@dataclass
class Served:
    server: Server
    url: str
    tokens: dict[str, str]


@pytest.fixture
def served(home: Path) -> Iterator[Served]:
    """`ledger serve` on a loopback port with tokens issued first (it refuses to start
    without one): alice's, another tenant's, a revoked one and one about to expire."""
    _seed(home)
    tokens: dict[str, str] = {}
    _, tokens["alice"] = issue(home, "assistant-a", "assistant", ["alice"])
    _, tokens["tenant"] = issue(home, "tenant-z", "assistant", tenant="zeta")
    revoked_id, tokens["revoked"] = issue(home, "revoked", "assistant", ["bob"])
    revoke(home, revoked_id)
    _, tokens["auditor"] = issue(home, "auditor", "auditor")
    _, tokens["expired"] = issue(home, "expired", "assistant", ["bob"],
                                 expires_at=clock.now() + timedelta(seconds=1))
    with serving(home) as server:  # LEDGER_NOW too, when the test pins it
        yield Served(server, f"{server.url}/mcp", tokens)


@pytest.mark.slow
def test_http_every_tool_equals_the_cli(home: Path, tmp_path: Path, pinned: None,
                                        served: Served) -> None:
    token = served.tokens["alice"]

    async def run() -> None:
        async with Client(_http_transport(served.url, token)) as c:
            assert c.protocol_version == LATEST_PROTOCOL_VERSION
            await _walk_every_tool(c, home, tmp_path)
        async with Client(_http_transport(served.url, token), mode="legacy") as c:
            assert c.protocol_version == "2025-11-25"
            listed = _ok(await c.call_tool("list_memories", {"subject": "alice"}))
            assert listed["memories"]

    anyio.run(run)


@pytest.mark.slow
def test_http_refuses_bad_credentials_and_scopes_every_tool(home: Path, served: Served
                                                            ) -> None:
    alice, tenant = served.tokens["alice"], served.tokens["tenant"]
    revoked, expired = served.tokens["revoked"], served.tokens["expired"]
    bob_atom = _cli_json(home, "atom", "show", "bob_1")["atom_id"]
    url = served.url
    anyio.run(anyio.sleep, 1.2)  # the expired token is past its time
    cases = 0
    before = home_digest(home)
    # no token, malformed header, unknown, revoked, expired: 401 before any MCP handling
    for header in (None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer mlt_unknown_token",
                   f"Bearer {revoked}", f"Bearer {expired}", f"Bearer {alice} extra"):
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json",
                   **({"Authorization": header} if header else {})}
        calls = [{"jsonrpc": "2.0", "id": n, "method": "tools/call",
                  "params": {"name": name, "arguments": args}}
                 for n, (name, args) in enumerate(_foreign_calls(bob_atom), start=2)]
        reads = [{"jsonrpc": "2.0", "id": 100 + n, "method": "resources/read",
                  "params": {"uri": uri}}
                 for n, uri in enumerate(("ledger://checkpoint",
                                          "memory://subjects/bob/memories"))]
        for body in ({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                     *calls, *reads):
            r = httpx.post(url, json=body, headers=headers, timeout=30)
            assert r.status_code == 401, (header, r.text)
            assert r.headers["content-type"].startswith("application/problem+json")
            assert "Bearer" in r.headers["www-authenticate"]
            for secret in (revoked, expired, alice):
                assert secret not in r.text
            cases += 1

    async def refused_client(header: str | None) -> None:
        with pytest.raises(ExceptionGroup) as e:  # the SDK's task groups wrap its error
            async with Client(_http_transport(url, None, header)) as c:
                await c.list_tools()
        leaves = _leaves(e.value)
        assert [type(x) for x in leaves] == [MCPError], leaves
        assert "error response" in str(leaves[0])

    async def scoped() -> int:
        n = 0
        await refused_client(None)
        await refused_client(f"Bearer {revoked}")
        async with Client(_http_transport(url, alice)) as c:
            for name, args in _foreign_calls(bob_atom):
                text = _refused(await c.call_tool(name, args))
                assert "Keeps bees" not in text
                n += 1
        async with Client(_http_transport(url, tenant)) as c:  # another tenant: no bob
            for name, args in _foreign_calls(bob_atom):
                _refused(await c.call_tool(name, args))
                n += 1
            with pytest.raises(MCPError):
                await c.read_resource("memory://subjects/bob/memories")
        async with Client(_http_transport(url, served.tokens["auditor"])) as c:
            for name, args in WRITES:  # an auditor reads and verifies; it writes nothing
                _refused(await c.call_tool(name, args), "auditor credential may not do this")
                n += 1
        return n

    cases += anyio.run(scoped)
    assert home_digest(home) == before
    print(f"MCP over HTTP: {cases} refused cases, the home unchanged")
