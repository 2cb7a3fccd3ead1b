"""Memories proposed from an artifact by a model (service/extraction.py, ADR 0053).

The sampling path is driven by the `mcp` SDK's own client and its sampling callback (the
2026-07-28 multi-round-trip and the legacy back-channel); the endpoint path by a local
ASGI server on loopback that answers /v1/chat/completions in the OpenAI wire format.
Both record inferred atoms citing the artifact, with the model and the prompt's version
and digest as extractor; a refused or malformed proposal writes nothing; the caller's
scope holds; nothing of the content or the key reaches a log line. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog.testing
import uvicorn
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, CreateMessageRequestParams, CreateMessageResult, ErrorData
from mcp_types import TextContent as Text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from server.backend import Backend
from server.mcp_server import build_mcp, fixed_caller
from service.caller import Caller
from service.extraction import prompt

from .conftest import run_cli
from .serving import home_digest

ALICE = Caller(credential_id="tok_alice", role="assistant", subjects=frozenset({"alice"}))
AUDITOR = Caller(credential_id="tok_aud", role="auditor")
BODY = "Q4 board prep: she wants blunt notes, in writing. Her daughter Ines starts school."
CHATGPT = [{"id": "c-1", "title": "Board prep", "mapping": {
    "n1": {"message": {"id": "u1", "author": {"role": "user"}, "create_time": 1760000000.0,
                       "content": {"parts": ["I keep bees on the roof of the office"]}}},
    "n2": {"message": {"id": "a1", "author": {"role": "assistant"},
                       "create_time": 1760000005.0,
                       "content": {"parts": ["Lovely. How many hives?"]}}}}},
    {"id": "c-2", "title": "Tea", "mapping": {
        "n1": {"message": {"id": "u2", "author": {"role": "user"},
                           "create_time": 1760000100.0,
                           "content": {"parts": ["Green tea every morning, never coffee"]}}}}}]
KEY = "sk-test-9f8e7d6c5b4a"  # a test key, to prove it is never printed


def _cli_json(home: Path, *args: str) -> Any:
    r = run_cli("--home", str(home), *args, "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def _seed(home: Path) -> tuple[str, str]:
    """alice with a chat artifact, bob with one: their ids."""
    h = str(home)
    ids = []
    for ref in ("alice", "bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
        ids.append(_cli_json(home, "artifact", "add", "--subject", ref, "--kind", "chat",
                             "--ref", f"chat_{ref}", "--body",
                             BODY if ref == "alice" else "bees")["artifact_id"])
    return ids[0], ids[1]


def _memories(home: Path, subject: str = "alice") -> Any:
    return _cli_json(home, "memory", "list", "--subject", subject)


def _proposals(aid: str, *texts: str, **extra: Any) -> str:
    return json.dumps({"memories": [{"text": t, "kind": "preference", "confidence": 0.8,
                                     "artifact_ids": [aid], **extra} for t in texts]})


def _source_id(user: str) -> str:
    first = user.splitlines()[0]
    assert first.startswith("Source id: "), first
    return first.removeprefix("Source id: ")


# ----------------------------------------------------------------------------- sampling
@dataclass
class Model:
    """The client's model: answers each sampling request with ``answer(source_id)``."""

    answer: Callable[[str], str | ErrorData]
    name: str = "test-model-1"
    asked: list[CreateMessageRequestParams] = field(default_factory=list)

    async def __call__(self, _ctx: Any, params: CreateMessageRequestParams
                       ) -> CreateMessageResult | ErrorData:
        self.asked.append(params)
        block = params.messages[0].content
        assert isinstance(block, Text)
        reply = self.answer(_source_id(block.text))
        if isinstance(reply, ErrorData):
            return reply
        return CreateMessageResult(role="assistant", model=self.name,
                                   content=Text(type="text", text=reply),
                                   stop_reason="endTurn")


@asynccontextmanager
async def connected(home: Path, caller: Caller, model: Model, mode: str = "auto"
                    ) -> AsyncIterator[Client]:
    backend = Backend(home)
    await anyio.to_thread.run_sync(backend.start)
    try:
        async with Client(build_mcp(backend, fixed_caller(caller)), mode=mode,  # type: ignore[arg-type]
                          sampling_callback=model) as client:
            yield client
    finally:
        await anyio.to_thread.run_sync(backend.close)


