"""Verify a whole event log offline: pure, no database (docs/spec/event-envelope.md).

Input: stored events in log order, the ledger id and the trusted root public
key. Each event passes the numbered steps of the spec; the first failure is
reported with its position, sequence number, event id, step and reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from keys.errors import KeyNotAuthorized
from keys.roster import ROOT, ROSTER_TOPICS, TOPIC_STARTED, KeyRoster, RosterState
from keys.signing import key_id
from ledger import envelope
from ledger.checkpoint import Checkpoint
from ledger.domain import event_classes
from ledger.errors import VerificationFailed
from ledger.leaf import leaf_of
from ledger.merkle import MemoryTreeStore, MerkleTree, leaf_hash


def _roles_by_topic() -> dict[str, tuple[str, ...]]:
    roles = {c.TOPIC: tuple(c.SIGNER_ROLES) for c in event_classes()}
    for value in vars(KeyRoster).values():
        if isinstance(value, type) and getattr(value, "TOPIC", None) in ROSTER_TOPICS:
            roles[str(getattr(value, "TOPIC"))] = (ROOT,)  # noqa: B009
    return roles


ROLES_BY_TOPIC = _roles_by_topic()


class StoredRecord(Protocol):
    id: int
    originator_id: UUID | str
    originator_version: int
    topic: str
    state: bytes


@dataclass(frozen=True)
class Failure:
    position: int
    seq: int | None
    event_id: str
    step: str
    reason: str

    def describe(self) -> str:
        seq = f"seq {self.seq}, " if self.seq is not None else ""
        return f"position {self.position} ({seq}event {self.event_id}): step {self.step}: " \
               f"{self.reason}"


@dataclass
class Report:
    ok: bool = True
    events: int = 0
    head_seq: int = 0
    head_time: str | None = None
    failure: Failure | None = None
    roster: RosterState = field(default_factory=RosterState)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "events": self.events, "head_seq": self.head_seq,
            "head_time": self.head_time,
            "failure": None if self.failure is None else {
                "position": self.failure.position, "seq": self.failure.seq,
                "event_id": self.failure.event_id, "step": self.failure.step,
                "reason": self.failure.reason},
        }


class _Fail(Exception):
    def __init__(self, step: str, reason: str) -> None:
        super().__init__(reason)
        self.step, self.reason = step, reason


class LogVerifier:
    """Checks events one at a time, in log order; keeps what the steps need to remember.

    ``leaves`` collects the RFC 9162 leaf hash of every verified event (for checkpoints).
    A verifier can be seeded (``head_seq``, ``last_time``, ``roster``) to check only the
    events after a trusted checkpoint.
    """

    def __init__(self, *, ledger_id: str, root_public_key: bytes,
                 collect_leaves: bool = False) -> None:
        self.ledger_id = ledger_id
        self.root_public_key = root_public_key
        self.root_kid = key_id(root_public_key)
        self.report = Report()
        self.last_time: datetime | None = None
        self.versions: dict[str, int] = {}
        self.leaves: list[bytes] | None = [] if collect_leaves else None
        self.prior_version: Any = None  # callable(originator_id, version) -> bool, for --since
        self.sparse = False  # True: verify a selection of events in log order (packs)
        self._last_stamp: object = None
        self._last_parsed = datetime.min

    def feed(self, rec: StoredRecord) -> bool:
        """Verify one event; on failure record it in the report and return False."""
        report = self.report
        eid = envelope.event_id(rec.originator_id, rec.originator_version)
        seq: int | None = None
        try:
            env, opened, when, seq = self._check(rec)
        except _Fail as f:
            report.ok = False
            report.failure = Failure(rec.id, seq if seq is not None else _seq_of(rec), eid,
                                     f.step, f.reason)
            return False
        self.versions[env["originator_id"]] = env["version"]
        self.last_time = when
        report.events += 1
        report.head_seq = env["seq"]
        report.head_time = env["timestamp"]
        if self.leaves is not None:
            self.leaves.append(leaf_hash(leaf_of(rec, opened)))
        return True

    def _authorized(self, kid: str, roles: tuple[str, ...], when: datetime) -> bytes:
        """Step 4 for non-roster events: the key held one of ``roles`` at ``when``."""
        try:
            return self.report.roster.holds(kid, roles, when)
        except KeyNotAuthorized as e:
            raise _Fail("4", str(e)) from None

    def _time(self, stamp: object) -> datetime:
        """Parse an envelope timestamp; events of one command share one, so memoise it."""
        if stamp != self._last_stamp:
            try:
                self._last_parsed = datetime.fromisoformat(str(stamp))
            except ValueError as e:
                raise _Fail("1.2", "timestamp is not ISO 8601") from e
            if self._last_parsed.tzinfo is None:
                raise _Fail("1.2", "timestamp has no time zone")
            self._last_stamp = stamp
        return self._last_parsed

    def _check(self, rec: StoredRecord) -> tuple[dict[str, Any], envelope.Opened, datetime, int]:
        report, roster = self.report, self.report.roster
        # Step 1: frame and shape.
        try:
            opened = envelope.open_state(rec.state)
        except envelope.EnvelopeError as e:
            raise _Fail(e.step, str(e).split(": ", 1)[1]) from e
        env = opened.envelope
        seq = env["seq"] if isinstance(env["seq"], int) else -1
        # Step 2: the envelope is bound to its row and to this ledger.
        if env["ledger"] != self.ledger_id:
            raise _Fail("2", f"event belongs to ledger {env['ledger']}, not {self.ledger_id}")
        oid, version = env["originator_id"], env["version"]
        if (env["topic"], oid, version) != (rec.topic, str(rec.originator_id),
                                            rec.originator_version):
            raise _Fail("2", "envelope topic, originator id or version differs from its row")
        roles = ROLES_BY_TOPIC.get(env["topic"])
        if roles is None:
            raise _Fail("2", f"unknown topic {env['topic']}")
        # Step 3: sequence numbers are consecutive from 1 (deletion, insertion, reorder).
        # A sparse selection (an evidence pack) needs only increasing numbers from 1.
        expected = report.head_seq + 1
        if self.sparse and report.events > 0:
            if env["seq"] < expected:
                raise _Fail("3", f"sequence number {env['seq']} does not increase "
                                 f"(previous {report.head_seq})")
            expected = env["seq"]
        if env["seq"] != expected:
            raise _Fail("3", f"sequence number {env['seq']} where {expected} was expected "
                             "(an event was removed, inserted or moved)")
        when = self._time(env["timestamp"])
        # Step 4: the signer held the topic's role at the event's time.
        if roles == (ROOT,):
            if opened.kid != self.root_kid:
                raise _Fail("4", f"roster event signed by {opened.kid}, not the trusted "
                                 f"root key {self.root_kid}")
            public_key = self.root_public_key
        else:
            public_key = self._authorized(opened.kid, roles, when)
        # Step 5: the signature verifies over the stored body bytes.
        try:
            envelope.verify(opened, public_key)
        except envelope.EnvelopeError as e:
            raise _Fail("5", f"signature does not verify under key {opened.kid}") from e
        # Step 6: time never runs backwards along the log.
        if self.last_time is not None and when < self.last_time:
            raise _Fail("6", f"time {env['timestamp']} is earlier than the previous event")
        # Step 7: each aggregate's versions follow one another.
        prev = self.versions.get(oid)
        if prev is None and version != 1 and self.prior_version is not None:
            prev = version - 1 if self.prior_version(oid, version - 1) else 0
        if self.sparse:
            if prev is not None and version <= prev:
                raise _Fail("7", f"version {version} does not follow version {prev}")
        elif version != (prev or 0) + 1:
            raise _Fail("7", f"version {version} follows version {prev or 0}")
        if expected == 1 and env["topic"] != TOPIC_STARTED:
            raise _Fail("4", "the log does not start with the key roster")
        if env["topic"] in ROSTER_TOPICS:
            try:
                roster.apply(env["topic"], env["payload"])
            except (KeyNotAuthorized, KeyError, ValueError) as e:
                raise _Fail("4", f"roster event is invalid: {e}") from e
            if env["topic"] == TOPIC_STARTED and roster.root_kid != self.root_kid:
                raise _Fail("4", "the roster names a different root key")
        return env, opened, when, seq


def _seq_of(rec: StoredRecord) -> int | None:
    try:
        seq = envelope.open_state(rec.state).envelope["seq"]
    except envelope.EnvelopeError:
        return None
    return seq if isinstance(seq, int) else None


def verify_log(records: Iterable[StoredRecord], *, ledger_id: str,
               root_public_key: bytes, leaves: list[bytes] | None = None) -> Report:
    """Check every event; stop at the first failure. Never raises for bad data.

    If ``leaves`` is given, the leaf hash of every verified event is appended to it.
    """
    v = LogVerifier(ledger_id=ledger_id, root_public_key=root_public_key,
                    collect_leaves=leaves is not None)
    for rec in records:
        if not v.feed(rec):
            break
    if v.report.ok and v.report.events == 0:
        v.report.ok = False
        v.report.failure = Failure(0, None, "-", "3", "the log holds no events; every ledger "
                                   "starts with its key roster, so its events were removed")
    if leaves is not None and v.leaves is not None:
        leaves.extend(v.leaves)
    return v.report


def check_log(records: Iterable[StoredRecord], *, ledger_id: str,
              root_public_key: bytes) -> Report:
    """Like :func:`verify_log` but raise :class:`VerificationFailed` on the first failure."""
    report = verify_log(records, ledger_id=ledger_id, root_public_key=root_public_key)
    if report.failure is not None:
        raise VerificationFailed(report.failure.describe())
    return report


def check_checkpoint(leaves: list[bytes], cp: Checkpoint,
                     stored_leaves: Callable[[int, int], list[bytes]] | None = None,
                     stored_root: Callable[[int], bytes] | None = None) -> Failure | None:
    """Step 8: the verified log extends a signed checkpoint (its signature checked by caller).

    8.2 the log holds at least ``cp.size`` events (else it was truncated);
    8.3 the first ``cp.size`` leaves hash to ``cp.root`` (else history was rewritten or
    forked). The first bad position is located by comparing the recomputed leaves with
    the stored tree, when the stored tree still matches the checkpoint.
    """
    n = len(leaves)
    if n < cp.size:
        return Failure(n + 1, n + 1, "-", "8.2",
                       f"the log has {n} events but checkpoint {cp.origin} has size {cp.size}: "
                       f"events {n + 1}..{cp.size} were removed (truncated)")
    tree = MerkleTree(MemoryTreeStore())
    tree.extend(leaves[:cp.size])
    if tree.root(cp.size) == cp.root:
        return None
    where = "the first bad position cannot be located (the stored tree was rewritten too)"
    pos: int | None = None
    if stored_leaves is not None and stored_root is not None:
        try:
            if stored_root(cp.size) == cp.root:
                old = stored_leaves(0, cp.size)
                pos = next((i + 1 for i, (a, b) in enumerate(zip(leaves, old, strict=False))
                            if a != b), None)
        except (KeyError, ValueError):
            pos = None
    if pos is not None:
        where = f"first bad position {pos}: the event there is not the one the checkpoint covers"
    return Failure(pos or 0, pos, "-", "8.3",
                   f"the first {cp.size} events do not hash to the root of checkpoint size "
                   f"{cp.size} (history rewritten or forked); {where}")
