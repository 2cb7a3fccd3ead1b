"""Right-to-be-forgotten cost: does it follow the subject, not the ledger?

For ledgers of each --sizes (events), with one subject holding --subject-atoms atoms and
the rest spread over other subjects: `redact-user` end to end (gather, sign, shred, purge,
probes, raw scan, tombstones, checkpoints), then Evidence Pack build and verify.
Target: redact-user under 5 s, and the largest ledger within 2x of the smallest.

Also printed per size: seconds per phase, and the raw limit for the one phase whose cost
follows the bytes the ledger owns by design, the raw file scan: reading every file of the
home once (measured in the same run, right after the erasure, page cache warm as it is
for the scan).

Also printed: the cost of the resume path, a redact-user killed at --resume-at (default
after 500 key destructions) and run again (ADR 0019).

Usage: python benchmarks/erasure.py [--sizes 100000,1000000] [--subject-atoms 1000]
                                    [--keep DIR] [--resume-at STEP]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/projections.py would shadow the projections package when run from here.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)

from governance.erasure import redact_user
from governance.pack import build_pack
from governance.pack_verify import verify_pack
from ledger.application import LedgerApp
from ledger.home import Config
from projections.service import Projections

WORDS = ("apple river Maria doctor allergy Berlin phone email garden Monday coffee passport "
         "salary penicillin Zoe violin Oslo brother dentist Friday mortgage keys bicycle "
         "Lisbon nurse cat insulin school Tuesday wedding").split()


def text(i: int, kind: str) -> str:
    """Varied, realistic-looking memory text (needles must not share a first letter, or
    the raw scan's matchers get an easy ride)."""
    rng = random.Random(f"{kind}{i}")
    words = [rng.choice(WORDS) for _ in range(6)]
    return f"{words[0].capitalize()} {' '.join(words[1:])} ({kind} {i})"


def build(home: Path, events: int, subject_atoms: int) -> LedgerApp:
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    others = max(1, events // 5000)
    app.import_records([{"ref": f"u{i}"} for i in range(others)] + [{"ref": "target"}], [], [])
    app.add_atoms([{"subject": "target", "text": text(i, "target"),
                    "session_id": "sess:target"} for i in range(subject_atoms)])
    remaining = events - subject_atoms - others - 10
    for start in range(0, remaining, 5000):
        n = min(5000, remaining - start)
        app.add_atoms([{"subject": f"u{(start + j) % others}",
                        "text": text(start + j, "background")}
                       for j in range(n)])
    return app


def read_all(folder: Path) -> float:
    """Seconds to read every byte of every file below ``folder`` once (1 MiB reads)."""
    t0 = time.perf_counter()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(1 << 20):
                    pass
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--subject-atoms", type=int, default=1000)
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="build each ledger once into DIR/<size>-<subject atoms> and erase "
                         "a copy of it on later runs (10^6 events take about half an hour "
                         "to build)")
    ap.add_argument("--resume-at", default="key:500", metavar="STEP",
                    help="also time the resume of a redact-user killed at this step "
                         "(LEDGER_FAULT, ADR 0019; '' to skip)")
    args = ap.parse_args()
    os.environ.pop("LEDGER_NOW", None)
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            kept = args.keep / f"{size}-{args.subject_atoms}" if args.keep else None
            if kept is not None and (kept / "home" / "config.toml").exists():
                shutil.copytree(kept / "home", Path(tmp) / "home")
                app = LedgerApp(Config.load(Path(tmp) / "home"))
            else:
                app = build(Path(tmp) / "home", size, args.subject_atoms)
            proj = Projections(app)
            proj.catch_up()
            if kept is not None and not (kept / "home" / "config.toml").exists():
                kept.mkdir(parents=True, exist_ok=True)
                shutil.copytree(Path(tmp) / "home", kept / "home")
            built = time.perf_counter() - t0
            pre = Path(tmp) / "pre"  # the home before the erasure, for the resume below
            if args.resume_at:
                proj.close()
                app.close()  # copying reads the SQLite files: no connection of ours open
                shutil.copytree(kept / "home" if kept is not None else Path(tmp) / "home", pre)
                app = LedgerApp(Config.load(Path(tmp) / "home"))
                proj = Projections(app)
                proj.catch_up()
            t0 = time.perf_counter()
            res = redact_user(app, proj, "target", reason="benchmark", operator="operator")
            erase = time.perf_counter() - t0
            read_limit = read_all(Path(tmp) / "home")
            t0 = time.perf_counter()
            pack = build_pack(app, res["batch_id"], Path(tmp) / "pack")
            pack_build = time.perf_counter() - t0
            t0 = time.perf_counter()
            report = verify_pack(pack, app.root_public_key)
            pack_verify = time.perf_counter() - t0
            assert report.ok
            events = app.reader.head()[0]
            sqlite = ".".join(map(str, proj.store.sqlite_version()))
            proj.close()
            app.close()
            resume = _resume(pre, args.resume_at) if args.resume_at else None
        phases = res["seconds"]
        scan = phases["raw_scan"]
        results.append((size, erase, erase - scan))
        print(f"ledger of {events:>9,} events (built + projected, or copied, in {built:6.1f} s): "
              f"redact-user of {len(res['targets']['atoms'])} atoms {erase:6.2f} s "
              f"(target < 5 s); pack build {pack_build:5.2f} s, verify {pack_verify:5.2f} s "
              f"({report.events} events; projections on SQLite {sqlite})")
        print("    phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
        for step in res.get("repairs", []):
            print(f"    residue repair: {step['action']} {step['table'] or 'whole file'} "
                  f"{step['seconds']:.2f} s")
        print(f"    raw scan of {res['scanned_bytes'] / 1e6:,.0f} MB: {scan:.2f} s after the "
              f"probes, with the projections checkpoint ({res['scanned_early_bytes'] / 1e6:,.0f}"
              f" MB of it started while the erasure ran, "
              f"{res['patched_bytes'] / 1e6:,.0f} MB of pages the checkpoint changed read "
              f"after it, {res['rescanned_bytes'] / 1e6:,.0f} MB read again); "
              f"raw limit (read every byte once) {read_limit:.2f} s; scan/limit "
              f"{scan / read_limit:.2f}")
        if resume is not None:
            print(f"    resume after a kill at {args.resume_at}: the resumed redact-user "
                  f"{resume['seconds']:.2f} s (phases: "
                  + ", ".join(f"{k} {v:.2f} s" for k, v in resume["phases"].items()) + ")")
    if len(results) > 1:
        print(f"largest/smallest ledger redact-user time: {results[-1][1] / results[0][1]:.2f}x "
              f"(target within 2x); without the raw scan "
              f"{results[-1][2] / results[0][2]:.2f}x")


def _resume(home: Path, step: str) -> dict[str, Any]:
    """Kill a `redact-user` of the home at ``step`` (a child process, LEDGER_FAULT), then
    time the run that resumes it, in this process (ADR 0019)."""
    child = subprocess.run(
        [sys.executable, "-c", "import sys; from cli.main import main; "
         "sys.exit(main(sys.argv[1:]))", "redact-user", "target", "--reason", "benchmark",
         "--operator", "operator"],
        env={**os.environ, "LEDGER_HOME": str(home), "LEDGER_FAULT": step,
             "LEDGER_LOG_LEVEL": "warning"}, capture_output=True, check=False)
    if child.returncode != -9:
        raise SystemExit(f"the run to interrupt ended with {child.returncode}, not SIGKILL "
                         f"at {step}: {child.stderr.decode()[-500:]}")
    app = LedgerApp(Config.load(home))
    proj = Projections(app)
    try:
        proj.catch_up()
        t0 = time.perf_counter()
        res = redact_user(app, proj, "target", reason="benchmark", operator="operator")
        seconds = time.perf_counter() - t0
        assert res.get("resumed"), res.get("status")
    finally:
        proj.close()
        app.close()
    return {"seconds": seconds, "phases": res["seconds"]}


if __name__ == "__main__":
    main()
