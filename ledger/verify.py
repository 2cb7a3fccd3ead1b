"""Verify a whole event log offline: pure, no database (docs/spec/event-envelope.md).

Input: stored events in log order, the ledger id and the trusted root public
key. Each event passes the numbered steps of the spec; the first failure is
reported with its position, sequence number, event id, step and reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from keys.errors import KeyNotAuthorized
from keys.roster import ROOT, ROSTER_TOPICS, KeyRoster, RosterState
from keys.signing import key_id
from ledger import envelope
from ledger.domain import event_classes
from ledger.errors import VerificationFailed


def _role_by_topic() -> dict[str, str]:
    roles = {c.TOPIC: c.SIGNER_ROLE for c in event_classes()}
    for value in vars(KeyRoster).values():
        if isinstance(value, type) and getattr(value, "TOPIC", None) in ROSTER_TOPICS:
            roles[value.TOPIC] = ROOT
    return roles


ROLE_BY_TOPIC = _role_by_topic()


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


def verify_log(records: Iterable[StoredRecord], *, ledger_id: str,
               root_public_key: bytes) -> Report:
    """Check every event; stop at the first failure. Never raises for bad data."""
    report = Report()
    roster = report.roster
    root_kid = key_id(root_public_key)
    last_time: datetime | None = None
    versions: dict[str, int] = {}
    for rec in records:
        eid = envelope.event_id(rec.originator_id, rec.originator_version)
        seq: int | None = None
        try:
            # Step 1: parse, shape, canonical bytes.
            try:
                opened = envelope.open_state(rec.state)
            except envelope.EnvelopeError as e:
                raise _Fail(e.step, str(e).split(": ", 1)[1]) from e
            env = opened.envelope
            seq = env["seq"] if isinstance(env["seq"], int) else None
            # Step 2: the envelope is bound to its row and to this ledger.
            if env["ledger"] != ledger_id:
                raise _Fail("2", f"event belongs to ledger {env['ledger']}, not {ledger_id}")
            if (env["topic"], env["originator_id"], env["version"]) != (
                    rec.topic, str(rec.originator_id), rec.originator_version):
                raise _Fail("2", "envelope topic, originator id or version differs from its row")
            role = ROLE_BY_TOPIC.get(env["topic"])
            if role is None:
                raise _Fail("2", f"unknown topic {env['topic']}")
            # Step 3: sequence numbers are consecutive from 1 (deletion, insertion, reorder).
            expected = report.head_seq + 1
            if env["seq"] != expected:
                raise _Fail("3", f"sequence number {env['seq']} where {expected} was expected "
                                 "(an event was removed, inserted or moved)")
            try:
                when = datetime.fromisoformat(str(env["timestamp"]).replace("Z", "+00:00"))
            except ValueError as e:
                raise _Fail("1.2", "timestamp is not ISO 8601") from e
            # Step 4: the signer held the topic's role at the event's time.
            if role == ROOT:
                if opened.kid != root_kid:
                    raise _Fail("4", f"roster event signed by {opened.kid}, not the trusted "
                                     f"root key {root_kid}")
                public_key = root_public_key
            else:
                try:
                    public_key = roster.check(opened.kid, role, when)
                except KeyNotAuthorized as e:
                    raise _Fail("4", str(e)) from e
            # Step 5: the signature verifies.
            try:
                envelope.verify(opened, public_key)
            except envelope.EnvelopeError as e:
                raise _Fail("5", f"signature does not verify under key {opened.kid}") from e
            # Step 6: time never runs backwards along the log.
            if last_time is not None and when < last_time:
                raise _Fail("6", f"time {env['timestamp']} is earlier than the previous event")
            # Step 7: each aggregate's versions follow one another.
            prev = versions.get(env["originator_id"], 0)
            if env["version"] != prev + 1:
                raise _Fail("7", f"version {env['version']} follows version {prev}")
            if report.events == 0 and env["topic"] != "memory-ledger:roster.started.v1":
                raise _Fail("4", "the log does not start with the key roster")
            if env["topic"] in ROSTER_TOPICS:
                try:
                    roster.apply(env["topic"], env["payload"])
                except (KeyNotAuthorized, KeyError, ValueError) as e:
                    raise _Fail("4", f"roster event is invalid: {e}") from e
                if env["topic"] == "memory-ledger:roster.started.v1" and \
                        roster.root_kid != root_kid:
                    raise _Fail("4", "the roster names a different root key")
        except _Fail as f:
            report.ok = False
            report.failure = Failure(rec.id, seq, eid, f.step, f.reason)
            return report
        versions[env["originator_id"]] = env["version"]
        last_time = when
        report.events += 1
        report.head_seq = env["seq"]
        report.head_time = env["timestamp"]
    return report


def check_log(records: Iterable[StoredRecord], *, ledger_id: str,
              root_public_key: bytes) -> Report:
    """Like :func:`verify_log` but raise :class:`VerificationFailed` on the first failure."""
    report = verify_log(records, ledger_id=ledger_id, root_public_key=root_public_key)
    if report.failure is not None:
        raise VerificationFailed(report.failure.describe())
    return report
