"""Verifying an Evidence Pack offline, with public keys only (docs/spec/evidence-pack.md,
steps 1-8): :func:`read_pack` is the I/O, :func:`verify_pack_bytes` the pure checks, which
raise :class:`~governance.pack_layout.PackInvalid` at the first failing step."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from governance.copies import CopiesInvalid, check_statement, fact_of, summary
from governance.dsse import PREDICATE_TYPE, STATEMENT_TYPE, read_statement, verify_envelope
from governance.pack_layout import (
    AFTER,
    BATCH_PARTIAL,
    BEFORE,
    CHECKING,
    CONSISTENCY,
    EVENTS,
    PARTIAL,
    PREDICATE_SCHEMA,
    ROOT_PUB,
    SIGNER_ROLES,
    STATEMENT,
    PackInvalid,
    partial_outcomes,
    predicate_problems,
    sha256_hex,
)
from governance.partial import LEGAL_HOLD, STORE_UNREACHABLE
from governance.witnessed import verify_witnessing
from keys.errors import KeyError_, KeyNotAuthorized, PublicKeyFileError
from keys.keyring import parse_public_key_document
from keys.roster import RosterState, parse_time
from ledger import clock, envelope
from ledger.checkpoint import parse_body, parse_note
from ledger.errors import InputError, VerificationFailed
from ledger.merkle import verify_consistency, verify_inclusion
from ledger.progress import Steps, report
from ledger.transparency import SignedCheckpoint, unb64, verify_with_roster
from ledger.verification import EVERY, VERIFYING
from ledger.verify import LogVerifier


@dataclass
class PackReport:
    ok: bool = True
    step: str | None = None
    reason: str | None = None
    signers: list[str] = field(default_factory=list)
    events: int = 0
    targets: dict[str, int] = field(default_factory=dict)
    witnesses: dict[str, Any] = field(default_factory=dict)
    flagged_for_review: int = 0  # memories of others flagged refers-to-erased
    artifacts_for_review: int = 0
    copies: dict[str, Any] | None = None  # copies.summary of the statement (step 8)
    outcome: str = "completed"  # or partial (ADR 0047): what the verified pack proves
    partial_reasons: list[dict[str, Any]] = field(default_factory=list)
    earlier_partials: int = 0  # runs of a completed batch that had ended partial

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "step": self.step, "reason": self.reason,
                               "signers": self.signers, "events": self.events,
                               "targets": self.targets, "witnesses": self.witnesses,
                               "flagged_for_review": self.flagged_for_review,
                               "artifacts_for_review": self.artifacts_for_review,
                               "copies": self.copies}
        if self.outcome != "completed" or self.earlier_partials:
            out.update(outcome=self.outcome, partial_reasons=self.partial_reasons,
                       earlier_partials=self.earlier_partials)
        return out


def verify_pack(folder: Path, root_public_key: bytes | None = None,
                policy: Any = None, progress: Steps | None = None) -> PackReport:
    """Verify a pack folder (or .zip); raise :class:`PackInvalid` at the first failing step.

    The I/O (:func:`read_pack`) then the pure checks (:func:`verify_pack_bytes`)."""
    return verify_pack_bytes(read_pack(folder), root_public_key, policy, progress)


def verify_pack_bytes(pack: Mapping[str, bytes], root_public_key: bytes | None = None,
                      policy: Any = None, progress: Steps | None = None) -> PackReport:
    """Verify a pack given as its files' bytes (name -> bytes, as :func:`read_pack` reads
    them): docs/spec/evidence-pack.md, steps 1-8. Pure: no file, no network, no clock.
    Raise :class:`PackInvalid` at the first failing step. ``progress(stage, done, total)``
    counts the events through steps 3 and 5 (ADR 0036)."""
    files = dict(pack)
    dsse, statement = _read_statement(files)
    predicate = _check_predicate_schema(statement)
    _check_subjects(statement, files)
    v, events = _verify_events(files, predicate, root_public_key, progress)
    roster = v.report.roster
    at = pack_time(predicate, [rec for _doc, rec in events])
    signers = _verify_statement_signatures(dsse, statement, roster, at)
    before, after = _verify_checkpoints(files, predicate["ledger"]["origin"], roster, events, at)
    _check_inclusions(events, v.leaves or [], after, progress)
    _check_consistency(files[CONSISTENCY], before, after)
    _check_predicate(predicate, events)
    # Steps 7.1-7.3: proof files, cosignatures, the witness policy (governance/witnessed.py).
    witnessing = verify_witnessing(files, predicate, events, v.leaves or [], before, after,
                                   policy)
    _check_copies(predicate, events)
    return _report(predicate, signers, len(events), witnessing)


_Events = list[tuple[dict[str, Any], "_Rec"]]


def _read_statement(files: dict[str, bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Step 1: the statement is a DSSE envelope of an in-toto Statement v1 of our type.
    Takes the statement out of ``files`` (it is the one file no subject covers)."""
    try:
        dsse, _payload, statement = read_statement(files.pop(STATEMENT))
    except (KeyError, ValueError, TypeError) as e:
        raise PackInvalid("1", f"{STATEMENT} is missing or not a DSSE envelope") from e
    if not isinstance(statement, dict):
        raise PackInvalid("1", "the DSSE payload is not a JSON object (an in-toto Statement)")
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != \
            PREDICATE_TYPE:
        raise PackInvalid("1", "the statement is not an evidence-pack in-toto Statement v1")
    return dsse, statement


