"""Hard erasure that reaches every copy, and the right-to-be-forgotten flow.

One mechanism serves `ledger redact --mode hard`, `ledger delete`, `ledger artifact
delete` and `ledger redact-user`:

1. an operator-approved redaction batch names the targets (ids only);
2. the plaintext of each target is read once, held in memory for the probes, never
   logged or stored;
3. the targets' data keys are destroyed and one signed event per key is appended;
4. the read models apply those events (physical purge plus compaction), and every
   registered route is purged again explicitly;
5. every route's probe, by id and by content, must find nothing, and a raw scan of every
   file the ledger owns must not find the content's bytes (its reading of the files the
   purge does not write starts as soon as the keys are gone, and any of them written
   meanwhile is read again); otherwise the erasure stops here, loudly, naming the route
   (the keys are already gone; a re-run finishes it);
6. signed tombstones list the routes reached; the batch records the reach results and
   closes; a checkpoint is taken before and after, for the Evidence Pack.

An erasure that cannot erase everything (a read model's store unreachable after retries,
items under a legal hold of the policy) ends *partial* instead (ADR 0047,
governance/partial.py): what it could do is done and recorded, signed
(``batch.ended-partial``, ``request.ended-partial``), the batch stays open, and a later
run (``ledger requests resume``) finishes it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec
from uuid import UUID

import structlog

from governance import partial as part
from governance.identifiers import (
    BROAD_MATCHES,
    Identifier,
    Match,
    compile_identifiers,
    first_matches,
)
from governance.scan import TreeScan, scan_tree
from keys.errors import DataKeyUnavailable, KeyNotAuthorized, KeystoreBlocked
from ledger import clock, envelope, faults
from ledger.errors import (
    CheckpointBlocked,
    ConflictError,
    InputError,
    NotFound,
    VerificationFailed,
)
from ledger.progress import Steps, report
from ledger.tracing import traced
from projections.atoms import GONE, AtomReads
from projections.memory import index_text
from projections.routes import Reach, StoreUnavailable, unreachable
from projections.service import Projections
from projections.store import FREE_PAGE, content_digest, content_needles

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.domain import ErasureRequest, RedactionBatch

log = structlog.get_logger("governance")

DEFAULT_ACK_HOURS = 24.0  # Persona Schema §7 rightToBeForgottenSla defaults
DEFAULT_COMPLETION_HOURS = 720.0
MIN_PROBE_CHARS = 8


class ErasureIncomplete(VerificationFailed):
    """Something is still reachable after the purge; the batch stays open."""


@dataclass
class Targets:
    atoms: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    records: list[str] = field(default_factory=list)  # portable records (ADR 0017)

    def as_json(self) -> dict[str, list[str]]:
        out = {"atoms": sorted(self.atoms), "artifacts": sorted(self.artifacts),
               "subjects": sorted(self.subjects)}
        if self.records:
            out["records"] = sorted(self.records)
        return out

    @property
    def count(self) -> int:
        return len(self.atoms) + len(self.artifacts) + len(self.subjects) + len(self.records)

    def without(self, ids: Iterable[str]) -> Targets:
        """These targets less ``ids`` (the items a legal hold keeps, ADR 0047)."""
        drop = set(ids)
        return Targets(atoms=[i for i in self.atoms if i not in drop],
                       artifacts=[i for i in self.artifacts if i not in drop],
                       subjects=[i for i in self.subjects if i not in drop],
                       records=[i for i in self.records if i not in drop])


def check_operator(app: LedgerApp, operator: str) -> None:
    """Refuse before anything is written unless ``operator`` holds the operator role now."""
    signer = app.signer(operator)
    try:
        app.roster().state.holds(signer.kid, ("operator",), clock.now())
    except KeyNotAuthorized as e:
        raise InputError(f"{operator} is not an authorized operator: {e}",
                         hint="an operator key is needed: `ledger keys authorize NAME "
                              "--role operator`") from e


# ----------------------------------------------------------------------------- content
def _content_of(reads: AtomReads, t: Targets
                ) -> tuple[dict[str, list[str]], dict[str, str], dict[str, set[str]]]:
    """Plaintext of every target, for probes only. Never logged, never stored.

    Free text only (text, gist, details, title, body, display name): tags are short
    labels other memories legitimately share, so they are probed by id, not by value.
    Texts shorter than :data:`MIN_PROBE_CHARS` say nothing about where a memory went
    (a one-word text matches everywhere); they too are probed by id only. So is a
    subject's display name: it is a name, which other people's memories legitimately
    hold (they are flagged for review, not erased), so its bytes elsewhere are not a copy.
    """
    out: dict[str, list[str]] = {}
    indexed: dict[str, str] = {}
    kept = _successor_texts(reads, t.atoms)
    for row in reads.atoms_by_id(t.atoms):
        texts = [row.get("text"), row.get("gist"),
                 *(d.get("content") for d in (row.get("details") or []))]
        # what a correction copied into the live successor is the successor's own
        # content (ADR 0019): not looked for, so its survival does not fail the erasure
        out[row["atom_id"]] = [x for x in texts if isinstance(x, str) and
                               not any(x.lower() in k for k in kept)]
        if row.get("text") is not None:
            indexed[row["atom_id"]] = index_text(row.get("text"), row.get("gist"),
                                                 row.get("tags"), row.get("details"))
    if t.artifacts:
        for r in reads.artifact_texts(t.artifacts):
            out[str(r.artifact_id)] = [x for x in (r.title, r.body, r.media_url) if x]
    out = {k: [x for x in v if x and len(x) >= MIN_PROBE_CHARS] for k, v in out.items()}
    # a value another live memory holds too, word for word (a duplicate memory, the same
    # chat captured twice), is that memory's own content: it stays, and is not looked
    # for; the record counts such values (``reach.held_by_others``), never names them
    targets = {*t.atoms, *t.artifacts, *t.subjects, *t.records}
    digest_of = {x: content_digest(x) for v in out.values() for x in v}
    holders = reads.items_with_digests("text", sorted(set(digest_of.values())))
    shared = {d: held - targets for d, held in holders.items() if held - targets}
    return ({k: [x for x in v if digest_of[x] not in shared] for k, v in out.items()},
            indexed, shared)


SAME_WORDS = "holds an erased memory's words word for word"
"""The reason of the review flag on a memory that :func:`held_by_others` found."""


def held_inside_others(proj: Projections, targets: set[str],
                       content: Mapping[str, Sequence[str]]
                       ) -> tuple[set[str], list[str], list[str]]:
    """The targets' values that live memories outside the erasure hold inside a longer
    text of their own (erased "Prefers tea", kept "Prefers tea over coffee"): asked only
    when the probes or the raw scan found something, so the common erasure pays nothing.
    Atoms are found through the keyword index (a phrase lookup), then the words checked
    in their rows; artifacts by a search of their titles and bodies. Returns the values
    and the atoms and artifacts that hold them (ADR 0041)."""
    values: set[str] = set()
    atoms: set[str] = set()
    artifacts: set[str] = set()
    phrases = proj.keyword.phrase_holders([v for texts in content.values() for v in texts])
    with proj.atoms.reading() as reads:
        for texts in content.values():
            for v in texts:
                low = v.lower()
                cands = sorted(set(phrases[v]) - targets)
                held = {str(r["atom_id"]) for r in reads.atoms_by_id(cands)
                        if any(isinstance(w, str) and low in w.lower() for w in (
                            r.get("text"), r.get("gist"),
                            *(d.get("content") for d in (r.get("details") or []))))}
                arts = reads.artifacts_containing(low) - targets
                if held or arts:
                    values.add(v)
                    atoms |= held
                    artifacts |= arts
    return values, sorted(atoms), sorted(artifacts)


def held_by_others(reads: AtomReads, shared: Mapping[str, set[str]]
                   ) -> tuple[dict[str, int], list[str], list[str]]:
    """What :func:`_content_of` found other live memories hold word for word (``shared``:
    a value's digest -> the memories outside the erasure holding it): the counts for the
    record (how many values, how many memories), and the atoms and the artifacts among
    them, to be flagged for review (never erased: they are other memories, ADR 0041)."""
    if not shared:
        return {}, [], []
    others = sorted({h for held in shared.values() for h in held})
    atoms = sorted(str(r["atom_id"]) for r in reads.atoms_by_id(others))
    artifacts = sorted(reads.artifacts_among(others))
    return {"values": len(shared), "items": len(others)}, atoms, artifacts


def successors(reads: AtomReads, atom_ids: Sequence[str]) -> dict[str, list[str]]:
    """Target atom -> the atoms that supersede it, directly or down the chain, that are
    not targets and not erased: the corrections that live on. Follows ``superseded_by``
    (primary-key reads, only for atoms that were corrected)."""
    targets = set(atom_ids)
    out: dict[str, list[str]] = {}
    origin = {r["atom_id"]: r["atom_id"] for r in reads.atoms_by_id(list(atom_ids))
              if r.get("superseded_by")}
    nxt = {r["atom_id"]: str(r["superseded_by"]) for r in reads.atoms_by_id(sorted(origin))}
    seen = set(origin)
    while nxt:
        ids = sorted({v for v in nxt.values() if v not in seen})
        seen.update(ids)
        by_id = {r["atom_id"]: r for r in reads.atoms_by_id(ids)}
        following: dict[str, str] = {}
        for prev, sid in nxt.items():
            row = by_id.get(sid)
            if row is None:
                continue
            start = origin[prev]
            origin[sid] = start
            if sid not in targets and row["status"] not in GONE and not row["content_erased"]:
                out.setdefault(start, []).append(sid)
            if row.get("superseded_by") and str(row["superseded_by"]) not in seen:
                following[sid] = str(row["superseded_by"])
        nxt = following
    return out


def _successor_texts(reads: AtomReads, atom_ids: Sequence[str]) -> list[str]:
    """The free text (lower case) of the live successors of these atoms."""
    ids = sorted({s for v in successors(reads, atom_ids).values() for s in v})
    texts = []
    for row in reads.atoms_by_id(ids):
        texts += [x.lower() for x in (row.get("text"), row.get("gist"),
                                      *(d.get("content") for d in (row.get("details") or [])))
                  if isinstance(x, str)]
    return texts


@traced("erasure.raw_scan", lambda out, *a, **k: {"ledger.erasure.hits": len(out["hits"])})
def scan_files(folder: Path, needles: Sequence[bytes],
               started: TreeScan | None = None) -> dict[str, Any]:
    """Raw scan of every file below ``folder`` for any needle (see governance/scan.py);
    ``started``: a scan begun early on some of them, finished here."""
    found = started.result() if started is not None else scan_tree(folder, needles)
    return {**found, "checked_at": clock.format_instant(clock.now())}


# ----------------------------------------------------------------------------- erasure
class _Timer:
    """Seconds per phase of an erasure (reported to the caller, not stored in the pack)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 4)
        self._last = now


