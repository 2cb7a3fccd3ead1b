"""The erasure as explicit steps (ADR 0019, ADR 0066): one run of one redaction batch.

:class:`ErasureRun` holds what each step recorded, and each step is a method that checks
the step before it was taken, acts, records (signed events, the keystore) and keeps its
typed result, in the order of ADR 0019's table:

1. :meth:`~ErasureRun.approve`: the batch opened and approved, the needles sealed
   (``after-approval``);
2. :meth:`~ErasureRun.destroy_keys`: keystore rows, then ``*.data-key-destroyed``, the
   subject's key last (``keys-deleted``, ``key:N``, ``subject-key``);
3. :meth:`~ErasureRun.purge`, :meth:`~ErasureRun.probe`, :meth:`~ErasureRun.scan`:
   re-run in full on resume (``after-purge``, ``probes``, ``scan``);
4. :meth:`~ErasureRun.tombstone`: ``atom.redacted`` / ``artifact.deleted``
   (``tombstone:N``);
5. :meth:`~ErasureRun.end_partial` (ADR 0047): ``batch.ended-partial``, the batch stays
   open (``after-partial``);
6. :meth:`~ErasureRun.execute`: ``batch.executed`` (``after-execute``);
7. :meth:`~ErasureRun.close`: ``batch.closed``, ``request.completed`` (``after-close``).

:meth:`ErasureRun.run` is the table read top to bottom. Between the scan and the
tombstones, :meth:`~ErasureRun.look_again` discounts words other memories hold inside
longer texts (ADR 0041) and :meth:`~ErasureRun.settle` repairs the residue the scan found
or stops the run (:class:`ErasureIncomplete`); after them :meth:`~ErasureRun.flag` raises
the review flags on memories of others. Each step is idempotent, so a run that stopped
anywhere is finished by running it again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from uuid import UUID

import structlog

from governance import erasure_reach as reach
from governance import partial as part
from governance.erasure_content import (
    SAME_WORDS,
    Targets,
    content_of,
    held_by_others,
    held_inside_others,
    plural_items,
    record_texts,
    successors,
)
from governance.scan import TreeScan
from keys.errors import DataKeyUnavailable, KeyNotAuthorized, KeystoreBlocked
from ledger import clock, envelope, faults
from ledger.errors import (
    CheckpointBlocked,
    ConflictError,
    InputError,
    VerificationFailed,
)
from ledger.progress import Steps, report
from ledger.tracing import traced
from projections.service import Projections
from projections.store import content_needles

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.domain import RedactionBatch

log = structlog.get_logger("governance")

T = TypeVar("T")


class ErasureIncomplete(VerificationFailed):
    """Something is still reachable after the purge; the batch stays open."""


def check_operator(app: LedgerApp, operator: str) -> None:
    """Refuse before anything is written unless ``operator`` holds the operator role now."""
    signer = app.signer(operator)
    try:
        app.reader.roster().state.holds(signer.kid, ("operator",), clock.now())
    except KeyNotAuthorized as e:
        raise InputError(f"{operator} is not an authorized operator: {e}",
                         hint="an operator key is needed: `ledger keys authorize NAME "
                              "--role operator`") from e


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


def settled(run: Callable[P, dict[str, Any]]) -> Callable[P, dict[str, Any]]:
    """An erasure that a reader in another process kept from settling an SQLite file
    (its write-ahead log could not be checkpointed and emptied within the busy timeout:
    the projections file, whose old pages may still hold erased content, or the keystore,
    whose WAL may still hold a destroyed key) stops with :class:`CheckpointBlocked`
    naming that file and saying how to finish: the batch stays open, and the same
    command, run again once the reader has gone, resumes it (ADR 0019). The event store
    is never checkpointed by an erasure (what it holds of an erased item is sealed under
    a destroyed key), so a reader there does not stop one."""

    @functools.wraps(run)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
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

    return wrapped



def held_refusal(held: Mapping[str, str], what: str) -> ConflictError:
    """A hard erasure without a request (a deletion) of held items is refused before
    anything is written (ADR 0047): nothing to report a partial outcome to."""
    return ConflictError(
        f"{plural_items(len(held))} of this {what} {'is' if len(held) == 1 else 'are'} "
        f"under legal hold {', '.join(sorted(set(held.values())))} of the policy in force; "
        "nothing was erased", hint="lift the hold (`ledger policy set` without it) first")


def seal_notes(app: LedgerApp, batch_id: UUID, notes: Mapping[str, Any]) -> None:
    try:
        app.seal_note(str(batch_id), json.dumps(
            {**notes, "needles": [n.hex() for n in notes["needles"]]}).encode())
    except DataKeyUnavailable:
        pass  # a batch opened before batches had keys: nothing to seal it under



@traced("erasure.key_destruction",
        lambda ids, *a, **k: {"ledger.erasure.keys_destroyed": len(ids)})
def destroy_keys(app: LedgerApp, targets: Targets, batch_id: UUID, operator: str,
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


def read_notes(app: LedgerApp, batch_id: UUID) -> dict[str, Any] | None:
    raw = app.reader.open_note(str(batch_id))
    if raw is None:
        return None
    notes: dict[str, Any] = json.loads(raw)
    notes["needles"] = [bytes.fromhex(n) for n in notes["needles"]]
    return notes


def open_batch(app: LedgerApp, request_id: UUID | None, targets: Targets | None
                ) -> RedactionBatch | None:
    """The batch left open (not closed) by an interrupted erasure: the request's, or,
    without a request, one of exactly these targets."""
    from ledger.domain import RedactionBatch

    opened = app.reader.notifications(start=1, limit=10**9,
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
        batch = app.reader.aggregate(UUID(str(n.originator_id)))
        if isinstance(batch, RedactionBatch) and (request_id is not None
                                                  or batch.status != "closed"):
            return batch
    return None



def _chunks(items: Sequence[str]) -> Iterator[list[str]]:
    size = max(CHUNK, -(-len(items) // MAX_COMMITS))
    for i in range(0, len(items), size):
        yield list(items[i:i + size])



@traced("erasure.tombstones", lambda ids, *a, **k: {"ledger.erasure.tombstones": len(ids)})
def tombstones(app: LedgerApp, live: Targets, mode: str, note: str, reached: list[str],
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


def flags_of_earlier_runs(batch: Any) -> dict[str, str]:
    """Memory -> its ``refers-to-erased`` flag event that an earlier run of this batch,
    which ended partial, raised (ADR 0047): not raised again (a reviewer may have
    resolved it since), and listed again in the batch's events."""
    if batch is None or not getattr(batch, "partials", ()):
        return {}
    flagged = set((batch.reach or {}).get("flagged_for_review", []))
    return {e.split("/", 1)[0]: e for e in batch.event_ids if e.split("/", 1)[0] in flagged}



# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Approval:
    """Approval's record: the batch (opened now, or left open by an interrupted run and
    continued), what it erases as it records it, the log's size before it, and the note
    sealed under its key (None: an old batch without one, or one already executed)."""

    batch_id: UUID
    mode: str
    targets: Targets
    before: int
    batch: RedactionBatch | None
    notes: dict[str, Any] | None

    @property
    def resumed(self) -> bool:
        return self.batch is not None

    @property
    def finished(self) -> bool:
        """Executed or closed by an earlier run: only the close is left."""
        return self.batch is not None and self.batch.status in ("executed", "closed")


@dataclass(frozen=True)
class Lookout:
    """What this run erases and looks for: the targets less the items a legal hold keeps
    (ADR 0047), and the sealed needles less the held items' words."""

    notes: dict[str, Any]
    held: dict[str, str]
    live: Targets
    content: dict[str, list[str]]
    indexed: dict[str, str]
    needles: list[bytes]

    @property
    def items(self) -> list[str]:
        live = self.live
        return [str(UUID(i)) for i in [*live.atoms, *live.artifacts, *live.subjects,
                                       *live.records]]


@dataclass(frozen=True)
class Purged:
    """The routes purged (to probe) and, by route name, why each other one was not:
    its store unreachable after retries; the probes add the routes they cannot reach."""

    routes: list[Any]
    unreachable: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Findings:
    """What the probes and the raw scan found, and what the run flags and records as
    other memories' own (ADR 0041): per-route reach, problems, the scan, its needles."""

    per_route: dict[str, dict[str, Any]]
    problems: list[str]
    raw: dict[str, Any]
    needles: list[bytes]
    referring: Mapping[str, str]
    review_artifacts: list[str]
    others: dict[str, int]


