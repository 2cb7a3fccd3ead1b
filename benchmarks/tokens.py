"""What checking a bearer token costs a server, per request (ADR 0028).

Prints, in one run, on SQLite and on PostgreSQL (a throwaway server when none answers
at LEDGER_TEST_PG, as in the tests):

* the first check of a token in a process (argon2id, the row read);
* a cached check inside the TTL (no database, no argon2);
* a check with ttl=0 (the row read on every request: revocation at once);
* a refused token with a known id and a wrong secret (argon2id every time).

    python benchmarks/tokens.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from credentials.auth import InvalidToken
from credentials.tokens import TokenStore
from ledger.application import LedgerApp
from ledger.home import Config


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(median, p95) in microseconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def run(label: str, home: Path, n: int) -> None:
    cfg = Config.load(home)
    with TokenStore.open(cfg) as issuer:
        token = issuer.create("bench", "assistant", ["u1"]).token
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    firsts = []
    for _ in range(5):
        with TokenStore.open(cfg) as s:
            s.list()  # the connection is open, as in a running server
            t = time.perf_counter()
            s.authenticate(token)
            firsts.append((time.perf_counter() - t) * 1e6)
    with TokenStore.open(cfg) as cached, TokenStore.open(cfg, ttl=0) as instant:
        cached.authenticate(token)
        instant.authenticate(token)
        rows = [("first check in a process (argon2id + row)", statistics.median(firsts),
                 max(firsts)),
                ("cached, inside the 5 s TTL", *timed(lambda: cached.authenticate(token), n)),
                ("ttl=0: row read every request", *timed(lambda: instant.authenticate(token),
                                                         n))]

        def refused() -> None:
            try:
                instant.authenticate(wrong)
            except InvalidToken:
                pass

        rows.append(("wrong secret, known id (argon2id)", *timed(refused, max(5, n // 100))))
    for what, p50, p95 in rows:
        print(f"{label:<10} {what:<44} p50 {p50:>10.1f} us   p95 {p95:>10.1f} us")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    os.environ.setdefault("LEDGER_LOG_LEVEL", "warning")
    from tests import pgserver

    pg_url, throwaway = pgserver.session_url()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min); N={n}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            LedgerApp.initialize(Path(tmp) / "sqlite")
            run("sqlite", Path(tmp) / "sqlite", n)
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            LedgerApp.initialize(Path(tmp) / "pg", db=f"{pg_url}?schema={schema}")
            try:
                run("postgres", Path(tmp) / "pg", n)
            finally:
                import psycopg

                with psycopg.connect(pg_url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        if throwaway is not None:
            throwaway.stop()


if __name__ == "__main__":
    main()
