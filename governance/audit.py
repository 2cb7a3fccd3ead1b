"""The memory audit report (Persona Schema §9 ``memory audit [--from DATE] [--to DATE]``).

:func:`build_report` reads the signed event log (never a read model, never a data key)
and returns a JSON-ready dict; ``governance/audit_render.py`` turns it into text, JSON
or a single self-contained HTML page with inline SVG charts.
docs/adr/0013-audit-report.md records what counts as what.

Where things are. The period and its positions in the log (binary search over event
time): ``governance/audit_period.py``. The checks of the verification section:
``ledger/verification.py`` (:func:`~ledger.verification.verify_for_audit`, the same
orchestration as ``ledger verify``). Here: what counts as what, the folds of the few
aggregates read outside the period (the key roster and the policy, by id; the erasure
requests and batches, selected by topic), :func:`build_report`.

No content. Personal fields are ciphertext in the stored envelopes and nothing here
decrypts them; of the plaintext payload fields only ids, times, deadlines, redaction
modes and policy settings reach the report. Free-text fields (reasons, legal basis,
subject refs, session ids, key revocation reasons) are never copied.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.audit_period import Period, bound, event_time, format_time, parse_period, rows
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
from ledger.errors import EnvironmentProblem, InputError
from ledger.progress import Steps, report
from ledger.transparency import b64
from ledger.verification import EVERY, verify_for_audit

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.verify import Failure

__all__ = ["REPORT_VERSION", "VERIFY_SCOPES", "Period", "build_report", "category",
           "evidence_note", "parse_period", "policy_history", "policy_rule"]

REPORT_VERSION = 1
READING = "Reading the period's events"
"""The first stage the report reports (``progress``); verification's follows."""
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


def evidence_note(closed: int, events: int) -> str:
    """Where the evidence of the report's erasures is, and how an Evidence Pack of it is
    built and checked (ADR 0048: building a pack appends nothing to the log)."""
    from ledger.text import plural

    if not closed:
        found = "No erasure was closed in this report, so there is no erasure evidence to pack."
    else:
        found = (f"The evidence of every closed erasure is in the signed log itself: "
                 f"{closed} closed redaction {'batch' if closed == 1 else 'batches'} in "
                 f"this report, with "
                 f"{plural(events, 'signed events')} (tombstones and key destructions).")
    return (f"{found} An Evidence Pack copies a batch's evidence, with its proofs, for "
            "someone outside to check offline. Building a pack appends nothing to the log "
            "(ADR 0048), so packs are not counted here; the ledger keeps no copy of them: a "
            "pack is wherever it was written (`ledger evidence-pack BATCH --out DIR`) or "
            "downloaded (the console's request page), and can be built again from the log at "
            "any time. Check a pack offline with `ledger verify-pack DIR --root-key "
            "root.pub`.")


# ----------------------------------------------------------------------------- reading
def _env(state: bytes) -> dict[str, Any]:
    return envelope.open_state(state).envelope


