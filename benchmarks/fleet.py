"""What a tenant costs a fleet (ADR 0061), measured in one run, on SQLite and PostgreSQL:
the figures docs/scale.md builds its capacity model on.

Per backend, on a fleet of ``--tenants`` tenants served by one `ledger serve` process:
* creating a tenant (seconds), and what an empty tenant occupies: its folder's bytes and,
  on PostgreSQL, its schema's tables and bytes;
* opening a tenant in a server process (the first request's latency), the memory it adds
  to the process and the PostgreSQL connections it holds when idle (pg_stat_activity);
* the fleet's write rate with ``--clients`` keep-alive clients adding one atom each
  request (``on_similar`` null) for ``--seconds``, spread over 1, 2 and 4 tenants in turn,
  and the same clients on a one-ledger server (no fleet) as the baseline, rounds
  interleaved: what the fleet's dispatch costs, and whether tenants add up or share one
  ceiling (the server's cores);
* the bytes one more atom costs a tenant's storage, from the growth over the runs;
* offboarding one tenant (the erasure, its pack and the removal; no grace wait).

Loopback only; PostgreSQL is a throwaway server of its own (tests/pgserver.py) unless
``--pg URL``. Bounded: about two minutes per backend at the defaults.
Usage:
    python benchmarks/fleet.py [--tenants 4] [--clients 32] [--seconds 8]
                               [--backends sqlite,postgresql] [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LEDGER = str(Path(sys.executable).with_name("ledger"))


def say(line: str) -> None:
    print(line, flush=True)


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rss_mib(pid: int) -> float:
    """Resident memory of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Pg:
    """Counting what PostgreSQL holds, over a psycopg connection of its own."""

    def __init__(self, url: str) -> None:
        import psycopg
        from sqlalchemy.engine import make_url

        u = make_url(url)
        self.conn = psycopg.connect(dbname=u.database, host=u.host, port=u.port or 5432,
                                    user=u.username, password=u.password, autocommit=True)

    def connections(self) -> int:
        row = self.conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = "
                                "'client backend' AND pid <> pg_backend_pid()").fetchone()
        return int(row[0]) if row else 0

    def schema(self, name: str) -> tuple[int, int]:
        """(tables, bytes) of a schema."""
        row = self.conn.execute(
            "SELECT count(*) FILTER (WHERE c.relkind = 'r'), "
            "coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relkind = 'r'), 0) "
            "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s", (name,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)


def storage(fleet: Any, name: str, pg: Pg | None) -> int:
    size = folder_bytes(fleet.tenant_home(name))
    if pg is not None:
        size += pg.schema(f"{fleet.db.schema}_{name}")[1]
    return size


async def adds(url: str, tokens: list[str], clients: int, seconds: float) -> int:
    """Acknowledged one-atom adds of ``clients`` clients, client n with tokens[n % k]."""
    import httpx

    done = 0
    deadline = time.monotonic() + seconds
    busy = [0]

    async def client(n: int) -> None:
        nonlocal done
        async with httpx.AsyncClient(base_url=url, timeout=60, headers={
                "Authorization": f"Bearer {tokens[n % len(tokens)]}"}) as c:
            i = 0
            while time.monotonic() < deadline:
                r = await c.post("/v1/atoms", json={"subject": "s", "on_similar": None,
                                                    "text": f"client {n} note {i}"})
                i += 1
                if r.status_code == 201:
                    done += 1
                elif r.status_code in (429, 503):
                    busy[0] += 1
                    await asyncio.sleep(float(r.headers.get("retry-after", "1")))
                else:
                    raise SystemExit(f"add answered {r.status_code}: {r.text[:200]}")

    await asyncio.gather(*[client(n) for n in range(clients)])
    if busy[0]:
        say(f"  ({busy[0]} answers were 429/503: the clients waited Retry-After)")
    return done


plain_proc: list[subprocess.Popen[bytes]] = []


def one_ledger(tmp: Path, url: str | None, schema: str) -> tuple[str, str]:
    """A one-ledger server (no fleet) with one subject and an assistant token: the
    baseline the fleet's writes are compared with, in the same run."""

    from credentials.tokens import TokenStore
    from ledger.home import Config
    from service.root import create_home

    home = tmp / "plain"
    create_home(home, db=None if url is None else f"{url}?schema={schema}_plain")
    subprocess.run([LEDGER, "--home", str(home), "subject", "add", "s"], check=True,
                   capture_output=True)
    with TokenStore.open(Config.load(home)) as store:
        token = store.create("w", "assistant").token
    port = free_port()
    plain_proc[:] = [subprocess.Popen([LEDGER, "--home", str(home), "serve", "--port",
                                       str(port)], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)]
    server = f"http://127.0.0.1:{port}"
    answering(server)
    return server, token


def answering(server: str) -> None:
    """Wait until the server at ``server`` answers its health route."""
    import httpx

    while True:
        try:
            if httpx.get(f"{server}/v1/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.2)


def one_backend(backend: str, args: argparse.Namespace, url: str | None) -> None:
    import httpx

    from credentials.fleet import FleetWithTokens

    say(f"== {backend}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    pg = Pg(url) if url is not None else None
    schema = f"bf{uuid.uuid4().hex[:8]}"
    home = tmp / "fleet"
    names = [f"t{i}" for i in range(args.tenants)]
    proc = None
    procs: list[subprocess.Popen[bytes]] = []
    try:
        fleet = FleetWithTokens.create(home, None if url is None else f"{url}?schema={schema}")
        tokens: dict[str, str] = {}
        started = time.perf_counter()
        for name in names:
            fleet.create_tenant(name)
            subprocess.run([LEDGER, "--home", str(fleet.tenant_home(name)), "subject", "add",
                            "s"], check=True, capture_output=True)
            tokens[name] = fleet.issue_token(f"w-{name}", "assistant", name).token
        created = (time.perf_counter() - started) / len(names)
        empty = storage(fleet, names[0], pg)
        line = f"tenant: created in {created:.2f} s each; an empty tenant holds {empty:,} bytes"
        if pg is not None:
            tables, nbytes = pg.schema(f"{schema}_{names[0]}")
            line += (f" ({folder_bytes(fleet.tenant_home(names[0])):,} in its folder, "
                     f"{nbytes:,} in its schema's {tables} tables)")
        say(line)
        port = free_port()
        base = pg.connections() if pg is not None else 0
        log = (tmp / "serve.log").open("wb")
        proc = subprocess.Popen([LEDGER, "--home", str(home), "serve", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "LEDGER_FLEET_OPEN": str(len(names))})
        server = f"http://127.0.0.1:{port}"
        answering(server)
        idle = pg.connections() if pg is not None else 0
        rss = [rss_mib(proc.pid)]
        opened: list[float] = []
        conns: list[int] = []
        for name in names:
            t0 = time.perf_counter()
            r = httpx.post(f"{server}/v1/atoms", timeout=120, json={
                "subject": "s", "text": "first note", "on_similar": None},
                headers={"Authorization": f"Bearer {tokens[name]}"})
            assert r.status_code == 201, r.text
            opened.append(time.perf_counter() - t0)
            time.sleep(0.5)
            rss.append(rss_mib(proc.pid))
            if pg is not None:
                conns.append(pg.connections())
        line = (f"open: first request of a tenant {min(opened):.2f}-{max(opened):.2f} s "
                f"(median {sorted(opened)[len(opened) // 2]:.2f} s)")
        if pg is not None:
            per = [b - a for a, b in itertools.pairwise([idle, *conns])]
            line += (f"; PostgreSQL connections: {base} before the server, {idle} with no "
                     f"tenant open, {conns[-1]} with {len(names)} open: "
                     f"{sorted(per)[len(per) // 2]} per open tenant (median)")
        say(line)
        grew = [b - a for a, b in itertools.pairwise(rss)]
        say(f"memory: the server process {rss[0]:.0f} MiB with no tenant open, "
            f"{rss[-1]:.0f} MiB with {len(names)}: {sorted(grew)[len(grew) // 2]:.0f} MiB per "
            "open tenant (median; the first also loads the embedder)")
        before = {n: storage(fleet, n, pg) for n in names}
        plain_url, plain_token = one_ledger(tmp, url, schema)
        procs.append(plain_proc[0])
        rates: dict[int, list[float]] = {}
        for _round in range(args.rounds):
            for k in (0, 1, 2, 4):  # 0: the one-ledger server, the baseline
                if k > len(names):
                    continue
                target, toks = (plain_url, [plain_token]) if k == 0 else \
                    (server, [tokens[x] for x in names[:k]])
                n = asyncio.run(adds(target, toks, args.clients, args.seconds))
                rates.setdefault(k, []).append(n / args.seconds)
        for k, rs in rates.items():
            what = "a one-ledger server" if k == 0 else f"{k} tenant(s) of the fleet"
            say(f"writes: {args.clients} clients on {what}: best {max(rs):,.0f} adds/s "
                f"(rounds {', '.join(f'{r:,.0f}' for r in rs)}); ratio to the one-ledger "
                f"server {max(rs) / max(rates[0]):.2f}")
        for p in (proc, plain_proc[0]):
            p.send_signal(signal.SIGTERM)
            p.wait(120)
        proc = None
        procs.clear()
        grown = sum(storage(fleet, n, pg) - before[n] for n in names)
        written = _atoms(fleet, names)
        say(f"storage: {grown / max(written - len(names), 1):,.0f} bytes per atom over "
            f"{written:,} atoms (log, read models, keystore, tree)")
        t0 = time.perf_counter()
        out = tmp / "pack"
        done = fleet.offboard(names[0], "benchmark", out, fleet.tokens, grace=0)
        say(f"offboard: {time.perf_counter() - t0:.2f} s for {done['targets']['atoms']:,} "
            f"atoms (one batch, its pack built and verified, KEKs destroyed, storage "
            "removed)")
        fleet.close()
    finally:
        for p in (proc, *procs):
            if p is not None:
                p.kill()
                p.wait()
        if pg is not None:
            for s in (schema, f"{schema}_plain", *(f"{schema}_{n}" for n in names)):
                pg.conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
            pg.conn.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _atoms(fleet: Any, names: list[str]) -> int:
    """Atoms written in all tenants (from each log's count of atom events)."""
    from ledger.application import LedgerApp
    from ledger.domain import Atom
    from ledger.home import Config

    total = 0
    for name in names:
        app = LedgerApp(Config.load(fleet.tenant_home(name)))
        try:
            total += len(app.reader.notifications(start=1, limit=10**9,
                                           topics=[Atom.Created.TOPIC]))
        finally:
            app.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tenants", type=int, default=4)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--pg", default=None, help="a PostgreSQL URL (default: a throwaway)")
    args = ap.parse_args()
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    os.environ.setdefault("LEDGER_LOG_LEVEL", "warning")
    for backend in args.backends.split(","):
        if backend == "sqlite":
            one_backend(backend, args, None)
            continue
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import pgserver

        with pgserver.given_or_throwaway(args.pg) as url:
            one_backend(backend, args, url)


if __name__ == "__main__":
    main()
