"""One verification orchestration: pure checks, and the I/O that gathers their inputs.

Every verifier of a ledger's log runs through here (issue 14): ``ledger verify`` (the
whole log, and the checkpoints it must extend), ``ledger verify --since`` and the
facade's verification (only what follows a trusted checkpoint), and the audit report
(either, plus the chain of recorded checkpoints). ``ledger verify-pack`` runs the same
pure steps on a pack's bytes (``governance/pack.py``).

**Pure half** (bytes and trusted keys in, verdicts out; nothing here opens a file or a
database): :func:`ledger.verify.verify_log` (steps 1-7 of docs/spec/event-envelope.md),
:func:`check_notes` (8.1-8.3 against the verified leaves), :func:`check_signed` and
:func:`check_chain` (recorded checkpoints signed by a log key, each consistent with the
next), :func:`verify_after` (the events after a trusted checkpoint). They take records
as any iterable and lookups as callables, so that a caller can hand them bytes it holds
(a test, a pack, a copy) as well as a live ledger. The entries report their count as
``progress(stage, done, total)`` (:data:`ledger.progress.Steps`, ADR 0036).

**I/O half**: :class:`Source` names what is read of a ledger (``LedgerReader`` is one);
:func:`gather_since` reads what :func:`verify_after` needs. The entries
:func:`verify_ledger` and :func:`verify_for_audit` put the two together.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from ledger.errors import VerificationFailed

if TYPE_CHECKING:
    from eventsourcing.persistence import Notification, StoredEvent

    from keys.roster import RosterState
    from ledger.home import Config
    from ledger.progress import Steps
    from ledger.transparency import SignedCheckpoint, TransparencyLog
    from ledger.verify import Failure, Report, StoredRecord

__all__ = ["AuditVerdict", "LedgerVerdict", "SinceInputs", "Source", "StoredTree",
           "check_chain", "check_notes", "check_signed", "gather_since", "verify_after",
           "verify_for_audit", "verify_ledger", "verify_since"]

VERIFYING = "Verifying events"
"""The stage verification reports (``progress(stage, done, total)``, ADR 0036)."""


# ----------------------------------------------------------------------------- the I/O half
class Source(Protocol):
    """What verification reads of a ledger (``LedgerReader`` is one): the log, its stored
    tree and recorded checkpoints, the ledger id and origin. No command: verification
    never calls back a write."""

    @property
    def ledger_id(self) -> str: ...

    @property
    def config(self) -> Config: ...

    @property
    def tlog(self) -> TransparencyLog: ...

    def notifications(self, start: int, limit: int, *, topics: Sequence[str] = (),
                      stop: int | None = None) -> Sequence[Notification]: ...

    def stored_events(self, aggregate_id: UUID, *, gt: int | None = None,
                      lte: int | None = None) -> list[StoredEvent]: ...

    def stored_records(self, start: int = 1, batch: int = 5000) -> Iterator[Any]: ...

    def head_position(self) -> int: ...

    def recorded_checkpoints(self) -> list[tuple[int, str, str]]: ...

    def consistency_proof(self, old_size: int, new_size: int) -> list[bytes]: ...


@dataclass(frozen=True)
class StoredTree:
    """The stored tree, read only to locate the first bad position of a failed step 8.3
    (never trusted: the verdict comes from the recomputed leaves)."""

    leaf_hashes: Callable[[int, int], list[bytes]]
    root: Callable[[int], bytes]

    @classmethod
    def of(cls, src: Source) -> StoredTree:
        return cls(src.tlog.store.leaf_hashes, src.tlog.tree.root)


EVERY = 256
"""Progress is reported every this many events, and at the end (a bar on a terminal
redraws on each report)."""


def _tracked(records: Iterable[Any], progress: Steps | None, total: int) -> Iterable[Any]:
    if progress is None:
        return records

    def walk() -> Iterator[Any]:
        done = 0
        progress(VERIFYING, 0, total)
        for rec in records:
            yield rec
            done += 1
            if done % EVERY == 0:
                progress(VERIFYING, done, total)
        progress(VERIFYING, done, total)

    return walk()


@dataclass(frozen=True)
class SinceInputs:
    """What :func:`verify_after` reads, gathered by :func:`gather_since`."""

    ledger_id: str
    origin: str
    note: str
    roster_records: Sequence[Any]
    peaks: dict[tuple[int, int], bytes] | None
    """The stored tree's nodes for the checkpoint's size; None when the store lacks one."""
    last_covered: Any | None
    """The stored record of the checkpoint's last event (its leaf ``size - 1``)."""
    last_covered_proof: list[bytes]
    after: Iterable[Any]
    """Every stored record after the checkpoint's last event, in log order."""
    prior_version: Callable[[str, int], bool]
    """Does the log hold this version of this aggregate (for step 7 after the checkpoint)?"""
    recorded_root: Callable[[int], bytes | None]
    """The root of the checkpoint recorded for a size, if any."""


