"""Rebuild of every read model against the machine's limits, measured in the same run.

For each ledger size of ``--events`` (default 10^5 and 10^6 events, nearly all atoms of
one subject, as ``benchmarks/projections.py`` builds them), one run prints:

* the raw notification read: ``select_notifications`` in batches, nothing else;
* the raw Ed25519 verify rate on all cores: a process pool (one worker per core) checking
  the real signatures of the ledger's first ``--sample`` events, PAE bytes prepared
  beforehand, so only ``crypto_sign_open`` is timed; and the same on one core;
* the rebuild rate of all read models with the parallel decode of ADR 0058 (and, for the
  smallest size, the same rebuild decoded in the runner's own process between two
  parallel ones, for comparison),
  each model's apply time, and the ratios to both limits. Goal (issue 30): rebuild at
  least 0.5 of the all-core verify rate;
* the CPU seconds the rebuild used in all its processes (the runner and the decode
  workers), against the core-seconds the goal's rate leaves on this machine's cores: a
  ratio above 1 says that no schedule of the same work across the cores reaches the goal.

Seeded ledgers are cached under ``--cache`` (default ``$TMPDIR/ledger-bench-rebuild``),
one folder per backend, size and seed, and reused by the next run (a rebuild changes
only the read models). Progress bars on a terminal.

Usage: python benchmarks/rebuild.py [--events 100000 1000000] [--sample 20000]
       [--workers N] [--cache DIR] [--db postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.projections import build
from ledger import envelope, progress
from ledger.application import LedgerApp
from ledger.home import Config
from projections.parallel import default_workers
from projections.service import Projections

SEED = 1
CHUNK = 2_000


def seeded(cache: Path, db: str | None, events: int) -> Path:
    """A ledger of ``events`` events, built once per backend, size and seed."""
    key = hashlib.sha256(f"{db or 'sqlite'}|{events}|{SEED}|v1".encode()).hexdigest()[:12]
    home = cache / f"ledger-{events}-{key}"
    if (home / ".complete").exists():
        return home
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    schema = None if db is None else f"{db.split('?')[0]}?schema=bench_rebuild_{key}"
    print(f"seeding {events} events into {home} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with progress.bar(f"Seeding {events} events", total=events) as bar:
        build(home, schema, events, seed=SEED, progress=bar)
    (home / ".complete").write_text(f"{time.perf_counter() - t0:.1f}\n")
    return home


def raw_read(app: LedgerApp) -> tuple[int, float]:
    """(notifications, events/s) reading the whole log and doing nothing with it."""
    t0 = time.perf_counter()
    count, pos = 0, 1
    while rows := app.reader.notifications(start=pos, limit=5000):
        count += len(rows)
        pos = rows[-1].id + 1
    return count, count / (time.perf_counter() - t0)


_SAMPLE: list[tuple[bytes, bytes, bytes]] = []


def _hold(sample: list[tuple[bytes, bytes, bytes]]) -> None:
    """Pool initializer: the sample is handed over once, before the clock starts."""
    _SAMPLE[:] = sample


def _verify_range(span: tuple[int, int]) -> int:
    import nacl.signing

    keys: dict[bytes, Any] = {}
    for pub, message, signature in _SAMPLE[span[0]:span[1]]:
        key = keys.get(pub)
        if key is None:
            key = keys[pub] = nacl.signing.VerifyKey(pub)
        key.verify(message, signature)
    return span[1] - span[0]


def signed_sample(app: LedgerApp, n: int) -> list[tuple[bytes, bytes, bytes]]:
    """``(public key, PAE bytes, signature)`` of the first ``n`` events of the log."""
    keys = app.reader.verification_keys()
    out = []
    for note in app.reader.notifications(start=1, limit=n):
        opened = envelope.open_state(note.state)
        out.append((keys[opened.kid], envelope.pae(envelope.PAYLOAD_TYPE, opened.body),
                    opened.signature))
    return out


def raw_verify(sample: list[tuple[bytes, bytes, bytes]], workers: int) -> float:
    """Signatures verified per second: in this process (``workers`` 0) or by a pool of
    ``workers`` processes that already hold the sample."""
    spans = [(i, min(i + CHUNK, len(sample))) for i in range(0, len(sample), CHUNK)]
    if workers == 0:
        _hold(sample)
        t0 = time.perf_counter()
        done = sum(_verify_range(s) for s in spans)
        return done / (time.perf_counter() - t0)
    with ProcessPoolExecutor(workers, initializer=_hold, initargs=(sample,)) as pool:
        list(pool.map(_verify_range, [(0, 1)] * workers * 4))  # every worker started
        t0 = time.perf_counter()
        done = sum(pool.map(_verify_range, spans))
        return done / (time.perf_counter() - t0)


def cpu_seconds() -> float:
    """User and system CPU of this process and of its children that have ended (the
    decode workers are joined when the rebuild's pool shuts down)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def rebuild(app: LedgerApp, workers: int, label: str) -> tuple[float, Any, float]:
    """(events/s, the runner's report, CPU seconds of every process of the rebuild)."""
    c0 = cpu_seconds()
    with Projections(app) as p:
        p.runner.workers = workers
        with progress.bar(label, total=app.reader.head_position()) as bar:
            report = p.rebuild(progress=bar)
    return report.notifications / report.seconds, report, cpu_seconds() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--sample", type=int, default=40_000,
                    help="signatures for the raw verify rate")
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="decode workers of the rebuild (default: one per core besides "
                         "the runner's, or LEDGER_DECODE_WORKERS)")
    ap.add_argument("--cache", type=Path,
                    default=Path(tempfile.gettempdir()) / "ledger-bench-rebuild")
    ap.add_argument("--db", default=None, help="PostgreSQL URL (default: SQLite files)")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    print(f"backend: {'postgresql' if args.db else 'sqlite'}; {cores} cores; "
          f"rebuild decode workers {args.workers}; cache {args.cache}")
    for i, events in enumerate(sorted(args.events)):
        app = LedgerApp(Config.load(seeded(args.cache, args.db, events)))
        try:
            count, read = raw_read(app)
            sample = signed_sample(app, args.sample)
            one = raw_verify(sample, 0)
            every = raw_verify(sample, cores)
            print(f"\n{count} events")
            print(f"  raw notification read:          {read:10.0f} events/s")
            print(f"  raw Ed25519 verify, one core:   {one:10.0f} signatures/s")
            print(f"  raw Ed25519 verify, {cores} cores:    {every:10.0f} signatures/s")
            mine = (f"{args.workers} decode workers" if args.workers else "decode in-process",
                    args.workers)
            runs = [mine]
            if i == 0 and args.workers:  # A B A: the load drifts, the comparison shows it
                runs += [("decode in-process", 0), mine]
            for name, workers in runs:
                rate, report, cpu = rebuild(app, workers, f"Rebuild ({name})")
                print(f"  rebuild, {name:<18} {rate:10.0f} events/s ({report.seconds:.1f}s): "
                      f"{rate / every:.3f} of all-core verify (goal 0.5), "
                      f"{rate / read:.3f} of raw read")
                # the goal's rate leaves cores * count / (0.5 * every) core-seconds in
                # all; the rebuild's own CPU (every process) says whether it could fit
                budget = cores * count / (0.5 * every)
                print(f"    CPU of every process {cpu:.1f} s ({cpu / count * 1e6:.0f} us an "
                      f"event); at the goal's rate the {cores} cores give {budget:.1f} s: "
                      f"{cpu / budget:.2f}x that")
                applies = ", ".join(f"{n} {r.apply_seconds:.1f}"
                                    for n, r in report.models.items())
                print(f"    seconds: read {report.read_seconds:.1f}, decode (waited) "
                      f"{report.decode_seconds:.1f}, apply {applies}, "
                      f"indexes {report.index_seconds:.1f}")
        finally:
            app.close()


if __name__ == "__main__":
    main()
