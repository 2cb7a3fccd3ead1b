"""Recall latency for one subject at 10^4, 10^5 and 10^6 atoms, and the rebuild rate.

Each ledger holds one subject whose atoms are the memories of benchmarks/recall_quality.py
(facts and everyday chatter of synthetic people, 500 per person, appended person after
person), recorded through the ordinary bulk path (``LedgerApp.add_atoms``, 5,000 per
command). Queries are those people's questions. Ledgers are kept in ``--keep`` (default
/tmp/recall-bench) and reused by later runs: building 10^6 events takes minutes.

Printed per size, in-process (``Projections.recall``, caught up, no rehearsal, the fused
scoring of ADR 0051 on): the first recall (which reads the subject's index), then p50/p95
of wall and CPU time over ``--queries`` queries with k=5, with k=50 and with k=5 and a
since/until window (holding every atom, and holding none), and their CPU time as a
ratio of the first (same run), with the load average before and after. For the ledger
of ``--rebuild-size`` events (and any ledger whose read models are not current: a new
or a reused one), the raw notification read rate and the rebuild rate of all read
models, in the same run, with progress. Last, one query's embedding time for WordLlama
and, when installed, MiniLM: the part of recall that depends on the model (ADR 0034).

The embedder is WordLlama unless ``--embedder`` says otherwise: the default of a dev or
CI install. (With MiniLM installed, it is the default, but a 10^6-atom vector index at
its embedding speed would take hours to build; its recall costs the search below, on
384 dimensions instead of 256, plus its query embedding, printed at the end.)

The first recall after a process start (ADR 0059): for each size, a new Python process
opens the ledger and recalls once; its recall is timed (and, at ``--cold-size`` and
above, once more with the snapshot file set aside: the index read from the database, as
before ADR 0059), against the warm p50 of this run. Goal: first <= 50x warm p50.

``--backends sqlite,postgresql``: on PostgreSQL, a server kept in ``--keep``/pgdata (made
with the dev extra's binaries on first use, stopped at the end, its data kept with the
ledgers, so a seeded ledger is reused), or ``--pg URL``.

Usage: python benchmarks/recall.py [--sizes 10000,100000,1000000] [--queries 300]
       [--rebuild-size 100000] [--keep /tmp/recall-bench] [--embedder wordllama]
       [--backends sqlite,postgresql] [--pg URL] [--cold-size 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/projections.py would shadow the projections package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_quality import person  # type: ignore[import-not-found]

from ledger.application import LedgerApp
from ledger.home import Config
from projections.embedder import configured, from_spec
from projections.service import Projections


def build(home: Path, events: int, seed: int = 1, db: str | None = None
          ) -> tuple[float, list[str]]:
    """A ledger of one subject with ``events - 1`` atoms; (seconds, questions). Kept in
    ``home`` (its name holds the parameters) and reused once complete."""
    rng = random.Random(seed)
    questions: list[str] = []
    if (home / "built").exists():
        for i in range(60):
            questions += [q.text for q in person(i, random.Random(i), 500).questions]
        return float((home / "built").read_text()), questions
    if home.exists():  # an unfinished build: start again
        import shutil

        shutil.rmtree(home)
    LedgerApp.initialize(home, db=db)
    app = LedgerApp(Config.load(home))
    t0 = time.perf_counter()
    try:
        app.register_subject({"ref": "u1"})
        done, i, batch = 1, 0, []
        while done < events:
            p = person(i, random.Random(i), 500)
            if i < 60:
                questions += [q.text for q in p.questions]
            i += 1
            order = list(range(len(p.memories)))
            rng.shuffle(order)
            batch += [{"subject": "u1", "text": p.memories[j], "salience": p.salience[j]}
                      for j in order]
            while len(batch) >= 5000 or (batch and done + len(batch) >= events):
                n = min(5000, events - done, len(batch))
                app.add_atoms(batch[:n])
                batch = batch[n:]
                done += n
                if done % 50_000 < n:
                    print(f"  built {done:,} events, {time.perf_counter() - t0:.0f}s",
                          flush=True)
                if done >= events:
                    batch = []
    finally:
        app.close()
    secs = time.perf_counter() - t0
    (home / "built").write_text(f"{secs:.1f}")
    return secs, questions


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def read_rate(app: LedgerApp) -> tuple[int, float]:
    t0 = time.perf_counter()
    count, pos = 0, 1
    while rows := app.recorder.select_notifications(start=pos, limit=5000):
        count += len(rows)
        pos = rows[-1].id + 1
    return count, count / (time.perf_counter() - t0)


WINDOW = {"since": "2000-01-01", "until": "2999-12-31"}
"""A since/until window (ADR 0051) that holds every atom: the filter's own cost."""
EMPTY = {"since": "2000-01-01", "until": "2000-01-01"}
"""One that holds none: the worst case, where the indexes are asked for more until
``MAX_PROPOSALS``."""