@dataclass(frozen=True)
class Reached:
    """Settled: every route probed clean and the raw scan (after any repair) clean, or
    the routes that could not be reached are recorded. ``reached`` is what the
    tombstones list."""

    per_route: dict[str, dict[str, Any]]
    raw: dict[str, Any]
    reached: list[str]


@dataclass(frozen=True)
class Record:
    """What the batch records: the reach, every event of this erasure, and the reasons
    it ends partial (none: it executes)."""

    reach: dict[str, Any]
    event_ids: list[str]
    reasons: list[dict[str, Any]]


@dataclass(frozen=True)
class Outcome:
    """The end of a run: closed (``status`` None), or ended partial (ADR 0047).
    :meth:`as_json` is the outward result of ``hard_erase``."""

    batch_id: str
    event_ids: list[str]
    seconds: dict[str, float]
    targets: dict[str, list[str]]
    reach: dict[str, Any]
    checkpoints: dict[str, int | None]
    scanned: Mapping[str, Any] | None = None
    """The raw scan's counts and repairs (None: a run that only closed the batch)."""
    resumed: bool | None = None
    reasons: list[dict[str, Any]] | None = None
    held: dict[str, str] | None = None
    status: str | None = None

    def as_json(self) -> dict[str, Any]:
        raw = self.scanned or {}
        counts = {"scanned_bytes": raw.get("bytes", 0),
                  "scanned_early_bytes": raw.get("early_bytes", 0),
                  "rescanned_bytes": raw.get("rescanned_bytes", 0),
                  "patched_bytes": raw.get("patched_bytes", 0)}
        if self.status == "partial":
            return {"status": "partial", "batch_id": self.batch_id,
                    "event_ids": self.event_ids, "reasons": self.reasons,
                    "held": self.held, "seconds": self.seconds, "targets": self.targets,
                    "reach": self.reach, "checkpoints": self.checkpoints, **counts,
                    "repairs": [], "resumed": self.resumed}
        out = {"batch_id": self.batch_id, "event_ids": self.event_ids,
               "seconds": self.seconds, **counts, "repairs": raw.get("repair_steps", []),
               "targets": self.targets, "reach": self.reach,
               "checkpoints": self.checkpoints}
        return out if self.resumed is None else {**out, "resumed": self.resumed}


def _after(result: T | None, step: str) -> T:
    """The result of ``step``, which must have been taken before this one."""
    if result is None:
        raise RuntimeError(f"erasure step out of order: {step} first")
    return result


