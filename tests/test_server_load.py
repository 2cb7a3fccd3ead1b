"""Load, bounded and on loopback only: 32 clients adding and recalling for 20 s (60 s or more
with ``LEDGER_LOAD_SECONDS`` for a soak) against two
`ledger serve` processes: on one SQLite ledger, then on a fleet of two tenants on
PostgreSQL (ADR 0061), each client with its tenant's token on either process.

Afterwards every acknowledged atom is in its own tenant's log exactly once (and in no
other's), `ledger verify` passes on each ledger, and no answer was an error other than
the documented 429/503 of an overloaded server.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from credentials.fleet import FleetWithTokens as Fleet
from ledger.application import LedgerApp
from ledger.domain import Atom

from .conftest import PG_URL, RawStore, drop_schema, run_cli
from .serving import issue, serving

pytestmark = pytest.mark.slow

CLIENTS = 32
SECONDS = float(os.environ.get("LEDGER_LOAD_SECONDS", "20"))
MAX_REQUESTS_PER_CLIENT = 5_000  # a bound on the count too, whatever the speed


async def _client(n: int, url: str, token: str, deadline: float, acked: list[str],
                  statuses: Counter[int], latencies: list[float]) -> None:
    rng = random.Random(n)
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 headers={"Authorization": f"Bearer {token}"}) as c:
        for i in range(MAX_REQUESTS_PER_CLIENT):
            if time.monotonic() > deadline:
                return
            t0 = time.perf_counter()
            if rng.random() < 0.7:
                r = await c.post("/v1/atoms", json={
                    "subject": "load", "text": f"client {n} remembers thing {i}"})
                if r.status_code == 201:
                    acked.append(r.json()["atom_id"])
            else:
                r = await c.post("/v1/recall", json={
                    "subject": "load", "query": f"thing {rng.randrange(100)}", "k": 5,
                    "rehearse": False})
            latencies.append(time.perf_counter() - t0)
            statuses[r.status_code] += 1
            if r.status_code in (429, 503):
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))


def _run(urls: list[str], tokens: list[str]) -> tuple[list[list[str]], Counter[int]]:
    """32 clients for SECONDS, client n on ``urls[n % 2]`` with ``tokens[(n // 2) % 2]``:
    the atoms each token's adds were acknowledged, and every answer's status."""
    acked: list[list[str]] = [[] for _ in tokens]
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    deadline = time.monotonic() + SECONDS

    async def run() -> None:
        await asyncio.gather(*[
            _client(n, urls[n % 2], tokens[(n // 2) % len(tokens)], deadline,
                    acked[(n // 2) % len(tokens)], statuses, latencies)
            for n in range(CLIENTS)])
    asyncio.run(run())
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p95 = latencies[int(len(latencies) * 0.95)] * 1000
    print(f"load: {sum(statuses.values())} requests in {SECONDS:.0f} s, "
          f"{sum(len(a) for a in acked)} adds acknowledged "
          f"({', '.join(str(len(a)) for a in acked)} by ledger), statuses {dict(statuses)}, "
          f"p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    assert set(statuses) <= {200, 201, 429, 503}, statuses
    assert statuses[201] == sum(len(a) for a in acked) and all(acked)
    return acked, statuses


def _created(home: Path) -> Counter[str]:
    return Counter(str(r[1]).replace("-", "") for r in RawStore(home).rows()
                   if r[3] == Atom.Created.TOPIC)


def _each_once(home: Path, acked: list[str]) -> None:
    """Every acknowledged atom in ``home``'s log exactly once, and no other atom."""
    created = _created(home)
    for atom_id in acked:
        assert created[atom_id.replace("-", "")] == 1, f"atom {atom_id} logged " \
                                                      f"{created[atom_id.replace('-', '')]} times"
    assert len(created) == len(acked), "an atom is in the log that no client was told of"
    v = run_cli("--home", str(home), "verify")
    assert v.code == 0, v.err


def test_32_clients_for_a_bounded_time_lose_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    LedgerApp.initialize(home)
    assert run_cli("--home", str(home), "subject", "add", "load").code == 0
    _, token = issue(home, "load", "assistant", ["load"])
    with serving(home) as one, serving(home) as two:
        acked, _ = _run([one.url, two.url], [token])
        assert one.stop() and two.stop()
    _each_once(home, acked[0])


def test_32_clients_on_two_tenants_of_a_postgresql_fleet_each_atom_in_its_own_log(
        tmp_path: Path) -> None:
    schema = f"f{uuid.uuid4().hex[:10]}"
    fleet = tmp_path / "fleet"
    tenants = ("acme", "beta")
    try:
        Fleet.create(fleet, f"{PG_URL}?schema={schema}").close()
        tokens = []
        with Fleet.open(fleet) as f:
            for name in tenants:
                f.create_tenant(name)
                home = f.tenant_home(name)
                assert run_cli("--home", str(home), "subject", "add", "load").code == 0
                tokens.append(f.issue_token(f"load-{name}", "assistant", name,
                                            ["load"]).token)
        with serving(fleet) as one, serving(fleet) as two:
            for server in (one, two):  # each process opens each tenant before the clock
                for token in tokens:  # starts (a tenant is opened by its first request)
                    with server.client(token) as c:
                        assert c.post("/v1/recall", json={
                            "subject": "load", "query": "x", "rehearse": False}
                        ).status_code == 200
            acked, _ = _run([one.url, two.url], tokens)
            assert one.stop() and two.stop()
        for name, mine, theirs in ((tenants[0], acked[0], acked[1]),
                                   (tenants[1], acked[1], acked[0])):
            home = fleet / "tenants" / name
            _each_once(home, mine)
            created = _created(home)
            assert not [a for a in theirs if created[a.replace("-", "")]], \
                f"an atom of another tenant is in {name}'s log"
    finally:
        for s in (schema, *(f"{schema}_{name}" for name in tenants)):
            drop_schema(s)