def timed(p: Projections, questions: list[str], n: int, **kw: object
          ) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of ``n`` recalls (fixed seed; a random number appended to each
    question so the recall cache never answers). CPU time is this process's own: on
    cores shared with other work it moves less than wall time does."""
    rng = random.Random(5)
    lat: list[float] = []
    cpu: list[float] = []
    for _ in range(n):
        q = rng.choice(questions) + f" {rng.randrange(10**6)}"
        t0, c0 = time.perf_counter(), time.process_time()
        p.recall(q, "u1", refresh=False, **kw)  # type: ignore[arg-type]
        lat.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return lat, cpu


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def query_embedding(name: str, questions: list[str], n: int = 200) -> None:
    """p50/p95 of embedding one query with embedder ``name`` (when installed): the part
    of recall that depends on the model; the search itself depends only on its dim."""
    try:
        e = from_spec(name)
        e.embed(["warm up"])
    except Exception as exc:  # not installed: say so
        print(f"query embedding, {name}: not available ({exc.__class__.__name__})")
        return
    rng = random.Random(7)
    lat = []
    for _ in range(n):
        q = rng.choice(questions)
        t0 = time.perf_counter()
        e.embed([q])
        lat.append(time.perf_counter() - t0)
    print(f"query embedding, {e.id}: p50 {pct(lat, 0.5) * 1000:.2f} ms, "
          f"p95 {pct(lat, 0.95) * 1000:.2f} ms ({load()})", flush=True)


FIRST = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
from ledger.application import LedgerApp
from ledger.home import Config
from projections.embedder import from_spec
from projections.service import Projections
home, spec, query, keep_file = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
app = LedgerApp(Config.load(home))
with Projections(app, embedder=from_spec(spec)) as p:
    if keep_file != "1":
        p.index.folder = None  # as before ADR 0059: the index read from the database
    p.vectors.embed_query("load the model")  # the model's own start, apart
    opened = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.process_time()
    p.recall(query, "u1", k=5, refresh=False)
    print(json.dumps({"first": time.perf_counter() - t1, "cpu": time.process_time() - c1,
                      "opened": opened}))
app.close()
"""


def first_in_new_process(home: Path, spec: str, query: str, use_file: bool = True
                         ) -> dict[str, float]:
    """One recall in a new Python process (its imports, the ledger's opening and the
    model's loading timed apart)."""
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", FIRST, str(home), spec, query,
                           "1" if use_file else "0"], capture_output=True, text=True,
                          check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


