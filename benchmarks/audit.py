"""`ledger audit` for one month of a large ledger, against the raw limit.

Builds a ledger of --events events spread over --months months (LEDGER_NOW stepping):
atoms in batches of 5000 (the bulk path of benchmarks/erasure.py), recall rehearsals,
explicit rehearsals, archive redactions and expiries, erasure requests with batches, a
policy, a key authorization and a signed checkpoint at every month boundary. Then it
times the report for the last full month (the function behind `ledger audit`,
governance.audit.build_report, and its json and html renderers) with each verification
scope, and compares with the raw limit measured in the same run: reading the same
month's rows from the event store with SQL (the recorder's select_notifications,
no parsing). It also counts aggregates loaded and data keys read during the report
(both must be 0: the report never decrypts).

Usage: python benchmarks/audit.py [--events 1000000] [--months 6] [--db POSTGRES_URL]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

# benchmarks/projections.py would shadow the projections package when run from here.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

from governance.audit import Period, build_report
from governance.audit_render import render_html, render_json
from ledger import clock
from ledger.application import LedgerApp
from ledger.home import Config

T0 = datetime(2030, 1, 1, tzinfo=UTC)
SUBJECTS = 200


def _now(t: datetime) -> None:
    os.environ["LEDGER_NOW"] = clock.format_instant(t)


def month_start(i: int) -> datetime:
    return T0.replace(year=T0.year + (T0.month - 1 + i) // 12, month=(T0.month - 1 + i) % 12 + 1)


def build(home: Path, events: int, months: int, db: str | None) -> LedgerApp:
    _now(T0)
    LedgerApp.initialize(home, db=db)
    app = LedgerApp(Config.load(home))
    app.import_records([{"ref": f"u{i}"} for i in range(SUBJECTS)], [], [])
    # enabled: false, so the write-time policy rules stay off the bulk path; the audit
    # flags are read all the same.
    app.set_policy({"enabled": False, "auditPolicy": {"logCreation": True},
                    "rightToBeForgottenSla": {"acknowledgmentHours": 24,
                                              "completionHours": 720}})
    end = month_start(months)
    batches = max(1, events // 5000)
    span = (end - T0) / (batches + 1)
    month = 0
    recent: list[str] = []
    t_last = time.perf_counter()
    for b in range(batches):
        at = T0 + span * (b + 1)
        while month + 1 < months and at >= month_start(month + 1):
            month += 1
            _now(month_start(month))
            app.checkpoint()
            if month == 1:
                app.authorize_key("dpo", "operator")
            req = app.receive_request(f"u{month}", "benchmark", "operator", 24, 720)
            if month % 2:  # every other month's request is completed (a governance batch)
                batch = app.open_batch("operator", req, "hard", "benchmark",
                                       {"atoms": [], "artifacts": [], "subjects": []})
                app.finish_batch("operator", batch, [], {"routes": []}, request_id=req)
        _now(at)
        n = min(5000, events - 5000 * b)
        ids = app.add_atoms([{"subject": f"u{(5000 * b + j) % SUBJECTS}",
                              "text": f"Background memory {5000 * b + j} of someone"}
                             for j in range(n)])
        recent = [str(i) for i in ids[:60]]
        _now(at + timedelta(minutes=1))
        app.rehearse_atoms(recent[:40], session_id=f"s{b}")  # recall rehearsals
        app.rehearse_atom(recent[40], reason="review")  # an explicit rehearsal
        app.redact(recent[41], "archive", "benchmark")
        app.expire_atom(recent[42], "benchmark")
        if time.perf_counter() - t_last > 30:
            t_last = time.perf_counter()
            print(f"  built {app.reader.head()[0]:,} events ...", file=sys.stderr, flush=True)
    _now(end)
    app.checkpoint()
    return app


class Counting:
    """Counts calls to a method (aggregate loads, data key reads) while the report runs."""

    def __init__(self, obj: Any, name: str) -> None:
        self.obj, self.name, self.calls = obj, name, 0
        self.original = getattr(obj, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self.original(*args, **kwargs)

        setattr(obj, name, wrapped)

    def restore(self) -> None:
        setattr(self.obj, self.name, self.original)


def raw_month(app: Any, first: int, last: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    pos, n, size = first, 0, 0
    while pos <= last:
        rows = app.recorder.select_notifications(start=pos, limit=5000, stop=last)
        if not rows:
            break
        n += len(rows)
        size += sum(len(r.state) for r in rows)
        pos = rows[-1].id + 1
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--months", type=int, default=6)
    ap.add_argument("--db", default=None, help="PostgreSQL URL (default: SQLite files)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        app = build(Path(tmp) / "home", args.events, args.months, args.db)
        built = time.perf_counter() - t0
        head = app.reader.head()[0]
        print(f"ledger of {head:,} events over {args.months} months "
              f"({'postgresql' if args.db else 'sqlite'}), built in {built:.0f} s")
        month = args.months - 1
        period = Period(month_start(month), month_start(month + 1), False)
        now = month_start(args.months) + timedelta(days=1)
        counters = [Counting(app.repository, "get"), Counting(app.datakeys, "get"),
                    Counting(app.datakeys, "get_many")]
        results = {}
        for scope in ("none", "since", "full"):
            t = time.perf_counter()
            report = build_report(app, period, verify=scope, now=now)
            results[scope] = (time.perf_counter() - t, report)
        loads = [c.calls for c in counters]
        for c in counters:
            c.restore()
        report = results["none"][1]
        p = report["period"]
        raw, rows = raw_month(app, p["first_position"], p["last_position"])
        raw_all, all_rows = raw_month(app, 1, int(app.recorder.max_notification_id() or 0))
        t = time.perf_counter()
        js = render_json(results["full"][1])
        t_json = time.perf_counter() - t
        t = time.perf_counter()
        page = render_html(results["full"][1])
        t_html = time.perf_counter() - t
        print(f"month {period.start_text[:7] if period.start_text else ''}: {rows:,} events "
              f"(positions {p['first_position']:,}..{p['last_position']:,}); "
              f"raw limit: SQL read of the month's rows {raw:.3f} s; of all {all_rows:,} "
              f"rows {raw_all:.3f} s")
        for scope, (secs, rep) in results.items():
            v = rep["verification"]
            what = "no verification" if scope == "none" else (
                f"{v['events_verified']:,} events verified ({v['scope']}), ok={v['ok']}")
            print(f"  report, --verify {scope:<5}: {secs:8.3f} s = {secs / raw:7.1f}x raw month "
                  f"read; {what}")
        print(f"  render json {t_json:.3f} s ({len(js):,} bytes), html {t_html:.3f} s "
              f"({len(page):,} bytes)")
        for scope in ("none", "since", "full"):
            secs = results[scope][0]
            print(f"  ledger audit --verify {scope:<5} --format json: {secs + t_json:8.3f} s, "
                  f"--format html: {secs + t_html:8.3f} s")
        print(f"  during the three reports: aggregates loaded {loads[0]}, data key reads "
              f"{loads[1] + loads[2]}")
        app.close()


if __name__ == "__main__":
    main()
