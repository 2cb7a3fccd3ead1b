"""Witnessed checkpoints: the latency witnesses add to a checkpoint, and a witness's
add-checkpoint throughput. Bounded in count and time; loopback only.

1. One SQLite ledger and three witnesses, each ``ledger witness serve`` in its own process
   on 127.0.0.1 (ephemeral ports). Each round appends one atom and checkpoints with 0
   witnesses, then one more atom and 1 witness, then 3 witnesses (asked in parallel), so
   the three configurations see the same machine load. Reported: median and p90 of
   ``LedgerApp.checkpoint`` per configuration, and the median added over 0 witnesses.
2. The witness alone: ``Witness.add_checkpoint`` in process (parse, verify the log's
   Ed25519 signature, consistency proof, cosign, SQLite commit with synchronous=FULL), and
   the same requests over HTTP (httpx keep-alive client to ``ledger witness serve``).
   Requests are built before timing; each extends the log by one leaf.

Usage: python benchmarks/witness.py [--rounds 30] [--requests 400] [--seconds 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import nacl.signing

from ledger.application import LedgerApp
from ledger.checkpoint import Checkpoint, sign_checkpoint, vkey_string
from ledger.home import Config
from ledger.merkle import MerkleTree
from ledger.transparency import SparseTreeStore
from ledger.witness.wire import AddCheckpoint
from witness.state import Witness, init_home


def serve(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    port_file = home / "port"
    proc = subprocess.Popen([sys.executable, "-m", "ledger", "witness", "serve", "--home",
                             str(home), "--port-file", str(port_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("witness did not start")
        time.sleep(0.05)
    url = f"http://127.0.0.1:{int(port_file.read_text())}"
    while True:
        try:
            httpx.post(url + "/add-checkpoint", content=b"", timeout=2)
            return proc, url
        except httpx.HTTPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(values), "median_ms": round(statistics.median(values) * 1000, 2),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 2)}


def checkpoint_latency(work: Path, rounds: int, deadline: float) -> dict[str, Any]:
    LedgerApp.initialize(work / "ledger")
    app = LedgerApp(Config.load(work / "ledger"))
    procs = []
    try:
        pairs = []
        for i in range(3):
            home = work / f"w{i}"
            vkey = init_home(home, f"w{i}.bench/witness")
            w = Witness(home)
            w.add_log(app.config.origin, app.log_vkey())
            w.close()
            proc, url = serve(home)
            procs.append(proc)
            pairs.append((url, vkey))
        app.register_subject({"ref": "bench"})
        app.checkpoint(pairs)  # warm: every witness learns the log
        configs = {"0": [], "1": pairs[:1], "3": pairs}
        times: dict[str, list[float]] = {k: [] for k in configs}
        for r in range(rounds):
            for name, chosen in configs.items():
                app.add_atom({"subject": "bench", "text": f"fact {r} {name}"})
                t = time.perf_counter()
                done = app.checkpoint_witnessed(chosen)
                times[name].append(time.perf_counter() - t)
                assert all(x.status == "cosigned" for x in done.results), \
                    [x.detail for x in done.results]
            if time.monotonic() > deadline:
                break
        out = {f"{k}_witnesses": stats(v) for k, v in times.items()}
        base = statistics.median(times["0"])
        for k in ("1", "3"):
            out[f"{k}_witnesses"]["added_median_ms"] = round(
                (statistics.median(times[k]) - base) * 1000, 2)
        return out
    finally:
        app.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(10)


def witness_throughput(work: Path, requests: int, deadline_s: float) -> dict[str, Any]:
    key = nacl.signing.SigningKey(b"B" * 32)
    origin = "bench.test/log"
    vkey = vkey_string(origin, bytes(key.verify_key))

    def build(n: int) -> list[bytes]:
        tree = MerkleTree(SparseTreeStore(0, {}))
        bodies, size = [], 0
        for i in range(n):
            new = tree.extend([hashlib.sha256(f"leaf {i}".encode()).digest()])
            note = sign_checkpoint(Checkpoint(origin, new, tree.root(new)), origin, key)
            proof = tuple(tree.consistency_proof(size, new)) if size else ()
            bodies.append(AddCheckpoint(size, proof, note).body())
            size = new
        return bodies

    out: dict[str, Any] = {}
    for mode in ("in_process", "http"):
        home = work / f"t-{mode}"
        init_home(home, f"{mode}.bench/witness")
        w = Witness(home)
        w.add_log(origin, vkey)
        bodies = build(requests)
        done = 0
        proc = None
        if mode == "in_process":
            t = time.perf_counter()
            for body in bodies:
                assert w.add_checkpoint(body).status == 200
                done += 1
                if time.perf_counter() - t > deadline_s:
                    break
            elapsed = time.perf_counter() - t
            w.close()
        else:
            w.close()
            proc, url = serve(home)
            from ledger.witness.client import make_client

            with make_client() as client:  # type: ignore[attr-defined]
                t = time.perf_counter()
                for body in bodies:
                    assert client.post(url + "/add-checkpoint", content=body).status_code == 200
                    done += 1
                    if time.perf_counter() - t > deadline_s:
                        break
                elapsed = time.perf_counter() - t
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
        out[mode] = {"requests": done, "seconds": round(elapsed, 3),
                     "per_second": round(done / elapsed, 1),
                     "ms_each": round(elapsed / done * 1000, 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=20.0, help="bound for each part")
    args = ap.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="witness-bench-", dir="/tmp") as tmp:
        work = Path(tmp)
        result = {
            "checkpoint": checkpoint_latency(work, args.rounds,
                                             time.monotonic() + args.seconds * 3),
            "add_checkpoint": witness_throughput(work, args.requests, args.seconds),
            "loadavg_before": [round(x, 2) for x in load],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "cores": os.cpu_count(),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