CHUNK = 100
"""Fewest items per commit of the key destructions and of the tombstones: each commit
is a step boundary an interrupted erasure resumes after (ADR 0019). A large erasure uses
at most :data:`MAX_COMMITS` commits per phase (each commit costs a transaction and a
Merkle tree extension)."""
MAX_COMMITS = 4


STEPS = ("start", "after-receipt", "after-approval", "keys-deleted", "key", "subject-key",
         "after-purge", "probes", "scan", "tombstone", "after-partial", "after-execute",
         "after-close")
"""The crash points of an erasure (``LEDGER_FAULT=STEP[:N]``, ledger/faults.py): ``key``
and ``tombstone`` count items (``key:150`` stops after the commit that destroyed the
150th key); ``keys-deleted`` is between a keystore commit and its events."""


P = ParamSpec("P")


def _settled(run: Callable[P, dict[str, Any]]) -> Callable[P, dict[str, Any]]:
    """An erasure that a reader in another process kept from settling an SQLite file
    (its write-ahead log could not be checkpointed and emptied within the busy timeout:
    the projections file, whose old pages may still hold erased content, or the keystore,
    whose WAL may still hold a destroyed key) stops with :class:`CheckpointBlocked`
    naming that file and saying how to finish: the batch stays open, and the same
    command, run again once the reader has gone, resumes it (ADR 0019). The event store
    is never checkpointed by an erasure (what it holds of an erased item is sealed under
    a destroyed key), so a reader there does not stop one."""

    @functools.wraps(run)
    def settled(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        try:
            return run(*args, **kwargs)
        except (CheckpointBlocked, KeystoreBlocked) as e:
            keystore = isinstance(e, KeystoreBlocked)
            name = Path(e.path).name
            rid = kwargs.get("request_id")
            log.error("erasure.checkpoint_blocked", file=name, seconds=e.seconds)
            raise CheckpointBlocked(
                e.path, e.seconds,
                "the erasure is not finished: " + (
                    "a destroyed data key's bytes may still be in that log" if keystore
                    else "erased content may still be in the file's old pages"),
                hint=f"end that transaction (or the program holding {name} open), then run "
                     "the same command again" + (f" or `ledger requests resume {rid}`"
                                                 if rid else "")
                     + ": it continues this erasure from where it stopped") from e

    return settled


@_settled
@traced("erasure.run", lambda out, *a, **k: {"ledger.erasure.mode": k.get("mode", "")})
def hard_erase(app: LedgerApp, proj: Projections, targets: Targets, *, mode: str, reason: str,
               operator: str, request_id: UUID | None = None,
               cascade: dict[str, dict[str, Any]] | None = None,
               referring: Sequence[str] | Mapping[str, str] = (),
               review_artifacts: Sequence[str] = (), batch: Any = None,
               fresh: bool = False, progress: Steps | None = None) -> dict[str, Any]:
    """Destroy, purge, probe, tombstone, close: one resumable batch (ADR 0019).

    Each step is recorded (signed events, the keystore) before the next begins, and each
    is idempotent, so a run that stopped anywhere is finished by running it again: the
    batch left open for the same targets (or ``batch``, the request's) is continued,
    never a second one opened. What the probes and the raw scan look for is taken before
    the first key is destroyed and kept sealed under the batch's data key, in the
    keystore, until the batch closes (its key destroyed last). ``fresh``: the request was
    received just now, so it has no batch to look for. Returns batch id, event ids and
    reach results, and ``status``: ``completed``, or ``partial`` with ``reasons``.

    A run that cannot erase everything ends partial (ADR 0047): a read model's store
    unreachable after :data:`governance.partial.ATTEMPTS` tries (the other routes are
    purged and probed, the keys destroyed stay destroyed, nothing is tombstoned), or items
    a legal hold of the enforced policy keeps (kept with their keys; the others erased
    and tombstoned). The batch stays open and the next run continues it. A hard erasure
    without a request (a deletion) of a held item is refused before anything is written.

    ``referring``: memories of others to flag ``refers-to-erased`` (a mapping gives each
    flag's reason: ids, identifier positions, field names, never content);
    ``review_artifacts``: other subjects' artifacts listed for review in the reach record.
    ``progress`` hears each step and its count (ledger/progress.py).
    """
    if mode not in ("hard", "delete"):
        raise InputError(f"hard_erase takes mode hard or delete, not {mode!r}")
    check_operator(app, operator)
    timer = _Timer()
    down = _catch_up_reachable(proj, progress)
    if batch is None and not fresh:
        batch = _open_batch(app, request_id, targets)
    resumed = batch is not None
    holds = part.holds_in_force(app.policy())
    notes: dict[str, Any] | None = None
    if batch is None:
        if part.ATOMS_MODEL in down:
            raise _unreachable_before(down)
        held = part.held_items(app, targets.as_json(), holds)
        if held and request_id is None:
            raise _held_refusal(held, "erasure")
        before = app.checkpoint().size
        batch_id = app.open_batch(operator, request_id, mode, reason, targets.as_json())
    else:
        batch_id = batch.id
        mode = batch.mode
        stored = batch.targets
        targets = Targets(atoms=list(stored.get("atoms", [])),
                          artifacts=list(stored.get("artifacts", [])),
                          subjects=list(stored.get("subjects", [])),
                          records=list(stored.get("records", [])))
        before = app.seq_of(f"{batch_id}/1") - 1
        notes = _read_notes(app, batch_id)
        log.info("erasure.resumed", batch_id=str(batch_id), status=batch.status)
    if batch is not None and batch.status in ("executed", "closed"):
        return _close(app, proj, batch_id, request_id, operator, timer, before,
                      batch.event_ids, batch.reach, targets, progress)
    if notes is None:  # taken before any key is destroyed (ADR 0019)
        if part.ATOMS_MODEL in down:
            raise _unreachable_before(down)
        with proj.atoms.reading() as reads:
            content, indexed, shared = _content_of(reads, targets)
            kept = successors(reads, targets.atoms)
            others, same_atoms, same_artifacts = held_by_others(reads, shared)
        referring = dict(referring) if isinstance(referring, Mapping) \
            else {r: "refers to memory" for r in referring}
        for other in same_atoms:  # flagged for review, never erased (ADR 0041)
            referring.setdefault(other, SAME_WORDS)
        review_artifacts = sorted({*review_artifacts, *same_artifacts})
        notes = {"content": content, "indexed": indexed, "kept_by_successor": kept,
                 "held_by_others": others,
                 "needles": sorted({n for texts in [*content.values(),
                                                    _record_texts(app, targets.records)]
                                    for t in texts for n in content_needles(t)}),
                 "referring": referring,
                 "review_artifacts": sorted(review_artifacts), "cascade": cascade}
        _seal_notes(app, batch_id, notes)
    faults.point("after-approval")
    held = part.held_items(app, targets.as_json(), holds)
    live = targets.without(held)
    content = {i: v for i, v in notes["content"].items() if i not in held}
    indexed = {i: v for i, v in notes["indexed"].items() if i not in held}
    # a value a held item keeps is that item's: not looked for (as a value other memories
    # hold, ADR 0041); values the held items share with erased ones are kept by them
    kept_values = {n for i, texts in notes["content"].items() if i in held
                   for t in texts for n in content_needles(t)}
    needles = [n for n in notes["needles"] if n not in kept_values]
    referring = notes["referring"]
    review_artifacts = notes.get("review_artifacts", [])
    cascade = notes.get("cascade")
    ids = [UUID(i) for i in [*live.atoms, *live.artifacts, *live.subjects, *live.records]]
    timer.lap("open")
    # The raw scan reads the files while the erasure runs (ADR 0012): the projections
    # file from now on, its changes held in its WAL until the probes are done, when a
    # checkpoint names the pages it changed; the files the purge does not write (event
    # store, keystore) once the keys are gone; result() reads again whatever changed.
    scan = TreeScan(app.config.home, needles)
    items = [str(i) for i in ids]
    unreachable: dict[str, dict[str, Any]] = {}
    try:
        with proj.store.checkpoints_held() as held_store:
            main = proj.store.sqlite_path if held_store else None
            if main is not None:
                scan.start([main])
            earlier = resumed and app.data_keys_destroyed_among(items)
            shred_ids = _destroy_keys(app, live, batch_id, operator, progress)
            # a key an interrupted run destroyed may have left its bytes in a page this
            # run cannot find them in (it never knew them): the keystore is rebuilt
            app.finish_key_destruction(vacuum=bool(earlier))
            timer.lap("shred")
            purged = {p.resolve() for p in proj.store.files()}
            scan.start([p for p in sorted(app.config.home.rglob("*"))
                        if p.is_file() and p.resolve() not in purged])
            routes, unreachable = _purge(proj, items, timer, progress, down)
            faults.point("after-purge")
            # the checkpoint (copying the purged pages into the file, and naming them)
            # runs on a thread while the probes read: they write nothing
            with ThreadPoolExecutor(1, thread_name_prefix="checkpoint") as ex:
                changed = ex.submit(proj.store.checkpoint_pages)
                report(progress, "Probing read models", 0, len(routes))
                per_route, problems = _probe(proj, routes, items, content, indexed, timer,
                                             shared_ok=bool(notes.get("held_by_others")
                                                            or held),
                                             unreachable=unreachable)
                report(progress, "Probing read models", len(routes), len(routes))
                named = changed.result()
            if main is not None and named is not None:
                scan.patch(main, *named)
        faults.point("scan")
        report(progress, "Scanning the files", 0, 1)
        raw = scan_files(app.config.home, scan.wanted, scan)
        report(progress, "Scanning the files", 1, 1)
        timer.lap("raw_scan")
    finally:
        scan.close()
    others = dict(notes.get("held_by_others") or {})
    if (problems or raw["hits"]) and not unreachable:
        # before failing: what was found may be other memories' own longer texts that
        # hold these words (ADR 0041); if so, look again without those values
        inside, in_atoms, in_artifacts = held_inside_others(proj, set(items), content)
        if inside:
            content = {i: [v for v in texts if v not in inside]
                       for i, texts in content.items()}
            dropped = {n for v in inside for n in content_needles(v)}
            needles = [n for n in needles if n not in dropped]
            per_route, problems = _probe(proj, routes, items, content, indexed, timer,
                                         shared_ok=True)
            raw = scan_files(app.config.home, needles)
            referring = dict(notes["referring"])
            for other in in_atoms:
                referring.setdefault(other, SAME_WORDS)
            review_artifacts = sorted({*review_artifacts, *in_artifacts})
            others = {"values": others.get("values", 0) + len(inside),
                      "items": others.get("items", 0) + len(in_atoms) + len(in_artifacts)}
    if unreachable:
        # a store that could not be purged still holds the items: its files' hits are
        # expected (and recorded); a hit in any other file is still a defect
        stray = _outside_store(app, proj, raw)
    else:
        raw = _repair_residue(app, proj, raw, needles, timer)
        stray = [h["file"] for h in raw["hits"]]
    checked_at = clock.format_instant(clock.now())
    for entry in per_route.values():
        entry["checked_at"] = checked_at
    if stray:
        problems.append("raw scan found erased content in " + ", ".join(stray))
    if problems:
        log.error("erasure.incomplete", batch_id=str(batch_id), problems=len(problems))
        raise ErasureIncomplete(
            "erasure incomplete: " + "; ".join(problems[:5]),
            hint=f"keys are destroyed; fix the route and run the command again (batch "
                 f"{batch_id} stays open and is resumed)")
    reached = [*sorted(r for r in per_route if r not in unreachable), "raw-file-scan"]
    note = f"erasure batch {batch_id}"  # the reason itself is sealed in the batch
    tomb_ids: list[str] = []
    if not unreachable:  # an item is tombstoned once every route reached it
        tomb_ids = _tombstones(app, live, mode, note, reached, batch_id, cascade, operator,
                               progress)
    earlier_flags = _flags_of_earlier_runs(batch)
    flag_ids = [*earlier_flags.values()]
    todo = [o for o in referring if o not in earlier_flags]
    for i, other in enumerate(todo, start=1):
        if i % 100 == 1 or i == len(todo):
            report(progress, "Flagging memories of others", i, len(todo))
        why = referring[other] if isinstance(referring, Mapping) else "refers to memory"
        fid = app.flag(UUID(other), "refers-to-erased", f"{why}; erased by batch "
                       f"{batch_id}", related=None, actor=operator)
        if fid is None and resumed:  # flagged by the interrupted run
            fid = getattr(app.get_atom(UUID(other)), "flag_events", {}).get("refers-to-erased")
        if fid:
            flag_ids.append(fid)
    reach = {"routes": [per_route[n] for n in sorted(per_route)],
             "raw_scan": {k: raw[k] for k in ("files", "bytes", "engine", "needles", "hits",
                                              "checked_at", "repaired") if k in raw},
             "flagged_for_review": sorted(referring),
             "checkpoint_before": before}
    if referring or review_artifacts:  # the Evidence Pack counts them (ADR 0012)
        reach["flags"] = {"count": len(referring), "artifacts_for_review": sorted(
            review_artifacts)}
    if notes.get("kept_by_successor"):  # ADR 0019: the corrections' own content
        reach["kept_by_successor"] = notes["kept_by_successor"]
    if others:  # ADR 0041: words other memories hold, in full or inside longer texts
        reach["held_by_others"] = others
    if resumed:
        reach["resumed"] = True
    if resumed:  # some were recorded by the interrupted run: each item's own events
        aggs = app.get_many(ids)
        shred_ids = [a.data_key_destroyed_event for a in aggs
                     if getattr(a, "data_key_destroyed_event", None)]
        tomb_ids = [a.tombstone_event for a in aggs if getattr(a, "tombstone_event", None)]
    event_ids = [*shred_ids, *tomb_ids, *flag_ids]
    reasons = [*unreachable.values(), *part.hold_reasons(targets.as_json(), held, holds)]
    if reasons:
        return _end_partial(app, batch_id, request_id, operator, timer, event_ids, reach,
                            reasons, targets, notes, held, raw)
    app.execute_batch(operator, batch_id, event_ids, reach)
    faults.point("after-execute")
    out = _close(app, proj, batch_id, request_id, operator, timer, before, event_ids, reach,
                 targets, progress)
    log.info("erasure.completed", batch_id=str(batch_id), items=len(ids),
             events=len(event_ids))
    return {**out, "scanned_bytes": raw["bytes"],
            "scanned_early_bytes": raw.get("early_bytes", 0),
            "rescanned_bytes": raw.get("rescanned_bytes", 0),
            "patched_bytes": raw.get("patched_bytes", 0),
            "repairs": raw.get("repair_steps", []), "resumed": resumed}


def plural_items(n: int) -> str:
    return f"{n} item{'s' if n != 1 else ''}"


def _held_refusal(held: Mapping[str, str], what: str) -> ConflictError:
    """A hard erasure without a request (a deletion) of held items is refused before
    anything is written (ADR 0047): nothing to report a partial outcome to."""
    return ConflictError(
        f"{plural_items(len(held))} of this {what} {'is' if len(held) == 1 else 'are'} "
        f"under legal hold {', '.join(sorted(set(held.values())))} of the policy in force; "
        "nothing was erased", hint="lift the hold (`ledger policy set` without it) first")


def _seal_notes(app: LedgerApp, batch_id: UUID, notes: Mapping[str, Any]) -> None:
    try:
        app.seal_note(str(batch_id), json.dumps(
            {**notes, "needles": [n.hex() for n in notes["needles"]]}).encode())
    except DataKeyUnavailable:
        pass  # a batch opened before batches had keys: nothing to seal it under


@traced("erasure.tombstones", lambda ids, *a, **k: {"ledger.erasure.tombstones": len(ids)})
def _tombstones(app: LedgerApp, live: Targets, mode: str, note: str, reached: list[str],
                batch_id: UUID, cascade: dict[str, dict[str, Any]] | None, operator: str,
                progress: Steps | None) -> list[str]:
    """Signed tombstones of the items erased everywhere, :data:`CHUNK` a commit."""
    done = 0
    tomb_ids: list[str] = []
    stones = len(live.atoms) + len(live.artifacts) + len(live.records)
    report(progress, "Writing tombstones", 0, stones)
    for chunk in _chunks(live.atoms):
        tomb_ids += app.tombstone([UUID(a) for a in chunk], [], mode, note, reached,
                                  batch_id=str(batch_id), actor=operator)
        done += len(chunk)
        faults.point("tombstone", done)
        report(progress, "Writing tombstones", done, stones)
    if live.artifacts:
        tomb_ids += app.tombstone([], [UUID(a) for a in live.artifacts], mode, note,
                                  reached, batch_id=str(batch_id), cascade=cascade,
                                  actor=operator)
        faults.point("tombstone", done + len(live.artifacts))
        report(progress, "Writing tombstones", done + len(live.artifacts), stones)
    if live.records:  # portable records (ADR 0017)
        tomb_ids += app.tombstone([], [], mode, note, reached, batch_id=str(batch_id),
                                  actor=operator, records=[UUID(r) for r in live.records])
        report(progress, "Writing tombstones", stones, stones)
    return tomb_ids


def _flags_of_earlier_runs(batch: Any) -> dict[str, str]:
    """Memory -> its ``refers-to-erased`` flag event that an earlier run of this batch,
    which ended partial, raised (ADR 0047): not raised again (a reviewer may have
    resolved it since), and listed again in the batch's events."""
    if batch is None or not getattr(batch, "partials", ()):
        return {}
    flagged = set((batch.reach or {}).get("flagged_for_review", []))
    return {e.split("/", 1)[0]: e for e in batch.event_ids if e.split("/", 1)[0] in flagged}


def _end_partial(app: LedgerApp, batch_id: UUID, request_id: UUID | None, operator: str,
                 timer: _Timer, event_ids: list[str], reach: dict[str, Any],
                 reasons: list[dict[str, Any]], targets: Targets, notes: dict[str, Any],
                 held: Mapping[str, str], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Record the partial outcome (ADR 0047). When every route was reached, what the
    resume needs is only the held items' needles: the sealed note keeps just those (the
    erased items' words no longer wait, sealed, under the batch's live key)."""
    if not any(r["code"] == part.STORE_UNREACHABLE for r in reasons):
        keep = {i: v for i, v in notes["content"].items() if i in held}
        kept_records = [r for r in targets.records if r in held]
        _seal_notes(app, batch_id, {
            **notes, "content": keep,
            "indexed": {i: v for i, v in notes["indexed"].items() if i in held},
            "needles": sorted({n for texts in [*keep.values(),
                                               _record_texts(app, kept_records)]
                               for t in texts for n in content_needles(t)})})
    ids = app.end_partial(operator, batch_id, request_id, event_ids, reach, reasons)
    faults.point("after-partial")
    timer.lap("tombstones")
    log.warning("erasure.partial", batch_id=str(batch_id),
                reasons=[r["code"] for r in reasons], events=len(event_ids))
    return {"status": "partial", "batch_id": str(batch_id),
            "event_ids": [*event_ids, *ids], "reasons": reasons,
            "held": dict(sorted(held.items())), "seconds": timer.laps,
            "targets": targets.as_json(), "reach": reach,
            "checkpoints": {"before": reach["checkpoint_before"], "after": None},
            "scanned_bytes": raw["bytes"], "scanned_early_bytes": raw.get("early_bytes", 0),
            "rescanned_bytes": raw.get("rescanned_bytes", 0),
            "patched_bytes": raw.get("patched_bytes", 0), "repairs": [],
            "resumed": "resumed" in reach}


# ----------------------------------------------------------------------------- reachability
def _unavailable(e: BaseException) -> bool:
    """Whether ``e`` says a store could not be reached (so a retry may succeed and a
    failing route is recorded as not checked), rather than a defect that must fail the
    erasure loudly. A blocked checkpoint is neither: it has its own stop (ADR 0019)."""
    return not isinstance(e, CheckpointBlocked | KeystoreBlocked) and unreachable(e)


def _retrying(step: Callable[[], Any]) -> tuple[int, BaseException | None]:
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
            if not _unavailable(e):
                raise
            error = e
            log.warning("erasure.store_unavailable", attempt=attempt,
                        error=type(e).__name__)
    return part.ATTEMPTS, error


def _catch_up_reachable(proj: Projections, progress: Steps | None,
                        stage: str = "Catching up read models") -> dict[str, dict[str, Any]]:
    """Bring every read model up to the log; one whose store cannot be reached (after
    retries) is left behind: read model name -> the reason. The common case is one
    catch-up of all; model by model only after a failure."""
    try:
        proj.catch_up_steps(progress, stage)
        return {}
    except Exception as e:
        if not _unavailable(e):
            raise
    down: dict[str, dict[str, Any]] = {}
    for model in proj.models:
        attempts, error = _retrying(functools.partial(proj.runner.catch_up, [model.name]))
        if error is not None:
            down[model.name] = part.unreachable_reason("", model.name, "catch-up", attempts,
                                                       error)
    return down


def _unreachable_before(down: Mapping[str, Mapping[str, Any]]) -> StoreUnavailable:
    """The atom store is what an erasure reads its targets' words from: without it, no
    key is destroyed (nothing was written)."""
    r = down[part.ATOMS_MODEL]
    return StoreUnavailable(
        f"the atom store could not be reached ({r['attempts']} attempts, {r['error']}); "
        "the erasure needs it to read what it will look for, so nothing was erased",
        hint="bring the read models' database back and run the command again")


def _outside_store(app: LedgerApp, proj: Projections, raw: Mapping[str, Any]) -> list[str]:
    """The raw scan's hits in files other than the read models' own."""
    home = app.config.home.resolve()
    mine = {str(p.resolve().relative_to(home)) for p in proj.store.files()
            if p.resolve().is_relative_to(home)}
    return [h["file"] for h in raw["hits"] if h["file"] not in mine]


def _close(app: LedgerApp, proj: Projections, batch_id: UUID, request_id: UUID | None,
           operator: str, timer: _Timer, before: int, event_ids: list[str],
           reach: dict[str, Any], targets: Targets, progress: Steps | None = None
           ) -> dict[str, Any]:
    """Close the batch (its key destroyed last: the sealed needles go with it) and its
    request; the checkpoint after."""
    report(progress, "Closing the batch", 0, 1)
    close_ids = app.close_batch(operator, batch_id, request_id)
    faults.point("after-close")
    proj.catch_up()
    after = app.checkpoint()
    report(progress, "Closing the batch", 1, 1)
    timer.lap("tombstones")
    return {"batch_id": str(batch_id), "event_ids": [*event_ids, *close_ids],
            "seconds": timer.laps, "scanned_bytes": 0, "scanned_early_bytes": 0,
            "rescanned_bytes": 0, "patched_bytes": 0, "repairs": [],
            "targets": targets.as_json(), "reach": reach,
            "checkpoints": {"before": before, "after": after.size}}


def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    size = max(CHUNK, -(-len(items) // MAX_COMMITS))
    for i in range(0, len(items), size):
        yield list(items[i:i + size])


@traced("erasure.key_destruction",
        lambda ids, *a, **k: {"ledger.erasure.keys_destroyed": len(ids)})
def _destroy_keys(app: LedgerApp, targets: Targets, batch_id: UUID, operator: str,
                  progress: Steps | None = None) -> list[str]:
    """Step 3 in commits of :data:`CHUNK` items: atoms, artifacts, then the subject's key
    (last: until it goes, the subject is still there to resume). Each commit is the
    keystore's, then the items' signed events; the keystore is compacted and checked by
    the caller (``finish_deferred``)."""
    note = f"erasure batch {batch_id}"
    done = 0
    ids: list[str] = []
    items = [*targets.atoms, *targets.artifacts, *targets.records]
    total = len(items) + len(targets.subjects)
    report(progress, "Destroying data keys", 0, total)
    for chunk in _chunks(items):
        ids += app.shred([UUID(i) for i in chunk], note, actor=operator, defer=True)
        done += len(chunk)
        faults.point("key", done)
        report(progress, "Destroying data keys", done, total)
    if targets.subjects:
        ids += app.shred([UUID(i) for i in targets.subjects], note, actor=operator,
                         defer=True)
        faults.point("subject-key")
        report(progress, "Destroying data keys", total, total)
    return ids


def _read_notes(app: LedgerApp, batch_id: UUID) -> dict[str, Any] | None:
    raw = app.open_note(str(batch_id))
    if raw is None:
        return None
    notes: dict[str, Any] = json.loads(raw)
    notes["needles"] = [bytes.fromhex(n) for n in notes["needles"]]
    return notes


def _open_batch(app: LedgerApp, request_id: UUID | None, targets: Targets | None
                ) -> RedactionBatch | None:
    """The batch left open (not closed) by an interrupted erasure: the request's, or,
    without a request, one of exactly these targets."""
    from ledger.domain import RedactionBatch

    opened = app.notifications(start=1, limit=10**9,
                               topics=[RedactionBatch.Created.TOPIC])
    want = targets.as_json() if targets is not None else None
    for n in reversed(opened):
        payload = envelope.open_state(n.state).envelope["payload"]
        rid = payload.get("request_id")
        if request_id is not None:
            if rid != str(request_id):
                continue
        elif rid is not None or want is None or \
                {k: sorted(v) for k, v in payload.get("targets", {}).items()} != want:
            continue
        batch = app.aggregate(UUID(str(n.originator_id)))
        if isinstance(batch, RedactionBatch) and (request_id is not None
                                                  or batch.status != "closed"):
            return batch
    return None


def _record_texts(app: LedgerApp, ids: Sequence[str]) -> list[str]:
    """Free text of portable records, for the raw scan only (no read model holds them)."""
    from ledger.portability.records import needles_of

    return [t for r in app.get_many([UUID(i) for i in ids]) if r.content is not None
            for t in needles_of(r.content, MIN_PROBE_CHARS)] if ids else []


@traced("erasure.purge", lambda out, proj, items, *a, **k: {
    "ledger.erasure.items": len(items), "ledger.erasure.routes": [r.name for r in out[0]],
    "ledger.erasure.routes_not_reached": sorted(out[1])})
def _purge(proj: Projections, items: list[str], timer: _Timer,
           progress: Steps | None = None, down: Mapping[str, Mapping[str, Any]] | None = None
           ) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Step 4: apply the destruction, purge every route explicitly, compact the routes
    (the store's checkpoint is the caller's: it names the pages the purge changed).
    Returns the routes to probe and, by route name, the reason of each whose store could
    not be reached after retries (ADR 0047): not purged, not probed, recorded as such.
    ``down``: read models already found unreachable in this run."""
    # the read models apply the destruction: the purge
    gone = {**(down or {}), **_catch_up_reachable(proj, progress, "Purging read models")}
    every = [r for r in proj.registry.routes() if r.name != "sqlite-files"]
    unreachable = {r.name: {**gone[r.model], "route": r.name} for r in every
                   if r.model in gone}
    routes = [r for r in every if r.name not in unreachable]
    try:  # explicit purge of every route, in batches
        proj.registry.purge_committed(proj.store, items, routes)
    except Exception as e:
        if not _unavailable(e):
            raise
        for r in routes:  # route by route, each with its retries
            attempts, error = _retrying(functools.partial(_purge_route, proj, items, r))
            if error is not None:
                unreachable[r.name] = part.unreachable_reason(r.name, r.model, "purge",
                                                              attempts, error)
    models = [m.name for m in proj.models
              if m.name not in gone and not any(r.model == m.name for r in every
                                                if r.name in unreachable)]
    try:
        proj.runner.compact(models)
    except Exception as e:
        if not _unavailable(e):
            raise
        for name in models:
            attempts, error = _retrying(functools.partial(proj.runner.compact, [name]))
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
def _probe(proj: Projections, routes: list[Any], items: list[str],
           content: dict[str, list[str]], indexed: dict[str, str], timer: _Timer,
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
        if not _unavailable(e):
            raise
        probes = []
        for r in routes:
            got: list[Any] = []

            def probe_one(route: Any = r, into: list[Any] = got) -> None:
                into.extend(proj.registry.probe_many(texts, [route]))

            attempts, error = _retrying(probe_one)
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


def _repair_residue(app: LedgerApp, proj: Projections, raw: dict[str, Any],
                    needles: Sequence[bytes], timer: _Timer) -> dict[str, Any]:
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
    home = app.config.home.resolve()
    mine = {str(p.resolve().relative_to(home)) for p in proj.store.files()
            if p.resolve().is_relative_to(home)}
    where = sorted({h["file"] for h in raw["hits"]})
    if not mine or not set(where) <= mine:
        return raw
    log.warning("erasure.residue_found", files=where)
    t0 = time.perf_counter()
    store = proj.store
    main = store.sqlite_path
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
    log.info("erasure.residue_repaired", steps=[s["action"] for s in steps],
             tables=[s["table"] for s in steps if s["table"]], left=len(again["hits"]))
    again["repaired"] = {
        "action": "; ".join(f"{s['action']} {s['table']}" if s["table"] else s["action"]
                            for s in steps),
        "files": where, "seconds": round(time.perf_counter() - t0, 4)}
    again["repair_steps"] = steps
    timer.lap("repair")
    return again


# ----------------------------------------------------------------------------- gathering
@dataclass
class ErasurePlan:
    """What a right-to-be-forgotten request erases, and what of others it flags.

    ``targets`` are the subject's own atoms, artifacts and subject record, nothing else.
    ``flags`` maps each memory of *another* subject that may refer to the person to why
    (``identifier``, ``tag``, ``session``, or ``same-words``: it holds a target's value word
    for word, ADR 0041); ``flag_reasons`` holds the sentence its review flag records (ids,
    identifier positions and field names only, never content). ``review_artifacts`` are
    other subjects' artifacts an identifier matched or that hold a target's value word for
    word: listed for review, never erased (an artifact carries no review flag). Values held
    inside a longer text of another memory are found only while erasing (ADR 0041), and
    their holders flagged then. ``identifiers`` reports, per
    identifier (by position), what it matched, by subject; ``sessions`` per session.
    """

    subject_id: str
    targets: Targets
    flags: dict[str, str] = field(default_factory=dict)
    flag_reasons: dict[str, str] = field(default_factory=dict)
    flag_owners: dict[str, str] = field(default_factory=dict)
    subject_refs: dict[str, str] = field(default_factory=dict)  # id -> ref, for people
    review_artifacts: list[str] = field(default_factory=list)
    identifiers: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    """The targets a legal hold of the enforced policy keeps (``legal-hold`` reasons, ADR
    0047): approved with the rest, kept while the hold lasts."""

    @property
    def referring(self) -> list[str]:
        return sorted(self.flags)

    def digest(self) -> str:
        """SHA-256 of what the run would erase and flag (ids only): a real run given the
        dry run's digest refuses to start if the ledger changed in between."""
        from ledger.canonical import dumps

        body: dict[str, Any] = {"subject_id": self.subject_id,
                                "targets": self.targets.as_json(),
                                "flags": dict(sorted(self.flags.items())),
                                "review_artifacts": sorted(self.review_artifacts)}
        if self.held:  # a plan without holds keeps the digest it always had
            body["held"] = [{k: v for k, v in h.items() if k != "reason"} for h in self.held]
        return "sha256:" + hashlib.sha256(dumps(body)).hexdigest()

    def as_json(self) -> dict[str, Any]:
        return {"subject_id": self.subject_id, "targets": self.targets.as_json(),
                "gathered_by": _count(self.targets.why.values()),
                "flag_for_review": self.referring,
                "flagged_by": _count(self.flags.values()),
                "flags": [{"atom_id": a, "subject_id": self.flag_owners.get(a),
                           "why": self.flags[a], "reason": self.flag_reasons.get(a)}
                          for a in self.referring],
                "review_artifacts": sorted(self.review_artifacts),
                "identifiers": self.identifiers, "sessions": self.sessions,
                "warnings": self.warnings, "subject_refs": self.subject_refs,
                **({"held": self.held} if self.held else {}),
                "plan_digest": self.digest()}


def _atom_fields(row: Any) -> list[tuple[str, str | None]]:
    """The free-text fields of an atom content row, for identifier matching."""
    out: list[tuple[str, str | None]] = [("text", row.text), ("gist", row.gist)]
    for name, raw in (("tags", row.tags), ("details", row.details)):
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            value = None
        items = value if isinstance(value, list) else []
        for item in items:
            text = item.get("content") if isinstance(item, dict) else item
            if isinstance(text, str):
                out.append((name, text))
    return out


def _identifier_matches(reads: AtomReads, idents: Sequence[Identifier]
                        ) -> tuple[list[tuple[str, str, Match]], list[tuple[str, str, Match]]]:
    """(atom id, subject id, match) and (artifact id, subject id, match) for every live
    memory an identifier matches. Reads every content row (normalisation and word
    boundaries are not SQL), streamed."""
    atoms: list[tuple[str, str, Match]] = []
    for row in reads.live_atom_contents():
        for m in first_matches(idents, _atom_fields(row)):
            atoms.append((str(row.atom_id), str(row.subject_id), m))
    arts: list[tuple[str, str, Match]] = []
    for row in reads.live_artifact_contents():
        for m in first_matches(idents, [("title", row.title), ("body", row.body)]):
            arts.append((str(row.artifact_id), str(row.subject_id), m))
    return atoms, arts


@traced("erasure.plan", lambda plan, *a, **k: {
    "ledger.erasure.atoms": len(plan.targets.atoms),
    "ledger.erasure.artifacts": len(plan.targets.artifacts),
    "ledger.erasure.subjects": len(plan.targets.subjects),
    "ledger.erasure.flagged": len(plan.flags)})
def plan_user_erasure(app: LedgerApp, proj: Projections, subject: str,
                      identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                      broad: int = BROAD_MATCHES, catch_up: bool = True) -> ErasurePlan:
    """Gather what belongs to the subject, and what of others may refer to it (ADR 0012).

    Erase targets are the subject's own atoms and artifacts and its subject record, and
    nothing else: a ``--session`` must be one the subject has memories in, and the
    memories other subjects hold in it are flagged, not erased. Identifiers only flag
    (governance/identifiers.py). Memories of others that share a tag with a target are
    flagged too. Subject, session and tag lookups use the atom store's indexes; identifier
    matching reads every content row, only when identifiers are given. ``catch_up``
    False: the plan of the read models as they stand, writing nothing.
    """
    sid = str(app.resolve_subject(subject))
    idents = compile_identifiers(identifiers)  # refused before anything is read
    if catch_up:
        proj.catch_up()
    plan = ErasurePlan(sid, Targets())
    t = plan.targets
    with proj.atoms.reading() as reads:
        own = reads.atoms_of_subject(sid)
        in_session: dict[str, list[dict[str, Any]]] = {}
        if sessions:
            for row in reads.atoms_in_sessions(sessions):
                in_session.setdefault(row["session_id"], []).append(row)
        for s in dict.fromkeys(sessions):
            rows = in_session.get(s, [])
            mine = [r for r in rows if r["subject_id"] == sid]
            if not mine:
                raise InputError(
                    f"session {s!r} holds no memory of subject {subject}; only the "
                    "subject's own sessions can be named",
                    hint="check the session id with `ledger memory list --json`; memories "
                         "of others are never erased by this command")
            others = [r for r in rows if r["subject_id"] != sid and r["status"] not in GONE]
            plan.sessions.append({"session_id": s, "atoms_of_subject": len(mine),
                                  "flagged_atoms_of_others": len(others)})
        target_rows = []
        for row in own:
            if row["status"] in GONE and row["content_erased"]:
                continue  # already erased and tombstoned; a half-done erasure is picked up
            t.atoms.append(row["atom_id"])
            t.why[row["atom_id"]] = "subject"
            target_rows.append(row)
        for art in reads.artifacts_of(sid):
            if not art.get("content_erased"):
                t.artifacts.append(str(art["artifact_id"]))
        subj = reads.subject(sid)
        if subj is not None and not subj.get("content_erased"):
            t.subjects.append(sid)
        t.records = _records_of(app, sid)
        target_set = set(t.atoms)
        if idents:
            atom_hits, art_hits = _identifier_matches(reads, idents)
        else:
            atom_hits, art_hits = [], []
        # Memories of others that may refer to the erased ones: shared tags or session.
        tags = {tag for row in target_rows for tag in (row.get("tags") or [])}
        sess = sorted({row["session_id"] for row in target_rows if row.get("session_id")}
                      | set(sessions))
        holders = reads.items_with_digests("tag", [content_digest(x) for x in tags])
        candidates = {i for ids in holders.values() for i in ids} - target_set
        by_tag = reads.atoms_by_id(sorted(candidates))
        by_session = reads.atoms_in_sessions(sess, not_of=sid) if sess else []
        # values other live memories hold word for word are theirs (ADR 0041): the erasure
        # keeps them and flags their holders; listed here, so the plan approved names them
        _, _, shared = _content_of(reads, t)
        _, same_atoms, same_artifacts = held_by_others(reads, shared)
        by_words = reads.atoms_by_id(same_atoms)
    for atom_id, owner, m in atom_hits:
        if owner != sid and atom_id not in plan.flags:
            plan.flags[atom_id] = "identifier"
            plan.flag_owners[atom_id] = owner
            plan.flag_reasons[atom_id] = (f"identifier #{m.position} of the erasure request "
                                          f"matched its {m.field}")
    for why, rows in (("tag", by_tag), ("session", by_session)):
        for row in rows:
            if (row["subject_id"] != sid and row["status"] not in GONE
                    and row["atom_id"] not in plan.flags):
                plan.flags[row["atom_id"]] = why
                plan.flag_owners[row["atom_id"]] = row["subject_id"]
                plan.flag_reasons[row["atom_id"]] = (
                    "shares a tag with an erased memory" if why == "tag"
                    else f"same session ({row['session_id']}) as an erased memory")
    for row in by_words:
        if row["atom_id"] not in plan.flags:
            plan.flags[row["atom_id"]] = "same-words"
            plan.flag_owners[row["atom_id"]] = row["subject_id"]
            plan.flag_reasons[row["atom_id"]] = SAME_WORDS
    plan.review_artifacts = sorted({*(aid for aid, owner, _ in art_hits if owner != sid),
                                    *same_artifacts})
    holds = part.holds_in_force(app.policy())
    plan.held = part.hold_reasons(t.as_json(), part.held_items(app, t.as_json(), holds), holds)
    for h in plan.held:
        n = sum(len(h[k]) for k in part.KINDS)
        plan.warnings.append(f"{plural_items(n)} under legal hold {h['hold']} will be kept: "
                             "the request will end partial until the hold is lifted")
    owners = {sid, *plan.flag_owners.values(), *(o for _, o, _ in atom_hits),
              *(o for _, o, _ in art_hits)}
    with proj.atoms.reading() as reads:
        for owner in sorted(owners):
            found = reads.subject(owner)
            if found is not None:
                plan.subject_refs[owner] = found["ref"]
    for ident in idents:
        per: dict[str, dict[str, int]] = {}
        for kind, hits in (("atoms", atom_hits), ("artifacts", art_hits)):
            for _item, owner, m in hits:
                if m.position == ident.position:
                    counts = per.setdefault(owner, {"atoms": 0, "artifacts": 0})
                    counts[kind] += 1
        of_others = sum(c["atoms"] + c["artifacts"] for o, c in per.items() if o != sid)
        plan.identifiers.append({
            "identifier": ident.position,
            "matched": {o: per[o] for o in sorted(per, key=lambda o: (o != sid, o))},
            "of_subject": sum(per.get(sid, {}).values()), "of_others": of_others})
        if of_others > broad:
            plan.warnings.append(
                f"identifier #{ident.position} matches {of_others} memories of other subjects "
                f"(more than {broad}): it may name someone else too; check the dry run's "
                "list before flagging them all for review")
    return plan


def _records_of(app: LedgerApp, sid: str) -> list[str]:
    from ledger.portability.records import live_of

    return [str(r.id) for r in live_of(app, sid)]


def redact_user(app: LedgerApp, proj: Projections, subject: str, *, reason: str, operator: str,
                identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                legal_basis: str | None = None, dry_run: bool = False,
                ack_hours: float = DEFAULT_ACK_HOURS,
                completion_hours: float = DEFAULT_COMPLETION_HOURS,
                resume: bool = False, expect_plan: str | None = None,
                progress: Steps | None = None) -> dict[str, Any]:
    """The right to be forgotten (Persona Schema §5): receipt, gather, approve, erase, flag,
    confirm. ``progress`` hears each step and its count (ledger/progress.py).

    A dry run checks what the real run checks (reason, subject, operator key and role,
    identifiers, sessions) and then reports the plan with its digest; a real run given
    ``expect_plan`` (that digest) refuses, before writing anything, if its plan differs.
    A subject with a request still open (an interrupted run) gets that request finished,
    never a second one (ADR 0019); ``resume`` asks for exactly that, and refuses when
    there is nothing to resume."""
    if not resume and not reason.strip():
        raise InputError("a reason is required", hint='e.g. --reason "GDPR Art. 17 request"')
    try:
        sid = app.resolve_subject(subject)
    except NotFound:
        raise NotFound(f"no subject {subject!r} in this ledger",
                       hint="check the subject's id with `ledger subject show`") from None
    faults.point("start")
    pending = None if dry_run else open_request(app, str(sid))
    if pending is not None:
        check_operator(app, operator)
        return _resume_request(app, proj, pending, operator, progress)
    if resume:
        done = _completed_request(app, proj, str(sid))
        if done is not None:
            return {"status": "already-completed", "no_op": True, **done,
                    "subject_id": str(sid), "targets": Targets().as_json(),
                    "flag_for_review": []}
        raise NotFound(f"subject {subject} has no erasure request to resume",
                       hint="start one with `ledger redact-user SUBJECT --reason ...`")
    check_operator(app, operator)
    t0 = time.perf_counter()
    proj.catch_up_steps(progress)
    report(progress, "Gathering what to erase", 0, 1)
    gathered_plan = plan_user_erasure(app, proj, str(sid), identifiers, sessions)
    report(progress, "Gathering what to erase", 1, 1)
    targets = gathered_plan.targets
    gathered = round(time.perf_counter() - t0, 4)
    plan = gathered_plan.as_json()
    if dry_run:
        return {"dry_run": True, **plan}
    if expect_plan is not None and expect_plan != plan["plan_digest"]:
        raise ConflictError(
            f"the ledger changed since the dry run: its plan was {expect_plan}, the plan now "
            f"is {plan['plan_digest']} ({len(targets.atoms)} atoms, "
            f"{len(targets.artifacts)} artifacts to erase, {len(gathered_plan.flags)} "
            "memories of others to flag); nothing was written",
            hint="run the dry run again, review it, and pass its new --plan")
    if targets.count == 0:
        done = _completed_request(app, proj, str(sid))
        if done is not None:
            return {"status": "already-completed", "no_op": True, **done, **plan}
        raise ConflictError(f"subject {subject} has nothing left to erase")
    request_id = app.receive_request(str(sid), reason, operator, ack_hours, completion_hours,
                                     legal_basis=legal_basis, identifiers=identifiers,
                                     sessions=sessions)
    faults.point("after-receipt")
    result = hard_erase(app, proj, targets, mode="hard", reason=reason, operator=operator,
                        request_id=request_id, referring=gathered_plan.flag_reasons,
                        review_artifacts=gathered_plan.review_artifacts, fresh=True,
                        progress=progress)
    result["seconds"] = {"gather": gathered, **result["seconds"]}
    return {"status": "completed", "request_id": str(request_id), **result, **plan}


def erasure_request(app: LedgerApp, request: str) -> Any:
    """The :class:`ErasureRequest` whose id is ``request``, or :class:`NotFound`."""
    from eventsourcing.application import AggregateNotFoundError

    from ledger.domain import ErasureRequest

    try:
        req = app.aggregate(UUID(request))
    except (ValueError, AggregateNotFoundError):
        raise NotFound(f"no erasure request {request!r}",
                       hint="see `ledger requests list`") from None
    if not isinstance(req, ErasureRequest):
        raise NotFound(f"{request} is not an erasure request", hint="see `ledger requests list`")
    return req


def resume_request(app: LedgerApp, proj: Projections, request: str, operator: str
                   ) -> dict[str, Any]:
    """`ledger requests resume REQUEST`: finish an interrupted erasure request."""
    req = erasure_request(app, request)
    check_operator(app, operator)
    if req.rejected_at is not None:
        raise ConflictError(f"request {req.id} was rejected at {req.rejected_at} "
                            f"({(req.rejection or {}).get('code')}): a rejected request is "
                            "closed and never executed",
                            hint="a new request can be filed for the subject")
    if req.completed_at is not None and req.data_key_destroyed_at is not None:
        return {"status": "already-completed", "no_op": True, "request_id": str(req.id),
                "batch_id": req.batch_id, "completed_at": req.completed_at,
                "event_ids": req.event_ids, "subject_id": req.subject_id,
                "targets": Targets().as_json(), "flag_for_review": []}
    return _resume_request(app, proj, req, operator)


def _resume_request(app: LedgerApp, proj: Projections, req: ErasureRequest, operator: str,
                    progress: Steps | None = None) -> dict[str, Any]:
    """Continue the request's batch from where it stopped (or open it, if the run
    stopped after the receipt), and close both."""
    batch = _open_batch(app, req.id, None)
    if batch is None:
        plan = plan_user_erasure(app, proj, req.subject_id, req.identifiers or (),
                                 req.sessions or ())
        if plan.targets.count == 0:
            raise ConflictError(f"request {req.id} has nothing left to erase",
                                hint="its subject's memories are already gone")
        result = hard_erase(app, proj, plan.targets, mode="hard", reason=req.reason or
                            f"erasure request {req.id}", operator=operator,
                            request_id=req.id, referring=plan.flag_reasons,
                            review_artifacts=plan.review_artifacts, fresh=True,
                            progress=progress)
    else:
        result = hard_erase(app, proj, Targets(), mode=batch.mode, reason="",
                            operator=operator, request_id=req.id, batch=batch,
                            progress=progress)
    flagged = (result.get("reach") or {}).get("flagged_for_review", [])
    return {"status": "completed", "request_id": str(req.id), **result, "resumed": True,
            "subject_id": req.subject_id, "flag_for_review": flagged,
            **({"partial_before": [dict(p) for p in req.partials]} if req.partials else {})}


def open_request(app: LedgerApp, sid: str) -> ErasureRequest | None:
    """The subject's erasure request that is not completed (or whose key is not yet
    destroyed), if any."""
    from ledger.domain import ErasureRequest

    received = app.notifications(start=1, limit=10**9,
                                 topics=[ErasureRequest.Created.TOPIC])
    for n in reversed(received):
        if envelope.open_state(n.state).envelope["payload"].get("subject_id") != sid:
            continue
        req = app.aggregate(UUID(str(n.originator_id)))
        if isinstance(req, ErasureRequest) and (
                (req.completed_at is None and req.rejected_at is None) or
                (req.data_key_destroyed_at is None and app.data_keys_present([str(req.id)]))):
            return req
    return None


def reject_request(app: LedgerApp, request: str, operator: str, code: str, reason: str
                   ) -> dict[str, Any]:
    """`ledger requests reject REQUEST --reason ...`: refuse a request before any erasure
    of it started (ADR 0047). The reason is kept in clear and shown in the request
    register: it must say why in words that name no one. Returns the request's id, the
    rejection and the signed events."""
    from ledger.domain import REJECTION_CODES

    if code not in REJECTION_CODES:
        raise InputError(f"unknown rejection code {code!r}",
                         hint="one of: " + ", ".join(REJECTION_CODES))
    words = reason.strip()
    if not words:
        raise InputError("a reason is required: it is what the register says about why",
                         hint='e.g. --reason "identity could not be verified"')
    if len(words) > 500:
        raise InputError("the reason is longer than 500 characters",
                         hint="say why in a sentence; it must name no one")
    req = erasure_request(app, request)
    check_operator(app, operator)
    batch = _open_batch(app, req.id, None)
    if batch is not None:
        raise ConflictError(
            f"request {req.id} has an erasure (batch {batch.id}, {batch.status}); only a "
            "request no erasure has started for can be rejected",
            hint=f"finish it with `ledger requests resume {req.id}`")
    ids = app.reject_request(operator, req.id, code, words)
    return {"request_id": str(req.id), "status": "rejected", "code": code, "reason": words,
            "event_ids": ids}


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _completed_request(app: LedgerApp, proj: Projections, sid: str) -> dict[str, Any] | None:
    from ledger import envelope
    from ledger.domain import ErasureRequest

    received = app.notifications(start=1, limit=10**9,
                                 topics=[ErasureRequest.Created.TOPIC])
    rows = [str(n.originator_id) for n in received
            if envelope.open_state(n.state).envelope["payload"].get("subject_id") == sid]
    for rid in reversed(rows):
        req = app.aggregate(UUID(rid))
        if isinstance(req, ErasureRequest) and req.completed_at:
            return {"request_id": rid, "batch_id": req.batch_id,
                    "completed_at": req.completed_at, "event_ids": req.event_ids}
    return None


# ----------------------------------------------------------------------------- artifacts
def delete_artifact(app: LedgerApp, proj: Projections, artifact: str, *, reason: str, operator: str,
                    flag_unsourced: bool = False) -> dict[str, Any]:
    """Delete an artifact; re-evaluate every atom whose provenance cites it (Konshus)."""
    aid = str(app.resolve("artifact", artifact))
    proj.catch_up()
    with proj.atoms.reading() as reads:
        rows = [r for r in reads.all_atoms()
                if aid in (r.get("artifact_ids") or []) and r["status"] not in GONE]
    gone: set[str] = set()
    deleted_atoms: list[str] = []
    flagged: list[str] = []
    kept: list[tuple[str, list[str]]] = []
    for r in rows:
        remaining = [a for a in (r.get("artifact_ids") or []) if a != aid and a not in gone]
        needs = r.get("min_sources") or 1
        if r["derivation"] in ("inferred", "observed") and len(remaining) < needs:
            (flagged if flag_unsourced else deleted_atoms).append(r["atom_id"])
        else:
            kept.append((r["atom_id"], remaining))
    check_operator(app, operator)
    held = part.held_items(app, {"atoms": deleted_atoms, "artifacts": [aid]},
                           part.holds_in_force(app.policy()))
    if held:  # refused before the cascade writes anything (ADR 0047)
        raise _held_refusal(held, "deletion")
    for atom_id, _remaining in kept:
        app.remove_source(UUID(atom_id), UUID(aid), actor=operator)
    for atom_id in flagged:
        app.remove_source(UUID(atom_id), UUID(aid), actor=operator)
        app.flag(UUID(atom_id), "unsourced", f"its source artifact {aid} was deleted",
                 actor=operator)
    cascade = {aid: {"deleted_atoms": sorted(deleted_atoms),
                     "kept_atoms": sorted(a for a, _ in kept),
                     "flagged_unsourced": sorted(flagged)}}
    targets = Targets(atoms=deleted_atoms, artifacts=[aid])
    result = hard_erase(app, proj, targets, mode="delete", reason=reason, operator=operator,
                        cascade=cascade)
    return {**result, "cascade": cascade[aid]}
