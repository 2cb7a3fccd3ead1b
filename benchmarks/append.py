"""Bulk append of signed, encrypted atom events on SQLite, against the raw limit.

Raw limit, measured in the same run: for the same rows, AES-256-GCM of the personal
fields + Ed25519 signature of the canonical envelope + sqlite executemany in batches,
with everything else (canonical JSON, aggregates, validation) precomputed. Two more raw
lines also serialise each envelope: with ``rfc8785.dumps`` (pure Python, the reference)
and with ``ledger.canonical.dumps`` (the same bytes through the C JSON encoder, ADR 0008).

Each batch is appended by the ledger and then, right after, pushed through the raw
variants, so all rates see the same machine load; the ratio compares the summed times.
A second ledger appends the same batches with the signing process switched off
(``LEDGER_SIGNING_PROCESS=off``: signatures on two threads of this process), for
comparison; the load average before and after is printed, since the signing process
needs the machine's second core to pay off (ADR 0008).

Usage: python benchmarks/append.py [--atoms 20000] [--batch 1000] [--single 200]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rfc8785

from keys import aead
from keys.signing import Signer
from ledger import canonical, envelope
from ledger.application import LedgerApp
from ledger.home import Config

ATOM_CREATED = "memory-ledger:atom.created.v1"


def atom(i: int) -> dict[str, object]:
    return {"subject": "u1", "kind": "fact", "text": f"Fact number {i} about the subject.",
            "tags": ["bench"], "confidence": 0.9, "sensitivity": "private", "salience": 0.6,
            "session_id": f"sess:{i % 50}"}


class RawLimit:
    """AEAD + sign + executemany for rows shaped like the ledger's, in its own database.

    ``serialize`` None signs the ledger's stored body as is (the raw limit); otherwise the
    envelope is serialised with it inside the timed loop.
    """

    def __init__(self, path: Path, serialize: Callable[[Any], bytes] | None = None) -> None:
        self.serialize = serialize
        self.signer = Signer.generate("raw")
        self.key = aead.new_data_key()
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE stored_events (originator_id TEXT, originator_version "
                        "INTEGER, topic TEXT, state BLOB, PRIMARY KEY (originator_id, "
                        "originator_version))")
        self.seconds = 0.0
        self.events = 0

    def run(self, rows: list[tuple[str, int, str, bytes]]) -> None:
        personal = b'{"tags":["bench"],"text":"Fact about the subject."}'
        prepared: list[tuple[str, int, str, Any]] = []
        for oid, version, topic, state in rows:
            opened = envelope.open_state(state)
            prepared.append((oid, version, topic,
                             opened.body if self.serialize is None else opened.envelope))
        serialize, signer, key = self.serialize, self.signer, self.key
        t0 = time.perf_counter()
        out = []
        for oid, version, topic, body in prepared:
            if serialize is not None:
                body = serialize(body)
            aead.seal(key, personal, topic.encode())
            sig = signer.sign(envelope.pae(envelope.PAYLOAD_TYPE, body))
            out.append((oid, version, topic, body + sig))
        self.db.execute("BEGIN")
        self.db.executemany("INSERT INTO stored_events VALUES (?,?,?,?)", out)
        self.db.execute("COMMIT")
        self.seconds += time.perf_counter() - t0
        self.events += len(rows)

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    def close(self) -> None:
        self.db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
        LedgerApp.initialize(Path(tmp) / "home2")
        inprocess = LedgerApp(Config.load(Path(tmp) / "home2"))
        inprocess.register_subject({"ref": "u1"})
        inprocess_seconds = 0.0
        load_before = os.getloadavg()
        raw = RawLimit(Path(tmp) / "raw.sqlite")
        fast = RawLimit(Path(tmp) / "fast.sqlite", canonical.dumps)
        reference = RawLimit(Path(tmp) / "rfc8785.sqlite", rfc8785.dumps)
        ledger_seconds = 0.0
        position = int(app.recorder.max_notification_id() or 0)
        for start in range(0, args.atoms, args.batch):
            batch = [atom(i) for i in range(start, min(start + args.batch, args.atoms))]
            t0 = time.perf_counter()
            app.add_atoms(batch)
            ledger_seconds += time.perf_counter() - t0
            os.environ["LEDGER_SIGNING_PROCESS"] = "off"
            t0 = time.perf_counter()
            inprocess.add_atoms(batch)
            inprocess_seconds += time.perf_counter() - t0
            del os.environ["LEDGER_SIGNING_PROCESS"]
            written = app.recorder.select_notifications(start=position + 1, limit=len(batch))
            position = written[-1].id
            rows = [(str(s.originator_id), s.originator_version, s.topic, s.state)
                    for s in written if s.topic == ATOM_CREATED]
            for variant in (raw, fast, reference):
                variant.run(rows)
        ledger_rate = args.atoms / ledger_seconds
        inprocess_rate = args.atoms / inprocess_seconds
        inprocess.close()
        load_after = os.getloadavg()
        latencies = []
        for i in range(args.single):
            t = time.perf_counter()
            app.add_atom(atom(10**9 + i))
            latencies.append((time.perf_counter() - t) * 1000)
        app.close()
        for variant in (raw, fast, reference):
            variant.close()
    q = statistics.quantiles(latencies, n=20)
    r = raw.rate
    print(f"atoms appended:                {args.atoms} in batches of {args.batch}")
    print(f"raw limit (AEAD+sign+insert):  {r:10.0f} events/s")
    print(f"raw + rfc8785 canonical JSON:  {reference.rate:10.0f} events/s  "
          f"(ratio {reference.rate / r:.2f}: rfc8785.dumps, pure Python)")
    print(f"raw + ledger.canonical JSON:   {fast.rate:10.0f} events/s  "
          f"(ratio {fast.rate / r:.2f}: same bytes, orjson)")
    print(f"ledger bulk append (SQLite):   {ledger_rate:10.0f} events/s")
    print(f"ratio ledger/raw:              {ledger_rate / r:10.2f}   (target >= 0.5)")
    print(f"ledger, signing in process:    {inprocess_rate:10.0f} events/s  "
          f"(ratio {inprocess_rate / r:.2f}: LEDGER_SIGNING_PROCESS=off, two threads)")
    print(f"load average (1 min):          {load_before[0]:.2f} before, {load_after[0]:.2f} "
          f"after, {os.cpu_count()} CPUs")
    print(f"one-atom add via Python API:   p50 {statistics.median(latencies):.2f} ms, "
          f"p95 {q[18]:.2f} ms over {args.single}")
    print(json.dumps({"raw": round(r), "raw_rfc8785": round(reference.rate),
                      "raw_canonical": round(fast.rate), "ledger": round(ledger_rate),
                      "ratio": round(ledger_rate / r, 3),
                      "ledger_inprocess": round(inprocess_rate),
                      "ratio_inprocess": round(inprocess_rate / r, 3),
                      "load_before": round(load_before[0], 2),
                      "load_after": round(load_after[0], 2),
                      "one_atom_p50_ms": round(statistics.median(latencies), 2),
                      "one_atom_p95_ms": round(q[18], 2)}, sort_keys=True))


if __name__ == "__main__":
    main()