def _text(r: CallToolResult) -> str:
    block = r.content[0]
    assert block.type == "text"
    return block.text


def _refused(r: CallToolResult, *words: str) -> str:
    assert r.is_error, r.structured_content
    text = _text(r)
    assert text.startswith("error: "), text
    for w in words:
        assert w in text, text
    return text


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sampling_records_inferred_memories_citing_the_artifact(home: Path, mode: str) -> None:
    aid, _ = _seed(home)
    model = Model(lambda src: _proposals(src, "Wants blunt written notes before board meetings",
                                         "Has a daughter, Ines, who is starting school"))

    async def run() -> dict[str, Any]:
        async with connected(home, ALICE, model, mode) as c:
            r = await c.call_tool("extract_memories", {"artifact_id": "chat_alice",
                                                        "max_memories": 5})
            assert not r.is_error, r.content
            assert r.structured_content is not None
            return r.structured_content

    out = anyio.run(run)
    assert len(model.asked) == 1  # asked once, on either transport
    asked = model.asked[0]
    p = prompt()
    assert asked.system_prompt == p.text and asked.include_context == "none"
    block = asked.messages[0].content
    assert isinstance(block, Text) and BODY in block.text
    assert "Propose at most 5 memories." in block.text
    extractor = f"test-model-1 via prompt extract-v1@sha256:{p.sha256}"
    assert out["artifacts"] == [aid] and out["extractor"] == extractor
    assert (out["prompt_version"], out["prompt_sha256"]) == ("extract-v1", p.sha256)
    assert len(out["atom_ids"]) == 2
    for atom_id in out["atom_ids"]:
        shown = _cli_json(home, "atom", "show", atom_id)
        assert shown["derivation"] == "inferred" and shown["artifact_ids"] == [aid]
        assert shown["extractor"] == extractor and shown["kind"] == "preference"
        assert shown["human_reviewed"] is False and shown["confidence"] == 0.8
    texts = sorted(m["text"] for m in _memories(home))
    assert texts == ["Has a daughter, Ines, who is starting school",
                     "Wants blunt written notes before board meetings"]
    assert _memories(home, "bob") == []


def _bad_answers(aid: str) -> list[tuple[str, str]]:
    """(answer, words of the refusal): each must write nothing."""
    good = {"text": "Likes tea", "kind": "preference", "artifact_ids": [aid]}
    return [
        ("I think she likes tea.", "not one JSON object"),
        (json.dumps({"memories": [good, {**good, "kind": "gossip"}]}), "memories.1.kind"),
        (json.dumps({"memories": [good, {**good, "text": "x" * 501}]}), "memories.1.text"),
        (json.dumps({"memories": [good, {**good, "artifact_ids": []}]}),
         "memories.1.artifact_ids"),
        (json.dumps({"memories": [good, {**good, "artifact_ids": ["chat_bob"]}]}),
         "proposal 2 does not cite the artifact"),
        (json.dumps({"memories": [good, {**good, "owner": "bob"}]}), "memories.1.owner"),
        (json.dumps({"memories": [good, {**good, "confidence": "0.9"}]}),
         "memories.1.confidence"),
        (json.dumps({"memories": [good, {**good, "tags": ["a\nb"]}]}), "tag"),
        (json.dumps({"memories": [good] * 4}), "4 memories, more than the 3 asked for"),
        ('{"memories": [], "memories": []}', "repeats a key"),
        (json.dumps([good]), "answer: Input should be"),
    ]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_refused_or_malformed_sampled_proposal_writes_nothing(home: Path, mode: str) -> None:
    aid, _ = _seed(home)
    answers: list[str | ErrorData] = []
    model = Model(lambda _src: answers.pop(0))
    listed = _memories(home)

    async def run() -> None:
        async with connected(home, ALICE, model, mode) as c:
            await c.call_tool("list_memories", {"subject": "alice"})  # the reads catch up
            before = home_digest(home)
            for answer, words in _bad_answers(aid):
                answers.append(answer)
                text = _refused(await c.call_tool("extract_memories", {
                    "artifact_id": aid, "max_memories": 3}), words, "nothing was written")
                assert "Likes tea" not in text and "Traceback" not in text
                assert home_digest(home) == before, words
            # the client's user declines the sampling request: a protocol error, no write
            answers.append(ErrorData(code=-1, message="User rejected sampling request"))
            with pytest.raises(MCPError, match="rejected"):
                await c.call_tool("extract_memories", {"artifact_id": aid})
            assert home_digest(home) == before
            assert answers == []

    anyio.run(run)
    assert _memories(home) == listed


