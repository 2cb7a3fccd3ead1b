"""Sweep cost: does it follow what is due, not the size of the ledger?

Builds a ledger of --atoms atoms (add_atoms in batches of 5000) whose --due-percent are
older than the rest, sets a memoryPolicy whose retention makes exactly those due at the
second sweep, and times two sweeps over the same ledger: one at an instant where nothing
is due, one where the older atoms are due (--due-class non-pii: archived; sensitive-pii:
erased by one hard-erasure batch). Prints both times, the planning (indexed query) time
of each, and the ratio, in process and end to end (a `ledger sweep` process on a copy of
the same ledger). A sweep's time includes the read models applying its own events.
Target: the 1%-due sweep within 10x of the empty sweep, for the command an operator or
cron runs (`ledger sweep`, end to end). In process the empty sweep is a single index
query (milliseconds), so the due sweep's own work (signing and projecting one event per
due atom, about 0.7 ms each) is printed beside it without a bound (ADR 0014).

Usage: PYTHONPATH=. python benchmarks/policy.py [--atoms 100000] [--due-percent 1]
       [--due-class non-pii|sensitive-pii]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

# benchmarks/projections.py would shadow the projections package when run from here.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

from governance.sweep import plan_sweep, sweep
from ledger import clock
from ledger.application import LedgerApp
from ledger.home import Config
from projections.service import Projections

T0 = clock.parse_instant("2031-01-01T00:00:00Z")
RETENTION_DAYS = 30
BATCH = 5000


def _at(t: object) -> None:
    os.environ["LEDGER_NOW"] = clock.format_instant(t)  # type: ignore[arg-type]


def _atoms(n: int, start: int, cls: str, subjects: int) -> list[dict[str, object]]:
    extra = {"consent_basis": "explicit-consent"} if cls == "sensitive-pii" else {}
    return [{"subject": f"u{(start + j) % subjects}", "privacy_class": cls,
             "text": f"Benchmark memory number {start + j} about something", "salience": 0.9,
             **extra} for j in range(n)]


def build(home: Path, atoms: int, due: int, due_class: str) -> LedgerApp:
    _at(T0)
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    subjects = max(1, atoms // 5000)
    app.import_records([{"ref": f"u{i}"} for i in range(subjects)], [], [])
    for start in range(0, due, BATCH):  # the old ones, due at T0 + 30 days
        app.add_atoms(_atoms(min(BATCH, due - start), start, due_class, subjects))
    _at(T0 + timedelta(days=20))
    rest = atoms - due
    for start in range(0, rest, BATCH):  # the young ones, due at T0 + 50 days
        app.add_atoms(_atoms(min(BATCH, rest - start), due + start, "non-pii", subjects))
    app.set_policy({"memoryPolicy": {"enabled": True, "retentionPolicy": {
        "perPrivacyClass": {"non-pii": RETENTION_DAYS, "sensitive-pii": RETENTION_DAYS}}}})
    return app


def timed_sweep(app: LedgerApp, proj: Projections) -> tuple[float, float, dict[str, object]]:
    policy = app.reader.policy()
    assert policy is not None
    t0 = time.perf_counter()
    plan_sweep(proj, policy, clock.now())
    planning = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = sweep(app, proj)
    proj.catch_up()  # the read models apply the sweep's own events: part of its cost
    return time.perf_counter() - t0, planning, report


def cli_sweep(home: Path, at: object) -> float:
    """End to end, as cron runs it: a new `ledger sweep` process."""
    env = {**os.environ, "LEDGER_NOW": clock.format_instant(at)}  # type: ignore[arg-type]
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ledger", "--home", str(home), "sweep", "--json"],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atoms", type=int, default=100_000)
    ap.add_argument("--due-percent", type=float, default=1.0)
    ap.add_argument("--due-class", default="non-pii", choices=["non-pii", "sensitive-pii"])
    args = ap.parse_args()
    due = int(args.atoms * args.due_percent / 100)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        app = build(Path(tmp) / "home", args.atoms, due, args.due_class)
        proj = Projections(app)
        proj.catch_up()
        built = time.perf_counter() - t0
        print(f"built {args.atoms:,} atoms ({due:,} {args.due_class} due at day "
              f"{RETENTION_DAYS}) and projected them in {built:.1f} s")
        copy = Path(tmp) / "copy"  # the same ledger, for the end-to-end runs
        proj.close()
        app.close()
        shutil.copytree(Path(tmp) / "home", copy)
        app = LedgerApp(Config.load(Path(tmp) / "home"))
        proj = Projections(app)
        _at(T0 + timedelta(days=RETENTION_DAYS) - timedelta(seconds=1))
        empty, empty_plan, r1 = timed_sweep(app, proj)
        assert r1["status"] == "nothing-due", r1["status"]
        _at(T0 + timedelta(days=RETENTION_DAYS))
        full, full_plan, r2 = timed_sweep(app, proj)
        done = r2["archived"]["count"] + r2["erased"]["count"]  # type: ignore[index]
        assert done == due, (done, due)
        _at(T0 + timedelta(days=RETENTION_DAYS, seconds=1))
        again, _, r3 = timed_sweep(app, proj)
        assert r3["status"] == "nothing-due"
        proj.close()
        app.close()
        cli_empty = cli_sweep(copy, T0 + timedelta(days=RETENTION_DAYS) - timedelta(seconds=1))
        cli_full = cli_sweep(copy, T0 + timedelta(days=RETENTION_DAYS))
    print(f"sweep, nothing due:     {empty:8.3f} s (planning query {empty_plan * 1000:7.1f} ms)")
    print(f"sweep, {due:,} due ({args.due_percent:g}%, {args.due_class}, "
          f"{'archived' if args.due_class == 'non-pii' else 'erased in one batch'}): "
          f"{full:8.3f} s (planning query {full_plan * 1000:7.1f} ms)")
    print(f"repeat sweep (nothing left): {again:8.3f} s")
    print(f"in process, ratio due/empty: {full / empty:.1f}x (the empty sweep is one index "
          f"query; the due one signs {due:,} events and projects them); planning ratio "
          f"{full_plan / empty_plan:.1f}x")
    print(f"end to end (`ledger sweep` process, as cron runs it): nothing due "
          f"{cli_empty:.3f} s, {due:,} due {cli_full:.3f} s, ratio {cli_full / cli_empty:.1f}x "
          f"(target within 10x)")


if __name__ == "__main__":
    main()