def _check_predicate_schema(statement: dict[str, Any]) -> dict[str, Any]:
    """Step 1.1: the predicate matches its JSON Schema (no field the format does not have)."""
    problems = predicate_problems(statement.get("predicate"))
    if problems:
        raise PackInvalid("1.1", f"the predicate does not match schemas/{PREDICATE_SCHEMA}: "
                                 f"{'; '.join(problems[:3])}")
    predicate: dict[str, Any] = statement["predicate"]
    return predicate


def _check_subjects(statement: dict[str, Any], files: dict[str, bytes]) -> None:
    """Step 2: every file is a subject with the right digest; no file missing or extra."""
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    if set(subjects) != set(files):
        missing = sorted(set(subjects) - set(files))
        extra = sorted(set(files) - set(subjects))
        raise PackInvalid("2", f"files missing {missing} or not covered {extra}")
    for name, digest in subjects.items():
        if sha256_hex(files[name]) != digest:
            raise PackInvalid("2", f"{name}: SHA-256 does not match the signed statement")


def _verify_events(files: dict[str, bytes], predicate: dict[str, Any],
                   root_public_key: bytes | None, progress: Steps | None
                   ) -> tuple[LogVerifier, _Events]:
    """Step 3: every event verifies against the roster folded from the pack's roster
    events; returns the verifier (its roster and leaves) and the events read."""
    if root_public_key is None:
        try:
            root_public_key = parse_public_key_document(files[ROOT_PUB], ROOT_PUB)
        except PublicKeyFileError as e:
            raise PackInvalid("3", str(e)) from None
    v = LogVerifier(ledger_id=predicate["ledger"]["id"], root_public_key=root_public_key,
                    collect_leaves=True)
    v.sparse = True
    events: _Events = []
    lines = files[EVENTS].decode().splitlines()
    report(progress, VERIFYING, 0, len(lines))
    for done, line in enumerate(lines, 1):
        _tick(progress, VERIFYING, done, len(lines))
        doc = json.loads(line)
        rec = _Rec(doc["seq"], UUID(doc["originator_id"]), doc["version"], doc["topic"],
                   unb64(doc["state"]))
        if not v.feed(rec):
            f = v.report.failure
            assert f is not None
            raise PackInvalid("3", f"event seq {doc['seq']}: step {f.step}: {f.reason}")
        events.append((doc, rec))
    return v, events


def _tick(progress: Steps | None, stage: str, done: int, total: int) -> None:
    if progress is not None and (done % EVERY == 0 or done == total):
        progress(stage, done, total)


def _verify_statement_signatures(dsse: dict[str, Any], statement: dict[str, Any],
                                 roster: RosterState, at: datetime) -> list[str]:
    """Step 4: every signature on the statement is by a key that holds the operator or
    auditor role at the pack's time, in the pack's roster (revoked keys refused); the
    payload is the statement's canonical form. Returns the signers."""
    signers = _statement_signers(dsse, roster, at)
    try:
        verified = verify_envelope(dsse, signers)
    except KeyError_ as e:
        raise PackInvalid("4", f"statement signature: {e}") from e
    if verified.payload != envelope.canonical(statement):
        raise PackInvalid("4", "the statement is not in canonical form")
    return verified.signers


def _verify_checkpoints(files: dict[str, bytes], origin: str, roster: RosterState,
                        events: _Events, at: datetime
                        ) -> tuple[SignedCheckpoint, SignedCheckpoint]:
    """Step 5: checkpoints are signed by a key holding the log role when they were signed
    (no earlier than the newest pack event they cover)."""
    before_note, after_note = files[BEFORE].decode(), files[AFTER].decode()
    try:
        before = verify_with_roster(before_note, origin, roster,
                                    _covered_time(before_note, events))
        after = verify_with_roster(after_note, origin, roster, at)
    except VerificationFailed as e:
        raise PackInvalid("5", str(e)) from e
    return before, after


