"""The memory audit report (Persona Schema §9 ``memory audit [--from DATE] [--to DATE]``).

:func:`build_report` reads the signed event log (never a read model, never a data key)
and returns a JSON-ready dict; :func:`render` turns it into text, JSON or a single
self-contained HTML page with inline SVG charts. docs/adr/0013-audit-report.md records
what counts as what.

How the period is found. Event times are inside the signed envelopes (the notification
table has no time column), but along the log they never decrease: every command takes
the write lock and refuses a clock earlier than the newest event, and verification
step 6 checks it. So the first and last positions of the period are found by binary
search over notification ids (about 2 log2(n) one-row reads), and only the period's
rows are read and parsed. A few small things are read outside the period: the key
roster and the policy (one aggregate each, by id), the erasure requests and batches
(selected by topic), and the recorded checkpoints. Verification (``verify``) reads
the whole log in scope ``full``, and the events after the last checkpoint before the
period in scope ``since``.

No content. Personal fields are ciphertext in the stored envelopes and nothing here
decrypts them; of the plaintext payload fields only ids, times, deadlines, redaction
modes and policy settings reach the report. Free-text fields (reasons, legal basis,
subject refs, session ids, key revocation reasons) are never copied.
"""

from __future__ import annotations

import html
import itertools
import json
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from keys.roster import ROSTER_TOPICS, RosterState
from ledger import clock, envelope
from ledger.domain import (
    Artifact,
    Atom,
    ErasureRequest,
    Policy,
    RedactionBatch,
    Subject,
)
from ledger.errors import ClockError, EnvironmentProblem, InputError, VerificationFailed
from ledger.merkle import verify_consistency
from ledger.transparency import b64, verify_since, verify_with_roster
from ledger.verify import Failure, Report, verify_log

if TYPE_CHECKING:
    from ledger.application import LedgerApp

__all__ = ["FORMATS", "REPORT_VERSION", "VERIFY_SCOPES", "Period", "build_report",
           "parse_period", "policy_history", "render", "render_html", "render_html_body",
           "render_json", "render_text", "write_atomic"]

REPORT_VERSION = 1
FORMATS = ("text", "json", "html")
VERIFY_SCOPES = ("full", "since", "none")
RECALL_REASON = "recalled"
"""The reason ``ledger recall`` gives its rehearsal events (LedgerApp.rehearse_atoms)."""
REVEAL_REASON_PREFIX = "revealed:"
"""The reason of the rehearsal event the console writes when a person reveals a flagged
memory's content (``revealed:`` and the credential id; ADR 0032): a retrieval too."""

CATEGORIES = ("created", "recalled", "rehearsed", "lifecycle", "redacted", "governance",
              "keys")
"""Activity categories, in chart stacking order (docs/adr/0013)."""

AUDIT_FLAGS = ("logCreation", "logRetrieval", "logRehearsal", "logRedaction")
FLAG_OF_CATEGORY = {"created": "logCreation", "recalled": "logRetrieval",
                    "rehearsed": "logRehearsal", "redacted": "logRedaction"}

REQUEST_TOPICS = (ErasureRequest.Created.TOPIC, ErasureRequest.Acknowledged.TOPIC,
                  ErasureRequest.Completed.TOPIC)
BATCH_TOPICS = (RedactionBatch.Created.TOPIC, RedactionBatch.Approved.TOPIC,
                RedactionBatch.Executed.TOPIC, RedactionBatch.Closed.TOPIC)
CREATION_TOPICS = {Subject.Created.TOPIC: "subjects", Artifact.Created.TOPIC: "artifacts",
                   Atom.Created.TOPIC: "atoms"}
KEY_DESTROYED = {Atom.DataKeyDestroyed.TOPIC: "atom",
                 Artifact.DataKeyDestroyed.TOPIC: "artifact",
                 Subject.DataKeyDestroyed.TOPIC: "subject",
                 ErasureRequest.DataKeyDestroyed.TOPIC: "request"}
REDACTION_MODES = ("soft", "archive", "hard", "delete")
_SWEEP = re.compile(r"sweep|expir|archiv")
_PACK = re.compile(r"evidence|pack")
_DATE_ONLY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


# ----------------------------------------------------------------------------- period
@dataclass(frozen=True)
class Period:
    """``start <= t`` and ``t < end`` (``t <= end`` when ``end_inclusive``); UTC."""

    start: datetime | None
    end: datetime
    end_inclusive: bool

    @property
    def start_text(self) -> str | None:
        return None if self.start is None else clock.format_instant(self.start)

    @property
    def end_text(self) -> str:
        return clock.format_instant(self.end)

    def contains(self, ts: str) -> bool:
        """Is an envelope timestamp (fixed-width UTC text, sorts as time) in the period?"""
        start = self.start_text
        if start is not None and ts < start:
            return False
        return ts <= self.end_text if self.end_inclusive else ts < self.end_text

    def after_end(self, ts: str) -> bool:
        return ts > self.end_text if self.end_inclusive else ts >= self.end_text


def _parse_date(value: str, option: str) -> tuple[datetime, bool]:
    """(instant, was a bare date). Bad input is an InputError with a hint."""
    try:
        return clock.parse_instant(value, option), bool(_DATE_ONLY.match(value))
    except ClockError as e:
        raise InputError(f"{option} {value!r} is not a date or time",
                         hint="use a date like 2026-01-31 or a UTC time like "
                              "2026-01-31T12:00:00Z") from e


def parse_period(from_: str | None, to: str | None, now: datetime) -> Period:
    """``--from`` is inclusive; ``--to DATE`` includes that whole day (UTC), ``--to TIME`` is
    exclusive; without ``--to`` the period ends now (inclusive)."""
    start = _parse_date(from_, "--from")[0] if from_ is not None else None
    if to is None:
        end, inclusive = now, True
    else:
        end, bare = _parse_date(to, "--to")
        if bare:
            end += timedelta(days=1)
        inclusive = False
    if start is not None and (end < start or (end == start and not inclusive)):
        raise InputError(f"the period is empty: --from {clock.format_instant(start)} is not "
                         f"before the end {clock.format_instant(end)}",
                         hint="give --from earlier than --to")
    return Period(start, end, inclusive)


# ----------------------------------------------------------------------------- reading
def _env(state: bytes) -> dict[str, Any]:
    return envelope.open_state(state).envelope


def _sealed_session(app: LedgerApp, env: dict[str, Any]) -> str | None:
    """The session id a rehearsal sealed under its atom's key (ADR 0004), counted, never
    copied; None once the atom's key is destroyed (the session went with the memory)."""
    import base64
    import json

    from keys import aead

    sealed = env["payload"].get("sealed")
    if not sealed:
        return None
    key = app.data_key(str(sealed["key_id"]))
    if key is None:
        return None
    plain = aead.open_sealed(key, base64.b64decode(sealed["nonce"]),
                             base64.b64decode(sealed["ct"]),
                             app.associated_data(env["originator_id"], env["version"],
                                                 env["topic"]))
    value = json.loads(plain).get("session_id")
    return str(value) if value is not None else None


def _short(topic: str) -> str:
    """``memory-ledger:atom.created.v1`` -> ``atom.created``."""
    name = topic.split(":", 1)[-1]
    return re.sub(r"\.v\d+$", "", name)


def policy_rule(payload: dict[str, Any]) -> str | None:
    """The memoryPolicy rule an archive redaction carries out (``maxAtoms``), or None
    for a person's redaction or a sweep. Older logs say it only in the reason."""
    if payload.get("mode") != "archive":
        return None
    if payload.get("rule"):
        return str(payload["rule"])
    reason = payload.get("reason")
    if isinstance(reason, str) and reason.startswith("memoryPolicy maxAtoms"):
        return "maxAtoms"
    return None


