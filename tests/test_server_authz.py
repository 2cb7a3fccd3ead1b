"""Authorization matrix of `ledger serve`: every endpoint x every bad credential.

Each case is refused (401 for no, malformed, expired or revoked credentials; 404 for an id
outside the credential's subjects or tenant; 403 for a role that may not act), and after
the whole matrix the ledger is exactly what it was: the home's files hash the same and,
on PostgreSQL, the event rows are the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.application import LedgerApp

from .conftest import PG_URL, RawStore, drop_schema, run_cli
from .serving import Server, home_digest, issue, revoke, serving

pytestmark = pytest.mark.slow


@dataclass
class World:
    home: Path
    server: Server
    ids: dict[str, str]
    tokens: dict[str, str]


def seed(home: Path) -> dict[str, str]:
    """The matrix's ledger: alice with an artifact and an atom, bob, and carol erased;
    the ids of the artifact, the atom and carol's batch (tests/test_tenants.py too)."""
    import json

    h = str(home)
    ids: dict[str, str] = {}
    for ref in ("alice", "carol", "bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    r = run_cli("--home", h, "artifact", "add", "--subject", "alice", "--kind", "chat",
                "--ref", "art_a", "--body", "Chat about the garden party")
    assert r.code == 0, r.err
    ids["artifact"] = r.out.strip()
    r = run_cli("--home", h, "atom", "add", "--subject", "alice", "--ref", "atom_a",
                "--text", "Grows tomatoes on the balcony")
    ids["atom"] = r.out.strip()
    run_cli("--home", h, "atom", "add", "--subject", "carol", "--text", "Collects stamps")
    r = run_cli("--home", h, "redact-user", "carol", "--reason", "GDPR Art. 17",
                "--operator", "operator", "--yes", "--json")
    assert r.code == 0, r.err
    ids["batch"] = json.loads(r.out)["batch_id"]
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[World]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    home = tmp_path_factory.mktemp("authz") / "home"
    LedgerApp.initialize(home, db=None if request.param == "sqlite"
                         else f"{PG_URL}?schema={schema}")
    ids = seed(home)
    tokens = {}
    _, tokens["operator"] = issue(home, "op", "operator")
    _, tokens["auditor"] = issue(home, "aud", "auditor")
    _, tokens["alice"] = issue(home, "assistant-a", "assistant", ["alice", "carol"])
    _, tokens["bob"] = issue(home, "assistant-b", "assistant", ["bob"])
    _, tokens["tenant"] = issue(home, "tenant-z", "assistant", tenant="zeta")
    _, tokens["agent"] = issue(home, "CR_AGENT", "privacy-agent")  # DRP only (ADR 0056)
    _, tokens["expired"] = issue(home, "expired-a", "assistant", ["alice"],
                                 expires_at=datetime.now(UTC) + timedelta(seconds=2))
    revoked_id, tokens["revoked"] = issue(home, "revoked-a", "assistant", ["alice"])
    with serving(home) as server:
        with server.client(tokens["operator"]) as c:
            r2 = c.post("/v1/requests", json={"subject": "alice", "reason": "GDPR Art. 17"})
            assert r2.status_code == 201, r2.text
            ids["request"] = r2.json()["request_id"]
            # the revoked token worked once, then was revoked
        with server.client(tokens["revoked"]) as c:
            assert c.get("/v1/atoms/atom_a").status_code == 200
        revoke(home, revoked_id)
        import time

        time.sleep(6)  # past the token cache's revocation bound and the expiry above
        yield World(home, server, ids, tokens)
    if request.param == "postgres":
        drop_schema(schema)


