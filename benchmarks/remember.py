"""The cost of looking for similar memories on every add (ADR 0052), in one run.

The server's writer adds atoms in groups (``MemoryService.add_atoms_grouped``). With
``on_similar`` null it writes them; with ``add`` (the default of ``POST /v1/atoms``, MCP
``remember`` and ``ledger atom add``) it first catches the read models up and searches the
subject's memories for each text (the read models it reads caught up first). Both are
timed on the same ledger, groups interleaved,
at growing sizes of one subject, and the search's share is split into its parts (catching
up, the search) by timing them alone. Two kinds of texts, each on a ledger of its own:
``crowded`` texts share most of their words, as a busy subject's do, so many memories are
near every new one and the keyword index matches many rows; ``varied`` texts are eight
words drawn from the project's own documentation, so few memories are near a new one
(the search then reads only the few above the threshold and skips the keyword index,
ADR 0077).

The nearest vectors of a group's texts are then timed both ways on the subject's recall
index, interleaved: all the texts in one matrix product (``vectors_top``, what the search
does) and one text at a time (``vector_top``, what it did before).

Run: python benchmarks/remember.py [--sizes 1000,10000] [--groups 30] [--group 4]
                                   [--texts crowded,varied]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # benchmarks/projections.py would shadow the projections package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--groups", type=int, default=30)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--texts", default="crowded,varied")
    args = ap.parse_args()
    os.environ.setdefault("LEDGER_LOG_LEVEL", "warning")
    from benchmarks.memory_texts import TEXTS
    from ledger.application import LedgerApp
    from service.caller import Caller
    from service.models import AtomIn, SubjectIn
    from service.root import close_service, open_service

    me = Caller(credential_id="bench", role="assistant", subjects=frozenset({"bench"}))
    print(f"one subject; groups of {args.group} adds; {args.groups} groups per mode, "
          f"interleaved; load {os.getloadavg()[0]:.2f}")
    runs = [(kind, int(s)) for kind in args.texts.split(",") for s in args.sizes.split(",")]
    for kind, size in runs:
        text = TEXTS[kind]
        folder = Path(tempfile.mkdtemp(prefix="remember-bench-"))
        try:
            LedgerApp.initialize(folder / "home")
            svc = open_service(folder / "home")
            try:
                svc.register_subject(me, SubjectIn(ref="bench"))
                for start in range(0, size, 5000):
                    svc.add_atoms(me, [AtomIn(subject="bench",
                                              text=text(i, "m"))
                                       for i in range(start, min(size, start + 5000))])
                svc.proj.catch_up()
                times: dict[str, list[float]] = {"none": [], "add": [], "catch-up": [],
                                                 "search": []}
                for g in range(args.groups):
                    for mode in ("none", "add"):
                        items = [(me, AtomIn(subject="bench", text=text(j, f"{mode}{g}"),
                                             on_similar=None if mode == "none" else "add"))
                                 for j in range(args.group)]
                        t0 = time.perf_counter()
                        svc.add_atoms_grouped(items)
                        times[mode].append((time.perf_counter() - t0) / args.group)
                    t0 = time.perf_counter()  # what the writer pays before the next search
                    svc.proj.catch_up_for_search()
                    times["catch-up"].append(time.perf_counter() - t0)
                    svc.proj.catch_up()  # the other read models, as the reader would
                    t0 = time.perf_counter()
                    svc.similar_memories(me, "bench", [text(j, f"probe{g}")
                                                       for j in range(args.group)])
                    times["search"].append((time.perf_counter() - t0) / args.group)
                times.update(nearest_both_ways(svc, text, args.group, args.groups))
            finally:
                close_service(svc)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"{kind:>8} {size:>8,} atoms: per add, without looking {med['none']:.2f} ms, looking "
              f"{med['add']:.2f} ms ({med['add'] / med['none']:.1f}x); the search alone "
              f"{med['search']:.2f} ms per text once current; catching the read models up "
              f"with one group's {args.group} atoms {med['catch-up']:.2f} ms)", flush=True)
        print(f"{'':>17}   nearest vectors of {args.group} texts: all at once "
              f"{med['batched']:.2f} ms, one at a time {med['one by one']:.2f} ms "
              f"({med['one by one'] / med['batched']:.1f}x)", flush=True)


def nearest_both_ways(svc: object, text: Callable[[int, str], str], group: int,
                      rounds: int) -> dict[str, list[float]]:
    """Seconds per call of the two ways to find the :data:`projections.similar.POOL`
    nearest vectors of ``group`` texts in the subject's recall index, interleaved."""
    import numpy as np

    from projections.embedder import embed_matrix
    from projections.similar import POOL, _unit
    from service.caller import Caller

    proj = svc.proj  # type: ignore[attr-defined]
    sid = svc.subject_id(Caller(credential_id="bench", role="operator"), "bench")  # type: ignore[attr-defined]
    with proj.store.engine.connect() as conn:
        entry = proj.index.get(conn, sid, proj._positions(conn))
    qs = _unit(embed_matrix(proj.vectors.embedder, [  # as find_similar embeds its texts
        text(j, "probe") for j in range(group)])).astype(np.float32)
    out: dict[str, list[float]] = {"batched": [], "one by one": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        entry.vectors_top(qs, POOL)
        out["batched"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for q in qs:
            entry.vector_top(q, POOL)
        out["one by one"].append(time.perf_counter() - t0)
    return out


if __name__ == "__main__":
    main()
