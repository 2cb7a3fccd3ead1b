"""Bulk append of signed, encrypted atom events on SQLite, against the raw limit.

Raw limit, measured in the same run: for the same rows, AES-256-GCM of the personal
fields + Ed25519 signature of the canonical envelope + sqlite executemany in batches,
with everything else (canonical JSON, aggregates, validation) precomputed.

Usage: python benchmarks/append.py [--atoms 20000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from keys import aead
from keys.signing import Signer
from ledger import envelope
from ledger.application import LedgerApp
from ledger.home import Config


def atom(i: int) -> dict[str, object]:
    return {"subject": "u1", "kind": "fact", "text": f"Fact number {i} about the subject.",
            "tags": ["bench"], "confidence": 0.9, "sensitivity": "private", "salience": 0.6,
            "session_id": f"sess:{i % 50}"}


def raw_limit(rows: list[tuple[str, int, str, bytes]], folder: Path, batch: int,
              canonicalize: bool = False) -> float:
    """Rate (rows/s) of AEAD + sign + executemany for rows shaped like the ledger's.

    With ``canonicalize`` the envelope is also serialised with rfc8785 (the floor any
    ledger that signs RFC 8785 bytes must pay).
    """
    signer = Signer.generate("raw")
    key = aead.new_data_key()
    prepared = []
    for oid, version, topic, state in rows:
        env = json.loads(state)["envelope"]
        personal = b'{"tags":["bench"],"text":"Fact about the subject."}'
        prepared.append((oid, version, topic, env, personal))
    db = sqlite3.connect(folder / f"raw{int(canonicalize)}.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
               "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))")
    if not canonicalize:
        prepared = [(o, v, t, envelope.canonical(e), p) for o, v, t, e, p in prepared]
    t0 = time.perf_counter()
    for start in range(0, len(prepared), batch):
        out = []
        for oid, version, topic, body, personal in prepared[start:start + batch]:
            if canonicalize:
                body = envelope.canonical(body)
            aead.seal(key, personal, topic.encode())
            sig = signer.sign(envelope.pae(envelope.PAYLOAD_TYPE, body))
            out.append((oid, version, topic, body + sig))
        db.execute("BEGIN")
        db.executemany("INSERT INTO stored_events VALUES (?,?,?,?)", out)
        db.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    db.close()
    return len(prepared) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atoms", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200, help="one-atom adds for latency")
    args = ap.parse_args()
    os.environ.pop("LEDGER_NOW", None)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        LedgerApp.initialize(home)
        app = LedgerApp(Config.load(home))
        app.register_subject({"ref": "u1"})
        t0 = time.perf_counter()
        for start in range(0, args.atoms, args.batch):
            app.add_atoms([atom(i) for i in range(start, min(start + args.batch, args.atoms))])
        ledger_rate = args.atoms / (time.perf_counter() - t0)
        latencies = []
        for i in range(args.single):
            t = time.perf_counter()
            app.add_atom(atom(10**9 + i))
            latencies.append((time.perf_counter() - t) * 1000)
        rows = [(str(s.originator_id), s.originator_version, s.topic, s.state)
                for s in app.recorder.select_notifications(start=1, limit=args.atoms + 10)
                if s.topic == "memory-ledger:atom.created.v1"][: args.atoms]
        app.close()
        raw_rate = raw_limit(rows, Path(tmp), args.batch)
        floor_rate = raw_limit(rows, Path(tmp), args.batch, canonicalize=True)
    q = statistics.quantiles(latencies, n=20)
    print(f"atoms appended:                {args.atoms} in batches of {args.batch}")
    print(f"raw limit (AEAD+sign+insert):  {raw_rate:10.0f} events/s")
    print(f"raw + rfc8785 canonical JSON:  {floor_rate:10.0f} events/s  "
          f"(ratio {floor_rate / raw_rate:.2f}: the ceiling for RFC 8785-signed events)")
    print(f"ledger bulk append (SQLite):   {ledger_rate:10.0f} events/s")
    print(f"ratio ledger/raw:              {ledger_rate / raw_rate:10.2f}   (target >= 0.5)")
    print(f"one-atom add via Python API:   p50 {statistics.median(latencies):.2f} ms, "
          f"p95 {q[18]:.2f} ms over {args.single}")


if __name__ == "__main__":
    main()