def _note_size(note: str) -> int | None:
    from ledger.checkpoint import parse_body, parse_note

    try:
        return parse_body(parse_note(note)[0]).size
    except (ValueError, VerificationFailed):
        return None


def gather_since(src: Source, note: str, progress: Steps | None = None) -> SinceInputs:
    """The I/O of ``verify --since``: the roster's events, the stored tree's peaks for the
    checkpoint's size, its last event with an inclusion proof, and the events after it
    (read lazily, as :func:`verify_after` walks them)."""
    from keys.roster import ROSTER_TOPICS
    from ledger.transparency import peak_keys

    roster_records = src.notifications(start=1, limit=10**9, topics=sorted(ROSTER_TOPICS))
    m = _note_size(note)
    peaks: dict[tuple[int, int], bytes] | None = None
    last: Any | None = None
    proof: list[bytes] = []
    start = 1
    if m is not None:
        keys = peak_keys(m)
        try:
            peaks = dict(zip(keys, src.tlog.store.get_many(keys), strict=True))
        except KeyError:
            peaks = None
        if m and peaks is not None:
            try:
                nid = src.tlog.store.last_notification_id_of(m - 1)
                rows = src.notifications(start=nid, limit=1)
                proof = src.tlog.tree.inclusion_proof(m - 1, m)
            except (KeyError, ValueError):
                rows = []
            if rows:
                last, start = rows[0], nid + 1

    def recorded_root(size: int) -> bytes | None:
        recorded = src.tlog.recorded(size)
        return None if recorded is None else recorded.root

    total = src.head_position() - start + 1
    return SinceInputs(
        ledger_id=src.ledger_id, origin=src.config.origin, note=note,
        roster_records=roster_records, peaks=peaks, last_covered=last,
        last_covered_proof=proof,
        after=_tracked(src.stored_records(start=start), progress, max(total, 0)),
        prior_version=lambda oid, ver: bool(src.stored_events(UUID(oid), gt=ver - 1,
                                                              lte=ver)),
        recorded_root=recorded_root)


# ----------------------------------------------------------------------------- the pure half
def check_notes(notes: Sequence[tuple[str, str]], *, origin: str, roster: RosterState,
                leaves: list[bytes], tree: StoredTree | None = None
                ) -> tuple[list[dict[str, Any]], Failure | None]:
    """Step 8 for each ``(label, note)``: signed by a log key of the verified roster
    (8.1), and the verified leaves extend it (8.2, 8.3). Returns the checked ones and the
    first failure."""
    from ledger.transparency import b64, verify_with_roster
    from ledger.verify import Failure, check_checkpoint

    checked: list[dict[str, Any]] = []
    for label, note in notes:
        try:
            signed = verify_with_roster(note, origin, roster)
            failure = check_checkpoint(leaves, signed.checkpoint,
                                       tree.leaf_hashes if tree else None,
                                       tree.root if tree else None)
        except VerificationFailed as e:
            failure = Failure(0, None, "-", "8.1", f"{label}: {e}")
        if failure is not None:
            return checked, failure
        checked.append({"checkpoint": label, "size": signed.size, "root": b64(signed.root)})
    return checked, None


def check_signed(notes: Sequence[tuple[str, str]], *, origin: str, roster: RosterState
                 ) -> tuple[list[SignedCheckpoint], Failure | None]:
    """Step 8.1 for each ``(label, note)`` in turn; stops at the first failure."""
    from ledger.transparency import verify_with_roster
    from ledger.verify import Failure

    signed = []
    for label, note in notes:
        try:
            signed.append(verify_with_roster(note, origin, roster))
        except VerificationFailed as e:
            return signed, Failure(0, None, "-", "8.1", f"{label}: {e}")
    return signed, None


