"""Envelope encryption's costs (issue 27, ADR 0044): KEK rotation, wrapping on add, backup.

1. **Rotation** of a keystore holding 10^5 and 10^6 wrapped data keys (``--keys``):
   ``ledger.epochs.rotate_kek`` on a real SQLite ledger (the default home), whose keystore
   is filled through ``DataKeyStore.store`` in batches (keys without events: a rotation
   reads only the keystore). Against the raw limit, measured on the same keys in the same
   run: ``cryptography``'s AES-256-GCM unwrap under the old KEK and wrap under a new one,
   key after key, the wrapped form and its associated data as the ledger builds them, no
   database. Goal: the rotation at >= 0.5 of the raw rate, the same per key at both sizes.
   The raw loop runs just before and just after the rotation; the ratio takes their mean.
2. **Wrapping on add**: the bulk append of benchmarks/append.py (ledger vs. its raw limit,
   AEAD + sign + insert) on two ledgers given the same batches in turn: one wrapping its
   data keys under the KEK (every ledger since ADR 0044), one storing them unwrapped
   (epoch 0: what a ledger made before wrapping does). Goal: its ratio within 5 % of the
   unwrapped one's.
3. **Backup and restore** of a home of 10^5 atoms (``--backup-atoms``) through the
   commands an operator runs: ``ledger backup OUT``, ``ledger journal export FILE`` and
   ``ledger restore OUT --home NEW --journal FILE``; "not built yet" while the ledger has
   no such commands.

Progress goes to stderr; the load average is printed with each figure (the machine is
shared: compare figures of one run). ``--quick``: 10^4 and 10^5 keys, 5,000 atoms added,
a 10^4-atom backup.

Usage: python benchmarks/kek.py [--keys 100000,1000000] [--atoms 20000] [--batch 1000]
       [--backup-atoms 100000] [--quick] [--only rotation,wrapping,backup]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/projections.py would shadow the projections package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from append import ATOM_CREATED, RawLimit, atom  # type: ignore[import-not-found]
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.aead import new_data_key
from keys.wrapped import NONCE_BYTES, WRAP_VERSION, wrap_aad
from ledger import clock
from ledger.application import LedgerApp
from ledger.epochs import rotate_kek
from ledger.home import Config

FILL_BATCH = 20_000


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


class Progress:
    """``steps(stage, done, total)`` (ledger/progress.py's shape) as a line on stderr: one
    redrawn line on a terminal, else a line every 10 s."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.tty:
            sys.stderr.write(f"\r  {stage}: {done:,}/{total:,}  ({load()})\x1b[K")
            if done >= total:
                sys.stderr.write("\n")
        elif now - self.last > 10 or done >= total:
            sys.stderr.write(f"  {stage}: {done:,}/{total:,} ({load()})\n")
        else:
            return
        self.last = now
        sys.stderr.flush()


# ------------------------------------------------------------------ 1. rotation
def fill(app: LedgerApp, n: int, progress: Progress) -> None:
    """``n`` data keys in the ledger's keystore, stored as the ledger stores them."""
    at = clock.now()
    done = 0
    while done < n:
        m = min(FILL_BATCH, n - done)
        app.datakeys.store({str(uuid.uuid4()): new_data_key() for _ in range(m)}, at)
        done += m
        progress("Filling the keystore", done, n)


def keystore_rows(app: LedgerApp) -> list[tuple[str, bytes, int]]:
    """Every row of the keystore, read through the ledger's own engine: one SQLite file
    must never be opened through two SQLite libraries in one process (keys/datakeys.py
    ``store_sqlite``: closing one drops the other's locks; a run that read it with the
    standard library's module here saw 'database disk image is malformed')."""
    with app.datakeys.engine.connect() as conn:
        cur = conn.connection.cursor()
        cur.execute("SELECT key_id, key_material, epoch FROM data_keys")
        rows = [(str(k), bytes(w), int(e)) for k, w, e in cur.fetchall()]
        cur.close()
    return rows


def raw_rewrap(rows: list[tuple[str, bytes, int]], old: bytes, new_epoch: int) -> float:
    """Seconds to unwrap every key under ``old`` and wrap it under a new KEK."""
    dec, enc = AESGCM(old).decrypt, AESGCM(AESGCM.generate_key(256)).encrypt
    t0 = time.perf_counter()
    out = []
    for key_id, wrapped, epoch in rows:
        key = dec(wrapped[1:1 + NONCE_BYTES], wrapped[1 + NONCE_BYTES:], wrap_aad(key_id, epoch))
        nonce = os.urandom(NONCE_BYTES)
        out.append(WRAP_VERSION + nonce + enc(nonce, key, wrap_aad(key_id, new_epoch)))
    seconds = time.perf_counter() - t0
    assert len(out) == len(rows)
    return seconds


def rotation(tmp: Path, n: int) -> dict[str, Any]:
    progress = Progress()
    home = tmp / f"rotate-{n}"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    try:
        fill(app, n, progress)
        rows = keystore_rows(app)
        old = (home / "kek" / "epoch-000001.kek").read_bytes()
        raw_rewrap(rows[:2000], old, 2)  # warm up
        raw_before = raw_rewrap(rows, old, 2)
        load_before = load()
        t0 = time.perf_counter()
        done = rotate_kek(app, progress=progress)
        seconds = time.perf_counter() - t0
        load_after = load()
        raw_after = raw_rewrap(rows, old, 2)
    finally:
        app.close()
    assert done.rewrapped == n and done.destroyed == [1], done
    shutil.rmtree(home)
    raw = len(rows) / ((raw_before + raw_after) / 2)
    rate = n / seconds
    return {"keys": n, "seconds": round(seconds, 2), "rate": round(rate),
            "raw_rate": round(raw), "raw_before": round(len(rows) / raw_before),
            "raw_after": round(len(rows) / raw_after), "ratio": round(rate / raw, 3),
            "load_before": load_before, "load_after": load_after}


# ------------------------------------------------------------------ 2. wrapping on add
def unwrapped_home(home: Path) -> None:
    """Make ``home`` a ledger that stores its data keys unwrapped (epoch 0), as a ledger
    made before wrapping does: no KEK store configured, no epoch in the keystore."""
    app = LedgerApp(Config.load(home))
    try:
        ids = app.datakeys.all_key_ids()
        plain = app.datakeys.get_many(ids)
    finally:
        app.close()
    db = sqlite3.connect(home / "keystore.sqlite")
    with db:
        db.executemany("UPDATE data_keys SET key_material = ?, epoch = 0 WHERE key_id = ?",
                       [(v, k) for k, v in plain.items()])
        db.execute("DELETE FROM kek_epochs")
    db.close()
    shutil.rmtree(home / "kek")
    replace(Config.load(home), kek=None).write()


def wrapping(tmp: Path, atoms: int, batch: int) -> dict[str, Any]:
    os.environ.pop("LEDGER_NOW", None)
    homes = {"wrapped": tmp / "add-wrapped", "unwrapped": tmp / "add-unwrapped"}
    apps: dict[str, LedgerApp] = {}
    for name, home in homes.items():
        LedgerApp.initialize(home)
        if name == "unwrapped":
            unwrapped_home(home)
        apps[name] = LedgerApp(Config.load(home))
        apps[name].register_subject({"ref": "u1"})
    assert apps["wrapped"].datakeys.current_epoch() == 1
    assert apps["unwrapped"].datakeys.current_epoch() == 0
    raw = RawLimit(tmp / "raw.sqlite")
    seconds = {name: 0.0 for name in apps}
    position = int(apps["wrapped"].recorder.max_notification_id() or 0)
    progress = Progress()
    load_before = load()
    try:
        for i, start in enumerate(range(0, atoms, batch)):
            rows = [atom(j) for j in range(start, min(start + batch, atoms))]
            order = list(apps) if i % 2 == 0 else list(reversed(apps))  # neither always first
            for name in order:
                t0 = time.perf_counter()
                apps[name].add_atoms(rows)
                seconds[name] += time.perf_counter() - t0
            written = apps["wrapped"].recorder.select_notifications(start=position + 1,
                                                                   limit=len(rows))
            position = written[-1].id
            raw.run([(str(s.originator_id), s.originator_version, s.topic, s.state)
                     for s in written if s.topic == ATOM_CREATED])
            progress("Appending", min(start + batch, atoms), atoms)
        wrapped_keys = {e for _k, _w, e in keystore_rows(apps["wrapped"])}
        plain_keys = {e for _k, _w, e in keystore_rows(apps["unwrapped"])}
        assert wrapped_keys == {1} and plain_keys == {0}, (wrapped_keys, plain_keys)
    finally:
        for a in apps.values():
            a.close()
        raw.close()
    rates = {name: atoms / s for name, s in seconds.items()}
    return {"atoms": atoms, "batch": batch, "raw": round(raw.rate),
            "wrapping_us_per_add": round((seconds["wrapped"] - seconds["unwrapped"])
                                         / atoms * 1e6, 2),
            "wrapped": round(rates["wrapped"]), "unwrapped": round(rates["unwrapped"]),
            "ratio_wrapped": round(rates["wrapped"] / raw.rate, 3),
            "ratio_unwrapped": round(rates["unwrapped"] / raw.rate, 3),
            "wrapped_vs_unwrapped": round(rates["wrapped"] / rates["unwrapped"], 3),
            "load_before": load_before, "load_after": load()}


# ------------------------------------------------------------------ 3. backup, restore
def ledger_cmd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("ledger")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ledger"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})})


def backup_built() -> bool:
    return all(ledger_cmd(*c, "--help").returncode == 0
               for c in (("backup",), ("restore",), ("journal", "export")))


def backup_restore(tmp: Path, atoms: int) -> dict[str, Any]:
    if not backup_built():
        return {"built": False}
    progress = Progress()
    home = tmp / "backup-home"
    LedgerApp.initialize(home)
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        for start in range(0, atoms, 5000):
            app.add_atoms([atom(j) for j in range(start, min(start + 5000, atoms))])
            progress("Building the home", min(start + 5000, atoms), atoms)
    finally:
        app.close()
    out, journal, new = tmp / "backup", tmp / "journal", tmp / "restored"
    timed: dict[str, Any] = {"atoms": atoms, "built": True}
    steps = [("backup", ("--home", str(home), "backup", str(out))),
             ("journal", ("--home", str(home), "journal", "export", str(journal))),
             ("restore", ("restore", str(out), "--home", str(new), "--journal", str(journal)))]
    for name, args in steps:
        before = load()
        t0 = time.perf_counter()
        r = ledger_cmd(*args)
        timed[name] = round(time.perf_counter() - t0, 2)
        timed[f"{name}_load"] = f"{before} -> {load()}"
        if r.returncode != 0:
            timed[f"{name}_error"] = (r.stderr or r.stdout).strip()[-500:]
            break
    timed["backup_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) \
        if out.is_dir() else (out.stat().st_size if out.exists() else 0)
    return timed


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keys", help="keystore sizes to rotate (default 100000,1000000)")
    ap.add_argument("--atoms", type=int, help="atoms added per ledger in 2. (default 20000)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--backup-atoms", type=int, help="atoms of the home in 3. (100000)")
    ap.add_argument("--quick", action="store_true",
                    help="defaults of 10^4 and 10^5 keys, 5,000 atoms, a 10^4-atom backup")
    ap.add_argument("--only", default="rotation,wrapping,backup",
                    help="which parts, comma-separated")
    args = ap.parse_args()
    quick = args.quick
    args.keys = args.keys or ("10000,100000" if quick else "100000,1000000")
    args.atoms = args.atoms or (5000 if quick else 20000)
    args.backup_atoms = args.backup_atoms or (10_000 if quick else 100_000)
    only = set(args.only.split(","))
    os.environ.pop("LEDGER_NOW", None)
    print(f"os.cpu_count() = {os.cpu_count()}, {load()}", flush=True)
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        if "rotation" in only:
            result["rotation"] = []
            for n in [int(s) for s in args.keys.split(",") if s]:
                r = rotation(tmp, n)
                result["rotation"].append(r)
                print(f"rotation of {n:>9,} keys: {r['seconds']:7.2f} s, {r['rate']:>9,} "
                      f"keys/s; raw AES-GCM unwrap+wrap {r['raw_rate']:>9,} keys/s "
                      f"({r['raw_before']:,} before, {r['raw_after']:,} after); ratio "
                      f"{r['ratio']:.2f} (goal >= 0.5); {r['load_before']} -> "
                      f"{r['load_after']}", flush=True)
            rates = [r["rate"] for r in result["rotation"]]
            if len(rates) > 1:
                print(f"rotation rate, largest size / smallest: {rates[-1] / rates[0]:.2f} "
                      "(1.00: linear)", flush=True)
        if "wrapping" in only:
            w = wrapping(tmp, args.atoms, args.batch)
            result["wrapping"] = w
            print(f"bulk append, {w['atoms']:,} atoms in batches of {w['batch']}: raw limit "
                  f"{w['raw']:,} events/s; KEK on {w['wrapped']:,}/s (ratio "
                  f"{w['ratio_wrapped']:.3f}); unwrapped, epoch 0 {w['unwrapped']:,}/s "
                  f"(ratio {w['ratio_unwrapped']:.3f}); KEK on / unwrapped "
                  f"{w['wrapped_vs_unwrapped']:.3f} (goal >= 0.95; wrapping "
                  f"{w['wrapping_us_per_add']:+.1f} us per add); {w['load_before']} -> "
                  f"{w['load_after']}", flush=True)
        if "backup" in only:
            b = backup_restore(tmp, args.backup_atoms)
            result["backup"] = b
            if not b["built"]:
                print("backup/restore: not built yet (no `ledger backup`, `ledger restore` "
                      "or `ledger journal export` in this ledger)", flush=True)
            else:
                errors = [f"{k}: {v}" for k, v in b.items() if k.endswith("_error")]
                print(f"backup/restore of a {b['atoms']:,}-atom home: `ledger backup` "
                      f"{b.get('backup', '-')} s ({b['backup_bytes'] / 1e6:.1f} MB; "
                      f"{b.get('backup_load', '')}), `ledger journal export` "
                      f"{b.get('journal', '-')} s, `ledger restore --journal` "
                      f"{b.get('restore', '-')} s ({b.get('restore_load', '')})"
                      + ("; FAILED " + "; ".join(errors) if errors else ""), flush=True)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