def _check_inclusions(events: _Events, leaves: list[bytes], after: SignedCheckpoint,
                      progress: Steps | None) -> None:
    """Step 5: every event is included in the after checkpoint."""
    report(progress, CHECKING, 0, len(events))
    for done, ((doc, _rec), leaf) in enumerate(zip(events, leaves, strict=True), 1):
        _tick(progress, CHECKING, done, len(events))
        try:
            verify_inclusion(leaf, doc["seq"] - 1, after.size, [unb64(p) for p in doc["proof"]],
                             after.root)
        except VerificationFailed as e:
            raise PackInvalid("5", f"event seq {doc['seq']}: {e}") from e


def _check_consistency(data: bytes, before: SignedCheckpoint, after: SignedCheckpoint
                       ) -> None:
    """Step 5: the before checkpoint is a prefix of the after checkpoint."""
    cons = json.loads(data)
    if (cons["old_size"], cons["new_size"]) != (before.size, after.size):
        raise PackInvalid("5", "the consistency proof is for other checkpoints")
    try:
        verify_consistency(before.size, after.size, before.root, after.root,
                           [unb64(p) for p in cons["proof"]])
    except VerificationFailed as e:
        raise PackInvalid("5", f"before -> after: {e}") from e


def _check_copies(predicate: dict[str, Any], events: _Events) -> None:
    """Steps 8.1-8.4: the copies statement is what the signed events support."""
    copies = predicate.get("copies")
    if copies is None:
        return
    try:
        check_statement(copies, [fact_of(rec.state) for _doc, rec in events],
                        predicate["batch"]["id"])
    except CopiesInvalid as e:
        raise PackInvalid(f"8.{e.step}", f"copies: {e}") from e
    except (KeyError, TypeError, ValueError) as e:  # a signed event it cannot read
        raise PackInvalid("8", f"copies: the statement's events do not read: {e!r}") from e


def _report(predicate: dict[str, Any], signers: list[str], events: int,
            witnessing: dict[str, Any]) -> PackReport:
    """What the verified pack proves."""
    copies = predicate.get("copies")
    reach = predicate["reach"]
    partials = predicate.get("partial_outcomes") or []
    is_partial = predicate["batch"]["outcome"] == PARTIAL
    return PackReport(True, None, None, signers, events,
                      {k: len(v) for k, v in predicate["targets"].items()}, witnessing,
                      len(reach["flagged_for_review"]),
                      len(reach.get("flags", {}).get("artifacts_for_review", [])),
                      summary(copies, predicate["generated_at"]) if copies else None,
                      PARTIAL if is_partial else "completed",
                      list(partials[-1]["reasons"]) if is_partial else [],
                      len(partials) - (1 if is_partial else 0))


def pack_time(predicate: dict[str, Any], records: Sequence[Any]) -> datetime:
    """The pack's time for step 4: its signed ``generated_at``, or the newest event in
    it if later (a pack cannot predate the events it holds, revocations included)."""
    times = [parse_time(predicate["generated_at"])]
    for rec in records:
        times.append(parse_time(envelope.open_state(rec.state).envelope["timestamp"]))
    return max(times)


def _statement_signers(dsse: dict[str, Any], roster: Any, at: datetime) -> dict[str, bytes]:
    """Step 4's role check: every signature's key (the first and every countersignature)
    must hold ``operator`` or ``auditor`` at ``at``; returns their public keys."""
    sigs = dsse.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise PackInvalid("4", "the statement carries no signature")
    keys = {}
    for sig in sigs:
        kid = sig.get("keyid") if isinstance(sig, dict) else None
        if not isinstance(kid, str):
            raise PackInvalid("4", "a statement signature has no key id")
        try:
            keys[kid] = roster.holds(kid, SIGNER_ROLES, at)
        except KeyNotAuthorized as e:
            raise PackInvalid("4", f"statement signed by {kid}, which does not hold the "
                                   f"operator or auditor role at the pack's time "
                                   f"{clock.format_instant(at)}: {e}") from e
    return keys


def _covered_time(note: str, events: Sequence[tuple[dict[str, Any], Any]]) -> datetime | None:
    """Time of the newest pack event a checkpoint covers (it was signed no earlier)."""
    try:
        size = parse_body(parse_note(note)[0]).size
    except (ValueError, VerificationFailed):
        return None  # verify_with_roster reports the malformed note
    covered = [rec for doc, rec in events if doc["seq"] <= size]
    if not covered:
        return None
    return parse_time(envelope.open_state(covered[-1].state).envelope["timestamp"])


@dataclass
class _Rec:
    id: int
    originator_id: UUID | str
    originator_version: int
    topic: str
    state: bytes


