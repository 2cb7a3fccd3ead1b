"""The typed Python client (memory_ledger_client, ADR 0057) against a real `ledger serve`,
sync and async, on SQLite and PostgreSQL; its retry rule against a scripted transport; and
the server's defects of issue 29 that the client's users met (each with its own test)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_ledger_client import (
    AsyncClient,
    BadInput,
    Client,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    RetryPolicy,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from memory_ledger_client._calls import next_link, retry_after

from .conftest import run_cli
from .serving import home_digest, issue, serving

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- the package
def test_the_client_imports_neither_the_server_nor_the_write_side() -> None:
    code = ("import sys, memory_ledger_client; heavy = ('eventsourcing', 'server', "
            "'fastapi', 'starlette', 'sqlalchemy', 'cryptography', 'governance', "
            "'projections', 'keys', 'mcp', 'uvicorn'); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True, cwd=REPO)
    assert r.stdout.strip() == "[]", r.stdout


# ----------------------------------------------------------------------------- retries
def _scripted(answers: list[httpx.Response], seen: list[httpx.Request]
              ) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    return httpx.MockTransport(handler)


def _problem(status: int, retry: str | None = None) -> httpx.Response:
    headers = {"Content-Type": "application/problem+json"}
    if retry is not None:
        headers["Retry-After"] = retry
    return httpx.Response(status, headers=headers, json={
        "type": f"https://memory-ledger.invalid/problems/{status}", "title": "t",
        "status": status, "detail": "busy"})


VERIFIED = {"ok": True, "events": 3, "checked_at": "2030-01-01T00:00:00Z"}


def test_a_503_is_retried_after_its_retry_after_seconds() -> None:
    seen: list[httpx.Request] = []
    waits: list[float] = []
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(503, "2"), _problem(429, "1"), httpx.Response(200, json=VERIFIED)], seen))
    with Client(token="t", http=http, sleep=waits.append) as c:
        assert c.verification().events == 3
    assert waits == [2.0, 1.0] and len(seen) == 3
    assert seen[0].headers["authorization"] == "Bearer t"


def test_retry_after_as_an_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 18 <= (retry_after(when) or 0) <= 20
    assert retry_after("7") == 7.0 and retry_after("soon") is None and retry_after(None) is None
    seen: list[httpx.Request] = []
    waits: list[float] = []
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(503, when), httpx.Response(200, json=VERIFIED)], seen))
    with Client(http=http, sleep=waits.append) as c:
        c.verification()
    assert len(waits) == 1 and 18 <= waits[0] <= 20


def test_retries_are_bounded_and_a_long_retry_after_is_not_waited() -> None:
    seen: list[httpx.Request] = []
    waits: list[float] = []
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(503)] * 3, seen))
    with Client(http=http, sleep=waits.append, retry=RetryPolicy(retries=2)) as c:
        with pytest.raises(Unavailable) as e:
            c.verification()
    assert len(seen) == 3 and waits == [0.5, 1.0] and e.value.detail == "busy"
    seen.clear()
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(429, "3600")], seen))
    with Client(http=http, sleep=waits.append) as c, pytest.raises(RateLimited) as r:
        c.verification()
    assert len(seen) == 1 and r.value.retry_after == 3600.0


def test_a_write_is_retried_only_when_it_may_be_sent_twice() -> None:
    seen: list[httpx.Request] = []
    waits: list[float] = []
    added = httpx.Response(201, json={"atom_id": "a1"})
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(503, "1"), added], seen))
    with Client(http=http, sleep=waits.append) as c:
        with pytest.raises(Unavailable):  # an add is not idempotent: the caller decides
            c.remember("Likes tea", subject="u1")
        assert len(seen) == 1 and not waits
        seen.clear()
        http.close()
    http = httpx.Client(base_url="http://ledger.test", transport=_scripted(
        [_problem(503, "1"), added], seen))
    with Client(http=http, sleep=waits.append) as c:  # with a key, it may be resent
        assert c.remember("Likes tea", subject="u1", idempotency_key="k-1").atom_id == "a1"
    assert len(seen) == 2 and waits == [1.0]
    assert {r.headers["idempotency-key"] for r in seen} == {"k-1"}
    assert json.loads(seen[0].content) == {"subject": "u1", "text": "Likes tea",
                                           "kind": "fact"}


def test_the_async_client_retries_the_same_way() -> None:
    seen: list[httpx.Request] = []
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _problem(503, "4") if len(seen) == 1 else httpx.Response(200, json=VERIFIED)

    async def run() -> None:
        http = httpx.AsyncClient(base_url="http://ledger.test",
                                 transport=httpx.MockTransport(handler))
        async with AsyncClient(http=http, sleep=sleep) as c:
            assert (await c.verification()).ok

    asyncio.run(run())
    assert waits == [4.0] and len(seen) == 2


def test_next_link_reads_rel_next() -> None:
    r = httpx.Response(200, headers={"Link": '</v1/memories?limit=1&after=a1>; rel="next"'})
    assert next_link(r) == "/v1/memories?limit=1&after=a1"
    assert next_link(httpx.Response(200)) is None


# ----------------------------------------------------------------------------- a real server
# the client is the unit: the routes on PostgreSQL are test_server.py's
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_memory_flow_with_the_sync_client(home: Path) -> None:
    """One subject's token: the subject may be left out (issue 29: it means the token's
    only subject); typed answers, pages as an iterator, problems as typed exceptions."""
    h = str(home)
    for ref in ("user_9f4e", "user_7a1c"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    _, one = issue(home, "assistant-1", "assistant", ["user_9f4e"])
    _, two = issue(home, "assistant-2", "assistant", ["user_9f4e", "user_7a1c"])
    with serving(home) as server, Client(server.url, token=one) as c, \
            Client(server.url, token=two) as both:
        assert c.health() == {"status": "ok"}
        first = c.remember("Prefers direct feedback", kind="preference", ref="atom_001")
        c.add_atoms([_atom("Reads on the train"), _atom("Drinks green tea")])
        found = c.recall("feedback style", k=3, rehearse=False)
        assert "Prefers direct feedback" in found.prompt
        assert found.items[0].atom_id == first.atom_id
        rows = list(c.memories("user_9f4e", page_size=1))  # three pages, one row each
        assert sorted(r.text or "" for r in rows) == [
            "Drinks green tea", "Prefers direct feedback", "Reads on the train"]
        assert c.get_atom("atom_001").atom_id == first.atom_id
        corrected = c.correct_atom("atom_001", text="Prefers direct feedback, in writing",
                                   reason="asked")
        assert first.atom_id in {e.atom_id for e in c.history(first.atom_id)}
        gone = c.delete_atom(corrected.new_atom_id, "asked to forget")
        assert gone.tombstone_ids and c.get_atom(corrected.new_atom_id).content_erased
        # a credential of two subjects must name one: refused, nothing written
        before = home_digest(home)
        with pytest.raises(BadInput) as e:
            both.recall("tea")
        assert "name the subject" in e.value.detail and "2 subjects" in e.value.detail
        with pytest.raises(BadInput):
            both.remember("Likes jazz")
        assert len(both.recall("tea", subject="user_7a1c", rehearse=False).items) == 0
        # a schema error is 422, a rule's refusal 400 (the README says both)
        from service.models import AtomIn

        with pytest.raises(InvalidRequest) as invalid:  # a model the client did not check
            c.add_atoms([AtomIn.model_construct(text="")])
        assert invalid.value.status == 422 and invalid.value.errors[0]["field"] == "0.text"
        # outside the scope reads as unknown: same class, same words, same hint
        with pytest.raises(NotFound) as other:
            c.get_subject("user_7a1c")
        with pytest.raises(NotFound) as unknown:
            c.get_subject("user_0000")
        assert other.value.hint == unknown.value.hint and other.value.hint
        assert other.value.detail.replace("user_7a1c", "X") == \
            unknown.value.detail.replace("user_0000", "X")
        with pytest.raises(Forbidden):  # the hint's way out answers 403 outside the scope:
            c.register_subject("user_7a1c")  # so the hint must not promise it
        assert "register it first" not in (other.value.hint or "")
        assert home_digest(home) == before
    readme = (REPO / "README.md").read_text("utf-8")  # it says what the server answers
    assert "400 `bad-input`" in readme and "422 `invalid-request`" in readme
    assert "400 over HTTP)" not in readme


def _atom(text: str) -> Any:
    from service.models import AtomIn

    return AtomIn(text=text)


# the client is the unit: the routes on PostgreSQL are test_server.py's
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_erasure_flow_with_the_async_client(home: Path, tmp_path: Path) -> None:
    """File (assistant), plan (auditor), a stale approval refused leaving every file of the
    home byte-identical (issue 29: it bumped projections.sqlite), execute, pack (operator)."""
    h = str(home)
    assert run_cli("--home", h, "subject", "add", "user_7a1c").code == 0
    _, asst = issue(home, "assistant-1", "assistant", ["user_7a1c"])
    _, op = issue(home, "operator-1", "operator")
    _, aud = issue(home, "auditor-1", "auditor")

    async def flow(url: str) -> tuple[str, bytes]:
        async with AsyncClient(url, token=asst) as c, AsyncClient(url, token=op) as o, \
                AsyncClient(url, token=aud) as a:
            await c.remember("Prefers aisle seats on long flights")
            await c.remember("Drinks green tea in the morning")
            filed = await c.file_request("user_7a1c", "GDPR Art. 17",
                                         legal_basis="GDPR Art. 17(1)(a)")
            assert filed.status == "open"
            # a stale digest, refused while the read models are behind the log (two adds
            # and the request since they last caught up): every file byte-identical
            before = home_digest(home)
            with pytest.raises(Conflict) as stale:
                await o.execute(filed.request_id, "sha256:" + "0" * 64)
            assert "nothing was written" in stale.value.detail
            assert home_digest(home) == before
            plan = await a.plan(filed.request_id)
            assert len(plan.targets["atoms"]) == 2
            before = home_digest(home)
            with pytest.raises(Conflict):
                await o.execute(filed.request_id, "sha256:" + "1" * 64)
            assert home_digest(home) == before
            with pytest.raises(Forbidden):
                await c.execute(filed.request_id, plan.plan_digest)
            assert len([m async for m in c.memories(page_size=1)]) == 2
            done = await o.execute(filed.request_id, plan.plan_digest)
            assert done.batch_id
            assert (await c.request_status(filed.request_id)).status == "completed"
            assert [r.request_id for r in await o.requests("completed")] == [filed.request_id]
            left = [m async for m in c.memories()]
            assert all(m.content_erased for m in left), left
            pack = await o.evidence_pack(done.batch_id)
            assert (await a.verification()).ok
            return done.batch_id, pack

    with serving(home) as server:
        _, pack = asyncio.run(flow(server.url))
    (tmp_path / "pack.zip").write_bytes(pack)
    v = run_cli("verify-pack", str(tmp_path / "pack.zip"), "--root-key",
                str(home / "keys" / "root.pub"))
    assert v.code == 0, v.err


# ----------------------------------------------------------------------------- defects
def _raw(url: str, request: bytes, chunk: int | None = None) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        if chunk is None:
            s.sendall(request)
        else:
            for i in range(0, len(request), chunk):
                s.sendall(request[i:i + chunk])
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            part = s.recv(65536)
            if not part:
                return out
            out += part


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_header_block_over_16_kib_is_refused_with_431_however_it_is_read(
        home: Path) -> None:
    _, tok = issue(home, "a", "assistant", ["u1"])
    with serving(home) as server:
        before = home_digest(home)
        for size in (40 * 1024, 120 * 1024):
            padding = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000)
                               for i in range(size // 1012))
            request = (b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"
                       b"Authorization: Bearer " + tok.encode() + b"\r\n" + padding +
                       b"Connection: close\r\n\r\n")
            for chunk in (None, 4096):  # one write; many small ones
                answer = _raw(server.url, request, chunk)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 431"), (size, chunk, head[:80])
                assert b"application/problem+json" in head
                assert json.loads(body)["status"] == 431
        small = _raw(server.url, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n"
                                 b"Connection: close\r\n\r\n")
        assert small.startswith(b"HTTP/1.1 200")
        assert home_digest(home) == before


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_health_is_in_the_openapi_document_and_a_fresh_verification_says_nothing_was_checked(
        home: Path) -> None:
    _, aud = issue(home, "auditor-1", "auditor")
    with serving(home) as server, Client(server.url, token=aud) as a:
        doc = a.http.get("/v1/openapi.json").json()
        assert doc["paths"]["/v1/health"]["get"]["security"] == []
        fresh = a.verification()
    assert fresh.events == 0 and fresh.checked is False
    assert fresh.detail is not None and "nothing was checked yet" in fresh.detail
    committed = json.loads((REPO / "docs" / "openapi.json").read_text("utf-8"))
    assert "/v1/health" in committed["paths"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the client is the unit
def test_typed_exceptions_carry_the_problem(home: Path) -> None:
    _, tok = issue(home, "a", "assistant", ["u1"])
    with serving(home) as server:
        with Client(server.url, token="not-a-token") as bad, \
                pytest.raises(Unauthorized) as e:
            bad.get_subject("u1")
        assert e.value.status == 401 and e.value.hint
        with Client(server.url, token=tok) as c:
            with pytest.raises(TooLarge) as big:  # the body bound, before it is read
                c.import_document(b"x" * (33 * 1024 * 1024), "text", subject="u1")
            assert big.value.status == 413 and big.value.slug == "too-large"
            with pytest.raises(NotFound) as nf:
                c.get_atom("atom_none")
            assert nf.value.slug == "not-found" and nf.value.problem["status"] == 404


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_readme_client_block_runs_against_a_server(home: Path) -> None:
    import os
    import re

    readme = (REPO / "README.md").read_text("utf-8")
    section = readme[readme.index("## For assistant builders: the server"):]
    script = re.search(r"```python\n(.*?)```", section, re.S)
    assert script and "memory_ledger_client" in script.group(1)
    assert run_cli("--home", str(home), "subject", "add", "user_42").code == 0
    _, tok = issue(home, "assistant-1", "assistant", ["user_42"])
    with serving(home) as server:
        env = {**os.environ, "LEDGER_URL": server.url, "LEDGER_TOKEN": tok}
        r = subprocess.run([sys.executable, "-c", script.group(1)], capture_output=True,
                           text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert "What you remember" in r.stdout and "Prefers short answers" in r.stdout
    assert "no atom 'atom_of_someone_else'" in r.stdout
