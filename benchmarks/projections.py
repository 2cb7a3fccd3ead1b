"""Read side: rebuild rate vs raw log reading, recall latency, state --as-of latency.

One run prints, for a ledger of ``--events`` events (default 10^5; nearly all are atoms
of one subject, the recall set):

* the raw notification-read rate (``select_notifications`` only) and the verified
  decode rate (signature check + decryption), measured in the same run;
* the rebuild rate of all read models together, with each model's apply time;
* recall latency p50/p95 over ``--queries`` queries on that subject;
* ``state --as-of`` latency for one small subject in a ledger of ``--small-events``
  events and in the big one (the as-of index should make them about equal).

Usage: python benchmarks/projections.py [--events 100000] [--small-events 10000]
       [--queries 30] [--db postgresql://postgres@127.0.0.1:5432/test?schema=bench]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger.application import LedgerApp
from ledger.clock import now
from ledger.home import Config
from projections.entries import decode
from projections.service import Projections

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
VERBS = ["likes", "visited", "works with", "avoids", "asked about", "recommended", "plays",
         "cooks", "reads about", "studies"]
THINGS = ["green tea", "the piano", "sailing", "Lisbon", "peanuts", "quiet rooms", "jazz",
          "cycling", "Berlin", "spicy food", "gardening", "chess", "the seafood", "museums",
          "early flights", "dark chocolate", "Spanish lessons", "a blue scarf", "running",
          "board games"]
WHEN = ["on Mondays", "last spring", "every morning", "at the conference", "in the lobby",
        "with her sister", "after work", "during the trip", "on weekends", "at night"]


def text(rng: random.Random) -> str:
    return (f"{rng.choice(NAMES)} {rng.choice(VERBS)} {rng.choice(THINGS)} "
            f"{rng.choice(WHEN)} ({rng.randrange(10_000)})")


def build(home: Path, db: str | None, events: int, seed: int,
          progress: Callable[[int, int], None] | None = None) -> float:
    """A ledger with one big subject (u1) and a small probe subject; returns seconds.
    ``progress(done, events)`` is called after each command."""
    rng = random.Random(seed)
    LedgerApp.initialize(home, db=db)
    app = LedgerApp(Config.load(home))
    t0 = time.perf_counter()
    try:
        app.register_subject({"ref": "u1"})
        app.register_subject({"ref": "probe"})
        probe = app.add_atoms([{"subject": "probe", "text": text(rng)} for _ in range(40)])
        for atom in probe[:20]:
            app.rehearse_atom(str(atom))
        for atom in probe[20:30]:
            app.correct_atom(str(atom), {"text": text(rng)})
        done = int(app.recorder.max_notification_id() or 0)
        while done < events:
            n = min(1000, events - done)
            app.add_atoms([{"subject": "u1", "text": text(rng), "tags": [rng.choice(THINGS)],
                            "salience": round(rng.uniform(0.2, 1.0), 2)} for _ in range(n)])
            done += n
            if progress is not None:
                progress(done, events)
    finally:
        app.close()
    return time.perf_counter() - t0


def read_rates(app: LedgerApp) -> tuple[int, float, float]:
    """(notifications, raw reads/s, verified decodes/s)."""
    t0 = time.perf_counter()
    count, pos = 0, 1
    while rows := app.recorder.select_notifications(start=pos, limit=5000):
        count += len(rows)
        pos = rows[-1].id + 1
    raw = count / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    pos = 1
    while rows := app.recorder.select_notifications(start=pos, limit=5000):
        decode(app.reader, rows)
        pos = rows[-1].id + 1
    return count, raw, count / (time.perf_counter() - t0)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def state_latency(app: LedgerApp, runs: int = 20) -> tuple[float, int]:
    with Projections(app) as p:
        p.catch_up()
        at = now()
        view = p.state_as_of("probe", at, refresh=False)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            p.state_as_of("probe", at, refresh=False)
            times.append(time.perf_counter() - t0)
    return statistics.median(times), len(view.valid) + len(view.not_valid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--small-events", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--db", default=None, help="PostgreSQL URL (default: SQLite files)")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-proj-"))

    def db_for(name: str) -> str | None:
        """Each ledger gets its own PostgreSQL schema (left in place for inspection)."""
        if args.db is None:
            return None
        return args.db.split("?")[0] + f"?schema=bench_{name}_{uuid.uuid4().hex[:6]}"

    backend = "postgresql" if args.db else "sqlite"
    print(f"backend: {backend}; folder {folder}")
    secs = build(folder / "big", db_for("big"), args.events, seed=1)
    app = LedgerApp(Config.load(folder / "big"))
    try:
        count, raw, decoded = read_rates(app)
        print(f"ledger: {count} events, built in {secs:.1f}s ({count / secs:.0f} events/s)")
        print(f"raw notification read:     {raw:10.0f} events/s")
        print(f"verified decode (sig+AEAD): {decoded:9.0f} events/s")
        with Projections(app) as p:
            report = p.rebuild()
            rate = report.notifications / report.seconds
            print(f"rebuild all 5 read models: {rate:10.0f} events/s "
                  f"({report.seconds:.1f}s; {rate / raw:.3f} of raw read, "
                  f"{rate / decoded:.2f} of verified decode)")
            for name, run in report.models.items():
                print(f"  {name:<9} apply {run.apply_seconds:6.2f}s "
                      f"({run.events / max(run.apply_seconds, 1e-9):9.0f} events/s)")
            print(f"  (reading {report.read_seconds:.2f}s, verifying+decrypting "
                  f"{report.decode_seconds:.2f}s)")
            rng = random.Random(7)
            latencies: list[float] = []
            pools: list[int] = []
            atoms = len(p.memory_list("u1", refresh=False))
            for _ in range(args.queries):
                q = f"{rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(WHEN)}"
                t0 = time.perf_counter()
                result = p.recall(q, "u1", k=5, refresh=False)
                latencies.append(time.perf_counter() - t0)
                pools.append(result.pool)
            print(f"recall over {atoms} atoms of one subject, k=5, {args.queries} queries "
                  f"(median pool {statistics.median(pools):.0f}): "
                  f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
                  f"p95 {percentile(latencies, 0.95) * 1000:.0f} ms")
        big_latency, items = state_latency(app)
    finally:
        app.close()
    build(folder / "small", db_for("small"), args.small_events, seed=2)
    small = LedgerApp(Config.load(folder / "small"))
    try:
        small_latency, _ = state_latency(small)
    finally:
        small.close()
    print(f"state --as-of for one subject ({items} atoms, with rehearsals and corrections): "
          f"{args.small_events} events {small_latency * 1000:.1f} ms, {count} events "
          f"{big_latency * 1000:.1f} ms (ratio {big_latency / small_latency:.2f}, target <= 2)")


if __name__ == "__main__":
    main()
