"""Where an erasure reaches: the read models caught up, every route purged and probed,
the raw scan of every file the ledger owns, and the residue it finds repaired (ADR 0012,
0019). A store that cannot be reached after retries is recorded, not fatal (ADR 0047).

Steps 4 and 5 of governance/erasure.py, as functions of the projections; the order, the
records and the crash points are the run's (governance/erasure_steps.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from governance import partial as part
from governance.scan import TreeScan, scan_tree
from keys.errors import KeystoreBlocked
from ledger import clock, faults
from ledger.errors import CheckpointBlocked
from ledger.progress import Steps
from ledger.tracing import traced
from projections.routes import Reach, StoreUnavailable, unreachable
from projections.service import Projections
from projections.store import FREE_PAGE

if TYPE_CHECKING:
    from ledger.application import LedgerApp

log = structlog.get_logger("governance")


@traced("erasure.raw_scan", lambda out, *a, **k: {"ledger.erasure.hits": len(out["hits"])})
def scan_files(folder: Path, needles: Sequence[bytes],
               started: TreeScan | None = None) -> dict[str, Any]:
    """Raw scan of every file below ``folder`` for any needle (see governance/scan.py);
    ``started``: a scan begun early on some of them, finished here."""
    found = started.result() if started is not None else scan_tree(folder, needles)
    return {**found, "checked_at": clock.format_instant(clock.now())}



class Timer:
    """Seconds per phase of an erasure (reported to the caller, not stored in the pack)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 4)
        self._last = now



def unavailable(e: BaseException) -> bool:
    """Whether ``e`` says a store could not be reached (so a retry may succeed and a
    failing route is recorded as not checked), rather than a defect that must fail the
    erasure loudly. A blocked checkpoint is neither: it has its own stop (ADR 0019)."""
    return not isinstance(e, CheckpointBlocked | KeystoreBlocked) and unreachable(e)