def test_extraction_goes_through_update_or_add(home: Path) -> None:
    """The same chat extracted twice adds no near-copies: each proposal that says what a
    memory already says rehearses it (the default), or is added, or refuses the whole
    extraction, as on_similar says (ADR 0052)."""
    aid, _ = _seed(home)
    texts = ("Wants blunt written notes before board meetings",
             "Has a daughter, Ines, who is starting school")
    model = Model(lambda src: _proposals(src, *texts))

    async def run() -> list[dict[str, Any]]:
        outs = []
        async with connected(home, ALICE, model) as c:
            for kw in ({}, {}, {"on_similar": "add"}):
                r = await c.call_tool("extract_memories", {"artifact_id": aid, **kw})
                assert not r.is_error, r.content
                assert r.structured_content is not None
                outs.append(r.structured_content)
            await c.call_tool("list_memories", {"subject": "alice"})  # the reads catch up
            before = home_digest(home)
            _refused(await c.call_tool("extract_memories", {"artifact_id": aid,
                                                            "on_similar": "refuse"}),
                     "similar")
            assert home_digest(home) == before
        return outs

    first, again, anyway = anyio.run(run)
    assert first["outcomes"] == ["added", "added"] and first["on_similar"] == "rehearse"
    assert again["outcomes"] == ["rehearsed", "rehearsed"]
    assert again["atom_ids"] == first["atom_ids"]  # the memories already held, rehearsed
    assert anyway["outcomes"] == ["added", "added"]
    assert sorted(m["text"] for m in _memories(home)) == sorted(texts * 2)
    counts = {m["atom_id"]: m["rehearsal_count"] for m in _memories(home)}
    assert [counts[a] for a in first["atom_ids"]] == [1, 1]
    assert [counts[a] for a in anyway["atom_ids"]] == [0, 0]


def test_extraction_keeps_to_the_callers_scope(home: Path) -> None:
    _, bob_aid = _seed(home)
    model = Model(lambda src: _proposals(src, "Keeps bees"))

    async def run() -> None:
        async with connected(home, ALICE, model) as c:
            await c.call_tool("list_memories", {"subject": "alice"})  # the reads catch up
            before = home_digest(home)
            for artifact in ("chat_bob", bob_aid, "nothing_here"):
                text = _refused(await c.call_tool("extract_memories", {"artifact_id": artifact}),
                                f"no artifact {artifact!r}")
                assert "bees" not in text
            assert home_digest(home) == before
        async with connected(home, AUDITOR, model) as c:
            _refused(await c.call_tool("extract_memories", {"artifact_id": "chat_alice"}),
                     "an auditor credential may not do this")
            assert home_digest(home) == before
        async with connected(home, ALICE, model) as c:  # argument bounds
            _refused(await c.call_tool("extract_memories", {"artifact_id": "chat_alice",
                                                            "max_memories": 51}),
                     "max_memories")
            assert home_digest(home) == before

    anyio.run(run)
    assert model.asked == []  # nothing was sent to any model
    assert _memories(home, "bob") == []


# ----------------------------------------------------------------------------- endpoint
@dataclass
class Endpoint:
    """A local OpenAI-compatible endpoint: ``answer(request body)`` makes each response."""

    url: str
    seen: list[tuple[dict[str, str], dict[str, Any]]]
    answers: list[Callable[[dict[str, Any]], Response]]


