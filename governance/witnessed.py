"""Evidence Pack steps 7.1-7.3: offline proof files, witness cosignatures, witness policy.

Pure: the pack's files and already verified values in; a report out, or
:class:`governance.pack_layout.PackInvalid` at the failing step (docs/spec/evidence-pack.md).
"""

from __future__ import annotations

from typing import Any

from governance.pack_layout import AFTER, BEFORE, KEY_TOPICS, PROOFS, TOMBSTONE_TOPICS, PackInvalid
from ledger import envelope
from ledger.checkpoint import CheckpointError, verify_checkpoint
from ledger.errors import VerificationFailed
from ledger.merkle import verify_inclusion
from ledger.witness.cosign import (
    CosignatureError,
    WitnessKey,
    check_cosignatures,
    parse_witness_vkey,
)
from ledger.witness.policy import Policy
from ledger.witness.wire import WireError, parse_tlog_proof


def _fail(step: str, message: str) -> Exception:
    return PackInvalid(step, message)


def verify_witnessing(files: dict[str, bytes], predicate: dict[str, Any],
                      events: list[tuple[dict[str, Any], Any]], leaves: list[bytes],
                      before: Any, after: Any, policy: Policy | None) -> dict[str, Any]:
    claims = predicate.get("witnesses")
    notes = {"before": files[BEFORE].decode(), "after": files[AFTER].decode()}
    heads = {"before": before, "after": after}
    _check_proof_files(files, claims, events, leaves, notes["after"], after)
    keys = _witness_keys(claims, policy)
    found, ignored = _check_cosignatures(notes, heads, keys, claims, predicate["ledger"]["origin"])
    report: dict[str, Any] = {
        which: [{"witness": vkey, "timestamp": ts} for vkey, ts in sorted(found[which].items())]
        for which in notes}
    report["ignored"] = ignored
    if policy is None:
        report["required"] = False
        report["policy"] = None
        return report
    _check_policy(policy, notes, heads, found, ignored, predicate["ledger"]["origin"])
    report["required"] = True
    report["policy"] = policy.describe() + ": met"
    return report


def _check_proof_files(files: dict[str, bytes], claims: dict[str, Any] | None,
                       events: list[tuple[dict[str, Any], Any]], leaves: list[bytes],
                       after_note: str, after: Any) -> None:
    """7.1 Proof files: one per tombstone and key destruction, each the event's inclusion in
    the after checkpoint, carrying that checkpoint (with its cosignatures) verbatim."""
    proof_names = sorted(n for n in files if n.startswith(PROOFS + "/"))
    if claims is None:
        if proof_names:
            raise _fail("7.1", "proof files in a pack whose predicate lists none")
        return
    by_id = {envelope.event_id(doc["originator_id"], doc["version"]): (doc, leaf)
             for (doc, _), leaf in zip(events, leaves, strict=True)}
    needed = {f"{PROOFS}/{doc['seq']}.tlog-proof" for doc, rec in events
              if rec.topic in TOMBSTONE_TOPICS or rec.topic in KEY_TOPICS}
    if set(proof_names) != needed or sorted(claims["proofs"]) != sorted(needed):
        raise _fail("7.1", f"proof files {proof_names[:3]}... are not one per tombstone and "
                           f"key destruction ({len(needed)} expected)")
    for name in proof_names:
        _check_proof_file(name, files[name], by_id, after_note, after)


def _check_proof_file(name: str, data: bytes,
                      by_id: dict[str, tuple[dict[str, Any], bytes]], after_note: str,
                      after: Any) -> None:
    """7.1 for one proof file: it carries the after checkpoint, names an event of the pack
    at that event's index, and proves its inclusion."""
    try:
        proof = parse_tlog_proof(data.decode())
    except (WireError, UnicodeDecodeError) as e:
        raise _fail("7.1", f"{name}: {e}") from e
    if proof.note != after_note:
        raise _fail("7.1", f"{name}: its checkpoint is not the pack's after checkpoint")
    doc_leaf = by_id.get((proof.extra or b"").decode("utf-8", "replace"))
    if doc_leaf is None or doc_leaf[0]["seq"] - 1 != proof.index or \
            name != f"{PROOFS}/{doc_leaf[0]['seq']}.tlog-proof":
        raise _fail("7.1", f"{name}: names no event of the pack at index {proof.index}")
    try:
        verify_inclusion(doc_leaf[1], proof.index, after.size, list(proof.proof), after.root)
    except VerificationFailed as e:
        raise _fail("7.1", f"{name}: {e}") from e


