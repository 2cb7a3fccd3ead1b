"""Transparency log figures, each next to a raw baseline measured in the same run.

* leaf append rate into the stored tree vs raw SHA-256 of the same leaves
* proof generation and verification times at 10^4, 10^5, 10^6 leaves (stored tree)
* full `ledger verify` rate on a ledger of --events events vs raw Ed25519 verify
  (target: at least 0.7 of raw)
* `verify --since` on 1,000 new events over that ledger (target: under 1 s)

Usage: python benchmarks/transparency.py [--events 100000] [--max-leaves 1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from keys.datakeys import make_engine
from keys.signing import Signer, verify_signature
from ledger import envelope
from ledger.application import LedgerApp
from ledger.home import Config
from ledger.merkle import MerkleTree, leaf_hash, verify_consistency, verify_inclusion
from ledger.transparency import SqlTreeStore
from ledger.verification import verify_since
from ledger.verify import verify_log


def tree_figures(folder: Path, max_leaves: int) -> None:
    engine = make_engine(f"sqlite:///{folder / 'tree.sqlite'}", pooled=True)
    store = SqlTreeStore(engine, None)
    tree = MerkleTree(store)
    leaves = [b"leaf-%d" % i for i in range(max_leaves)]
    t0 = time.perf_counter()
    for leaf in leaves[:100_000]:
        hashlib.sha256(b"\x00" + leaf).digest()
    raw_rate = 100_000 / (time.perf_counter() - t0)
    sizes = [s for s in (10**4, 10**5, 10**6) if s <= max_leaves]
    appended, append_time = 0, 0.0
    for size in sizes:
        t0 = time.perf_counter()
        batch = 10_000
        for start in range(appended, size, batch):
            tree.extend(leaf_hash(x) for x in leaves[start:min(start + batch, size)])
        append_time += time.perf_counter() - t0
        appended = size
        gen, ver = [], []
        for i in range(50):
            index = (i * 7919) % size
            t = time.perf_counter()
            proof = tree.inclusion_proof(index, size)
            gen.append(time.perf_counter() - t)
            root = tree.root(size)
            t = time.perf_counter()
            verify_inclusion(leaf_hash(leaves[index]), index, size, proof, root)
            ver.append(time.perf_counter() - t)
        t = time.perf_counter()
        cproof = tree.consistency_proof(size // 3, size)
        cgen = time.perf_counter() - t
        old_root, new_root = tree.root(size // 3), tree.root(size)
        t = time.perf_counter()
        verify_consistency(size // 3, size, old_root, new_root, cproof)
        cver = time.perf_counter() - t
        print(f"tree of {size:>9,} leaves: inclusion proof gen {statistics.median(gen)*1e3:6.2f} ms"
              f" verify {statistics.median(ver)*1e3:6.3f} ms; consistency gen {cgen*1e3:6.2f} ms"
              f" verify {cver*1e3:6.3f} ms")
    rate = appended / append_time
    print(f"leaf append (stored tree):  {rate:10.0f} leaves/s; raw SHA-256 {raw_rate:10.0f}/s; "
          f"ratio {rate / raw_rate:.3f}")


def ledger_figures(folder: Path, events: int) -> None:
    os.environ.pop("LEDGER_NOW", None)
    home = folder / "home"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    app.register_subject({"ref": "u1"})
    target = events - 1000 - 10
    t0 = time.perf_counter()
    for start in range(0, target, 2000):
        app.add_atoms([{"subject": "u1", "text": f"fact {i}"}
                       for i in range(start, min(start + 2000, target))])
    build = time.perf_counter() - t0
    kept = app.checkpoint()
    app.add_atoms([{"subject": "u1", "text": f"new {i}"} for i in range(1000)])
    total = app.reader.head()[0]
    print(f"ledger built: {total:,} events in {build:.1f} s")

    signer = Signer.generate("raw")
    msgs = [b"x" * 600 + i.to_bytes(4, "big") for i in range(20_000)]
    sigs = [signer.sign(m) for m in msgs]
    t0 = time.perf_counter()
    for m, s in zip(msgs, sigs, strict=True):
        verify_signature(signer.public_key, m, s)
    raw_verify = len(msgs) / (time.perf_counter() - t0)

    leaves: list[bytes] = []
    t0 = time.perf_counter()
    report = verify_log(app.reader.stored_records(), ledger_id=app.ledger_id,
                        root_public_key=app.root_public_key, leaves=leaves)
    full = time.perf_counter() - t0
    assert report.ok, report.failure
    rate = report.events / full
    print(f"full verify: {report.events:,} events in {full:.2f} s = {rate:8.0f} events/s; raw "
          f"Ed25519 verify {raw_verify:8.0f}/s; ratio {rate / raw_verify:.2f} (target >= 0.7)")
    t0 = time.perf_counter()
    since_report, extra = verify_since(app.reader, kept.note, app.root_public_key)
    since = time.perf_counter() - t0
    assert since_report.ok, since_report.failure
    print(f"verify --since: {since_report.events:,} new events over {kept.size:,} in "
          f"{since:.3f} s (target < 1 s); new size {extra['size']:,}")
    app.close()
    assert envelope  # imported for its side effects on topic registration


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--max-leaves", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree_figures(Path(tmp), args.max_leaves)
        ledger_figures(Path(tmp), args.events)


if __name__ == "__main__":
    main()