def retrying(step: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """Run ``step`` up to :data:`governance.partial.ATTEMPTS` times while its store is
    unavailable; (attempts made, the last error or None when it succeeded)."""
    error: BaseException | None = None
    for attempt in range(1, part.ATTEMPTS + 1):
        if attempt > 1:
            time.sleep(part.BACKOFF_S[min(attempt - 2, len(part.BACKOFF_S) - 1)])
        try:
            step()
            return attempt, None
        except Exception as e:
            if not unavailable(e):
                raise
            error = e
            log.warning("erasure.store_unavailable", attempt=attempt,
                        error=type(e).__name__)
    return part.ATTEMPTS, error


def catch_up_reachable(proj: Projections, progress: Steps | None,
                        stage: str = "Catching up read models") -> dict[str, dict[str, Any]]:
    """Bring every read model up to the log; one whose store cannot be reached (after
    retries) is left behind: read model name -> the reason. The common case is one
    catch-up of all; model by model only after a failure."""
    try:
        proj.catch_up_steps(progress, stage)
        return {}
    except Exception as e:
        if not unavailable(e):
            raise
    down: dict[str, dict[str, Any]] = {}
    for model in proj.models:
        attempts, error = retrying(functools.partial(proj.runner.catch_up, [model.name]))
        if error is not None:
            down[model.name] = part.unreachable_reason("", model.name, "catch-up", attempts,
                                                       error)
    return down


def unreachable_before(down: Mapping[str, Mapping[str, Any]]) -> StoreUnavailable:
    """The atom store is what an erasure reads its targets' words from: without it, no
    key is destroyed (nothing was written)."""
    r = down[part.ATOMS_MODEL]
    return StoreUnavailable(
        f"the atom store could not be reached ({r['attempts']} attempts, {r['error']}); "
        "the erasure needs it to read what it will look for, so nothing was erased",
        hint="bring the read models' database back and run the command again")


def outside_store(app: LedgerApp, proj: Projections, raw: Mapping[str, Any]) -> list[str]:
    """The raw scan's hits in files other than the read models' own."""
    mine = _store_files(app, proj)
    return [h["file"] for h in raw["hits"] if h["file"] not in mine]


@traced("erasure.purge", lambda out, proj, items, *a, **k: {
    "ledger.erasure.items": len(items), "ledger.erasure.routes": [r.name for r in out[0]],
    "ledger.erasure.routes_not_reached": sorted(out[1])})
def purge(proj: Projections, items: list[str], timer: Timer,
           progress: Steps | None = None, down: Mapping[str, Mapping[str, Any]] | None = None
           ) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Step 4: apply the destruction, purge every route explicitly, compact the routes
    (the store's checkpoint is the caller's: it names the pages the purge changed).
    Returns the routes to probe and, by route name, the reason of each whose store could
    not be reached after retries (ADR 0047): not purged, not probed, recorded as such.
    ``down``: read models already found unreachable in this run."""
    # the read models apply the destruction: the purge
    gone = {**(down or {}), **catch_up_reachable(proj, progress, "Purging read models")}
    every = [r for r in proj.registry.routes() if r.name != "sqlite-files"]
    unreachable = {r.name: {**gone[r.model], "route": r.name} for r in every
                   if r.model in gone}
    routes = [r for r in every if r.name not in unreachable]
    try:  # explicit purge of every route, in batches
        proj.registry.purge_committed(proj.store, items, routes)
    except Exception as e:
        if not unavailable(e):
            raise
        for r in routes:  # route by route, each with its retries
            attempts, error = retrying(functools.partial(_purge_route, proj, items, r))
            if error is not None:
                unreachable[r.name] = part.unreachable_reason(r.name, r.model, "purge",
                                                              attempts, error)
    models = [m.name for m in proj.models
              if m.name not in gone and not any(r.model == m.name for r in every
                                                if r.name in unreachable)]
    try:
        proj.runner.compact(models)
    except Exception as e:
        if not unavailable(e):
            raise
        for name in models:
            attempts, error = retrying(functools.partial(proj.runner.compact, [name]))
            if error is not None:
                for r in every:
                    if r.model == name and r.name not in unreachable:
                        unreachable[r.name] = part.unreachable_reason(
                            r.name, name, "compact", attempts, error)
    timer.lap("purge")
    return [r for r in every if r.name not in unreachable], unreachable


def _purge_route(proj: Projections, items: list[str], route: Any) -> None:
    proj.registry.purge_committed(proj.store, items, [route])


@traced("erasure.reach_probes", lambda out, proj, routes, items, *a, **k: {
    "ledger.erasure.items": len(items), "ledger.erasure.routes": sorted(out[0]),
    "ledger.erasure.still_reachable": len(out[1])})
def probe(proj: Projections, routes: list[Any], items: list[str],
           content: dict[str, list[str]], indexed: dict[str, str], timer: Timer,
           shared_ok: bool = False, unreachable: dict[str, dict[str, Any]] | None = None
           ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Step 5: probe every route for every item, by id and by content. Returns the
    per-route reach and what is still reachable.

    With ``shared_ok`` (other live memories hold some of the targets' values word for
    word, :func:`held_by_others`, or items a legal hold keeps do), a hit by content that
    only other memories outside this erasure hold (the item itself is not among them) is
    their content, not a reach of the erased item; a hit by id, or one the item still
    holds, always is.

    ``unreachable`` (route name -> reason): routes found unreachable before; a route whose
    probe cannot reach its store after retries is added to it. Both are in the per-route
    reach as ``not-checked`` (ADR 0047)."""
    wanted = set(items)
    unreachable = {} if unreachable is None else unreachable
    texts = {i: [*content.get(i, []), *([indexed[i]] if i in indexed else [])] for i in items}
    try:
        probes = proj.registry.probe_many(texts, routes)
    except Exception as e:
        if not unavailable(e):
            raise
        probes = []
        for r in routes:
            got: list[Any] = []

            def probe_one(route: Any = r, into: list[Any] = got) -> None:
                into.extend(proj.registry.probe_many(texts, [route]))

            attempts, error = retrying(probe_one)
            if error is not None:
                unreachable[r.name] = part.unreachable_reason(r.name, r.model, "probe",
                                                              attempts, error)
            else:
                probes.extend(got)
    per_route: dict[str, dict[str, Any]] = {r.name: {"route": r.name, "items": 0,
                                                      "reach": Reach.NOT_REACHABLE.value}
                                            for r in routes if r.name not in unreachable}
    for name in unreachable:
        per_route[name] = {"route": name, "items": 0, "reach": part.NOT_CHECKED}
    problems = []

    def theirs(h: Any) -> bool:
        return (shared_ok and h.by == "content" and bool(h.other_ids)
                and h.count == len(h.other_ids) and not wanted & set(h.other_ids))

    for res in probes:
        per_route[res.route]["items"] += 1
        faults.point("probes")
        if any(not theirs(h) for h in res.hits):
            per_route[res.route]["reach"] = Reach.REACHABLE.value
            problems.append(f"{res.route} still reaches {res.item_id} "
                            f"({', '.join(h.where for h in res.hits)})")
    timer.lap("probes")
    return per_route, problems


def repair_residue(app: LedgerApp, proj: Projections, raw: dict[str, Any],
                    needles: Sequence[bytes], timer: Timer) -> dict[str, Any]:
    """Remove erased bytes the raw scan found in the projections file, then scan again.

    ``secure_delete`` zeroes deleted cells and freed pages, but when SQLite rebuilds a
    b-tree page during a rebalance (``rebuildPage``) it does not clear the page's
    unallocated gap, which can keep an old copy of a cell that moved to a sibling page;
    when that row is later deleted from its new place, the copy stays (measured: SQLite
    3.40 and 3.50 alike, 5 of 54 erasures of 1,000 atoms at 10^5 events, each a whole
    content row in a ``proj_atom_content`` or ``proj_kw_fts_content`` page; ADR 0012).
    Those bytes belong to no row, so no probe sees them; the raw scan does.

    Smallest repair first, each followed by a new scan, only while hits remain:

    1. ``scrub``: the pages holding the hits (the scan's byte offsets) get their unused
       bytes zeroed through ``sqlite_dbpage``; cost: those pages;
    2. ``rebuild``: ``dbstat`` names the b-tree that owns each page, and only those are
       rewritten from their live rows; cost: those tables;
    3. ``vacuum``: the whole file; cost: the file.

    Only hits in the projections database file go to 1 and 2 (hits in its WAL go
    straight to 3). Hits in any other file (event store, keystore) are never repaired
    here: plaintext there is a defect, reported as such. ``raw["repaired"]`` records
    the steps (``action``: e.g. ``scrub 1 page``, ``rebuild proj_atom_content``,
    ``vacuum``), ``files`` and ``seconds``; ``raw["repair_steps"]`` has each step with
    its table and seconds (the step and the scan after it; for the caller, not in the
    signed record).
    """
    if not raw["hits"]:
        return raw
    mine = _store_files(app, proj)
    where = sorted({h["file"] for h in raw["hits"]})
    if not mine or not set(where) <= mine:
        return raw
    log.warning("erasure.residue_found", files=where)
    t0 = time.perf_counter()
    again, steps = _repairs(app, proj, raw, needles, where)
    log.info("erasure.residue_repaired", steps=[s["action"] for s in steps],
             tables=[s["table"] for s in steps if s["table"]], left=len(again["hits"]))
    again["repaired"] = {
        "action": "; ".join(f"{s['action']} {s['table']}" if s["table"] else s["action"]
                            for s in steps),
        "files": where, "seconds": round(time.perf_counter() - t0, 4)}
    again["repair_steps"] = steps
    timer.lap("repair")
    return again


def _repairs(app: LedgerApp, proj: Projections, raw: dict[str, Any],
             needles: Sequence[bytes], where: list[str]
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Scrub, rebuild, vacuum: each only while hits remain, each followed by a new scan
    (see :func:`repair_residue`). Returns the last scan and the steps taken."""
    store = proj.store
    main = store.sqlite_path
    home = app.config.home.resolve()
    main_rel = str(main.resolve().relative_to(home)) if main is not None else None
    steps: list[dict[str, Any]] = []
    again = raw

    def step(action: str, table: str | None, t1: float) -> dict[str, Any]:
        nonlocal again
        again = scan_files(app.config.home, needles)
        steps.append({"action": action, "table": table,
                      "seconds": round(time.perf_counter() - t1, 4)})
        return again

    if where == [main_rel]:
        t1 = time.perf_counter()
        changed = store.scrub(raw.get("offsets", {}).get(main_rel, []))
        if changed:
            step(f"scrub {changed} page{'s' if changed > 1 else ''}", None, t1)
    if again["hits"] and [h["file"] for h in again["hits"]] == [main_rel]:
        owners = store.page_owners(again.get("offsets", {}).get(main_rel, []))
        named = set(owners.values())
        if owners and None not in named and FREE_PAGE not in named:
            for name in sorted(str(n) for n in named):
                t1 = time.perf_counter()
                step(store.rebuild(name), name, t1)
    if again["hits"]:
        t1 = time.perf_counter()
        store.vacuum()
        step("vacuum", None, t1)
    return again, steps


def _store_files(app: LedgerApp, proj: Projections) -> set[str]:
    """The read models' own files, relative to the home."""
    home = app.config.home.resolve()
    return {str(p.resolve().relative_to(home)) for p in proj.store.files()
            if p.resolve().is_relative_to(home)}
