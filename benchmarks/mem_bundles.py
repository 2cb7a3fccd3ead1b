"""Export and import of N atoms as a ``.mem`` bundle, and bundle validation: our
importer's checks (``verify_bundle``: stricter) against portable-memory's
``BundleValidator`` on the same bundle.

Usage: python benchmarks/mem_bundles.py [--atoms 100000] [--repeat 3] [--json]

SQLite homes in a temporary folder. Seeding the source ledger is timed separately
(it is ``import_records`` in batches, not the portability code).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from portable_memory import BundleValidator

from ledger.application import LedgerApp
from ledger.home import Config
from portability import mem, service, view
from portability.membundle import verify_bundle

SUBJECT = "bench-user"


def seed(app: LedgerApp, n: int, batch: int = 10_000) -> None:
    arts = [{"subject": SUBJECT, "ref": f"{SUBJECT}:art-{i}", "kind": "chat",
             "title": f"Chat {i}", "body": f"Transcript {i} ...", "source": "chatgpt-export",
             "captured_at": "2026-01-01T00:00:00Z"} for i in range(max(1, n // 100))]
    app.import_records([{"ref": SUBJECT, "display_name": "Bench User"}], arts, [])
    for start in range(0, n, batch):
        atoms = []
        for i in range(start, min(n, start + batch)):
            inferred = i % 3 == 0
            atoms.append({
                "subject": SUBJECT, "ref": f"{SUBJECT}:atom-{i}", "kind": "preference",
                "text": f"Fact number {i} about the subject, in one short sentence.",
                "tags": ["bench"], "confidence": 0.9,
                "sensitivity": ("private", "public", "medical")[i % 3],
                "derivation": "inferred" if inferred else "stated",
                "artifact_ids": [arts[i % len(arts)]["ref"]] if inferred else [],
                "extractor": "claude-opus-4" if inferred else None,
                "salience": 0.6, "session_id": f"sess:{i % 50}",
                "valid_from": "2025-11-04T00:00:00Z",
            })
        app.import_records([], [], atoms)


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--atoms", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3, help="validation runs (best is kept)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n = args.atoms
    folder = Path(tempfile.mkdtemp(prefix="portability-bench-"))
    out: dict[str, Any] = {"atoms": n, "machine": platform.platform(),
                           "python": platform.python_version()}
    try:
        LedgerApp.initialize(folder / "a")
        LedgerApp.initialize(folder / "b")
        a = LedgerApp(Config.load(folder / "a"))
        t0 = time.perf_counter()
        seed(a, n)
        out["seed_s"] = time.perf_counter() - t0

        bundle = folder / "bench.mem"
        signer = a.signer(None)
        t0 = time.perf_counter()
        v = view.load(a, SUBJECT)
        t_read = time.perf_counter() - t0
        stats = mem.export(v, bundle, include_private=True,
                           key=mem.signing_key(bytes(signer.signing_key)), sign_manifest=True)
        out["export_s"] = time.perf_counter() - t0
        out["export_read_ledger_s"] = t_read
        out["export_counts"] = stats
        out["bundle_bytes"] = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
        a.close()

        trusted = [signer.public_key]
        t_ours, checked = best(lambda: verify_bundle(bundle, trusted), args.repeat)
        t_pm, result = best(lambda: BundleValidator().validate(bundle), args.repeat)
        assert result.ok, result.issues
        assert checked.manifest_trust == "trusted"
        out["validate_ours_s"] = t_ours
        out["validate_portable_memory_s"] = t_pm
        out["validate_speedup"] = t_pm / t_ours

        b = LedgerApp(Config.load(folder / "b"))
        t0 = time.perf_counter()
        plan = service.plan_file(b, bundle, "mem", subject=None, trusted=trusted,
                                 max_bytes=None, skip_unsupported=False)
        t_plan = time.perf_counter() - t0
        report = service.apply_plan(b, plan)
        out["import_s"] = time.perf_counter() - t0
        out["import_verify_and_plan_s"] = t_plan
        out["import_created"] = report["created"]
        b.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    if args.json:
        print(json.dumps(out, indent=2))
        return
    rate = lambda s: f"{n / s:,.0f} atoms/s"  # noqa: E731
    print(f"portability benchmark: {n:,} atoms, SQLite, {out['machine']}, "
          f"Python {out['python']}")
    print(f"  seed (import_records, 10k per command)  {out['seed_s']:8.2f} s  "
          f"({rate(out['seed_s'])})")
    print(f"  export .mem (read+verify ledger, write)   {out['export_s']:8.2f} s  "
          f"({rate(out['export_s'])}; reading the ledger {out['export_read_ledger_s']:.2f} s)")
    print(f"  bundle size                                {out['bundle_bytes'] / 1e6:8.1f} MB")
    print(f"  import .mem (verify+plan, one command)     {out['import_s']:8.2f} s  "
          f"({rate(out['import_s'])}; verify+plan {out['import_verify_and_plan_s']:.2f} s)")
    print(f"  validate: ours (stricter)                  {t_ours:8.3f} s")
    print(f"  validate: portable-memory BundleValidator  {t_pm:8.3f} s")
    print(f"  speedup (target >= 2x)                     {out['validate_speedup']:8.2f} x  "
          f"{'MET' if out['validate_speedup'] >= 2 else 'NOT MET'}")


if __name__ == "__main__":
    main()
