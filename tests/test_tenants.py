"""One ledger per tenant behind one server (ADR 0061), on SQLite and PostgreSQL.

A fleet of two tenants, acme and beta, each its own ledger, served by one `ledger serve`.
The authorization matrix of tests/test_server_authz.py is sent to acme's ids with every
credential of beta (its operator, auditor and assistant, with and without a Ledger-Tenant
header naming acme) and a fleet-wide auditor that names beta: every call that names
acme's memories is refused, no answer holds acme's content or ids, and acme's ledger is
byte for byte what it was. The MCP tools likewise. Then acme is offboarded with one
command while the server runs: its tokens are refused, its Evidence Pack verifies
offline, and no byte of its markers is left in the fleet's files or database.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from credentials.fleet import FleetWithTokens as Fleet

from .conftest import PG_URL, RawStore, drop_schema, pg_connect, run_cli
from .serving import Server, home_digest, serving
from .test_mcp import _foreign_calls, _refused
from .test_server_authz import endpoints, seed

pytestmark = pytest.mark.slow

MARKERS = ["Grows tomatoes on the balcony", "Chat about the garden party",
           "Keeps bees on the roof", "Likes rain", "balcony"]


@dataclass
class World:
    fleet: Path
    server: Server
    schema: str | None
    ids: dict[str, str]
    tokens: dict[str, str]

    @property
    def acme(self) -> Path:
        return self.fleet / "tenants" / "acme"


def _seed_acme(home: Path) -> dict[str, str]:
    """The world of tests/test_server_authz.py, and bob's memory of tests/test_mcp.py."""
    ids = seed(home)
    r = run_cli("--home", str(home), "atom", "add", "--subject", "bob", "--ref", "bob_1",
                "--text", "Keeps bees on the roof")
    assert r.code == 0, r.err
    ids["bob_atom"] = r.out.strip()
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[World]:
    pg = request.param == "postgres"
    schema = f"f{uuid.uuid4().hex[:10]}" if pg else None
    fleet = tmp_path_factory.mktemp("fleet") / "fleet"
    r = run_cli("--home", str(fleet), "tenants", "init",
                *(["--db", f"{PG_URL}?schema={schema}"] if pg else []))
    assert r.code == 0, r.err
    for name in ("acme", "beta"):
        r = run_cli("--home", str(fleet), "tenants", "create", name)
        assert r.code == 0, r.err
    ids = _seed_acme(fleet / "tenants" / "acme")
    beta = str(fleet / "tenants" / "beta")
    assert run_cli("--home", beta, "subject", "add", "dave").code == 0
    assert run_cli("--home", beta, "atom", "add", "--subject", "dave", "--text",
                   "Plays the oboe").code == 0
    tokens: dict[str, str] = {}
    with Fleet.open(fleet) as f:
        for key, name, role, tenant, subjects in (
                ("acme_op", "acme-op", "operator", "acme", ()),
                ("acme_bob", "acme-bob", "assistant", "acme", ("bob",)),
                ("beta_op", "beta-op", "operator", "beta", ()),
                ("beta_aud", "beta-aud", "auditor", "beta", ()),
                ("beta_asst", "beta-asst", "assistant", "beta", ()),
                ("fleet_aud", "fleet-aud", "auditor", None, ())):
            tokens[key] = f.issue_token(name, role, tenant, subjects).token
    try:
        with serving(fleet) as server:
            with server.client(tokens["acme_op"]) as c:
                got = c.post("/v1/requests", json={"subject": "alice", "reason": "GDPR"})
                assert got.status_code == 201, got.text
                ids["request"] = got.json()["request_id"]
            yield World(fleet, server, schema, ids, tokens)
    finally:
        if pg:
            for s in (schema, f"{schema}_acme", f"{schema}_beta"):
                drop_schema(str(s))


def _state(world: World) -> tuple[dict[str, str], Any]:
    raw = RawStore(world.acme)
    return home_digest(world.acme), raw.rows() if raw.pg else None