def _check_predicate(predicate: dict[str, Any], events: list[tuple[dict[str, Any], _Rec]]
                     ) -> None:
    payloads = {(str(r.originator_id), r.originator_version):
                (r.topic, envelope.open_state(r.state).envelope["payload"]) for _, r in events}
    batch_id = predicate["batch"]["id"]
    topics = {t for (oid, _), (t, _) in payloads.items() if oid == batch_id}
    partial = predicate["batch"]["outcome"] == PARTIAL
    ends = ({BATCH_PARTIAL} if partial else
            {"memory-ledger:batch.executed.v1", "memory-ledger:batch.closed.v1"})
    needed = {"memory-ledger:batch.opened.v1", "memory-ledger:batch.approved.v1", *ends}
    if not needed <= topics:
        raise PackInvalid("6", f"the batch's signed events are missing: {sorted(needed - topics)}")
    if partial and "memory-ledger:batch.executed.v1" in topics:
        raise PackInvalid("6", "the pack says partial but holds the batch's signed execution")
    opened = payloads[(batch_id, 1)][1]
    if opened["targets"] != predicate["targets"]:
        raise PackInvalid("6", "the targets differ from those the operator approved")
    # 6.P: every run that ended partial is named, with its signed reasons (ADR 0047)
    signed_partials = partial_outcomes(
        {k: (t, envelope.open_state(r.state).envelope) for (_d, r) in events
         for k, t in [((str(r.originator_id), r.originator_version), r.topic)]}, batch_id)
    if (predicate.get("partial_outcomes") or []) != signed_partials:
        raise PackInvalid("6", "the partial outcomes differ from the batch's signed "
                               "batch.ended-partial events")
    if partial:
        last = max(((oid, v), p) for (oid, v), (t, p) in payloads.items()
                   if oid == batch_id and t == BATCH_PARTIAL)[1]
        signed_reach, reasons = last["reach"], last["reasons"]
    else:
        signed_reach = next(p for (oid, _), (t, p) in payloads.items()
                            if oid == batch_id and t == "memory-ledger:batch.executed.v1")["reach"]
        reasons = []
    if signed_reach != predicate["reach"]:
        raise PackInvalid("6", "the reach results differ from the signed batch "
                               + ("outcome" if partial else "execution"))
    unchecked = {r["route"] for r in reasons if r.get("code") == STORE_UNREACHABLE}
    routes = predicate["reach"].get("routes", [])
    if any(r["reach"] == "reachable" or (r["reach"] != "not-reachable" and
                                         r["route"] not in unchecked) for r in routes) or \
            {r["route"] for r in routes if r["reach"] != "not-reachable"} != unchecked or \
            (predicate["reach"].get("raw_scan", {}).get("hits") and not unchecked):
        raise PackInvalid("6", "the reach results say erased content is still reachable")
    held = {i for r in reasons if r.get("code") == LEGAL_HOLD
            for k in ("atoms", "artifacts", "subjects", "records") for i in r.get(k) or []}
    by_item: dict[str, set[str]] = {}
    for (oid, _), (t, _p) in payloads.items():
        by_item.setdefault(oid, set()).add(t)
    for kind, key, stone in (("atoms", "memory-ledger:atom.data-key-destroyed.v1",
                              "memory-ledger:atom.redacted.v1"),
                             ("artifacts", "memory-ledger:artifact.data-key-destroyed.v1",
                              "memory-ledger:artifact.deleted.v1")):
        for item in predicate["targets"].get(kind, []):
            have = by_item.get(item, set())
            if item in held:  # kept under a legal hold: it must not have been destroyed
                if key in have or stone in have:
                    raise PackInvalid("6", f"target {kind[:-1]} {item} is said to be held "
                                           "but its key destruction or tombstone is signed")
            elif key not in have or (stone not in have and not unchecked):
                raise PackInvalid("6", f"target {kind[:-1]} {item} has no key destruction "
                                       "or tombstone")


def read_pack(folder: Path) -> dict[str, bytes]:
    """The I/O half of ``verify-pack``: every file of a pack folder or .zip, by its
    relative name (zip entries that escape the pack are refused, step 2)."""
    if folder.is_file() and folder.suffix == ".zip":
        try:
            with zipfile.ZipFile(folder) as zf:
                return _zip_files(zf)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
            raise PackInvalid("2", f"{folder} is not a readable zip file: {e}") from e
    if not folder.is_dir():
        raise InputError(f"{folder} is not a pack folder or .zip")
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def read_pack_zip(data: bytes) -> dict[str, bytes]:
    """The files of a pack zip held in memory (a pack received over the network)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return _zip_files(zf)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise PackInvalid("2", f"the pack is not a readable zip file: {e}") from e


def _zip_files(zf: zipfile.ZipFile) -> dict[str, bytes]:
    out = {}
    for info in zf.infolist():
        name = info.filename
        if info.is_dir():
            continue
        if name.startswith("/") or ".." in Path(name).parts:
            raise PackInvalid("2", f"zip entry {name!r} escapes the pack")
        out[name] = zf.read(info)
    return out



__all__ = ["PackReport", "pack_time", "read_pack", "read_pack_zip", "verify_pack",
           "verify_pack_bytes"]