def _witness_keys(claims: dict[str, Any] | None, policy: Policy | None) -> list[WitnessKey]:
    """7.2 The witnesses we check: the policy's, else those the pack says were asked."""
    if policy is not None:
        return list(policy.witnesses.values())
    try:
        return [parse_witness_vkey(v) for v in (claims or {}).get("asked", [])]
    except CosignatureError as e:
        raise _fail("7.2", f"the pack names a malformed witness key: {e}") from e


def _check_cosignatures(notes: dict[str, str], heads: dict[str, Any], keys: list[WitnessKey],
                        claims: dict[str, Any] | None, origin: str
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """7.2 Cosignatures: lines of the witnesses we check must verify over their checkpoint
    (and every cosignature the pack claims of them must be among them); others are
    ignored. Returns the valid cosignatures and the ignored labels, by checkpoint."""
    found: dict[str, dict[str, Any]] = {}
    ignored: dict[str, list[str]] = {}
    for which, note in notes.items():
        try:
            check = check_cosignatures(note, keys)
        except CosignatureError as e:
            raise _fail("7.2", f"{which} checkpoint (size {heads[which].size}): {e}") from e
        found[which] = {vkey: c.timestamp for vkey, c in check.valid.items()}
        ignored[which] = [label for label in check.unknown
                          if label.split("+", 1)[0] != origin]
        for claim in (claims or {}).get(which, []):
            checkable = any(k.vkey == claim["witness"] for k in keys)
            if checkable and found[which].get(claim["witness"]) != claim["timestamp"]:
                raise _fail("7.2", f"the pack says {claim['witness'].split('+')[0]} cosigned "
                                   f"the {which} checkpoint at {claim['timestamp']}, but no "
                                   "such cosignature verifies")
    return found, ignored


def _check_policy(policy: Policy, notes: dict[str, str], heads: dict[str, Any],
                  found: dict[str, dict[str, Any]], ignored: dict[str, list[str]],
                  origin: str) -> None:
    """7.3 Policy: the log is one the policy lists (if it lists any), and the cosigners of
    each checkpoint meet the quorum."""
    if policy.logs:
        for which, note in notes.items():
            if not any(_signed(note, name, pub, origin) for name, pub in policy.logs):
                raise _fail("7.3", f"the {which} checkpoint is not signed by a log the policy "
                                   "lists")
    by_vkey = {k.vkey: name for name, k in policy.witnesses.items()}
    for which in notes:
        names = {by_vkey[v] for v in found[which]}
        if not policy.satisfied(names):
            outside = ", ".join(ignored[which]) or "none"
            raise _fail("7.3", f"witness quorum not met for the {which} checkpoint (size "
                               f"{heads[which].size}): {policy.describe()}; cosigned by "
                               f"{', '.join(sorted(names)) or 'no witness of the policy'}; "
                               f"cosignatures by keys outside the policy (ignored): {outside}")


def _signed(note: str, name: str, pub: bytes, origin: str) -> bool:
    try:
        verify_checkpoint(note, name, pub, expected_origin=origin)
        return True
    except CheckpointError:
        return False


def summary(report: dict[str, Any]) -> str:
    """One line for the verdict."""
    if not report:
        return ""

    def names(rows: list[dict[str, Any]]) -> str:
        return ", ".join(r["witness"].split("+", 1)[0] for r in rows) or "none"

    tail = f"; witness policy {report['policy']}" if report.get("required") else \
        "; no witness policy given, so none were required (pass --policy FILE)"
    return f"; cosigned before by {names(report['before'])}, after by " \
           f"{names(report['after'])}{tail}"


__all__ = ["summary", "verify_witnessing"]