# ----------------------------------------------------------------------------- the run
class ErasureRun:
    """One run of one hard erasure: destroy, purge, probe, scan, tombstone, close, one
    resumable batch (ADR 0019). See :func:`governance.erasure.hard_erase` for the
    arguments; :meth:`run` takes the steps in order, each recorded before the next."""

    def __init__(self, app: LedgerApp, proj: Projections, targets: Targets, *, mode: str,
                 reason: str, operator: str, request_id: UUID | None = None,
                 cascade: dict[str, dict[str, Any]] | None = None,
                 referring: Sequence[str] | Mapping[str, str] = (),
                 review_artifacts: Sequence[str] = (), batch: Any = None,
                 fresh: bool = False, progress: Steps | None = None) -> None:
        self.app, self.proj, self.targets = app, proj, targets
        self.mode, self.reason, self.operator = mode, reason, operator
        self.request_id, self.cascade, self.referring = request_id, cascade, referring
        self.review_artifacts, self.batch, self.fresh = review_artifacts, batch, fresh
        self.progress = progress
        self.timer = reach.Timer()
        self.down: dict[str, dict[str, Any]] = {}
        self.holds: Any = None
        self.approval: Approval | None = None
        self.lookout: Lookout | None = None
        self.shred_ids: list[str] | None = None
        self.purged: Purged | None = None
        self.probed: tuple[dict[str, dict[str, Any]], list[str]] | None = None
        self.raw: dict[str, Any] | None = None
        self.findings: Findings | None = None
        self.reached: Reached | None = None
        self.tomb_ids: list[str] | None = None
        self.flag_ids: list[str] | None = None

    def run(self) -> Outcome:
        """ADR 0019's table, top to bottom."""
        approval = self.approve()
        if approval.finished:
            return self.close(approval.batch.event_ids if approval.batch else [],
                              approval.batch.reach if approval.batch else {})
        files = TreeScan(self.app.config.home, _after(self.lookout, "approve").needles)
        try:
            with self.proj.store.checkpoints_held() as held_store:
                main = self.proj.store.sqlite_path if held_store else None
                self.destroy_keys(files, main)
                self.purge()
                self.probe(files, main)
            self.scan(files)
        finally:
            files.close()
        self.look_again()
        self.settle()
        self.tombstone()
        self.flag()
        record = self.record()
        if record.reasons:
            return self.end_partial(record)
        self.execute(record)
        outcome = self.close(record.event_ids, record.reach)
        log.info("erasure.completed", batch_id=str(approval.batch_id),
                 items=len(_after(self.lookout, "approve").items),
                 events=len(record.event_ids))
        return dataclasses.replace(outcome, scanned=_after(self.reached, "settle").raw,
                                   resumed=approval.resumed)

    # ------------------------------------------------------------------ approve
    def approve(self) -> Approval:
        """Approval: the read models caught up (those unreachable noted), the batch opened
        and approved (a deletion of held items refused first), or the one an interrupted
        run left open for the same request or targets continued, never a second; what
        the probes and the scan look for taken and sealed before any key is destroyed."""
        if self.mode not in ("hard", "delete"):
            raise InputError(f"hard_erase takes mode hard or delete, not {self.mode!r}")
        check_operator(self.app, self.operator)
        self.timer = reach.Timer()
        self.down = reach.catch_up_reachable(self.proj, self.progress)
        batch = self.batch
        if batch is None and not self.fresh:
            batch = open_batch(self.app, self.request_id, self.targets)
        self.holds = part.holds_in_force(self.app.reader.policy())
        approval = self._open() if batch is None else self._continue(batch)
        self.approval = approval
        if approval.finished:
            return approval
        notes = approval.notes if approval.notes is not None else self._seal(approval)
        faults.point("after-approval")
        self.lookout = self._lookout(approval, notes)
        self.timer.lap("open")
        return approval

    def _open(self) -> Approval:
        if part.ATOMS_MODEL in self.down:
            raise reach.unreachable_before(self.down)
        held = part.held_items(self.app, self.targets.as_json(), self.holds)
        if held and self.request_id is None:
            raise held_refusal(held, "erasure")
        before = self.app.checkpoint().size
        batch_id = self.app.open_batch(self.operator, self.request_id, self.mode, self.reason,
                                       self.targets.as_json())
        return Approval(batch_id, self.mode, self.targets, before, None, None)

    def _continue(self, batch: RedactionBatch) -> Approval:
        stored = batch.targets
        targets = Targets(atoms=list(stored.get("atoms", [])),
                          artifacts=list(stored.get("artifacts", [])),
                          subjects=list(stored.get("subjects", [])),
                          records=list(stored.get("records", [])))
        before = self.app.reader.seq_of(f"{batch.id}/1") - 1
        notes = read_notes(self.app, batch.id)
        log.info("erasure.resumed", batch_id=str(batch.id), status=batch.status)
        return Approval(batch.id, batch.mode, targets, before, batch, notes)

    def _seal(self, approval: Approval) -> dict[str, Any]:
        """Take the needles (ADR 0019) and seal them under the batch's key."""
        if part.ATOMS_MODEL in self.down:
            raise reach.unreachable_before(self.down)
        targets = approval.targets
        with self.proj.atoms.reading() as reads:
            content, indexed, shared = content_of(reads, targets)
            kept = successors(reads, targets.atoms)
            others, same_atoms, same_artifacts = held_by_others(reads, shared)
        referring = dict(self.referring) if isinstance(self.referring, Mapping) \
            else {r: "refers to memory" for r in self.referring}
        for other in same_atoms:  # flagged for review, never erased (ADR 0041)
            referring.setdefault(other, SAME_WORDS)
        review_artifacts = sorted({*self.review_artifacts, *same_artifacts})
        notes = {"content": content, "indexed": indexed, "kept_by_successor": kept,
                 "held_by_others": others,
                 "needles": sorted({n for texts in [*content.values(),
                                                    record_texts(self.app, targets.records)]
                                    for t in texts for n in content_needles(t)}),
                 "referring": referring,
                 "review_artifacts": sorted(review_artifacts), "cascade": self.cascade}
        seal_notes(self.app, approval.batch_id, notes)
        return notes

    def _lookout(self, approval: Approval, notes: dict[str, Any]) -> Lookout:
        held = part.held_items(self.app, approval.targets.as_json(), self.holds)
        # a value a held item keeps is that item's: not looked for (as a value other
        # memories hold, ADR 0041); values the held items share with erased ones are kept
        kept_values = {n for i, texts in notes["content"].items() if i in held
                       for t in texts for n in content_needles(t)}
        return Lookout(
            notes, held, approval.targets.without(held),
            {i: v for i, v in notes["content"].items() if i not in held},
            {i: v for i, v in notes["indexed"].items() if i not in held},
            [n for n in notes["needles"] if n not in kept_values])

    # ------------------------------------------------------------------ destroy keys
    def destroy_keys(self, files: TreeScan, main: Path | None) -> list[str]:
        """Key destruction, the subject's key last, each commit recorded. The raw scan
        reads the files while the erasure runs (ADR 0012): the projections file from now
        on (its changes held in its WAL until the probes are done, when a checkpoint
        names the pages it changed), the files the purge does not write (event store,
        keystore) once the keys are gone; ``result()`` reads again whatever changed."""
        approval, lookout = _after(self.approval, "approve"), _after(self.lookout, "approve")
        if main is not None:
            files.start([main])
        earlier = approval.resumed and self.app.reader.data_keys_destroyed_among(lookout.items)
        self.shred_ids = destroy_keys(self.app, lookout.live, approval.batch_id,
                                      self.operator, self.progress)
        # a key an interrupted run destroyed may have left its bytes in a page this
        # run cannot find them in (it never knew them): the keystore is rebuilt
        self.app.finish_key_destruction(vacuum=bool(earlier))
        self.timer.lap("shred")
        purged = {p.resolve() for p in self.proj.store.files()}
        files.start([p for p in sorted(self.app.config.home.rglob("*"))
                     if p.is_file() and p.resolve() not in purged])
        return self.shred_ids

    # ------------------------------------------------------------------ purge
    def purge(self) -> Purged:
        """The read models apply the destruction; every route purged explicitly, then
        compacted; a store unreachable after retries is recorded (ADR 0047)."""
        _after(self.shred_ids, "destroy_keys")
        routes, unreachable = reach.purge(self.proj, _after(self.lookout, "approve").items,
                                          self.timer, self.progress, self.down)
        faults.point("after-purge")
        self.purged = Purged(routes, unreachable)
        return self.purged

    # ------------------------------------------------------------------ probe
    def probe(self, files: TreeScan, main: Path | None) -> tuple[dict[str, Any], list[str]]:
        """Every route probed for every item, by id and by content, while a thread
        checkpoints the projections file (copying the purged pages in and naming them:
        the probes write nothing); the raw scan told which pages changed."""
        purged, lookout = _after(self.purged, "purge"), _after(self.lookout, "approve")
        routes = purged.routes
        with ThreadPoolExecutor(1, thread_name_prefix="checkpoint") as ex:
            changed = ex.submit(self.proj.store.checkpoint_pages)
            report(self.progress, "Probing read models", 0, len(routes))
            self.probed = reach.probe(
                self.proj, routes, lookout.items, lookout.content, lookout.indexed,
                self.timer, shared_ok=bool(lookout.notes.get("held_by_others")
                                           or lookout.held),
                unreachable=purged.unreachable)
            report(self.progress, "Probing read models", len(routes), len(routes))
            named = changed.result()
        if main is not None and named is not None:
            files.patch(main, *named)
        return self.probed

    # ------------------------------------------------------------------ scan
    def scan(self, files: TreeScan) -> dict[str, Any]:
        """The raw scan of every file below the home, finished."""
        _after(self.probed, "probe")
        faults.point("scan")
        report(self.progress, "Scanning the files", 0, 1)
        self.raw = reach.scan_files(self.app.config.home, files.wanted, files)
        report(self.progress, "Scanning the files", 1, 1)
        self.timer.lap("raw_scan")
        return self.raw

    def look_again(self) -> Findings:
        """Before failing on what the probes or the scan found: it may be other memories'
        own longer texts that hold these words (ADR 0041); if so, probe and scan again
        without those values, and flag those memories for review."""
        (per_route, problems), raw = _after(self.probed, "probe"), _after(self.raw, "scan")
        lookout, purged = _after(self.lookout, "approve"), _after(self.purged, "purge")
        notes = lookout.notes
        found = Findings(per_route, problems, raw, lookout.needles, notes["referring"],
                         notes.get("review_artifacts", []),
                         dict(notes.get("held_by_others") or {}))
        if (problems or raw["hits"]) and not purged.unreachable:
            found = self._without_others_words(found)
        self.findings = found
        return found

    def _without_others_words(self, found: Findings) -> Findings:
        lookout, purged = _after(self.lookout, "approve"), _after(self.purged, "purge")
        items = lookout.items
        inside, in_atoms, in_artifacts = held_inside_others(self.proj, set(items),
                                                            lookout.content)
        if not inside:
            return found
        content = {i: [v for v in texts if v not in inside]
                   for i, texts in lookout.content.items()}
        dropped = {n for v in inside for n in content_needles(v)}
        needles = [n for n in found.needles if n not in dropped]
        per_route, problems = reach.probe(self.proj, purged.routes, items, content,
                                          lookout.indexed, self.timer, shared_ok=True)
        raw = reach.scan_files(self.app.config.home, needles)
        referring = dict(lookout.notes["referring"])
        for other in in_atoms:
            referring.setdefault(other, SAME_WORDS)
        others = found.others
        return Findings(per_route, problems, raw, needles, referring,
                        sorted({*found.review_artifacts, *in_artifacts}),
                        {"values": others.get("values", 0) + len(inside),
                         "items": others.get("items", 0) + len(in_atoms) + len(in_artifacts)})

    def settle(self) -> Reached:
        """The residue the raw scan found in the read models' file repaired (smallest
        repair first); what is still reachable stops the run, loudly, naming the route:
        the keys are gone, the batch stays open, a re-run finishes it. A store that could
        not be purged still holds the items: its files' hits are expected (and
        recorded); a hit in any other file is still a defect."""
        found, purged = _after(self.findings, "look_again"), _after(self.purged, "purge")
        raw = found.raw
        if purged.unreachable:
            stray = reach.outside_store(self.app, self.proj, raw)
        else:
            raw = reach.repair_residue(self.app, self.proj, raw, found.needles, self.timer)
            stray = [h["file"] for h in raw["hits"]]
        checked_at = clock.format_instant(clock.now())
        for entry in found.per_route.values():
            entry["checked_at"] = checked_at
        problems = found.problems
        if stray:
            problems.append("raw scan found erased content in " + ", ".join(stray))
        if problems:
            batch_id = _after(self.approval, "approve").batch_id
            log.error("erasure.incomplete", batch_id=str(batch_id), problems=len(problems))
            raise ErasureIncomplete(
                "erasure incomplete: " + "; ".join(problems[:5]),
                hint=f"keys are destroyed; fix the route and run the command again (batch "
                     f"{batch_id} stays open and is resumed)")
        self.reached = Reached(found.per_route, raw,
                               [*sorted(r for r in found.per_route
                                        if r not in purged.unreachable), "raw-file-scan"])
        return self.reached

    # ------------------------------------------------------------------ tombstone
    def tombstone(self) -> list[str]:
        """Signed tombstones of the items every route reached, listing the routes; none
        while a route was unreachable (the run ends partial)."""
        reached, approval = _after(self.reached, "settle"), _after(self.approval, "approve")
        lookout = _after(self.lookout, "approve")
        self.tomb_ids = []
        if not _after(self.purged, "purge").unreachable:
            note = f"erasure batch {approval.batch_id}"  # the reason is sealed in the batch
            self.tomb_ids = tombstones(self.app, lookout.live, approval.mode, note,
                                       reached.reached, approval.batch_id,
                                       lookout.notes.get("cascade"), self.operator,
                                       self.progress)
        return self.tomb_ids

    def flag(self) -> list[str]:
        """``refers-to-erased`` flags on the memories of others that may refer to the
        erased ones (never erased); those an earlier partial run raised are kept."""
        _after(self.tomb_ids, "tombstone")
        referring = _after(self.findings, "look_again").referring
        approval = _after(self.approval, "approve")
        earlier_flags = flags_of_earlier_runs(approval.batch)
        flag_ids = [*earlier_flags.values()]
        todo = [o for o in referring if o not in earlier_flags]
        for i, other in enumerate(todo, start=1):
            if i % 100 == 1 or i == len(todo):
                report(self.progress, "Flagging memories of others", i, len(todo))
            why = referring[other] if isinstance(referring, Mapping) else "refers to memory"
            fid = self.app.flag(UUID(other), "refers-to-erased", f"{why}; erased by batch "
                                f"{approval.batch_id}", related=None, actor=self.operator)
            if fid is None and approval.resumed:  # flagged by the interrupted run
                fid = getattr(self.app.reader.get_atom(UUID(other)), "flag_events",
                              {}).get("refers-to-erased")
            if fid:
                flag_ids.append(fid)
        self.flag_ids = flag_ids
        return flag_ids

    def record(self) -> Record:
        """The reach record, every event of the erasure (a resumed run's own items'
        events, some recorded by the interrupted run), and why it ends partial."""
        found, reached = _after(self.findings, "look_again"), _after(self.reached, "settle")
        approval, lookout = _after(self.approval, "approve"), _after(self.lookout, "approve")
        raw, referring = reached.raw, found.referring
        reach_ = {"routes": [reached.per_route[n] for n in sorted(reached.per_route)],
                  "raw_scan": {k: raw[k] for k in ("files", "bytes", "engine", "needles",
                                                   "hits", "checked_at", "repaired")
                               if k in raw},
                  "flagged_for_review": sorted(referring),
                  "checkpoint_before": approval.before}
        if referring or found.review_artifacts:  # the Evidence Pack counts them (ADR 0012)
            reach_["flags"] = {"count": len(referring),
                               "artifacts_for_review": sorted(found.review_artifacts)}
        if lookout.notes.get("kept_by_successor"):  # ADR 0019: the corrections' content
            reach_["kept_by_successor"] = lookout.notes["kept_by_successor"]
        if found.others:  # ADR 0041: words other memories hold, in full or inside
            reach_["held_by_others"] = found.others
        shred_ids, tomb_ids = _after(self.shred_ids, "destroy_keys"), self.tomb_ids or []
        if approval.resumed:
            reach_["resumed"] = True
            aggs = self.app.reader.get_many([UUID(i) for i in lookout.items])
            shred_ids = [a.data_key_destroyed_event for a in aggs
                         if getattr(a, "data_key_destroyed_event", None)]
            tomb_ids = [a.tombstone_event for a in aggs
                        if getattr(a, "tombstone_event", None)]
        reasons = [*_after(self.purged, "purge").unreachable.values(),
                   *part.hold_reasons(approval.targets.as_json(), lookout.held, self.holds)]
        return Record(reach_, [*shred_ids, *tomb_ids, *_after(self.flag_ids, "flag")],
                      reasons)

    # ------------------------------------------------------------------ end partial
    def end_partial(self, record: Record) -> Outcome:
        """Record the partial outcome (ADR 0047); the batch stays open. When every route
        was reached, what the resume needs is only the held items' needles: the sealed
        note keeps just those (the erased items' words no longer wait, sealed, under the
        batch's live key)."""
        approval, lookout = _after(self.approval, "approve"), _after(self.lookout, "approve")
        notes, held, targets = lookout.notes, lookout.held, approval.targets
        if not any(r["code"] == part.STORE_UNREACHABLE for r in record.reasons):
            keep = {i: v for i, v in notes["content"].items() if i in held}
            kept_records = [r for r in targets.records if r in held]
            seal_notes(self.app, approval.batch_id, {
                **notes, "content": keep,
                "indexed": {i: v for i, v in notes["indexed"].items() if i in held},
                "needles": sorted({n for texts in [*keep.values(),
                                                   record_texts(self.app, kept_records)]
                                   for t in texts for n in content_needles(t)})})
        ids = self.app.end_partial(self.operator, approval.batch_id, self.request_id,
                                   record.event_ids, record.reach, record.reasons)
        faults.point("after-partial")
        self.timer.lap("tombstones")
        log.warning("erasure.partial", batch_id=str(approval.batch_id),
                    reasons=[r["code"] for r in record.reasons],
                    events=len(record.event_ids))
        return Outcome(str(approval.batch_id), [*record.event_ids, *ids], self.timer.laps,
                       targets.as_json(), record.reach,
                       {"before": record.reach["checkpoint_before"], "after": None},
                       scanned=_after(self.reached, "settle").raw,
                       resumed="resumed" in record.reach, reasons=record.reasons,
                       held=dict(sorted(held.items())), status="partial")

    # ------------------------------------------------------------------ execute, close
    def execute(self, record: Record) -> None:
        """``batch.executed``: the event ids and the reach."""
        self.app.execute_batch(self.operator, _after(self.approval, "approve").batch_id,
                               record.event_ids, record.reach)
        faults.point("after-execute")

    def close(self, event_ids: list[str], reach_: dict[str, Any]) -> Outcome:
        """Close the batch (its key destroyed last: the sealed needles go with it) and
        its request; the checkpoint after."""
        approval = _after(self.approval, "approve")
        report(self.progress, "Closing the batch", 0, 1)
        close_ids = self.app.close_batch(self.operator, approval.batch_id, self.request_id)
        faults.point("after-close")
        self.proj.catch_up()
        after = self.app.checkpoint()
        report(self.progress, "Closing the batch", 1, 1)
        self.timer.lap("tombstones")
        return Outcome(str(approval.batch_id), [*event_ids, *close_ids], self.timer.laps,
                       approval.targets.as_json(), reach_,
                       {"before": approval.before, "after": after.size})