def check_chain(signed: Sequence[SignedCheckpoint],
                proof: Callable[[int, int], list[bytes]]) -> Failure | None:
    """Step 8.3 along a chain of checkpoints: each is consistent with the next
    (``proof(old_size, new_size)`` gives the consistency proof; an error reading it is a
    failure too)."""
    from ledger.merkle import verify_consistency
    from ledger.verify import Failure

    for old, new in itertools.pairwise(signed):
        try:
            verify_consistency(old.size, new.size, old.root, new.root,
                               proof(old.size, new.size))
        except (VerificationFailed, ValueError, KeyError) as e:
            return Failure(0, None, "-", "8.3", f"checkpoint of size {new.size} does not "
                                                f"extend the one of size {old.size}: {e}")
    return None


def verify_after(inputs: SinceInputs, root_public_key: bytes
                 ) -> tuple[Report, dict[str, Any]]:
    """Verify only what was appended after a trusted checkpoint (cost follows new events).

    1. fold the roster from its root-signed events (few); 2. the checkpoint is signed by a
    log key; 3. the stored tree's peaks for that size hash to its root, and the last event
    it covers is included (its time seeds step 6); 4. every newer event passes steps 1-7;
    5. the new leaves extend the trusted peaks to the new root (consistency by construction),
    which must equal any checkpoint recorded for the new size.
    """
    from keys.roster import RosterState
    from keys.signing import key_id
    from ledger import envelope
    from ledger.leaf import leaf_of
    from ledger.merkle import MerkleTree, leaf_hash, verify_inclusion
    from ledger.transparency import SparseTreeStore, b64, verify_with_roster
    from ledger.verify import Failure, LogVerifier

    root_kid = key_id(root_public_key)
    full = RosterState()
    opened_roster = []
    for rec in inputs.roster_records:
        try:
            opened = envelope.open_state(rec.state)
            if opened.kid != root_kid:
                raise envelope.EnvelopeError("4", "not signed by the trusted root key")
            envelope.verify(opened, root_public_key)
        except envelope.EnvelopeError as e:
            raise VerificationFailed(f"roster event at position {rec.id}: {e}") from e
        full.apply(rec.topic, opened.envelope["payload"])
        opened_roster.append(opened)
    signed = verify_with_roster(inputs.note, inputs.origin, full)
    m = signed.size
    v = LogVerifier(ledger_id=inputs.ledger_id, root_public_key=root_public_key,
                    collect_leaves=True)
    for opened in opened_roster:
        if opened.envelope["seq"] <= m:
            v.report.roster.apply(opened.envelope["topic"], opened.envelope["payload"])
    sparse = None if inputs.peaks is None else SparseTreeStore(m, dict(inputs.peaks))
    if sparse is None or MerkleTree(sparse).root(m) != signed.root:
        v.report.ok = False
        v.report.failure = Failure(0, None, "-", "8.3", f"the stored tree does not match the "
                                   f"trusted checkpoint of size {m}: history was rewritten; "
                                   "run `ledger verify --checkpoint FILE` for the full check")
        return v.report, {"since": m}
    if m:
        rec = inputs.last_covered
        if rec is None:
            raise VerificationFailed(f"the log holds no event at position {m} of the trusted "
                                     "checkpoint")
        opened = envelope.open_state(rec.state)
        verify_inclusion(leaf_hash(leaf_of(rec, opened)), m - 1, m,
                         inputs.last_covered_proof, signed.root)
        v.report.head_seq = m
        v.last_time = datetime.fromisoformat(opened.envelope["timestamp"].replace("Z", "+00:00"))
    v.prior_version = inputs.prior_version
    for rec in inputs.after:
        if not v.feed(rec):
            return v.report, {"since": m}
    tree = MerkleTree(sparse)
    size = tree.extend(v.leaves or [])
    root = tree.root(size)
    recorded = inputs.recorded_root(size)
    if recorded is not None and recorded != root:
        v.report.ok = False
        v.report.failure = Failure(0, None, "-", "8.3", f"the recorded checkpoint of size {size}"
                                   " has another root than the verified log")
    return v.report, {"since": m, "size": size, "root": b64(root)}


# ----------------------------------------------------------------------------- entries
def verify_since(src: Source, note: str, root_public_key: bytes,
                 progress: Steps | None = None) -> tuple[Report, dict[str, Any]]:
    """``ledger verify --since NOTE``: :func:`gather_since` then :func:`verify_after`."""
    return verify_after(gather_since(src, note, progress), root_public_key)