def category(topic: str, payload: dict[str, Any]) -> str:
    """The activity category of an event (docs/adr/0013)."""
    if topic in ROSTER_TOPICS:
        return "keys"
    prefix = _short(topic).split(".", 1)[0]
    if prefix in ("request", "batch", "policy"):
        return "governance"
    if topic in CREATION_TOPICS:
        return "created"
    if topic == Atom.Rehearsed.TOPIC:
        reason = payload.get("reason")
        retrieved = reason == RECALL_REASON or (
            isinstance(reason, str) and reason.startswith(REVEAL_REASON_PREFIX))
        return "recalled" if retrieved else "rehearsed"
    if topic == Atom.Redacted.TOPIC and policy_rule(payload) is not None:
        return "lifecycle"  # a policy effect, reported under its own heading
    if topic in KEY_DESTROYED or topic in (Atom.Redacted.TOPIC, Atom.Unredacted.TOPIC,
                                           Artifact.Deleted.TOPIC):
        return "redacted"
    return "lifecycle"


def _bound(app: LedgerApp, max_id: int, past: Callable[[str], bool]) -> int:
    """Smallest ``s`` such that the first event at a position >= ``s`` is ``past`` (or there
    is none). Event times never decrease along the log, so ``past`` flips once."""
    lo, hi = 1, max_id + 1
    while lo < hi:
        mid = (lo + hi) // 2
        rows = app.notifications(start=mid, limit=1)
        if not rows or past(_env(rows[0].state)["timestamp"]):
            hi = mid
        else:
            lo = min(int(rows[0].id) + 1, hi)
    return lo


def _rows(app: LedgerApp, start: int, stop: int, batch: int = 5000) -> Iterator[Any]:
    pos = start
    while pos <= stop:
        rows = app.notifications(start=pos, limit=batch, stop=stop)
        if not rows:
            return
        yield from rows
        pos = int(rows[-1].id) + 1


def _aggregate_events(app: LedgerApp, aggregate_id: UUID) -> list[dict[str, Any]]:
    return [_env(r.state) for r in app.stored_events(aggregate_id)]


def _hours(a: str, b: str | datetime) -> float:
    t0 = _time(a)
    t1 = b if isinstance(b, datetime) else _time(b)
    return round((t1 - t0).total_seconds() / 3600.0, 3)


def _time(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC)


def _fmt(ts: str | None) -> str | None:
    return None if ts is None else clock.format_instant(_time(ts))


@dataclass
class _Owners:
    """Which subject an item belongs to, from its creation event (for ``--subject``)."""

    app: LedgerApp
    known: dict[str, str | None] = field(default_factory=dict)
    lookups: int = 0

    def note(self, topic: str, oid: str, payload: dict[str, Any]) -> None:
        if topic == Subject.Created.TOPIC:
            self.known[oid] = oid
        elif topic in (Atom.Created.TOPIC, Artifact.Created.TOPIC):
            self.known[oid] = str(payload.get("subject_id"))

    def of(self, topic: str, oid: str) -> str | None:
        prefix = _short(topic).split(".", 1)[0]
        if prefix == "subject":
            return oid
        if prefix not in ("atom", "artifact"):
            return None
        if oid not in self.known:
            self.lookups += 1
            first = self.app.stored_events(UUID(oid), lte=1)
            owner = None
            if first:
                env = _env(first[0].state)
                owner = str(env["payload"].get("subject_id"))
            self.known[oid] = owner
        return self.known[oid]


# ----------------------------------------------------------------------------- folds
def _roster(app: LedgerApp) -> tuple[RosterState, list[dict[str, Any]]]:
    """The roster folded from its events (names for key ids), and the events themselves."""
    state = RosterState()
    events = []
    for env in _aggregate_events(app, app.roster_id):
        state.apply(env["topic"], env["payload"])
        events.append(env)
    return state, events


def _names(state: RosterState) -> dict[str, str]:
    names = {kid: e.name for kid, e in state.entries.items()}
    if state.root_kid:
        names[state.root_kid] = "root"
    return names


def _policy_events(app: LedgerApp) -> list[dict[str, Any]]:
    return [e for e in _aggregate_events(app, app.policy_id())
            if e["topic"] == Policy.PolicySet.TOPIC]


