"""Load, bounded and on loopback only: 32 clients adding and recalling for 60 s against two
`ledger serve` processes on one ledger (SQLite, then PostgreSQL).

Afterwards every acknowledged atom is in the log exactly once, `ledger verify` passes,
and no answer was an error other than the documented 429/503 of an overloaded server.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from ledger.domain import Atom

from .conftest import RawStore, run_cli
from .serving import issue, serving

pytestmark = pytest.mark.slow

CLIENTS = 32
SECONDS = float(os.environ.get("LEDGER_LOAD_SECONDS", "60"))
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


def test_32_clients_for_60_s_lose_nothing(home: Path) -> None:
    assert run_cli("--home", str(home), "subject", "add", "load").code == 0
    _, token = issue(home, "load", "assistant", ["load"])
    acked: list[str] = []
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    with serving(home) as one, serving(home) as two:
        urls = [one.url, two.url]
        deadline = time.monotonic() + SECONDS

        async def run() -> None:
            await asyncio.gather(*[_client(n, urls[n % 2], token, deadline, acked, statuses,
                                           latencies) for n in range(CLIENTS)])
        asyncio.run(run())
        assert one.stop() and two.stop()
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p95 = latencies[int(len(latencies) * 0.95)] * 1000
    print(f"load: {sum(statuses.values())} requests in {SECONDS:.0f} s, {len(acked)} adds "
          f"acknowledged, statuses {dict(statuses)}, p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    assert set(statuses) <= {200, 201, 429, 503}, statuses
    assert statuses[201] == len(acked) and acked
    created = Counter(str(r[1]).replace("-", "") for r in RawStore(home).rows()
                      if r[3] == Atom.Created.TOPIC)
    for atom_id in acked:
        assert created[atom_id.replace("-", "")] == 1, f"atom {atom_id} logged " \
                                                      f"{created[atom_id.replace('-', '')]} times"
    assert len(created) == len(acked), "an atom is in the log that no client was told of"
    v = run_cli("--home", str(home), "verify")
    assert v.code == 0, v.err