def _full(src: Source, root_public_key: bytes, progress: Steps | None
          ) -> tuple[Report, list[bytes]]:
    from ledger.verify import verify_log

    leaves: list[bytes] = []
    records: Iterable[StoredRecord] = src.stored_records()
    if progress is not None:
        records = _tracked(records, progress, src.head_position())
    report = verify_log(records, ledger_id=src.ledger_id, root_public_key=root_public_key,
                        leaves=leaves)
    return report, leaves


@dataclass
class LedgerVerdict:
    """What ``ledger verify`` found: the events' report, the checkpoints it extends (a
    full run) or the checkpoint it started from (``since``)."""

    report: Report
    checkpoints: list[dict[str, Any]] | None = None
    since: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.report.failure is None

    def as_json(self) -> dict[str, Any]:
        data = {**self.report.as_json(), **self.since}
        if self.checkpoints is not None:
            data["checkpoints"] = self.checkpoints
        return data


def verify_ledger(src: Source, root_public_key: bytes, *, since: str | None = None,
                  checkpoints: Sequence[tuple[str, str]] = (),
                  progress: Steps | None = None) -> LedgerVerdict:
    """``ledger verify``: with ``since`` (a trusted checkpoint note) only the events after
    it; else every event, then step 8 against the latest recorded checkpoint and each of
    ``checkpoints`` (``(label, note)``, e.g. a file the caller kept)."""
    if since is not None:
        report, extra = verify_since(src, since, root_public_key, progress)
        return LedgerVerdict(report, None, extra)
    report, leaves = _full(src, root_public_key, progress)
    notes: list[tuple[str, str]] = []
    latest = src.tlog.recorded()
    if latest is not None:
        notes.append(("latest recorded checkpoint", latest.note))
    notes.extend(checkpoints)
    checked: list[dict[str, Any]] = []
    if report.ok:
        checked, failure = check_notes(notes, origin=src.config.origin, roster=report.roster,
                                       leaves=leaves, tree=StoredTree.of(src))
        if failure is not None:
            report.ok, report.failure = False, failure
    return LedgerVerdict(report, checked)


@dataclass
class AuditVerdict:
    """What the audit report's verification found (``governance/audit.py`` renders it)."""

    report: Report
    scope: str
    """``full`` or ``since`` (the one used: ``since`` falls back to ``full`` without a
    checkpoint before the period)."""
    recorded: int
    base_size: int | None
    signed: list[tuple[SignedCheckpoint, str]]
    """The recorded checkpoints checked, with the time each was recorded."""
    failure: Failure | None
    tree_size: int | None


def verify_for_audit(src: Source, root_public_key: bytes, scope: str,
                     limit: Callable[[], int], progress: Steps | None = None
                     ) -> AuditVerdict:
    """The audit report's check: ``since`` verifies the events after the last recorded
    checkpoint of a size below ``limit()`` (else the whole log, as ``full``); then every
    recorded checkpoint from there on is signed by a log key, the newest extends the
    verified leaves (a full run) and each is consistent with the next."""
    from ledger.verify import Failure, Report

    cps = src.recorded_checkpoints()
    base: tuple[int, str, str] | None = None
    if scope == "since":
        below = limit()
        older = [c for c in cps if c[0] < below]
        base = older[-1] if older else None
    leaves: list[bytes] = []
    used = scope
    extra: dict[str, Any] = {}
    if base is not None:
        try:
            report, extra = verify_since(src, base[1], root_public_key, progress)
        except VerificationFailed as e:
            report = Report(ok=False, failure=Failure(0, None, "-", "8.1",
                                                      f"checkpoint of size {base[0]}: {e}"))
    else:
        used = "full"
        report, leaves = _full(src, root_public_key, progress)
    signed: list[tuple[SignedCheckpoint, str]] = []
    failure: Failure | None = None
    if report.ok:
        chain = [c for c in cps if base is None or c[0] >= base[0]]
        good, failure = check_signed([(f"checkpoint of size {size}", note)
                                      for size, note, _ in chain],
                                     origin=src.config.origin, roster=report.roster)
        if failure is None and good and base is None:
            from ledger.verify import check_checkpoint

            tree = StoredTree.of(src)
            failure = check_checkpoint(leaves, good[-1].checkpoint, tree.leaf_hashes,
                                       tree.root)
        if failure is None:
            failure = check_chain(good, src.consistency_proof)
        if failure is None:
            signed = [(cp, created) for cp, (_, _, created) in zip(good, chain, strict=True)]
    return AuditVerdict(report, used, len(cps), base[0] if base else None, signed, failure,
                        extra.get("size"))