def _send(client: httpx.Client, method: str, path: str, body: Any, token: str,
          tenant: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if tenant is not None:
        headers["Ledger-Tenant"] = tenant
    kwargs: dict[str, Any] = {}
    if isinstance(body, str):
        kwargs["content"] = body.encode()
        headers["Content-Type"] = "text/plain"
    elif body is not None:
        kwargs["json"] = body
    return client.request(method, path, headers=headers, **kwargs)


def test_another_tenants_credentials_reach_nothing_of_this_tenant(world: World) -> None:
    before = _state(world)
    t = world.tokens
    leaks = [world.ids["atom"], world.ids["artifact"], world.ids["bob_atom"],
             world.ids["request"], world.ids["batch"], *MARKERS[:3]]
    with Fleet.open(world.fleet) as f:
        leaks.append(f.tenant("acme").ledger_id)
    others = [("beta operator", t["beta_op"], None), ("beta auditor", t["beta_aud"], None),
              ("beta assistant", t["beta_asst"], None),
              ("beta operator naming acme", t["beta_op"], "acme"),
              ("beta assistant naming acme", t["beta_asst"], "acme"),
              ("fleet auditor naming beta", t["fleet_aud"], "beta")]
    unexpected: list[str] = []
    cases = 0
    client = httpx.Client(base_url=world.server.url, timeout=60)
    for method, path, body, _needs, scoped in endpoints(world.ids):
        if path == "/v1/subjects":  # registering 'alice' in beta makes beta's own alice
            continue
        for label, token, tenant in others:
            cases += 1
            r = _send(client, method, path, body, token, tenant)
            if (scoped or tenant == "acme") and r.status_code not in (403, 404):
                unexpected.append(f"{method} {path} [{label}]: {r.status_code}")
            if r.status_code >= 500:
                unexpected.append(f"{method} {path} [{label}]: {r.status_code}")
            asked = path + json.dumps(body)  # an id the request named may be echoed
            found = [x for x in leaks if x in r.text and x not in asked]
            if found:
                unexpected.append(f"{method} {path} [{label}]: answer holds {found}")
    # the same paths with acme's own credential do reach acme's ledger (the routing works)
    mine = _send(client, "GET", f"/v1/atoms/{world.ids['atom']}", None, t["acme_op"], None)
    assert mine.status_code == 200 and "tomatoes" in mine.text
    fleet_wide = _send(client, "GET", "/v1/atoms/atom_a", None, t["fleet_aud"], "acme")
    assert fleet_wide.status_code == 200 and "tomatoes" in fleet_wide.text
    no_tenant = _send(client, "GET", "/v1/atoms/atom_a", None, t["fleet_aud"], None)
    assert no_tenant.status_code == 400 and "Ledger-Tenant" in no_tenant.text
    client.close()
    print(f"cross-tenant matrix: {cases} calls of beta's credentials on acme's ids")
    assert not unexpected, "\n".join(unexpected)
    assert _state(world) == before, "another tenant's request changed acme's ledger"


def _mcp(url: str, token: str, tenant: str | None = None) -> Any:
    import httpx2

    headers = {"Authorization": f"Bearer {token}"}
    if tenant is not None:
        headers["Ledger-Tenant"] = tenant
    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers,
                                                                      timeout=60))


def test_every_tool_of_another_tenant_is_refused_acmes_memories(world: World) -> None:
    url = f"{world.server.url}/mcp"
    t = world.tokens

    async def control() -> None:
        async with Client(_mcp(url, t["acme_bob"])) as c:  # acme's own: bob is there
            listed = await c.call_tool("list_memories", {"subject": "bob"})
            assert not listed.is_error and "Keeps bees" in json.dumps(
                listed.structured_content)

    anyio.run(control)
    before = _state(world)

    async def run() -> int:
        n = 0
        for token, tenant in ((t["beta_asst"], None), (t["beta_op"], None),
                              (t["fleet_aud"], "beta")):
            async with Client(_mcp(url, token, tenant)) as c:
                for name, args in _foreign_calls(world.ids["bob_atom"]):
                    text = _refused(await c.call_tool(name, args))
                    assert "Keeps bees" not in text
                    n += 1
                with pytest.raises(MCPError):
                    await c.read_resource("memory://subjects/bob/memories")
        with pytest.raises(ExceptionGroup):  # beta's token naming acme: refused at the door
            async with Client(_mcp(url, t["beta_asst"], "acme")) as c:
                await c.list_tools()
        return n

    cases = anyio.run(run)
    print(f"MCP: {cases} tool calls of beta's credentials refused")
    assert _state(world) == before


def _pg_text(schemas: list[str]) -> str:
    """Every row of every table of ``schemas``, as text (what a dump of them holds)."""
    out: list[str] = []
    with pg_connect() as conn:
        for schema in schemas:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,)).fetchall()]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"').fetchall():
                    out.append(repr(row))
    return "\n".join(out)


def test_offboarded_tenant_leaves_a_verified_pack_and_no_byte_of_its_markers(
        world: World, tmp_path: Path) -> None:
    t = world.tokens
    pack = tmp_path / "acme-pack"
    r = run_cli("--home", str(world.fleet), "tenants", "offboard", "acme", "--reason",
                "contract ended", "--out", str(pack), "--yes", "--json")
    assert r.code == 0, r.err
    done = json.loads(r.out)
    assert done["targets"]["atoms"] >= 2 and done["kek_epochs_destroyed"]
    assert len(done["tokens_revoked"]) == 2
    # the server refuses acme from now on; beta is served as before
    with httpx.Client(base_url=world.server.url, timeout=60) as c:
        assert _send(c, "GET", "/v1/checkpoint", None, t["acme_op"], None).status_code == 401
        gone = _send(c, "GET", "/v1/checkpoint", None, t["fleet_aud"], "acme")
        assert gone.status_code == 404
        assert _send(c, "GET", "/v1/subjects/dave", None, t["beta_asst"],
                     None).status_code == 200
    v = run_cli("verify-pack", str(pack))
    assert v.code == 0, v.err
    assert run_cli("verify-pack", str(pack) + ".zip").code == 0
    listed = json.loads(run_cli("--home", str(world.fleet), "tenants", "list", "--all",
                                "--json").out)
    acme = next(x for x in listed if x["name"] == "acme")
    assert acme["state"] == "offboarded" and acme["evidence"] == done["statement_sha256"]
    assert not world.acme.exists()
    needles = [m.encode() for m in MARKERS]
    for folder in (world.fleet, pack):
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert not [n for n in needles if n in data], path
    if world.schema is not None:
        with pg_connect() as conn:
            left = {r[0] for r in conn.execute(
                "SELECT schema_name FROM information_schema.schemata").fetchall()}
        assert f"{world.schema}_acme" not in left and f"{world.schema}_beta" in left
        text = _pg_text([world.schema, f"{world.schema}_beta"])
        assert "'dave'" in text  # the dump reads beta's rows (its subject's ref)
        assert not [m for m in MARKERS if m in text]