def completion(text: str, *, finish: str = "stop", refusal: str | None = None,
               model: str = "local-model-7b") -> Callable[[dict[str, Any]], Response]:
    def make(_body: dict[str, Any]) -> Response:
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1760000000,
            "model": model, "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                      "total_tokens": 2},
            "choices": [{"index": 0, "finish_reason": finish, "message": {
                "role": "assistant", "content": text, "refusal": refusal}}]})
    return make


def proposing(*texts: str) -> Callable[[dict[str, Any]], Response]:
    def make(body: dict[str, Any]) -> Response:
        return completion(_proposals(_source_id(body["messages"][1]["content"]), *texts))(body)
    return make


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[Endpoint]:
    seen: list[tuple[dict[str, str], dict[str, Any]]] = []
    answers: list[Callable[[dict[str, Any]], Response]] = []

    async def chat(request: Request) -> Response:
        body = await request.json()
        seen.append((dict(request.headers), body))
        if not answers:
            return JSONResponse({"error": {"message": "no answer queued"}}, status_code=500)
        make = answers.pop(0)
        return await anyio.to_thread.run_sync(make, body)

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                            lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the test endpoint did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    monkeypatch.setenv("LEDGER_EXTRACT_URL", url)
    monkeypatch.setenv("LEDGER_EXTRACT_MODEL", "local-model-7b")
    monkeypatch.setenv("LEDGER_EXTRACT_API_KEY", KEY)
    try:
        yield Endpoint(url, seen, answers)
    finally:
        server.should_exit = True
        thread.join(10)


def _import_chats(home: Path, tmp_path: Path) -> str:
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps(CHATGPT))
    r = run_cli("--home", str(home), "import", str(src), "--format", "chatgpt",
                "--subject", "alice")
    assert r.code == 0, r.err
    return r.err