def _sealed_session(app: LedgerApp, env: dict[str, Any]) -> str | None:
    """The session id a rehearsal sealed under its atom's key (ADR 0004), counted, never
    copied; None once the atom's key is destroyed (the session went with the memory)."""
    import base64

    from keys import aead

    sealed = env["payload"].get("sealed")
    if not sealed:
        return None
    key = app.reader.data_key(str(sealed["key_id"]))
    if key is None:
        return None
    plain = aead.open_sealed(key, base64.b64decode(sealed["nonce"]),
                             base64.b64decode(sealed["ct"]),
                             app.reader.associated_data(env["originator_id"], env["version"],
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


def _aggregate_events(app: LedgerApp, aggregate_id: UUID) -> list[dict[str, Any]]:
    return [_env(r.state) for r in app.reader.stored_events(aggregate_id)]


def _hours(a: str, b: str | datetime) -> float:
    t0 = event_time(a)
    t1 = b if isinstance(b, datetime) else event_time(b)
    return round((t1 - t0).total_seconds() / 3600.0, 3)


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
            first = self.app.reader.stored_events(UUID(oid), lte=1)
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
    return [e for e in _aggregate_events(app, app.reader.policy_id())
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
    rows = app.reader.notifications(start=1, limit=10**12,
                             topics=[*REQUEST_TOPICS, *BATCH_TOPICS])
    for row in rows:
        env = _env(row.state)
        oid, ts, p, topic = env["originator_id"], env["timestamp"], env["payload"], env["topic"]
        if topic == ErasureRequest.Created.TOPIC:
            requests[oid] = {
                "request_id": oid, "subject_id": p.get("subject_id"),
                "subject_ref": p.get("subject_ref"), "received_at": ts,
                "received_by": env["kid"], "ack_due": format_time(p.get("ack_due")),
                "acknowledged_at": None, "complete_due": format_time(p.get("complete_due")),
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


# ----------------------------------------------------------------------------- verification
def _failure(f: Failure | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {"position": f.position, "seq": f.seq, "event_id": f.event_id, "step": f.step,
            "reason": f.reason}


def _verification(app: LedgerApp, scope: str, first_seq: int | None, last_position: int | None,
                  period: Period, progress: Steps | None = None) -> dict[str, Any]:
    """The report's verification section: the checks are ledger/verification.py's
    (:func:`ledger.verification.verify_for_audit`); this says what they found."""
    if scope == "none":
        return {"scope": "none", "status": "not-verified", "ok": None,
                "note": "verification was skipped (--verify none)"}
    root = app.root_public_key
    if root is None:
        raise EnvironmentProblem("no trusted root key: keys/root.pub is missing",
                                 hint="restore it, or run the report with --verify none")
    found = verify_for_audit(
        app.reader, root, scope,
        lambda: first_seq if first_seq is not None else app.reader.head()[0] + 1, progress)
    report = found.report
    checked = [{"size": cp.size, "root": b64(cp.root), "signed_at": format_time(created_at),
                "in_period": period.contains(format_time(created_at) or "")}
               for cp, created_at in found.signed]
    failure = report.failure or found.failure
    ok = failure is None
    if ok:
        status = "verified"
    elif (report.failure is not None and last_position is not None
          and report.failure.position > last_position):
        status = "verified-with-later-failure"
    else:
        status = "failed"
    out: dict[str, Any] = {
        "scope": found.scope, "status": status, "ok": ok,
        "events_verified": report.events, "head_seq": report.head_seq,
        "head_time": report.head_time, "failure": _failure(failure),
        "checkpoints": {"recorded": found.recorded, "checked": len(checked),
                        "in_period": sum(1 for c in checked if c["in_period"]),
                        "latest_size": checked[-1]["size"] if checked else None,
                        "items": checked},
    }
    if found.scope == "since" and found.base_size is not None:
        out["since_checkpoint_size"] = found.base_size
        out["note"] = (f"events after the signed checkpoint of size {found.base_size} were "
                       "verified; the events it covers are bound by its signature and tree "
                       "root")
    elif scope == "since":
        out["note"] = "no checkpoint before the period: the whole log was verified"
    if found.tree_size is not None:
        out["tree_size"] = found.tree_size
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


def _request_rows(requests: dict[str, dict[str, Any]], period: Period, sid: str | None,
                  at: datetime) -> list[dict[str, Any]]:
    """Erasure requests received by the end, not completed before the start; with their
    status (completed, completed-late, overdue, open) and turnaround in hours."""
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
        elif due is not None and event_time(due) <= at:  # at due: overdue
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
    return req_rows


def _batch_rows(batches: dict[str, dict[str, Any]], period: Period, batch_in_period: set[str],
                names: dict[str, str],
                of_subject: Callable[[dict[str, Any]], bool] | None) -> list[dict[str, Any]]:
    """Redaction batches with an event in the period, or open during it."""
    batch_rows = []
    for b in batches.values():
        if period.after_end(b["opened_at"]):
            continue
        closed = b["closed_at"]
        open_during = closed is None or period.start_text is None or \
            closed >= period.start_text
        if b["batch_id"] not in batch_in_period and not open_during:
            continue
        if of_subject is not None and not of_subject(b):
            continue
        batch_rows.append({k: v for k, v in b.items() if not k.startswith("_")} | {
            "status": "closed" if closed else "executed" if b["executed_at"] else
            "approved" if b["approved_at"] else "opened",
            "approved_by_name": names.get(str(b["approved_by"])) if b["approved_by"] else None})
    batch_rows.sort(key=lambda b: (b["opened_at"], b["batch_id"]))
    return batch_rows


def _roster_changes(roster_events: list[dict[str, Any]], period: Period,
                    names: dict[str, str]) -> list[dict[str, Any]]:
    """Key roster changes in the period."""
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
            "valid_from": format_time(p.get("valid_from")),
            "revoked_from": format_time(p.get("revoked_from"))})
    return roster_changes


@dataclass
class _Tally:
    """What one pass over the period's events counts (:func:`_tally`)."""

    by_topic: Counter[str] = field(default_factory=Counter)
    by_actor: Counter[str] = field(default_factory=Counter)
    by_category: Counter[str] = field(default_factory=Counter)
    per_day: dict[str, Counter[str]] = field(default_factory=dict)
    events: int = 0
    not_reported: int = 0
    creations: Counter[str] = field(default_factory=Counter)
    recalled_atoms: set[str] = field(default_factory=set)
    recall_sessions: set[str] = field(default_factory=set)
    rehearsed_atoms: set[str] = field(default_factory=set)
    modes: Counter[str] = field(default_factory=Counter)
    keys_destroyed: Counter[str] = field(default_factory=Counter)
    unredactions: int = 0
    artifact_deletions: int = 0
    sweeps: Counter[str] = field(default_factory=Counter)
    policy_archived: Counter[str] = field(default_factory=Counter)
    packs: Counter[str] = field(default_factory=Counter)
    first_seq: int | None = None
    last_seq: int | None = None
    first_position: int | None = None
    last_position: int | None = None
    batch_in_period: set[str] = field(default_factory=set)

    def place(self, env: dict[str, Any], position: int) -> None:
        """Note the event's place in the log (the period's first and last)."""
        if self.first_seq is None:
            self.first_seq, self.first_position = int(env["seq"]), position
        self.last_seq, self.last_position = int(env["seq"]), position

    def count(self, app: LedgerApp, env: dict[str, Any], flags: dict[str, bool]) -> None:
        """Count one event of the period (of the subject, with ``--subject``)."""
        topic, oid, payload = env["topic"], env["originator_id"], env["payload"]
        self.events += 1
        if topic in BATCH_TOPICS:
            self.batch_in_period.add(oid)
        cat = category(topic, payload)
        flag = FLAG_OF_CATEGORY.get(cat)
        if flag is not None and not flags[flag]:
            self.not_reported += 1
            return
        self.by_topic[topic] += 1
        self.by_actor[env["kid"]] += 1
        self.by_category[cat] += 1
        self.per_day.setdefault(env["timestamp"][:10], Counter())[cat] += 1
        self._count_kind(app, env, cat)
        if topic != Atom.Redacted.TOPIC and _SWEEP.search(_short(topic)):
            self.sweeps[topic] += 1
        if _PACK.search(_short(topic)):
            self.packs[topic] += 1

    def _count_kind(self, app: LedgerApp, env: dict[str, Any], cat: str) -> None:
        """The count of its kind a reported event adds to (creations, retrievals, ...)."""
        topic, oid, payload = env["topic"], env["originator_id"], env["payload"]
        if topic in CREATION_TOPICS:
            self.creations[CREATION_TOPICS[topic]] += 1
        elif cat == "recalled":
            self.recalled_atoms.add(oid)
            session = payload.get("session_id") or _sealed_session(app, env)
            if session:
                self.recall_sessions.add(str(session))
        elif cat == "rehearsed":
            self.rehearsed_atoms.add(oid)
        elif topic == Atom.Redacted.TOPIC and policy_rule(payload) is not None:
            self.policy_archived[str(policy_rule(payload))] += 1  # a policy effect, not a redaction
        elif topic == Atom.Redacted.TOPIC:
            mode = str(payload.get("mode"))
            self.modes[mode if mode in REDACTION_MODES else "other"] += 1
            if mode == "archive":
                self.sweeps[f"{topic} (mode archive)"] += 1
        elif topic == Atom.Unredacted.TOPIC:
            self.unredactions += 1
        elif topic == Artifact.Deleted.TOPIC:
            self.artifact_deletions += 1
        elif topic in KEY_DESTROYED:
            self.keys_destroyed[KEY_DESTROYED[topic]] += 1


@dataclass
class _SubjectScope:
    """With ``--subject``: which events and batches are on the subject's items."""

    sid: str
    requests: dict[str, dict[str, Any]]
    batches: dict[str, dict[str, Any]]
    owners: _Owners

    def batch_matches(self, b: dict[str, Any]) -> bool:
        req = self.requests.get(str(b.get("request_id")))
        if req is not None and req["subject_id"] == self.sid:
            return True
        t = b["_targets"]
        if self.sid in (t.get("subjects") or []):
            return True
        return any(self.owners.of(Atom.Created.TOPIC, a) == self.sid
                   for a in t.get("atoms") or []) or \
            any(self.owners.of(Artifact.Created.TOPIC, a) == self.sid
                for a in t.get("artifacts") or [])

    def includes(self, env: dict[str, Any]) -> bool:
        """Whether the event is on the subject (noting the owners its creation names)."""
        topic, oid = env["topic"], env["originator_id"]
        self.owners.note(topic, oid, env["payload"])
        prefix = _short(topic).split(".", 1)[0]
        if prefix == "request":
            return self.requests.get(oid, {}).get("subject_id") == self.sid
        if prefix == "batch":
            return oid in self.batches and self.batch_matches(self.batches[oid])
        return self.owners.of(topic, oid) == self.sid


def _tally(app: LedgerApp, positions: tuple[int, int], in_period: int,
           scope: _SubjectScope | None, flags: dict[str, bool],
           progress: Steps | None) -> _Tally:
    """One pass over the period's events (``positions``, first and last)."""
    tally = _Tally()
    done = 0
    report(progress, READING, 0, in_period)
    for done, row in enumerate(rows(app, *positions), 1):
        if progress is not None and done % EVERY == 0:
            progress(READING, done, in_period)
        env = _env(row.state)
        tally.place(env, int(row.id))
        if scope is not None and not scope.includes(env):
            continue
        tally.count(app, env, flags)
    report(progress, READING, done, in_period)
    return tally


def _policy_in_period(app: LedgerApp, period: Period, names: dict[str, str]
                      ) -> dict[str, Any]:
    """The policy section: in force at the end of the period, and changes within it."""
    pol_events = _policy_events(app)
    in_force = None
    for env in pol_events:
        if not period.after_end(env["timestamp"]):
            in_force = _policy_summary(env, names)
    flags, flags_note = _flags(in_force)
    policy_changes = [_policy_summary(e, names) for e in pol_events
                      if period.contains(e["timestamp"])]
    return {"in_force": in_force, "audit_flags": flags, "audit_flags_source": flags_note,
            "changes": policy_changes}


def _findings(req_rows: list[dict[str, Any]], verification: dict[str, Any],
              events: int) -> list[str]:
    """What an auditor should look at: late or overdue requests, a failed verification,
    an empty period."""
    findings = []
    for r in req_rows:
        if r["overdue"]:
            findings.append(f"erasure request {r['request_id']} is overdue: completion was due "
                            f"{clock.for_people(r['complete_due'])} and it is not completed")
        elif r["status"] == "completed-late":
            findings.append(f"erasure request {r['request_id']} was completed late "
                            f"({clock.for_people(r['completed_at'])}, due "
                            f"{clock.for_people(r['complete_due'])})")
    if verification["ok"] is False:
        findings.append(f"verification failed: {verification['failure']['reason']}")
    if events == 0:
        findings.append("no events in the period")
    return findings


def _activity(t: _Tally, roster: RosterState, names: dict[str, str]) -> dict[str, Any]:
    """The activity section: events by topic, category, actor and day."""
    actors = [{"kid": kid, "name": names.get(kid),
               "roles": sorted({g.role for g in roster.entries[kid].grants})
               if kid in roster.entries else (["root"] if kid == roster.root_kid else []),
               "events": n}
              for kid, n in sorted(t.by_actor.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {
        "events": t.events, "reported": t.events - t.not_reported,
        "not_reported": t.not_reported,
        "by_topic": dict(sorted(t.by_topic.items())),
        "by_category": {c: t.by_category.get(c, 0) for c in CATEGORIES},
        "by_actor": actors,
        "per_day": {d: {c: t.per_day[d].get(c, 0) for c in CATEGORIES}
                    for d in sorted(t.per_day)},
    }


def _counted_sections(t: _Tally, flags: dict[str, bool]) -> dict[str, Any]:
    """Creations, retrievals, rehearsals and redactions, each as its audit flag allows."""
    return {
        "creations": _section(flags, "logCreation", {
            "atoms": t.creations["atoms"], "artifacts": t.creations["artifacts"],
            "subjects": t.creations["subjects"], "total": sum(t.creations.values())}),
        "retrievals": _section(flags, "logRetrieval", {
            "events": t.by_category["recalled"], "atoms": len(t.recalled_atoms),
            "sessions": len(t.recall_sessions)}),
        "rehearsals": _section(flags, "logRehearsal", {
            "events": t.by_category["rehearsed"], "atoms": len(t.rehearsed_atoms)}),
        "redactions": _section(flags, "logRedaction", {
            "by_mode": {m: t.modes.get(m, 0) for m in (*REDACTION_MODES, "other") if
                        m != "other" or t.modes.get(m)},
            "unredactions": t.unredactions, "artifact_deletions": t.artifact_deletions,
            "data_keys_destroyed": {k: t.keys_destroyed.get(k, 0)
                                    for k in ("atom", "artifact", "subject", "request")},
            "events": t.by_category["redacted"]}),
    }


def _erasure_sections(batch_rows: list[dict[str, Any]], req_rows: list[dict[str, Any]],
                      packs: Counter[str]) -> dict[str, Any]:
    """Batches, erasure requests and where their evidence is."""
    statuses = Counter(r["status"] for r in req_rows)
    closed_batches = sum(1 for b in batch_rows if b["status"] == "closed")
    overdue_ids = [r["request_id"] for r in req_rows if r["overdue"]]
    return {
        "batches": {"count": len(batch_rows), "closed": closed_batches, "items": batch_rows},
        "erasure_requests": {
            "count": len(req_rows), "overdue": statuses["overdue"], "open": statuses["open"],
            "completed": statuses["completed"], "completed_late": statuses["completed-late"],
            "overdue_ids": overdue_ids, "items": req_rows},
        "evidence_packs": {
            "recorded": bool(packs), "events": sum(packs.values()),
            "by_topic": dict(sorted(packs.items())),
            "closed_batches": closed_batches,
            "evidence_events": sum(b["event_ids"] for b in batch_rows
                                   if b["status"] == "closed"),
            "note": evidence_note(closed_batches, sum(b["event_ids"] for b in batch_rows
                                                      if b["status"] == "closed"))},
    }


def build_report(app: LedgerApp, period: Period, subject: str | None = None,
                 verify: str = "full", now: datetime | None = None,
                 progress: Steps | None = None) -> dict[str, Any]:
    """The audit report of ``period`` as a JSON-ready dict (see module docstring).

    ``progress(stage, done, total)`` (ADR 0036) counts the period's events read, then the
    events verified."""
    if verify not in VERIFY_SCOPES:
        raise InputError(f"unknown verification scope {verify!r}",
                         hint=f"use one of: {', '.join(VERIFY_SCOPES)}")
    at = now or clock.now()
    sid = str(app.reader.resolve_subject(subject)) if subject is not None else None
    roster, roster_events = _roster(app)
    names = _names(roster)

    # -- the period's positions, by binary search over event time
    max_id = app.reader.head_position()
    start_pos = 1 if period.start is None else bound(
        app, max_id, lambda ts: ts >= (period.start_text or ""))
    stop_pos = bound(app, max_id, period.after_end) - 1
    in_period = max(stop_pos - start_pos + 1, 0)

    policy = _policy_in_period(app, period, names)
    flags = policy["audit_flags"]
    requests, batches = _governance(app)
    scope = None if sid is None else _SubjectScope(sid, requests, batches, _Owners(app))
    t = _tally(app, (start_pos, stop_pos), in_period, scope, flags, progress)

    req_rows = _request_rows(requests, period, sid, at)
    batch_rows = _batch_rows(batches, period, t.batch_in_period, names,
                             None if scope is None else scope.batch_matches)
    roster_changes = _roster_changes(roster_events, period, names)
    verification = _verification(app, verify, t.first_seq, t.last_position, period, progress)

    return {
        "report": "memory-ledger audit", "version": REPORT_VERSION,
        "ledger_id": app.ledger_id, "generated_at": clock.format_instant(at),
        "period": {"from": period.start_text, "to": period.end_text,
                   "to_inclusive": period.end_inclusive,
                   "first_position": t.first_position, "last_position": t.last_position,
                   "first_seq": t.first_seq, "last_seq": t.last_seq},
        "subject": None if sid is None else {"subject_id": sid},
        "scope_note": ("events on this subject's items only; policy, key roster and "
                       "verification are ledger-wide") if sid else "every event of the ledger",
        "policy": policy,
        "activity": _activity(t, roster, names),
        **_counted_sections(t, flags),
        **_erasure_sections(batch_rows, req_rows, t.packs),
        "sweeps": {"events": sum(t.sweeps.values()), "by_topic": dict(sorted(t.sweeps.items()))},
        "policy_archiving": {"events": sum(t.policy_archived.values()),
                             "by_rule": dict(sorted(t.policy_archived.items()))},
        "key_roster": {"changes": len(roster_changes), "items": roster_changes,
                       "keys": len(roster.entries) + (1 if roster.root_kid else 0)},
        "verification": verification,
        "findings": _findings(req_rows, verification, t.events),
    }