def _policy_summary(env: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    doc = env["payload"].get("document") or {}
    audit = doc.get("auditPolicy") or {}
    sla = doc.get("rightToBeForgottenSla") or {}
    return {
        "event_id": envelope.event_id(env["originator_id"], env["version"]),
        "set_at": env["timestamp"], "signer": env["kid"], "signer_name": names.get(env["kid"]),
        "enabled": doc.get("enabled"),
        "auditPolicy": {k: audit.get(k) for k in AUDIT_FLAGS},
        "rightToBeForgottenSla": {k: sla.get(k) for k in (
            "acknowledgmentHours", "completionHours", "tombstoneRetentionDays")},
    }


def policy_history(app: LedgerApp) -> list[dict[str, Any]]:
    """Every signed ``policy.set`` event, oldest first: id, time, signer, SLA, audit flags."""
    names = _names(_roster(app)[0])
    return [_policy_summary(e, names) for e in _policy_events(app)]


def _governance(app: LedgerApp) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Erasure requests and redaction batches folded from their (few) signed events."""
    requests: dict[str, dict[str, Any]] = {}
    batches: dict[str, dict[str, Any]] = {}
    rows = app.notifications(start=1, limit=10**12,
                             topics=[*REQUEST_TOPICS, *BATCH_TOPICS])
    for row in rows:
        env = _env(row.state)
        oid, ts, p, topic = env["originator_id"], env["timestamp"], env["payload"], env["topic"]
        if topic == ErasureRequest.Created.TOPIC:
            requests[oid] = {
                "request_id": oid, "subject_id": p.get("subject_id"), "received_at": ts,
                "received_by": env["kid"], "ack_due": _fmt(p.get("ack_due")),
                "acknowledged_at": None, "complete_due": _fmt(p.get("complete_due")),
                "completed_at": None, "batch_id": None}
        elif topic == ErasureRequest.Acknowledged.TOPIC and oid in requests:
            requests[oid]["acknowledged_at"] = ts
        elif topic == ErasureRequest.Completed.TOPIC and oid in requests:
            requests[oid]["completed_at"] = ts
            requests[oid]["batch_id"] = p.get("batch_id")
        elif topic == RedactionBatch.Created.TOPIC:
            targets = p.get("targets") or {}
            batches[oid] = {
                "batch_id": oid, "request_id": p.get("request_id"), "mode": p.get("mode"),
                "opened_at": ts, "approved_at": None, "approved_by": None,
                "executed_at": None, "closed_at": None, "outcome": None,
                "targets": {k: len(targets.get(k) or []) for k in
                            ("atoms", "artifacts", "subjects")},
                "event_ids": 0, "_targets": targets}
        elif oid in batches:
            b = batches[oid]
            if topic == RedactionBatch.Approved.TOPIC:
                b["approved_at"], b["approved_by"] = ts, env["kid"]
            elif topic == RedactionBatch.Executed.TOPIC:
                b["executed_at"], b["event_ids"] = ts, len(p.get("event_ids") or [])
            elif topic == RedactionBatch.Closed.TOPIC:
                b["closed_at"], b["outcome"] = ts, p.get("outcome")
    return requests, batches


def _checkpoints(app: LedgerApp) -> list[tuple[int, str, str]]:
    return app.recorded_checkpoints()


# ----------------------------------------------------------------------------- verification
def _failure(f: Failure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"position": f.position, "seq": f.seq, "event_id": f.event_id, "step": f.step,
            "reason": f.reason}


def _verification(app: LedgerApp, scope: str, first_seq: int | None, last_position: int | None,
                  period: Period) -> dict[str, Any]:
    if scope == "none":
        return {"scope": "none", "status": "not-verified", "ok": None,
                "note": "verification was skipped (--verify none)"}
    root = app.root_public_key
    if root is None:
        raise EnvironmentProblem("no trusted root key: keys/root.pub is missing",
                                 hint="restore it, or run the report with --verify none")
    cps = _checkpoints(app)
    base: tuple[int, str, str] | None = None
    if scope == "since":
        limit = first_seq if first_seq is not None else app.head()[0] + 1
        older = [c for c in cps if c[0] < limit]
        base = older[-1] if older else None
    leaves: list[bytes] = []
    used_scope = scope
    extra: dict[str, Any] = {}
    if base is not None:
        try:
            report, extra = verify_since(app, base[1], root)
        except VerificationFailed as e:
            report = Report(ok=False, failure=Failure(0, None, "-", "8.1",
                                                      f"checkpoint of size {base[0]}: {e}"))
    else:
        used_scope = "full"
        report = verify_log(app.stored_records(), ledger_id=app.ledger_id,
                            root_public_key=root, leaves=leaves)
    checked: list[dict[str, Any]] = []
    cp_failure: Failure | None = None
    if report.ok:
        chain = [c for c in cps if base is None or c[0] >= base[0]]
        signed = []
        for size, note, created_at in chain:
            try:
                signed.append((verify_with_roster(note, app.config.origin, report.roster),
                               created_at))
            except VerificationFailed as e:
                cp_failure = Failure(0, None, "-", "8.1", f"checkpoint of size {size}: {e}")
                break
        if cp_failure is None and signed and base is None:
            cp_failure = app.check_against_tree(leaves, signed[-1][0].checkpoint)
        if cp_failure is None:
            for (old, _), (new, _) in itertools.pairwise(signed):
                try:
                    verify_consistency(old.size, new.size, old.root, new.root,
                                       app.consistency_proof(old.size, new.size))
                except (VerificationFailed, ValueError, KeyError) as e:
                    cp_failure = Failure(0, None, "-", "8.3",
                                         f"checkpoint of size {new.size} does not extend the "
                                         f"one of size {old.size}: {e}")
                    break
        if cp_failure is None:
            for cp, created_at in signed:
                checked.append({"size": cp.size, "root": b64(cp.root),
                                "signed_at": _fmt(created_at),
                                "in_period": period.contains(_fmt(created_at) or "")})
    failure = report.failure or cp_failure
    ok = failure is None
    if ok:
        status = "verified"
    elif (report.failure is not None and last_position is not None
          and report.failure.position > last_position):
        status = "verified-with-later-failure"
    else:
        status = "failed"
    out: dict[str, Any] = {
        "scope": used_scope, "status": status, "ok": ok,
        "events_verified": report.events, "head_seq": report.head_seq,
        "head_time": report.head_time, "failure": _failure(failure),
        "checkpoints": {"recorded": len(cps), "checked": len(checked),
                        "in_period": sum(1 for c in checked if c["in_period"]),
                        "latest_size": checked[-1]["size"] if checked else None,
                        "items": checked},
    }
    if used_scope == "since" and base is not None:
        out["since_checkpoint_size"] = base[0]
        out["note"] = (f"events after the signed checkpoint of size {base[0]} were verified; "
                       "the events it covers are bound by its signature and tree root")
    elif scope == "since":
        out["note"] = "no checkpoint before the period: the whole log was verified"
    if extra.get("size") is not None:
        out["tree_size"] = extra["size"]
    return out


# ----------------------------------------------------------------------------- report
def _flags(policy: dict[str, Any] | None) -> tuple[dict[str, bool], str]:
    if policy is None:
        return {k: True for k in AUDIT_FLAGS}, "no policy in force: every kind is reported"
    given = policy["auditPolicy"]
    flags = {k: (True if given.get(k) is None else bool(given[k])) for k in AUDIT_FLAGS}
    unset = [k for k in AUDIT_FLAGS if given.get(k) is None]
    note = "auditPolicy of the policy in force at the end of the period"
    if unset:
        note += f" ({', '.join(unset)} not set: schema default true)"
    return flags, note


def _section(flags: dict[str, bool], flag: str, data: dict[str, Any]) -> dict[str, Any]:
    if flags[flag]:
        return {"audit_flag": flag, "reported": True, **data}
    return {"audit_flag": flag, "reported": False,
            "note": f"auditPolicy.{flag} is false in the policy in force: not reported"}


def build_report(app: LedgerApp, period: Period, subject: str | None = None,
                 verify: str = "full", now: datetime | None = None) -> dict[str, Any]:
    """The audit report of ``period`` as a JSON-ready dict (see module docstring)."""
    if verify not in VERIFY_SCOPES:
        raise InputError(f"unknown verification scope {verify!r}",
                         hint=f"use one of: {', '.join(VERIFY_SCOPES)}")
    at = now or clock.now()
    sid = str(app.resolve_subject(subject)) if subject is not None else None
    roster, roster_events = _roster(app)
    names = _names(roster)

    # -- the period's positions, by binary search over event time
    max_id = app.head_position()
    start_pos = 1 if period.start is None else _bound(
        app, max_id, lambda ts: ts >= (period.start_text or ""))
    stop_pos = _bound(app, max_id, period.after_end) - 1

    # -- policy in force at the end of the period, and changes within it
    pol_events = _policy_events(app)
    in_force = None
    for env in pol_events:
        if not period.after_end(env["timestamp"]):
            in_force = _policy_summary(env, names)
    flags, flags_note = _flags(in_force)
    policy_changes = [_policy_summary(e, names) for e in pol_events
                      if period.contains(e["timestamp"])]

    requests, batches = _governance(app)
    owners = _Owners(app)

    def batch_subject_match(b: dict[str, Any]) -> bool:
        req = requests.get(str(b.get("request_id")))
        if req is not None and req["subject_id"] == sid:
            return True
        t = b["_targets"]
        if sid in (t.get("subjects") or []):
            return True
        return any(owners.of(Atom.Created.TOPIC, a) == sid for a in t.get("atoms") or []) or \
            any(owners.of(Artifact.Created.TOPIC, a) == sid for a in t.get("artifacts") or [])

    # -- one pass over the period's events
    by_topic: Counter[str] = Counter()
    by_actor: Counter[str] = Counter()
    by_category: Counter[str] = Counter()
    per_day: dict[str, Counter[str]] = {}
    events = not_reported = 0
    creations: Counter[str] = Counter()
    recalled_atoms: set[str] = set()
    recall_sessions: set[str] = set()
    rehearsed_atoms: set[str] = set()
    modes: Counter[str] = Counter()
    keys_destroyed: Counter[str] = Counter()
    unredactions = artifact_deletions = 0
    sweeps: Counter[str] = Counter()
    policy_archived: Counter[str] = Counter()
    packs: Counter[str] = Counter()
    first_seq = last_seq = None
    first_position = last_position = None
    batch_in_period: set[str] = set()
    for row in _rows(app, start_pos, stop_pos):
        env = _env(row.state)
        topic, oid, payload = env["topic"], env["originator_id"], env["payload"]
        if first_seq is None:
            first_seq, first_position = int(env["seq"]), int(row.id)
        last_seq, last_position = int(env["seq"]), int(row.id)
        if sid is not None:
            owners.note(topic, oid, payload)
            prefix = _short(topic).split(".", 1)[0]
            if prefix == "request":
                if requests.get(oid, {}).get("subject_id") != sid:
                    continue
            elif prefix == "batch":
                if oid not in batches or not batch_subject_match(batches[oid]):
                    continue
            elif owners.of(topic, oid) != sid:
                continue
        events += 1
        if topic in BATCH_TOPICS:
            batch_in_period.add(oid)
        cat = category(topic, payload)
        flag = FLAG_OF_CATEGORY.get(cat)
        if flag is not None and not flags[flag]:
            not_reported += 1
            continue
        by_topic[topic] += 1
        by_actor[env["kid"]] += 1
        by_category[cat] += 1
        per_day.setdefault(env["timestamp"][:10], Counter())[cat] += 1
        if topic in CREATION_TOPICS:
            creations[CREATION_TOPICS[topic]] += 1
        elif cat == "recalled":
            recalled_atoms.add(oid)
            session = payload.get("session_id") or _sealed_session(app, env)
            if session:
                recall_sessions.add(str(session))
        elif cat == "rehearsed":
            rehearsed_atoms.add(oid)
        elif topic == Atom.Redacted.TOPIC and policy_rule(payload) is not None:
            policy_archived[str(policy_rule(payload))] += 1  # a policy effect, not a redaction
        elif topic == Atom.Redacted.TOPIC:
            mode = str(payload.get("mode"))
            modes[mode if mode in REDACTION_MODES else "other"] += 1
            if mode == "archive":
                sweeps[f"{topic} (mode archive)"] += 1
        elif topic == Atom.Unredacted.TOPIC:
            unredactions += 1
        elif topic == Artifact.Deleted.TOPIC:
            artifact_deletions += 1
        elif topic in KEY_DESTROYED:
            keys_destroyed[KEY_DESTROYED[topic]] += 1
        if topic != Atom.Redacted.TOPIC and _SWEEP.search(_short(topic)):
            sweeps[topic] += 1
        if _PACK.search(_short(topic)):
            packs[topic] += 1

    # -- erasure requests: received by the end, not completed before the start
    req_rows = []
    for r in requests.values():
        if period.after_end(r["received_at"]):
            continue
        if sid is not None and r["subject_id"] != sid:
            continue
        done = r["completed_at"]
        if done is not None and period.start_text is not None and done < period.start_text:
            continue
        due = r["complete_due"]
        if done is not None:
            status = "completed-late" if due is not None and done > due else "completed"
        elif due is not None and _time(due) <= at:  # at due: overdue
            status = "overdue"
        else:
            status = "open"
        req_rows.append({
            **r, "status": status, "overdue": status == "overdue",
            "received_in_period": period.contains(r["received_at"]),
            "completed_in_period": done is not None and period.contains(done),
            "acknowledged_late": bool(r["ack_due"] and r["acknowledged_at"]
                                      and r["acknowledged_at"] > r["ack_due"]),
            "hours_taken": _hours(r["received_at"], done) if done else None,
            "hours_open": None if done else _hours(r["received_at"], at),
            "deadline_hours": _hours(r["received_at"], due) if due else None,
        })
    req_rows.sort(key=lambda r: (r["received_at"], r["request_id"]))
    statuses = Counter(r["status"] for r in req_rows)

    # -- batches: an event in the period, or open during it
    batch_rows = []
    for b in batches.values():
        if period.after_end(b["opened_at"]):
            continue
        closed = b["closed_at"]
        open_during = closed is None or period.start_text is None or \
            closed >= period.start_text
        if b["batch_id"] not in batch_in_period and not open_during:
            continue
        if sid is not None and not batch_subject_match(b):
            continue
        batch_rows.append({k: v for k, v in b.items() if not k.startswith("_")} | {
            "status": "closed" if closed else "executed" if b["executed_at"] else
            "approved" if b["approved_at"] else "opened",
            "approved_by_name": names.get(str(b["approved_by"])) if b["approved_by"] else None})
    batch_rows.sort(key=lambda b: (b["opened_at"], b["batch_id"]))

    # -- key roster changes in the period
    roster_changes = []
    for env in roster_events:
        if not period.contains(env["timestamp"]):
            continue
        p = env["payload"]
        kid = p.get("kid") or p.get("root_kid")
        roster_changes.append({
            "event_id": envelope.event_id(env["originator_id"], env["version"]),
            "at": env["timestamp"], "change": _short(env["topic"]).split(".", 1)[1],
            "kid": kid, "name": names.get(str(kid)), "role": p.get("role"),
            "valid_from": _fmt(p.get("valid_from")), "revoked_from": _fmt(p.get("revoked_from"))})

    actors = [{"kid": kid, "name": names.get(kid),
               "roles": sorted({g.role for g in roster.entries[kid].grants})
               if kid in roster.entries else (["root"] if kid == roster.root_kid else []),
               "events": n}
              for kid, n in sorted(by_actor.items(), key=lambda kv: (-kv[1], kv[0]))]
    closed_batches = sum(1 for b in batch_rows if b["status"] == "closed")
    overdue_ids = [r["request_id"] for r in req_rows if r["overdue"]]
    findings = []
    for r in req_rows:
        if r["overdue"]:
            findings.append(f"erasure request {r['request_id']} is overdue: completion was due "
                            f"{r['complete_due']} and it is not completed")
        elif r["status"] == "completed-late":
            findings.append(f"erasure request {r['request_id']} was completed late "
                            f"({r['completed_at']}, due {r['complete_due']})")
    verification = _verification(app, verify, first_seq, last_position, period)
    if verification["ok"] is False:
        findings.append(f"verification failed: {verification['failure']['reason']}")
    if events == 0:
        findings.append("no events in the period")

    return {
        "report": "memory-ledger audit", "version": REPORT_VERSION,
        "ledger_id": app.ledger_id, "generated_at": clock.format_instant(at),
        "period": {"from": period.start_text, "to": period.end_text,
                   "to_inclusive": period.end_inclusive,
                   "first_position": first_position, "last_position": last_position,
                   "first_seq": first_seq, "last_seq": last_seq},
        "subject": None if sid is None else {"subject_id": sid},
        "scope_note": ("events on this subject's items only; policy, key roster and "
                       "verification are ledger-wide") if sid else "every event of the ledger",
        "policy": {"in_force": in_force, "audit_flags": flags, "audit_flags_source": flags_note,
                   "changes": policy_changes},
        "activity": {
            "events": events, "reported": events - not_reported, "not_reported": not_reported,
            "by_topic": dict(sorted(by_topic.items())),
            "by_category": {c: by_category.get(c, 0) for c in CATEGORIES},
            "by_actor": actors,
            "per_day": {d: {c: per_day[d].get(c, 0) for c in CATEGORIES}
                        for d in sorted(per_day)},
        },
        "creations": _section(flags, "logCreation", {
            "atoms": creations["atoms"], "artifacts": creations["artifacts"],
            "subjects": creations["subjects"], "total": sum(creations.values())}),
        "retrievals": _section(flags, "logRetrieval", {
            "events": by_category["recalled"], "atoms": len(recalled_atoms),
            "sessions": len(recall_sessions)}),
        "rehearsals": _section(flags, "logRehearsal", {
            "events": by_category["rehearsed"], "atoms": len(rehearsed_atoms)}),
        "redactions": _section(flags, "logRedaction", {
            "by_mode": {m: modes.get(m, 0) for m in (*REDACTION_MODES, "other") if
                        m != "other" or modes.get(m)},
            "unredactions": unredactions, "artifact_deletions": artifact_deletions,
            "data_keys_destroyed": {k: keys_destroyed.get(k, 0)
                                    for k in ("atom", "artifact", "subject", "request")},
            "events": by_category["redacted"]}),
        "batches": {"count": len(batch_rows), "closed": closed_batches, "items": batch_rows},
        "erasure_requests": {
            "count": len(req_rows), "overdue": statuses["overdue"], "open": statuses["open"],
            "completed": statuses["completed"], "completed_late": statuses["completed-late"],
            "overdue_ids": overdue_ids, "items": req_rows},
        "evidence_packs": {
            "recorded": bool(packs), "events": sum(packs.values()),
            "by_topic": dict(sorted(packs.items())),
            "closed_batches": closed_batches,
            "note": ("" if packs else
                     "the log holds no record of evidence packs (building a pack appends no "
                     "event), so packs built in the period cannot be listed; each closed batch "
                     "can have one built with `ledger evidence-pack BATCH`")},
        "sweeps": {"events": sum(sweeps.values()), "by_topic": dict(sorted(sweeps.items()))},
        "policy_archiving": {"events": sum(policy_archived.values()),
                             "by_rule": dict(sorted(policy_archived.items()))},
        "key_roster": {"changes": len(roster_changes), "items": roster_changes,
                       "keys": len(roster.entries) + (1 if roster.root_kid else 0)},
        "verification": verification,
        "findings": findings,
    }


# ----------------------------------------------------------------------------- output
def write_atomic(path: Path, data: str) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise InputError(f"cannot write {path}: {e}", hint="check that the folder exists "
                                                           "and is writable") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise InputError(f"cannot write {path}: {e}") from e
        raise


def render(report: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return render_json(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "text":
        return render_text(report)
    raise InputError(f"unknown format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")


def render_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# -- text
def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    cells = [[("-" if v is None else str(v)) for v in r] for r in rows]
    if not cells:
        return ["  (none)"]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip(), "  " + "  ".join("-" * w for w in widths)]
    for r in cells:
        out.append(("  " + "  ".join(c.rjust(w) if c.lstrip("-").isdigit() else c.ljust(w)
                                     for c, w in zip(r, widths, strict=True))).rstrip())
    return out


def _period_label(r: dict[str, Any]) -> str:
    p = r["period"]
    end = "]" if p["to_inclusive"] else ")"
    return f"[{p['from'] or 'start of the log'}, {p['to']}{end}"


def render_text(r: dict[str, Any]) -> str:
    a = r["activity"]
    lines = [f"Memory audit report — ledger {r['ledger_id']}",
             f"period {_period_label(r)}; generated {r['generated_at']}",
             f"scope: {r['scope_note']}"
             + (f" (subject {r['subject']['subject_id']})" if r["subject"] else ""), ""]
    if r["findings"]:
        lines.append("FINDINGS")
        lines += [f"  ! {f}" for f in r["findings"]]
        lines.append("")
    v = r["verification"]
    lines.append("VERIFICATION")
    if v["scope"] == "none":
        lines.append(f"  {v['note']}")
    else:
        lines.append(f"  status {v['status']} (scope {v['scope']}): {v['events_verified']} "
                     f"events verified, head seq {v['head_seq']} at {v['head_time']}")
        c = v["checkpoints"]
        lines.append(f"  checkpoints: {c['recorded']} recorded, {c['checked']} checked "
                     f"(signature and consistency), {c['in_period']} signed in the period")
        if v.get("note"):
            lines.append(f"  {v['note']}")
        if v["failure"]:
            f = v["failure"]
            lines.append(f"  FAIL at position {f['position']} (seq {f['seq']}): step "
                         f"{f['step']}: {f['reason']}")
    lines.append("")
    lines.append(f"ACTIVITY: {a['events']} events in the period, {a['reported']} reported"
                 + (f", {a['not_reported']} not reported (auditPolicy)"
                    if a["not_reported"] else ""))
    lines.append("")
    lines.append("By category")
    lines += _table(["category", "events"], a["by_category"].items())
    lines.append("")
    lines.append("By type (topic)")
    lines += _table(["topic", "events"], a["by_topic"].items())
    lines.append("")
    lines.append("By actor (signer)")
    lines += _table(["key id", "name", "roles", "events"],
                    [(x["kid"], x["name"], ",".join(x["roles"]), x["events"])
                     for x in a["by_actor"]])
    lines.append("")
    lines.append("Per day (UTC)")
    lines += _table(["day", *CATEGORIES, "total"],
                    [(d, *(c[k] for k in CATEGORIES), sum(c.values()))
                     for d, c in a["per_day"].items()])
    lines.append("")
    for key, title, fields in (
            ("creations", "CREATIONS", ("atoms", "artifacts", "subjects", "total")),
            ("retrievals", "RETRIEVALS (recall rehearsals)", ("events", "atoms", "sessions")),
            ("rehearsals", "REHEARSALS (other than recall)", ("events", "atoms"))):
        s = r[key]
        if s["reported"]:
            lines.append(f"{title}: " + ", ".join(f"{f} {s[f]}" for f in fields))
        else:
            lines.append(f"{title}: {s['note']}")
    s = r["redactions"]
    if s["reported"]:
        lines.append("REDACTIONS: " + ", ".join(f"{m} {n}" for m, n in s["by_mode"].items())
                     + f"; unredactions {s['unredactions']}; artifact deletions "
                       f"{s['artifact_deletions']}; data keys destroyed "
                     + ", ".join(f"{k} {n}" for k, n in s["data_keys_destroyed"].items()))
    else:
        lines.append(f"REDACTIONS: {s['note']}")
    lines.append("")
    b = r["batches"]
    lines.append(f"REDACTION BATCHES: {b['count']} ({b['closed']} closed)")
    lines += _table(["batch", "mode", "request", "opened", "approved by", "closed", "atoms",
                     "artifacts", "subjects", "status"],
                    [(x["batch_id"], x["mode"], x["request_id"], x["opened_at"],
                      x["approved_by_name"] or x["approved_by"], x["closed_at"],
                      x["targets"]["atoms"], x["targets"]["artifacts"],
                      x["targets"]["subjects"], x["status"]) for x in b["items"]])
    lines.append("")
    e = r["erasure_requests"]
    lines.append(f"ERASURE REQUESTS: {e['count']} ({e['completed']} completed, "
                 f"{e['completed_late']} completed late, {e['open']} open, "
                 f"{e['overdue']} OVERDUE)")
    lines += _table(["request", "subject", "received", "ack due", "complete due", "completed",
                     "hours", "deadline h", "status"],
                    [(x["request_id"], x["subject_id"], x["received_at"], x["ack_due"],
                      x["complete_due"], x["completed_at"],
                      x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"],
                      x["deadline_hours"], x["status"].upper() if x["overdue"]
                      else x["status"]) for x in e["items"]])
    lines.append("")
    ep = r["evidence_packs"]
    lines.append(f"EVIDENCE PACKS: {ep['events']} recorded" if ep["recorded"]
                 else f"EVIDENCE PACKS: {ep['note']}")
    sw = r["sweeps"]
    lines.append(f"SWEEPS (expiry / archive): {sw['events']} events")
    lines += _table(["topic", "events"], sw["by_topic"].items()) if sw["by_topic"] else []
    lines.append("")
    pa = r["policy_archiving"]
    lines.append(f"POLICY ARCHIVING (atoms archived by memoryPolicy rules at creation): "
                 f"{pa['events']} events")
    lines += _table(["rule", "events"], pa["by_rule"].items()) if pa["by_rule"] else []
    lines.append("")
    pol = r["policy"]
    inf = pol["in_force"]
    lines.append("POLICY in force at the end of the period: " + (
        f"{inf['event_id']} set {inf['set_at']} by {inf['signer_name'] or inf['signer']}"
        if inf else "none"))
    lines.append("  audit flags: " + ", ".join(f"{k}={str(v).lower()}"
                                              for k, v in pol["audit_flags"].items())
                 + f" ({pol['audit_flags_source']})")
    lines.append(f"  changes in the period: {len(pol['changes'])}")
    lines += _table(["event", "set at", "signer"],
                    [(c["event_id"], c["set_at"], c["signer_name"] or c["signer"])
                     for c in pol["changes"]]) if pol["changes"] else []
    k = r["key_roster"]
    lines.append(f"KEY ROSTER changes in the period: {k['changes']}")
    lines += _table(["at", "change", "key id", "name", "role"],
                    [(x["at"], x["change"], x["kid"], x["name"], x["role"])
                     for x in k["items"]]) if k["items"] else []
    return "\n".join(lines) + "\n"


# -- html
_COLORS = {"created": "#2b6cb0", "recalled": "#38a169", "rehearsed": "#9ae6b4",
           "lifecycle": "#a0aec0", "redacted": "#e53e3e", "governance": "#805ad5",
           "keys": "#d69e2e"}
_STATUS_COLORS = {"completed": "#38a169", "completed-late": "#dd6b20", "open": "#718096",
                  "overdue": "#e53e3e"}
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;
max-width:1100px;color:#1a202c;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #e2e8f0;padding-bottom:.3rem}
.muted{color:#4a5568;font-size:.9rem}
.tiles{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0}
.tile{border:1px solid #e2e8f0;border-radius:8px;padding:.6rem 1rem;min-width:8rem}
.tile .n{font-size:1.6rem;font-weight:600}.tile .l{font-size:.8rem;color:#4a5568}
.tile.bad{border-color:#e53e3e;background:#fff5f5}.tile.good{border-color:#38a169}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border-bottom:1px solid #edf2f7;padding:.25rem .6rem;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.finding{background:#fff5f5;border-left:4px solid #e53e3e;padding:.4rem .8rem;margin:.3rem 0}
.ok{color:#276749;font-weight:600}.fail{color:#c53030;font-weight:600}
code{font-size:.8rem}svg{max-width:100%;height:auto}
.scroll{overflow-x:auto;max-width:100%}
.legend span{display:inline-block;margin-right:1rem;font-size:.8rem}
.legend svg{margin-right:.3rem;vertical-align:middle}
"""


def _pointer(*parts: str | int) -> str:
    """RFC 6901 JSON pointer of a value in the JSON report."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)



def _counted(r: dict[str, Any], section: str, title: str, by: str, label: str) -> list[str]:
    """An HTML section of event counts, one table row per ``by`` key."""
    sec = r[section]
    out = [f"<h2>{html.escape(title)}</h2><p>"
           f"{_n(sec['events'], section, 'events', tag='span')} events.</p>"]
    if sec[by]:
        out.append(f"<table><tr><th>{label}</th><th>events</th></tr>" + "".join(
            f"<tr>{_t(t)}{_n(n, section, by, t)}</tr>" for t, n in sec[by].items())
            + "</table>")
    return out

def _n(value: Any, *path: str | int, tag: str = "td") -> str:
    """A number shown on the page, tied to its place in the JSON report."""
    text = "-" if value is None else str(value)
    cls = ' class="n"' if tag == "td" else ""
    return f'<{tag}{cls} data-json-pointer="{html.escape(_pointer(*path))}">' \
           f"{html.escape(text)}</{tag}>"


def _t(value: Any) -> str:
    return f"<td>{html.escape('-' if value is None else str(value))}</td>"


def _tile(label: str, value: Any, *path: str | int, state: str = "") -> str:
    return (f'<div class="tile {state}"><div class="n">{_n(value, *path, tag="span")}</div>'
            f'<div class="l">{html.escape(label)}</div></div>')


def _buckets(per_day: dict[str, dict[str, int]], start: str | None, end: str,
             end_inclusive: bool) -> tuple[str, list[tuple[str, dict[str, int]]]]:
    """Chart buckets (first day, counts) covering the period: days, or weeks (over 92 days)
    or months (over two years), so a long period still gives a readable chart."""
    if not per_day:
        return "day", []
    first = date.fromisoformat(start[:10] if start is not None else min(per_day))
    last_t = _time(end)
    if not end_inclusive and last_t.time() == datetime.min.time():
        last_t -= timedelta(days=1)
    last = max(last_t.date(), date.fromisoformat(max(per_day)))
    span = (last - first).days + 1
    unit = "day" if span <= 92 else "week" if span <= 730 else "month"

    def key(d: date) -> date:
        if unit == "week":
            return d - timedelta(days=d.weekday())
        return d.replace(day=1) if unit == "month" else d

    def step(d: date) -> date:
        if unit == "month":
            return d.replace(year=d.year + 1, month=1) if d.month == 12 else \
                d.replace(month=d.month + 1)
        return d + timedelta(days=7 if unit == "week" else 1)

    out: dict[date, dict[str, int]] = {}
    d = key(first)
    while d <= last:
        out[d] = {c: 0 for c in CATEGORIES}
        d = step(d)
    for day, counts in per_day.items():
        bucket = out.setdefault(key(date.fromisoformat(day)), {c: 0 for c in CATEGORIES})
        for c in CATEGORIES:
            bucket[c] += counts.get(c, 0)
    return unit, [(k.isoformat(), v) for k, v in sorted(out.items())]


def _nice_max(value: int) -> int:
    if value <= 5:
        return max(value, 1)
    magnitude: int = 10 ** (len(str(value)) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return value


def _activity_svg(r: dict[str, Any]) -> str:
    p = r["period"]
    unit, buckets = _buckets(r["activity"]["per_day"], p["from"], p["to"], p["to_inclusive"])
    if not buckets:
        return '<p class="muted">No reported events in the period.</p>'
    width, height, left, bottom, top = 1000, 300, 50, 40, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = _nice_max(max(sum(b[1].values()) for b in buckets))
    bar = plot_w / len(buckets)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="Reported events per {unit}, stacked by category" '
             f'data-chart="activity" data-unit="{unit}">']
    tick = _nice_max(-(-peak // 5))
    for v in range(0, peak + 1, tick):
        y = top + plot_h - plot_h * v / peak
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#edf2f7"/><text x="{left - 6}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="#4a5568">{v}</text>')
    label_every = max(1, len(buckets) // 12)
    for i, (label, counts) in enumerate(buckets):
        x = left + i * bar
        y = top + plot_h
        total = sum(counts.values())
        parts.append(f'<g data-bucket="{label}" data-total="{total}">')
        for c in CATEGORIES:
            n = counts[c]
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            parts.append(f'<rect x="{x + bar * 0.1:.2f}" y="{y:.2f}" width="{bar * 0.8:.2f}" '
                         f'height="{h:.2f}" fill="{_COLORS[c]}" data-category="{c}" '
                         f'data-count="{n}"><title>{label} {c}: {n}</title></rect>')
        parts.append("</g>")
        if i % label_every == 0:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 16}" '
                         f'font-size="11" text-anchor="middle" fill="#4a5568">'
                         f'{label[5:] if unit != "month" else label[:7]}</text>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="11" fill="#4a5568">'
                 f'per {unit} (UTC); {r["activity"]["reported"]} reported events</text></svg>')
    legend = "".join(f"<span>{_swatch(_COLORS[c])}{c}</span>" for c in CATEGORIES)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _swatch(color: str) -> str:
    """A legend's colour square: SVG with a fill attribute (no style attribute, which a
    strict Content-Security-Policy refuses)."""
    return (f'<svg class="swatch" width="12" height="12" viewBox="0 0 12 12" '
            f'aria-hidden="true"><rect width="12" height="12" fill="{color}"/></svg>')


def _turnaround_svg(r: dict[str, Any]) -> str:
    items = r["erasure_requests"]["items"]
    if not items:
        return '<p class="muted">No erasure requests in the period.</p>'
    row_h, left, width, top = 28, 300, 1000, 20
    height = top + row_h * len(items) + 40
    values = [x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"]
              for x in items] + [x["deadline_hours"] or 0 for x in items]
    peak = max(max(values), 1.0) * 1.1
    scale = (width - left - 20) / peak
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="Erasure turnaround against the completion deadline" '
             f'data-chart="turnaround">']
    for i, x in enumerate(items):
        y = top + i * row_h
        taken = x["hours_taken"] if x["hours_taken"] is not None else x["hours_open"]
        color = _STATUS_COLORS.get(x["status"], "#718096")
        parts.append(f'<g data-request="{html.escape(x["request_id"])}" '
                     f'data-status="{x["status"]}">')
        parts.append(f'<text x="{left - 8}" y="{y + 17}" font-size="11" text-anchor="end" '
                     f'fill="#1a202c">{html.escape(x["request_id"][:8])}… {x["status"]}</text>')
        dash = ' stroke="#1a202c" stroke-dasharray="4 2"' if x["hours_taken"] is None else ""
        parts.append(f'<rect x="{left}" y="{y + 5}" width="{max(taken * scale, 1):.2f}" '
                     f'height="16" fill="{color}"{dash} data-hours="{taken}">'
                     f'<title>{"taken" if x["hours_taken"] is not None else "open for"} '
                     f'{taken} h</title></rect>')
        if x["deadline_hours"] is not None:
            dx = left + x["deadline_hours"] * scale
            parts.append(f'<line x1="{dx:.2f}" x2="{dx:.2f}" y1="{y + 1}" y2="{y + 25}" '
                         f'stroke="#1a202c" stroke-width="2" '
                         f'data-deadline-hours="{x["deadline_hours"]}">'
                         f'<title>deadline {x["deadline_hours"]} h</title></line>')
        parts.append("</g>")
    axis_y = top + row_h * len(items) + 14
    for i in range(5):
        hours = peak * i / 4
        ax = left + hours * scale
        parts.append(f'<text x="{ax:.1f}" y="{axis_y}" font-size="11" text-anchor="middle" '
                     f'fill="#4a5568">{hours / 24:.1f} d</text>')
    parts.append(f'<text x="{left}" y="{height - 4}" font-size="11" fill="#4a5568">bar: time '
                 "from receipt to completion (dashed: still open, up to now); black line: "
                 "completion deadline</text></svg>")
    legend = "".join(f"<span>{_swatch(c)}{s}</span>" for s, c in _STATUS_COLORS.items())
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def render_html(r: dict[str, Any]) -> str:
    """One self-contained page: inline CSS and SVG, no script, nothing fetched."""
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Memory audit report {html.escape(_period_label(r))}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>Memory audit report</h1>", render_html_body(r), "</body></html>"]) + "\n"


_LABELLED = re.compile(r"(<h[234]>.*?</h[234]>|<summary>.*?</summary>|<table>)")


def _scrollable(body: str) -> str:
    """Each table in a focusable region that scrolls sideways on a narrow screen, named
    after the heading (or summary) above it."""
    out, label = [], "table"
    for piece in _LABELLED.split(body):
        if piece == "<table>":
            piece = (f'<div class="scroll" role="region" tabindex="0" '
                     f'aria-label="{html.escape(label)}"><table>')
        elif piece.startswith(("<h", "<summary>")):
            label = re.sub(r"<[^>]+>", "", piece)
        out.append(piece)
    return "".join(out).replace("</table>", "</table></div>")


def render_html_body(r: dict[str, Any], level: int = 2) -> str:
    """The report's body without its page or title: what :func:`render_html` wraps, and
    what the console shows inside its own page. Styled by class names only (no style
    attribute), so it renders under a strict Content-Security-Policy. ``level``: the
    heading level of its sections (3 to nest them under a page's own h2)."""
    a, v, e = r["activity"], r["verification"], r["erasure_requests"]
    out: list[str] = [
        f'<p class="muted">Ledger <code>{html.escape(r["ledger_id"])}</code> · period '
        f"{html.escape(_period_label(r))} · generated {html.escape(r['generated_at'])}<br>"
        f"{html.escape(r['scope_note'])}"
        + (f" · subject <code>{html.escape(r['subject']['subject_id'])}</code>"
           if r["subject"] else "") + "</p>",
    ]
    for f in r["findings"]:
        out.append(f'<div class="finding">{html.escape(f)}</div>')
    vstate = "" if v["ok"] is None else ("good" if v["ok"] else "bad")
    out.append('<div class="tiles">')
    out.append(_tile("events in the period", a["events"], "activity", "events"))
    out.append(_tile("reported events", a["reported"], "activity", "reported"))
    for key, label in (("creations", "creations"), ("retrievals", "retrievals"),
                       ("rehearsals", "other rehearsals")):
        s = r[key]
        if s["reported"]:
            out.append(_tile(label, s["total"] if key == "creations" else s["events"],
                             key, "total" if key == "creations" else "events"))
    if r["redactions"]["reported"]:
        out.append(_tile("redaction events", r["redactions"]["events"], "redactions",
                         "events"))
    out.append(_tile("erasure requests", e["count"], "erasure_requests", "count"))
    out.append(_tile("overdue requests", e["overdue"], "erasure_requests", "overdue",
                     state="bad" if e["overdue"] else "good"))
    if v["scope"] != "none":
        out.append(_tile("events verified", v["events_verified"], "verification",
                         "events_verified", state=vstate))
    out.append("</div>")

    # verification
    out.append("<h2>Verification</h2>")
    if v["scope"] == "none":
        out.append(f"<p>{html.escape(v['note'])}</p>")
    else:
        cls = "ok" if v["ok"] else "fail"
        out.append(f'<p>Status: <span class="{cls}" data-json-pointer="/verification/status">'
                   f"{html.escape(v['status'])}</span> (scope {html.escape(v['scope'])}); head "
                   f"seq {_n(v['head_seq'], 'verification', 'head_seq', tag='span')} at "
                   f"{html.escape(str(v['head_time']))}.</p>")
        if v.get("note"):
            out.append(f'<p class="muted">{html.escape(v["note"])}</p>')
        if v["failure"]:
            fl = v["failure"]
            out.append(f'<p class="fail">FAIL at position {fl["position"]} (seq {fl["seq"]}): '
                       f"step {html.escape(str(fl['step']))}: {html.escape(fl['reason'])}</p>")
        c = v["checkpoints"]
        out.append("<table><tr><th>checkpoints recorded</th><th>checked (signature and "
                   "consistency)</th><th>signed in the period</th></tr><tr>"
                   + _n(c["recorded"], "verification", "checkpoints", "recorded")
                   + _n(c["checked"], "verification", "checkpoints", "checked")
                   + _n(c["in_period"], "verification", "checkpoints", "in_period")
                   + "</tr></table>")

    # activity
    out.append("<h2>Activity over time</h2>")
    out.append(_activity_svg(r))
    out.append("<h3>By category</h3><table><tr><th>category</th><th>events</th></tr>")
    for c, n in a["by_category"].items():
        out.append(f"<tr>{_t(c)}{_n(n, 'activity', 'by_category', c)}</tr>")
    out.append("</table>")
    out.append("<h3>By type (topic)</h3><table><tr><th>topic</th><th>events</th></tr>")
    for t, n in a["by_topic"].items():
        out.append(f"<tr>{_t(t)}{_n(n, 'activity', 'by_topic', t)}</tr>")
    out.append("</table>")
    out.append("<h3>By actor (signer)</h3><table><tr><th>key id</th><th>name</th><th>roles"
               "</th><th>events</th></tr>")
    for i, x in enumerate(a["by_actor"]):
        out.append(f"<tr>{_t(x['kid'])}{_t(x['name'])}{_t(', '.join(x['roles']))}"
                   f"{_n(x['events'], 'activity', 'by_actor', i, 'events')}</tr>")
    out.append("</table>")
    out.append("<details><summary>Events per day (UTC)</summary><table><tr><th>day</th>"
               + "".join(f"<th>{c}</th>" for c in CATEGORIES) + "</tr>")
    for d, counts in a["per_day"].items():
        out.append(f"<tr>{_t(d)}" + "".join(_n(counts[c], "activity", "per_day", d, c)
                                            for c in CATEGORIES) + "</tr>")
    out.append("</table></details>")

    # kinds
    out.append("<h2>Creations, retrievals, rehearsals, redactions</h2><table>"
               "<tr><th>kind</th><th>audit flag</th><th>figures</th></tr>")
    for key, fields in (("creations", ("atoms", "artifacts", "subjects", "total")),
                        ("retrievals", ("events", "atoms", "sessions")),
                        ("rehearsals", ("events", "atoms"))):
        s = r[key]
        figures = (" ".join(f"{f} {_n(s[f], key, f, tag='span')}" for f in fields)
                   if s["reported"] else html.escape(s["note"]))
        out.append(f"<tr>{_t(key)}{_t(s['audit_flag'])}<td>{figures}</td></tr>")
    s = r["redactions"]
    if s["reported"]:
        figures = " ".join(f"{m} {_n(n, 'redactions', 'by_mode', m, tag='span')}"
                           for m, n in s["by_mode"].items())
        figures += "; unredactions " + _n(s["unredactions"], "redactions", "unredactions",
                                          tag="span")
        figures += "; artifact deletions " + _n(s["artifact_deletions"], "redactions",
                                                "artifact_deletions", tag="span")
        figures += "; data keys destroyed " + " ".join(
            f"{k} {_n(n, 'redactions', 'data_keys_destroyed', k, tag='span')}"
            for k, n in s["data_keys_destroyed"].items())
    else:
        figures = html.escape(s["note"])
    out.append(f"<tr>{_t('redactions')}{_t(s['audit_flag'])}<td>{figures}</td></tr></table>")

    # erasure
    out.append("<h2>Erasure requests and turnaround</h2>")
    out.append(f"<p>Requests: {_n(e['count'], 'erasure_requests', 'count', tag='span')}; "
               f"{_n(e['completed'], 'erasure_requests', 'completed', tag='span')} completed, "
               f"{_n(e['completed_late'], 'erasure_requests', 'completed_late', tag='span')} "
               f"completed late, {_n(e['open'], 'erasure_requests', 'open', tag='span')} open, "
               f"{_n(e['overdue'], 'erasure_requests', 'overdue', tag='span')} overdue.</p>")
    out.append(_turnaround_svg(r))
    out.append("<table><tr><th>request</th><th>subject</th><th>received</th><th>ack due</th>"
               "<th>acknowledged</th><th>complete due</th><th>completed</th><th>hours taken"
               "</th><th>hours open</th><th>deadline (h)</th><th>status</th></tr>")
    for i, x in enumerate(e["items"]):
        out.append(
            f"<tr>{_t(x['request_id'])}{_t(x['subject_id'])}{_t(x['received_at'])}"
            f"{_t(x['ack_due'])}{_t(x['acknowledged_at'])}{_t(x['complete_due'])}"
            f"{_t(x['completed_at'])}"
            f"{_n(x['hours_taken'], 'erasure_requests', 'items', i, 'hours_taken')}"
            f"{_n(x['hours_open'], 'erasure_requests', 'items', i, 'hours_open')}"
            f"{_n(x['deadline_hours'], 'erasure_requests', 'items', i, 'deadline_hours')}"
            f'<td class="{"fail" if x["overdue"] else ""}" data-json-pointer="'
            f'{_pointer("erasure_requests", "items", i, "status")}">'
            f"{html.escape(x['status'])}</td></tr>")
    out.append("</table>")
    b = r["batches"]
    out.append(f"<h2>Redaction batches</h2><p>Batches: "
               f"{_n(b['count'], 'batches', 'count', tag='span')}; "
               f"{_n(b['closed'], 'batches', 'closed', tag='span')} closed.</p>")
    out.append("<table><tr><th>batch</th><th>mode</th><th>request</th><th>opened</th>"
               "<th>approved by</th><th>closed</th><th>atoms</th><th>artifacts</th>"
               "<th>subjects</th><th>events</th><th>status</th></tr>")
    for i, x in enumerate(b["items"]):
        out.append(
            f"<tr>{_t(x['batch_id'])}{_t(x['mode'])}{_t(x['request_id'])}{_t(x['opened_at'])}"
            f"{_t(x['approved_by_name'] or x['approved_by'])}{_t(x['closed_at'])}"
            + "".join(_n(x["targets"][k], "batches", "items", i, "targets", k)
                      for k in ("atoms", "artifacts", "subjects"))
            + f"{_n(x['event_ids'], 'batches', 'items', i, 'event_ids')}{_t(x['status'])}</tr>")
    out.append("</table>")
    ep = r["evidence_packs"]
    out.append("<h2>Evidence packs</h2>")
    out.append(f"<p>{_n(ep['events'], 'evidence_packs', 'events', tag='span')} recorded. "
               f"{html.escape(ep['note'])}</p>")
    out += _counted(r, "sweeps", "Sweeps (expiry, archive)", "by_topic", "topic")
    out += _counted(r, "policy_archiving", "Policy archiving (memoryPolicy rules at creation)",
                    "by_rule", "rule")

    # policy and keys
    pol = r["policy"]
    inf = pol["in_force"]
    out.append("<h2>Policy</h2>")
    out.append("<p>In force at the end of the period: " + (
        f"<code>{html.escape(inf['event_id'])}</code> set {html.escape(inf['set_at'])} by "
        f"{html.escape(str(inf['signer_name'] or inf['signer']))}" if inf else "none")
        + "</p>")
    out.append("<p>Audit flags: " + ", ".join(
        f"{html.escape(k)}=<span data-json-pointer=\"{_pointer('policy', 'audit_flags', k)}\">"
        f"{str(val).lower()}</span>" for k, val in pol["audit_flags"].items())
        + f' <span class="muted">({html.escape(pol["audit_flags_source"])})</span></p>')
    out.append(f"<p>Changes in the period: {len(pol['changes'])}</p>")
    if pol["changes"]:
        out.append("<table><tr><th>event</th><th>set at</th><th>signer</th></tr>" + "".join(
            f"<tr>{_t(c['event_id'])}{_t(c['set_at'])}{_t(c['signer_name'] or c['signer'])}"
            "</tr>" for c in pol["changes"]) + "</table>")
    k = r["key_roster"]
    out.append(f"<h2>Key roster</h2><p>"
               f"{_n(k['changes'], 'key_roster', 'changes', tag='span')} changes in the "
               f"period; {_n(k['keys'], 'key_roster', 'keys', tag='span')} keys in the "
               "roster.</p>")
    if k["items"]:
        out.append("<table><tr><th>at</th><th>change</th><th>key id</th><th>name</th>"
                   "<th>role</th></tr>" + "".join(
                       f"<tr>{_t(x['at'])}{_t(x['change'])}{_t(x['kid'])}{_t(x['name'])}"
                       f"{_t(x['role'])}</tr>" for x in k["items"]) + "</table>")
    out.append('<p class="muted">Ids and counts only: this report holds no memory content. '
               "Produced by <code>ledger audit</code>.</p>")
    body = _scrollable("\n".join(out))
    if level != 2:
        body = re.sub(r"<(/?)h([23])>", lambda m: f"<{m[1]}h{int(m[2]) + level - 2}>", body)
    return body
