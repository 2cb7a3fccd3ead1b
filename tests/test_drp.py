"""The Data Rights Protocol (DRP 0.9.4, ADR 0056) as a privacy tool uses it.

A real `ledger serve` on SQLite and on PostgreSQL. Every request the tests send is the
signed body of DRP 0.9.4 (base64 of the Ed25519 signature and the JSON), validated
against ``schemas/drp/`` before it is sent; every answer is validated against the
Exercise Status or error schema. A deletion goes through the protocol's states to
fulfilled, with the digest of the Evidence Pack it names and hands over; refused
requests (wrong role, bad signature, replay, another business, another agent) leave
every file of the home and every row byte-identical.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from nacl.signing import SigningKey

from credentials.auth import InsufficientScope
from credentials.tokens import TokenStore
from ledger.application import LedgerApp
from ledger.home import Config
from service.drp import drp_state, schema_errors

from .conftest import PG_URL, RawStore, drop_schema, pg_connect, run_cli
from .serving import Server, home_digest, issue, serving
from .test_server_authz import endpoints

pytestmark = pytest.mark.slow

BUSINESS = "ACME_MEMORY"


@dataclass
class World:
    home: Path
    server: Server
    key: SigningKey
    other_key: SigningKey
    tokens: dict[str, str]


def _directory(key: SigningKey, other: SigningKey) -> dict[str, Any]:
    def b64(k: SigningKey) -> str:
        return base64.b64encode(bytes(k.verify_key)).decode()

    return {"business": {"id": BUSINESS, "name": "Acme Memory",
                         "api_base": "https://ledger.example/drp",
                         "supported_actions": ["deletion", "access"],
                         "supported_verifications": ["email"]},
            "agents": [{"id": "CR_AGENT", "name": "Consumer agent", "verify_key": b64(key)},
                       {"id": "OTHER_AGENT", "verify_key": b64(other)}]}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[World]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    home = tmp_path_factory.mktemp("drp") / "home"
    LedgerApp.initialize(home, db=None if request.param == "sqlite"
                         else f"{PG_URL}?schema={schema}")
    h = str(home)
    for ref in ("alice", "bob", "dora", "erin"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
        r = run_cli("--home", h, "atom", "add", "--subject", ref,
                    "--text", f"{ref} grows tomatoes on the balcony")
        assert r.code == 0, r.err
    key, other = SigningKey.generate(), SigningKey.generate()
    doc = _directory(key, other)
    assert schema_errors("directory", doc) == []
    (home / "drp.json").write_text(json.dumps(doc))
    tokens = {}
    _, tokens["agent"] = issue(home, "CR_AGENT", "privacy-agent")
    _, tokens["other"] = issue(home, "OTHER_AGENT", "privacy-agent")
    _, tokens["operator"] = issue(home, "op", "operator")
    _, tokens["auditor"] = issue(home, "aud", "auditor")
    _, tokens["assistant"] = issue(home, "assistant-a", "assistant", ["alice"])
    with serving(home) as server:
        yield World(home, server, key, other, tokens)
    if request.param == "postgres":
        drop_schema(schema)


def _request(exercise: str, ident: Any = "alice", *, agent: str = "CR_AGENT",
             business: str = BUSINESS, issued: datetime | None = None,
             ttl: timedelta = timedelta(minutes=10), **extra: Any) -> dict[str, Any]:
    at = issued or datetime.now(UTC)
    doc: dict[str, Any] = {
        "agent-id": agent, "business-id": business,
        "issued-at": at.isoformat().replace("+00:00", "Z"),
        "expires-at": (at + ttl).isoformat().replace("+00:00", "Z"),
        "agent-request-id": f"req-{uuid.uuid4().hex[:8]}", "drp.version": "0.9.4",
        "exercise": exercise, "regime": "ccpa", "relationships": ["customer"],
        "name": "Alice Example", "email": "alice@example.com", "email_verified": True,
        **extra}
    if ident is not None:
        doc["identifier"] = ident
    return doc


def _signed(doc: dict[str, Any], key: SigningKey, kind: str = "exercise-request") -> bytes:
    assert schema_errors(kind, doc) == [], "the test sends what DRP 0.9.4 defines"
    return base64.b64encode(bytes(key.sign(json.dumps(doc).encode())))


def _drp(world: World, method: str, path: str, token: str = "agent",  # noqa: S107 -- a key of world.tokens, not a secret
         body: bytes | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {world.tokens[token]}",
               "Content-Type": "text/plain"}
    return httpx.request(method, f"{world.server.url}/drp/v1{path}", headers=headers,
                         content=body, timeout=120)


def _status(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    assert schema_errors("exercise-status", doc) == [], doc
    return doc


def _error(r: httpx.Response, code: int) -> dict[str, Any]:
    assert r.status_code == code, r.text
    doc: dict[str, Any] = r.json()
    assert schema_errors("error", doc) == [], doc
    assert doc["code"] == str(code)
    return doc


def _exercise(world: World, doc: dict[str, Any]) -> dict[str, Any]:
    return _status(_drp(world, "POST", "/data-rights-request",
                        body=_signed(doc, world.key)))


def _erasure_request(world: World, ref: str) -> dict[str, Any]:
    with world.server.client(world.tokens["operator"]) as c:
        sid = c.get(f"/v1/subjects/{ref}").json()["subject_id"]
        rows = [r for r in c.get("/v1/requests").json() if r["subject_id"] == sid]
    assert len(rows) == 1, rows
    row: dict[str, Any] = rows[0]
    return row


def _state(world: World) -> tuple[dict[str, str], Any, Any]:
    raw = RawStore(world.home)
    drp = None
    if raw.pg:
        with pg_connect() as conn:
            drp = conn.execute(f'SELECT * FROM "{raw.schema}".drp_requests '
                               "ORDER BY request_id").fetchall()
    return home_digest(world.home), raw.rows() if raw.pg else None, drp


def test_deletion_through_the_protocol_states_to_fulfilled_with_the_pack(world: World
                                                                          ) -> None:
    doc = _request("deletion", "alice")
    first = _exercise(world, doc)
    assert first["status"] == "in_progress" and "reason" not in first
    assert first["agent_request_id"] == doc["agent-request-id"]
    assert "approve" in first["processing_details"]
    rid = first["request_id"]
    erasure = _erasure_request(world, "alice")
    assert erasure["status"] == "open" and first["expected_by"] == erasure["complete_due"]
    # nothing is erased until an operator approves and executes it
    assert _status(_drp(world, "GET", f"/data-rights-request/{rid}"))["status"] \
        == "in_progress"
    with world.server.client(world.tokens["assistant"]) as c:
        assert c.get("/v1/subjects/alice/state").status_code == 200
    with world.server.client(world.tokens["operator"]) as c:
        eid = erasure["request_id"]
        plan = c.get(f"/v1/requests/{eid}/plan").json()
        r = c.post(f"/v1/requests/{eid}/execute", json={"plan_digest": plan["plan_digest"]})
        assert r.status_code == 200, r.text
    done = _status(_drp(world, "GET", f"/data-rights-request/{rid}"))
    assert done["status"] == "fulfilled"
    assert done["results_url"] == f"/drp/v1/data-rights-request/{rid}/results"
    m = re.search(r"sha256:([0-9a-f]{64})", done["processing_details"])
    assert m is not None, done
    # the pack handed over is the one the status names, and it verifies
    from governance.certificate import pack_digest
    from governance.pack_verify import read_pack_zip, verify_pack_bytes

    r = httpx.get(f"{world.server.url}{done['results_url']}", timeout=120,
                  headers={"Authorization": f"Bearer {world.tokens['agent']}"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    files = read_pack_zip(r.content)
    assert pack_digest(files) == m.group(1)
    assert verify_pack_bytes(files).ok
    assert b"tomatoes" not in r.content
    # asked again: the same pack, not a new one
    again = _status(_drp(world, "GET", f"/data-rights-request/{rid}"))
    assert again["processing_details"] == done["processing_details"]
    # once executed, a revoke is refused and changes nothing
    before = _state(world)
    r = _drp(world, "DELETE", f"/data-rights-request/{rid}",
             body=_signed({"reason": "changed my mind"}, world.key, "revoke-request"))
    _error(r, 409)
    assert _state(world) == before
    # the other agent does not see this request
    _error(_drp(world, "GET", f"/data-rights-request/{rid}", token="other"), 403)
    assert world.tokens["agent"] not in world.server.output()
    assert "alice@example.com" not in world.server.output()
    # the identity's claims are in no file of the home in clear (the erasure request keeps
    # them encrypted under its own key; the DRP table keeps no claim)
    for f in world.home.rglob("*"):
        if f.is_file():
            assert b"alice@example.com" not in f.read_bytes(), f


def test_revoke_rejects_the_request_before_its_erasure(world: World) -> None:
    first = _exercise(world, _request("deletion", "bob"))
    rid = first["request_id"]
    r = _drp(world, "DELETE", f"/data-rights-request/{rid}",
             body=_signed({"reason": "I don't want my account deleted"}, world.key,
                          "revoke-request"))
    revoked = _status(r)
    assert revoked["status"] == "revoked" and revoked["request_id"] == rid
    erasure = _erasure_request(world, "bob")
    assert erasure["status"] == "rejected"
    assert erasure["rejection"]["code"] == "withdrawn"
    assert erasure["rejection"]["reason"] == "revoked by the requester"
    assert erasure["batch_id"] is None
    assert _status(_drp(world, "GET", f"/data-rights-request/{rid}"))["status"] == "revoked"
    with world.server.client(world.tokens["assistant"]) as c:  # nothing of bob's erased
        assert c.get("/v1/subjects/alice").status_code in (200, 404)
    with world.server.client(world.tokens["operator"]) as c:
        assert "bob grows" in json.dumps(c.get("/v1/subjects/bob/state").json())


def test_an_identity_matching_no_one_or_several_is_denied_and_files_nothing(world: World
                                                                            ) -> None:
    with world.server.client(world.tokens["operator"]) as c:
        before = len(c.get("/v1/requests").json())
    for ident in (None, "nobody", ["dora", "erin"]):
        denied = _exercise(world, _request("deletion", ident))
        assert denied["status"] == "denied" and denied["reason"] == "no_match", denied
        assert _status(_drp(world, "GET", f"/data-rights-request/{denied['request_id']}")) \
            == denied
    with world.server.client(world.tokens["operator"]) as c:
        assert len(c.get("/v1/requests").json()) == before
        for ref in ("dora", "erin"):
            assert "grows" in json.dumps(c.get(f"/v1/subjects/{ref}/state").json())


def test_access_is_fulfilled_with_the_subjects_export(world: World) -> None:
    body = _signed(_request("access", "dora"), world.key)
    status = _status(_drp(world, "POST", "/data-rights-request", body=body))
    # the same signed bytes again (a replay inside their validity): refused, nothing kept
    before = _state(world)
    again = _error(_drp(world, "POST", "/data-rights-request", body=body), 409)
    assert status["request_id"] in again["message"]
    assert _state(world) == before
    assert status["status"] == "fulfilled"
    r = httpx.get(f"{world.server.url}{status['results_url']}", timeout=60,
                  headers={"Authorization": f"Bearer {world.tokens['agent']}"})
    assert r.status_code == 200, r.text
    assert "dora grows tomatoes" in r.text and "erin" not in r.text
    r = httpx.get(f"{world.server.url}{status['results_url']}", timeout=60,
                  headers={"Authorization": f"Bearer {world.tokens['other']}"})
    _error(r, 403)


def test_refused_requests_change_nothing(world: World) -> None:
    _exercise(world, _request("access", "erin"))  # the table exists before the refusals
    before = _state(world)
    url = world.server.url
    now = datetime.now(UTC)
    refused: list[tuple[httpx.Response, int]] = []

    def post(body: bytes, token: str = "agent") -> httpx.Response:  # noqa: S107 -- a key
        return _drp(world, "POST", "/data-rights-request", token=token, body=body)

    good = _signed(_request("deletion", "erin"), world.key)
    for token in ("operator", "auditor", "assistant"):  # DRP refuses every other role
        refused.append((post(good, token), 403))
        refused.append((_drp(world, "GET", "/agent/CR_AGENT", token=token), 403))
    refused.append((httpx.post(f"{url}/drp/v1/data-rights-request", content=good), 401))
    refused.append((post(_signed(_request("deletion", "erin"), world.other_key)), 403))
    refused.append((post(good, "other"), 403))  # agent-id is CR_AGENT, the token OTHER
    refused.append((post(_signed(_request("deletion", "erin", business="ELSEWHERE"),
                                 world.key)), 403))
    refused.append((post(_signed(_request("deletion", "erin", issued=now - timedelta(
        minutes=30)), world.key)), 400))  # expired: a replay
    refused.append((post(_signed(_request("deletion", "erin", issued=now + timedelta(
        hours=1)), world.key)), 400))  # issued in the future
    refused.append((post(_signed(_request("sale:opt_out", "erin"), world.key)), 400))
    bad = _request("deletion", "erin")
    bad["drp.version"] = "0.9"
    assert schema_errors("exercise-request", bad) != []
    refused.append((post(base64.b64encode(bytes(world.key.sign(json.dumps(bad).encode())))),
                    400))
    refused.append((post(b"not base64 !"), 400))
    tampered = bytearray(base64.b64decode(good))
    tampered[-3] ^= 1
    refused.append((post(base64.b64encode(bytes(tampered))), 403))
    refused.append((_drp(world, "GET", f"/data-rights-request/{uuid.uuid4()}"), 403))
    refused.append((_drp(world, "DELETE", f"/data-rights-request/{uuid.uuid4()}",
                         body=_signed({}, world.key, "revoke-request")), 403))
    refused.append((_drp(world, "GET", "/agent/OTHER_AGENT"), 403))
    for r, code in refused:
        _error(r, code)
    # a privacy-agent token is refused by every other endpoint and by MCP
    ids = {"atom": "atom_x", "artifact": str(uuid.uuid4()), "request": str(uuid.uuid4()),
           "batch": str(uuid.uuid4())}
    with httpx.Client(base_url=url, timeout=60) as client:
        auth = {"Authorization": f"Bearer {world.tokens['agent']}"}
        for method, path, body, _needs, _scoped in endpoints(ids):
            kwargs: dict[str, Any] = {"content": body.encode()} if isinstance(body, str) \
                else {"json": body} if body is not None else {}
            r = client.request(method, path, headers=auth, **kwargs)
            assert r.status_code == 403, f"{method} {path}: {r.status_code}"
        r = client.post("/mcp/", headers={**auth, "Accept": "application/json, "
                                          "text/event-stream"},
                        json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                         "clientInfo": {"name": "t", "version": "1"}}})
        assert r.status_code == 403, r.text
    assert _state(world) == before, "a refused request changed the ledger"
    assert world.tokens["agent"] not in world.server.output()


def test_the_well_known_document_and_the_agent_endpoint(world: World) -> None:
    r = httpx.get(f"{world.server.url}/.well-known/data-rights.json", timeout=30)
    assert r.status_code == 200
    assert schema_errors("business", r.json()) == []
    assert r.json()["id"] == BUSINESS
    r = _drp(world, "GET", "/agent/CR_AGENT")
    assert r.status_code == 200 and r.json() == {}


def test_the_token_store_keeps_privacy_agents_to_the_drp(world: World) -> None:
    """Every surface but the DRP authenticates through TokenStore.authenticate (the API,
    MCP over HTTP, the console's sign-in): a privacy-agent token is refused there."""
    with TokenStore.open(Config.load(world.home)) as store:
        with pytest.raises(InsufficientScope):
            store.authenticate(world.tokens["agent"])
        assert store.authenticate_agent(world.tokens["agent"]).role == "privacy-agent"
        with pytest.raises(InsufficientScope):
            store.authenticate_agent(world.tokens["operator"])


def test_privacy_agent_tokens_are_named_by_their_agent_id(tmp_path: Path) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    r = run_cli("--home", str(home), "tokens", "create", "cr-agent", "--role",
                "privacy-agent")
    assert r.code == 2 and "agent-id" in r.err
    r = run_cli("--home", str(home), "tokens", "create", "CR_AGENT", "--role",
                "privacy-agent", "--subject", "alice")
    assert r.code == 2 and "--subject" in r.err
    r = run_cli("--home", str(home), "tokens", "create", "CR_AGENT", "--role",
                "privacy-agent", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["role"] == "privacy-agent"


@pytest.mark.parametrize(("erasure", "drp"), [
    ({"status": "open", "batch_id": None}, ("in_progress", None)),
    ({"status": "overdue", "batch_id": None}, ("in_progress", None)),
    ({"status": "partial", "batch_id": "b"}, ("in_progress", None)),
    ({"status": "completed", "batch_id": "b"}, ("fulfilled", None)),
    ({"status": "completed-late", "batch_id": "b"}, ("fulfilled", None)),
    ({"status": "rejected", "rejection": {"code": "withdrawn"}}, ("revoked", None)),
    ({"status": "rejected", "rejection": {"code": "identity-not-verified"}},
     ("denied", "insuf_verification")),
    ({"status": "rejected", "rejection": {"code": "legal-exemption"}},
     ("denied", "claim_not_covered")),
    ({"status": "rejected", "rejection": {"code": "excessive"}},
     ("denied", "too_many_requests")),
])
def test_erasure_states_map_onto_drp_states(erasure: dict[str, Any],
                                            drp: tuple[str, str | None]) -> None:
    out = drp_state({"state": "filed"}, erasure)
    assert (out["status"], out.get("reason")) == drp


def test_a_second_deletion_while_one_is_open_is_refused(world: World) -> None:
    first = _exercise(world, _request("deletion", "erin"))
    assert first["status"] == "in_progress"
    before = _state(world)
    r = _drp(world, "POST", "/data-rights-request",
             body=_signed(_request("deletion", "erin"), world.key))
    assert _error(r, 409)["fatal"] is False
    assert _state(world) == before
    # revoked, the person is left as they were, and a new request may be filed later
    r = _drp(world, "DELETE", f"/data-rights-request/{first['request_id']}",
             body=_signed({}, world.key, "revoke-request"))
    assert _status(r)["status"] == "revoked"


def test_a_request_signed_by_one_agent_is_refused_from_another(world: World) -> None:
    """Section 3.07 step 3: OTHER_AGENT signs, with its own key and token, a request
    claiming to come from CR_AGENT; the signature verifies, the agent-id does not match."""
    before = _state(world)
    doc = _request("deletion", "erin", agent="CR_AGENT")
    r = _drp(world, "POST", "/data-rights-request", token="other",
             body=_signed(doc, world.other_key))
    assert "agent-id" in _error(r, 403)["message"]
    assert _state(world) == before


def test_the_tenant_of_the_token_scopes_the_identity(tmp_path: Path) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    h = str(home)
    for ref in ("acme:alice", "zeta:alice", "zeta:bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    key = SigningKey.generate()
    (home / "drp.json").write_text(json.dumps(_directory(key, SigningKey.generate())))
    _, token = issue(home, "CR_AGENT", "privacy-agent", tenant="acme")
    _, op = issue(home, "op", "operator")
    world = World(home, None, key, key, {"agent": token})  # type: ignore[arg-type]
    with serving(home) as server:
        world.server = server
        denied = _exercise(world, _request("deletion", "bob"))  # zeta's bob: not acme's
        assert (denied["status"], denied["reason"]) == ("denied", "no_match")
        filed = _exercise(world, _request("deletion", "alice"))
        assert filed["status"] == "in_progress"
        with server.client(op) as c:
            rows = c.get("/v1/requests").json()
            refs = {c.get(f"/v1/subjects/{r['subject_id']}").json()["ref"] for r in rows}
        assert refs == {"acme:alice"}


def test_ledger_mcp_on_stdio_refuses_a_privacy_agent_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    _, token = issue(home, "CR_AGENT", "privacy-agent")
    before = home_digest(home)
    monkeypatch.setenv("LEDGER_TOKEN", token)
    r = run_cli("--home", str(home), "mcp")
    assert r.code != 0 and "Data Rights Protocol" in r.err and token not in r.err, r
    assert r.out == ""
    assert home_digest(home) == before


def test_the_console_refuses_a_privacy_agent_token(world: World) -> None:
    before = _state(world)
    with httpx.Client(base_url=world.server.url, follow_redirects=False, timeout=60) as c:
        form = c.get("/console/signin")
        m = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert m is not None
        r = c.post("/console/signin", data={"csrf": m[1], "token": world.tokens["agent"]})
        assert r.headers.get("location") != "/console/requests", r.text
        assert c.get("/console/requests").status_code in (303, 401, 403)
    assert _state(world) == before