def test_chat_import_ends_with_the_next_step_and_the_endpoint_extracts(
        home: Path, tmp_path: Path, endpoint: Endpoint) -> None:
    err = _import_chats(home, tmp_path)
    assert "2 ChatGPT conversation(s) became private chat artifacts" in err
    assert "Next step" in err and "extract_memories" in err
    assert "`ledger extract --subject alice`" in err
    endpoint.answers += [proposing("Keeps bees on the office roof"),
                         proposing("Drinks green tea every morning", "Never drinks coffee")]
    with structlog.testing.capture_logs() as logs:
        r = run_cli("--home", str(home), "extract", "--subject", "alice", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert len(out["atom_ids"]) == 3 and len(out["artifacts"]) == 2
    p = prompt()
    assert out["extractor"] == f"local-model-7b via prompt extract-v1@sha256:{p.sha256}"
    # the wire: the configured model, the shipped prompt, the key as a bearer token
    assert len(endpoint.seen) == 2
    for (headers, body), art in zip(endpoint.seen, out["artifacts"], strict=True):
        assert headers["authorization"] == f"Bearer {KEY}"
        assert body["model"] == "local-model-7b" and body["temperature"] == 0
        assert body["messages"][0] == {"role": "system", "content": p.text}
        assert body["messages"][1]["content"].startswith(f"Source id: {art}\n")
    assert "I keep bees on the roof" in endpoint.seen[0][1]["messages"][1]["content"]
    for atom_id, art in zip(out["atom_ids"], [out["artifacts"][0], *out["artifacts"][1:] * 2],
                            strict=True):
        shown = _cli_json(home, "atom", "show", atom_id)
        assert (shown["derivation"], shown["artifact_ids"]) == ("inferred", [art])
    # content and key: to the model only
    printed = r.out + r.err + json.dumps(logs, default=str)
    for secret in (KEY, "bees", "tea", "coffee", "Board prep"):
        assert secret not in printed, secret
    assert "OK: recorded 3 inferred memories from 2 artifact(s)" in r.err
    # again: what the model proposes is already held, so it is rehearsed, not copied
    endpoint.answers += [proposing("Keeps bees on the office roof"),
                         proposing("Drinks green tea every morning")]
    r = run_cli("--home", str(home), "extract", "--subject", "alice", "--json")
    assert r.code == 0, r.err
    again = json.loads(r.out)
    assert again["outcomes"] == ["rehearsed", "rehearsed"]
    assert again["atom_ids"] == out["atom_ids"][:2]
    assert "recorded 0 inferred memories from 2 artifact(s), 2 already known" in r.err
    assert len(_memories(home)) == 3


@pytest.mark.parametrize("answer, code, words", [
    (completion("not json at all"), 2, "not one JSON object"),
    (completion('{"memories": [{"text": "x", "kind": "rumour", "artifact_ids": ["a"]}]}'), 2,
     "memories.0.kind"),
    (completion("", refusal="I can't help with that."), 2, "the model refused"),
    (completion('{"memories": [', finish="length"), 2, "cut off at its token limit"),
    (lambda _b: JSONResponse({"error": "boom"}, status_code=500), 3, "answered HTTP 500"),
    (lambda _b: JSONResponse({"error": "no"}, status_code=401), 3,
     "hint: check the key in LEDGER_EXTRACT_API_KEY"),
    (lambda _b: JSONResponse({"object": "list", "data": []}), 2, "not a chat completion"),
    (completion("{}", model="bad\nname"), 2, "model's name is not a plain name"),
])
def test_a_refused_or_malformed_endpoint_answer_writes_nothing(
        home: Path, tmp_path: Path, endpoint: Endpoint,
        answer: Callable[[dict[str, Any]], Response], code: int, words: str) -> None:
    _import_chats(home, tmp_path)
    listed = _memories(home)
    before = home_digest(home)
    # the first artifact's answer is good, the second's is not: the batch writes nothing
    endpoint.answers += [proposing("Keeps bees"), answer]
    r = run_cli("--home", str(home), "extract", "--subject", "alice")
    assert r.code == code, r.err
    assert words in r.err and "nothing was written" in r.err
    assert KEY not in r.err + r.out and "bees" not in r.err + r.out
    assert home_digest(home) == before and _memories(home) == listed


def test_endpoint_extraction_is_off_unless_configured(home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(home)
    for var in ("LEDGER_EXTRACT_URL", "LEDGER_EXTRACT_MODEL", "LEDGER_EXTRACT_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    before = home_digest(home)
    r = run_cli("--home", str(home), "extract", "chat_alice")
    assert r.code == 3 and "no model endpoint is configured" in r.err
    assert "nothing leaves this machine" in r.err and "[extract]" in r.err
    config = home / "config.toml"
    original = config.read_text()
    cases = [
        ('[extract]\nurl = "http://127.0.0.1:9/v1"\nmodel = "m"\napi_key = "sk-x"\n',
         "API key in clear"),
        ('[extract]\nurl = "http://models.example.com/v1"\nmodel = "m"\n',
         "remote host over plain http"),
        ('[extract]\nurl = "https://u:p@models.example.com/v1"\nmodel = "m"\n',
         "holds credentials"),
        ('[extract]\nurl = "https://models.example.com/v1"\nmodel = "m"\nsecret = 1\n',
         "unknown keys: secret"),
        ('[extract]\nurl = "https://models.example.com/v1"\nmodel = "m"\ntimeout = 0\n',
         "timeout must be"),
    ]
    for table, words in cases:
        config.write_text(original + "\n" + table)
        r = run_cli("--home", str(home), "extract", "chat_alice")
        assert r.code == 3 and words in r.err, (words, r.err)
        assert "sk-x" not in r.err
    config.write_text(original)
    assert home_digest(home) == before
    r = run_cli("--home", str(home), "extract")
    assert r.code == 2 and "give one ARTIFACT or --subject S" in r.err


def test_a_timeout_bounds_the_endpoint_call(home: Path, tmp_path: Path, endpoint: Endpoint,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(home)
    monkeypatch.setenv("LEDGER_EXTRACT_TIMEOUT", "0.5")

    def slow(body: dict[str, Any]) -> Response:
        time.sleep(3)
        return proposing("Too late")(body)

    endpoint.answers.append(slow)
    before = home_digest(home)
    started = time.monotonic()
    r = run_cli("--home", str(home), "extract", "chat_alice")
    assert r.code == 3 and "did not answer within 0.5 s" in r.err
    assert time.monotonic() - started < 2.5
    assert home_digest(home) == before