class Server:
    """A PostgreSQL server over ``folder`` (made on first use, kept after stop)."""

    def __init__(self, folder: Path) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import pgserver

        binaries = pgserver.find_binaries()
        if binaries is None:
            raise SystemExit("no PostgreSQL binaries: install the dev extra, or pass --pg")
        run_as = pgserver._as_unprivileged()
        data = folder / "pgdata"
        env = {"PATH": f"{binaries}:/usr/bin:/bin", "LC_ALL": "C", "HOME": str(folder),
               "TZ": "UTC"}
        if not (data / "PG_VERSION").exists():
            folder.mkdir(parents=True, exist_ok=True)
            if run_as:
                os.chown(folder, int(run_as["user"]), int(run_as["group"]))
            subprocess.run([str(binaries / "initdb"), "-D", str(data), "-U", "postgres",
                            "--auth=trust", "--encoding=UTF8", "--no-sync"], env=env,
                           check=True, capture_output=True, **run_as)
        port = pgserver._free_port()
        self.process = subprocess.Popen(
            [str(binaries / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port),
             "-k", "", "-c", "fsync=off", "-c", "full_page_writes=off",
             "-c", "shared_buffers=256MB"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True, **run_as)
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 60
        while not pgserver.answers(self.url, timeout=1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the benchmark's PostgreSQL did not start")
            time.sleep(0.2)
        self.port = port

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rebuild-size", type=int, default=100_000, help="0: none")
    ap.add_argument("--keep", default="/tmp/recall-bench")
    ap.add_argument("--embedder", default="wordllama")
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument("--pg", default=None, help="PostgreSQL URL (default: a server in --keep)")
    ap.add_argument("--cold-size", type=int, default=1_000_000,
                    help="from this size, also a first recall without the snapshot file")
    args = ap.parse_args()
    os.environ.setdefault("LEDGER_LOG_LEVEL", "warning")
    keep = Path(args.keep)
    keep.mkdir(parents=True, exist_ok=True)
    embedder = from_spec(args.embedder)
    print(f"embedder {embedder.id} (the default is {configured(None).id}); ledgers in {keep}; "
          f"os.cpu_count() = {os.cpu_count()}, {load()}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    all_questions: list[str] = []
    server = None
    for backend in [b for b in args.backends.split(",") if b]:
        base = None
        if backend == "postgresql":
            if args.pg is None:
                server = Server(keep / "pg")
                base = server.url
            else:
                base = args.pg
        try:
            for size in sorted(set(sizes) | ({args.rebuild_size} - {0})):
                all_questions = one_size(args, keep, backend, base, size, embedder) \
                    or all_questions
        finally:
            if server is not None:
                server.stop()
                server = None
    for name in ("wordllama", "minilm"):
        query_embedding(name, all_questions)


def one_size(args: argparse.Namespace, keep: Path, backend: str, base: str | None,
             size: int, embedder: Any) -> list[str]:
    """Build or reuse the ledger of ``size`` events on ``backend``, then time its recall."""
    if base is None:
        home, db = keep / f"q{size}", None
    else:
        home = keep / f"pg-q{size}"
        db = base.split("?")[0] + f"?schema=bench_q{size}_{uuid.uuid4().hex[:6]}"
        if (home / "built").exists():
            db = None
    tag = f"{backend}, {size:>9,} events"
    secs, questions = build(home, size, db=db)
    if base is not None:  # the server's port changes from run to run
        cfg = (home / "config.toml").read_text()
        cfg = re.sub(r"postgresql://postgres@127\.0\.0\.1:\d+/", base.split("?")[0].rsplit(
            "/", 1)[0] + "/", cfg)
        (home / "config.toml").write_text(cfg)
    app = LedgerApp(Config.load(home))
    try:
        with Projections(app, embedder=embedder) as p:
            last = [time.perf_counter()]

            def progress(done: int, head: int, last: list[float] = last) -> None:
                if time.perf_counter() - last[0] > 10:
                    last[0] = time.perf_counter()
                    print(f"  rebuild {done:,}/{head:,} ({load()})", flush=True)
            stale = any(m.position < m.head for m in p.status())
            if size == args.rebuild_size or stale:
                raw_load = load()
                _count, raw = read_rate(app)
                report = p.rebuild(progress=progress)
                rate = report.notifications / report.seconds
                print(f"{tag}: raw notification read {raw:,.0f} events/s "
                      f"({raw_load}); rebuild of all read models {rate:,.0f} events/s "
                      f"({report.seconds:.1f}s, {rate / raw:.3f} of the raw read; "
                      f"reading {report.read_seconds:.1f}s, verifying+decrypting "
                      f"{report.decode_seconds:.1f}s, "
                      + ", ".join(f"{n} {r.apply_seconds:.1f}s"
                                  for n, r in report.models.items())
                      + f", deferred indexes {report.index_seconds:.1f}s; {load()})",
                      flush=True)
            else:
                print(f"{tag}: built in {secs:.0f}s; read models current")
            t0 = time.perf_counter()
            p.recall("warm up the subject index", "u1", k=5, refresh=False)
            first = time.perf_counter() - t0
            p.index.wait()  # its snapshot file, if it wrote one: not during the timings
            before = load()
            runs = {label: timed(p, questions, args.queries, **kw)
                    for label, kw in (("k=5", {"k": 5}), ("k=50", {"k": 50}),
                                      ("k=5, since/until", {"k": 5, **WINDOW}),
                                      ("k=5, since/until holding nothing",
                                       {"k": 5, **EMPTY}))}
            for label, (lat, cpu) in runs.items():
                print(f"{tag} ({size - 1:,} atoms of one subject): recall "
                      f"{label} p50 {pct(lat, 0.5) * 1000:.1f} ms, "
                      f"p95 {pct(lat, 0.95) * 1000:.1f} ms, "
                      f"mean {statistics.fmean(lat) * 1000:.1f} ms; CPU time p50 "
                      f"{pct(cpu, 0.5) * 1000:.1f} ms, p95 {pct(cpu, 0.95) * 1000:.1f} ms "
                      f"over {len(lat)} queries", flush=True)
            cpu_base = pct(runs["k=5"][1], 0.5)
            print("  same run, CPU time p50 against k=5: "
                  + ", ".join(f"{label} {pct(cpu, 0.5) / cpu_base:.2f}x"
                              for label, (_lat, cpu) in runs.items() if label != "k=5")
                  + f" ({before} before, {load()} after; this process's first recall: "
                  f"{first * 1000:.0f} ms)", flush=True)
            file = p.index.path(str(app.reader.resolve_subject("u1")))
            held = file is not None and file.exists()
        warm, warm_cpu = pct(runs["k=5"][0], 0.5), pct(runs["k=5"][1], 0.5)
        query = random.Random(9).choice(questions)
        got = first_in_new_process(home, args.embedder, query)
        print(f"{tag}: first recall in a new process {got['first'] * 1000:.0f} ms "
              f"(CPU {got['cpu'] * 1000:.0f} ms; its start, the ledger's opening and the "
              f"model's loading apart: {got['opened']:.1f}s) = "
              f"{got['first'] / warm:.1f}x the warm p50 {warm * 1000:.1f} ms (goal <= 50x; "
              f"CPU {got['cpu'] / warm_cpu:.1f}x the warm CPU p50 {warm_cpu * 1000:.1f} ms; "
              f"snapshot file {'mapped' if held else 'not written: a small subject'}; "
              f"{load()})", flush=True)
        if size >= args.cold_size:
            cold = first_in_new_process(home, args.embedder, query, use_file=False)
            print(f"{tag}: the same without the snapshot file (read from the database, as "
                  f"before ADR 0059): {cold['first'] * 1000:.0f} ms = "
                  f"{cold['first'] / warm:.0f}x the warm p50 (CPU {cold['cpu'] * 1000:.0f} "
                  f"ms = {cold['cpu'] / warm_cpu:.0f}x)", flush=True)
    finally:
        app.close()
    return questions


if __name__ == "__main__":
    main()