# (method, path, json body, operator-only, subject-scoped)
def endpoints(ids: dict[str, str]) -> list[tuple[str, str, Any, str, bool]]:
    atom, art, req, batch = ids["atom"], ids["artifact"], ids["request"], ids["batch"]
    memory = {"subject": "alice", "text": "Likes rain"}
    return [
        ("POST", "/v1/subjects", {"ref": "alice"}, "writer", True),
        ("GET", "/v1/subjects/alice", None, "reader", True),
        ("GET", "/v1/subjects/alice/state", None, "reader", True),
        ("GET", "/v1/subjects/alice/export?format=konshus", None, "reader", True),
        ("GET", "/v1/subjects/alice/export?format=mem", None, "reader", True),
        ("POST", "/v1/artifacts", {"subject": "alice", "kind": "chat", "body": "x"},
         "writer", True),
        ("GET", f"/v1/artifacts/{art}", None, "reader", True),
        ("POST", f"/v1/artifacts/{art}/deletions", {"reason": "test"}, "writer", True),
        ("DELETE", f"/v1/artifacts/{art}?reason=test", None, "writer", True),
        ("POST", "/v1/atoms", memory, "writer", True),
        ("POST", "/v1/atoms/batch", [memory, memory], "writer", True),
        ("GET", f"/v1/atoms/{atom}", None, "reader", True),
        ("GET", "/v1/atoms/atom_a", None, "reader", True),
        ("GET", f"/v1/atoms/{atom}/history", None, "reader", True),
        ("POST", f"/v1/atoms/{atom}/corrections", {"text": "Grows basil"}, "writer", True),
        ("POST", f"/v1/atoms/{atom}/redactions", {"mode": "hard", "reason": "x"},
         "operator", True),
        ("POST", f"/v1/atoms/{atom}/deletions", {"reason": "test"}, "writer", True),
        ("DELETE", f"/v1/atoms/{atom}?reason=test", None, "writer", True),
        ("POST", "/v1/rehearsals", {"atom_ids": [atom]}, "writer", True),
        ("POST", "/v1/recall", {"subject": "alice", "query": "tomatoes"}, "reader", True),
        ("GET", "/v1/memories?subject=alice", None, "reader", True),
        ("GET", f"/v1/memories/{atom}", None, "reader", True),
        ("POST", "/v1/imports?format=text&subject=alice", "I like jazz.", "writer", True),
        ("POST", "/v1/requests", {"subject": "alice", "reason": "x"}, "writer", True),
        ("GET", f"/v1/requests/{req}", None, "reader", True),
        ("GET", f"/v1/requests/{req}/plan", None, "audit", True),
        ("POST", f"/v1/requests/{req}/execute", {"plan_digest": "sha256:" + "0" * 64},
         "operator", True),
        ("POST", f"/v1/batches/{batch}/evidence-pack", None, "operator", True),
        ("GET", "/v1/verification", None, "audit", False),
        ("GET", "/v1/keys", None, "audit", False),
        ("GET", "/v1/checkpoint", None, "reader", False),
        ("GET", "/v1/requests", None, "reader", False),
    ]


MALFORMED = ["Bearer", "Basic dXNlcjpwYXNz", "Bearer a b", "Bearer mlt_\u00e9", "bearer x",
             "Bearer " + "A" * 5000, "Token abc"]


def _send(client: httpx.Client, method: str, path: str, body: Any, header: str | None
          ) -> int:
    headers: dict[str, Any] = {} if header is None else {
        "Authorization": header.encode("utf-8")}  # bytes: non-ASCII reaches the server
    kwargs: dict[str, Any] = {}
    if isinstance(body, str):
        kwargs["content"] = body.encode()
        headers["Content-Type"] = "text/plain"
    elif body is not None:
        kwargs["json"] = body
    return client.request(method, path, headers=headers, **kwargs).status_code


def _state(world: World) -> tuple[dict[str, str], Any]:
    raw = RawStore(world.home)
    return home_digest(world.home), raw.rows() if raw.pg else None


def test_every_endpoint_refuses_every_bad_credential_and_changes_nothing(world: World) -> None:
    before = _state(world)
    t = world.tokens
    cases = 0
    unexpected: list[str] = []
    client = httpx.Client(base_url=world.server.url, timeout=60)
    for method, path, body, needs, scoped in endpoints(world.ids):
        attempts: list[tuple[str, str | None, set[int]]] = [("no token", None, {401})]
        attempts += [(f"malformed {m[:12]!r}", m, {401}) for m in MALFORMED]
        attempts += [("expired", f"Bearer {t['expired']}", {401}),
                     ("revoked", f"Bearer {t['revoked']}", {401})]
        attempts.append(("privacy agent", f"Bearer {t['agent']}", {403}))
        if scoped:
            attempts.append(("wrong subject", f"Bearer {t['bob']}", {403, 404}))
            if path != "/v1/subjects":  # a tenant registering 'alice' makes zeta:alice
                attempts.append(("wrong tenant", f"Bearer {t['tenant']}", {403, 404}))
        if needs in ("operator", "audit"):
            attempts.append(("assistant on an operator act", f"Bearer {t['alice']}", {403}))
        if needs in ("writer", "operator"):
            attempts.append(("auditor writing", f"Bearer {t['auditor']}", {403}))
        for label, header, allowed in attempts:
            cases += 1
            status = _send(client, method, path, body, header)
            if status not in allowed:
                unexpected.append(f"{method} {path} [{label}]: {status}, expected {allowed}")
    client.close()
    print(f"authorization matrix: {cases} refused cases")
    assert not unexpected, "\n".join(unexpected)
    assert _state(world) == before, "a refused request changed the ledger"


def test_refusals_name_no_token_and_no_reason(world: World) -> None:
    for header in (None, f"Bearer {world.tokens['revoked']}", f"Bearer {world.tokens['expired']}",
                   "Bearer mlt_0000000000000000_" + "A" * 43):
        r = httpx.get(f"{world.server.url}/v1/atoms/atom_a", timeout=30,
                      headers={} if header is None else {"Authorization": header})
        assert r.status_code == 401
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["www-authenticate"].startswith("Bearer")
        body = r.text
        assert "revoked" not in body.split('"detail"')[0]
        if header:
            assert header.split()[1] not in body
    assert world.tokens["revoked"] not in world.server.output()
    assert world.tokens["operator"] not in world.server.output()
    assert "tomatoes" not in world.server.output()
