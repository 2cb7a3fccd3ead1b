"""Evidence Packs, built from a ledger (docs/spec/evidence-pack.md).

Layout of a pack folder:

    statement.dsse.json            DSSE envelope over an in-toto Statement v1
    events.jsonl                   the signed events, one per line, with inclusion proofs
    checkpoints/before.checkpoint  C2SP checkpoint before the batch
    checkpoints/after.checkpoint   C2SP checkpoint after it
    consistency.json               RFC 9162 consistency proof before -> after
    keys/root.pub                  the ledger's root public key (pin your own with --root-key)
    report.html                    the same facts rendered for people

The statement's subjects are the SHA-256 digests of every other file; its predicate
holds the request, the batch, the targets (ids only), the event index, the checkpoints
and the reach results. Nothing in a pack is memory content: events are stored bytes,
whose personal fields are ciphertext under keys that were destroyed.

A batch that ended partial (ADR 0047) has a pack too: its outcome is ``partial``, its
reach the last ``batch.ended-partial``'s, and ``partial_outcomes`` names why; verify-pack
checks that it claims no more than that (step 6) and says it is partial.

Three modules, as sigstore splits its bundle code: this one builds (it needs the ledger),
:mod:`governance.pack_render` renders the report for people, and
:mod:`governance.pack_verify` verifies (pure: public keys only); what all three share is
:mod:`governance.pack_layout`, and the statement's signing is :mod:`governance.dsse`'s.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.batch_events import erasure_rows
from governance.copies import evidence_rows, fact_of
from governance.copies import statement as copies_statement
from governance.dsse import PREDICATE_TYPE, STATEMENT_TYPE, add_signature, sign_envelope
from governance.pack_layout import (
    AFTER,
    BEFORE,
    CONSISTENCY,
    EVENTS,
    KEY_TOPICS,
    PREDICATE_SCHEMA,
    PROOFS,
    REPORT,
    ROOT_PUB,
    STATEMENT,
    TOMBSTONE_TOPICS,
    PackInvalid,
)
from keys.files import PUBLIC, make_dirs, write_file
from keys.keyring import public_key_document
from keys.roster import ROSTER_TOPICS
from ledger import clock, envelope
from ledger.domain import RedactionBatch
from ledger.errors import ConflictError, EnvironmentProblem, InputError, NotFound
from ledger.progress import Steps, report
from ledger.transparency import b64

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.transparency import SignedCheckpoint


from governance.pack_layout import PARTIAL, partial_outcomes, predicate_problems, sha256_hex
from governance.pack_render import render_report
from governance.pack_verify import verify_pack


def build_pack(app: LedgerApp, batch_id: str, out: Path, make_zip: bool = False,
               operator: str = "operator", progress: Steps | None = None) -> Path:
    """Write the Evidence Pack of a closed batch to ``out`` (which must not exist);
    ``progress`` hears each step and its count (ledger/progress.py)."""
    batch, request = _closed_batch(app, batch_id, out)
    rows, opened, ordered = _pack_rows(app, batch, request, progress)
    after = app.checkpoint()
    first_batch_seq = opened[(str(batch.id), 1)].envelope["seq"]
    before = _checkpoint_before(app, first_batch_seq)
    proofs = _inclusion_proofs(app, ordered, opened, after, progress)
    consistency = app.reader.consistency_proof(before.size, after.size)
    report(progress, "Writing the pack", 0, 1)

    make_dirs(out)
    try:
        files: dict[str, bytes] = {
            EVENTS: _event_lines(rows, opened, ordered, proofs),
            BEFORE: before.note.encode(),
            AFTER: after.note.encode(),
            CONSISTENCY: json.dumps({"old_size": before.size, "new_size": after.size,
                                     "proof": [b64(p) for p in consistency]},
                                    indent=2).encode()}
        if app.root_public_key is None:
            raise EnvironmentProblem("no root public key: keys/root.pub is missing",
                                     hint="restore it from a copy; a pack carries it")
        files[ROOT_PUB] = json.dumps(public_key_document("root", app.root_public_key)).encode()
        proof_files = _proof_files(app, ordered, opened, proofs, after)
        files.update(proof_files)
        predicate = _predicate(app, batch, request, opened, ordered, before, after)
        predicate["witnesses"] = _witness_claims(app, before, after, sorted(proof_files))
        predicate["copies"] = copies_statement([fact_of(rows[k].state) for k in ordered],
                                               str(batch.id))
        problems = predicate_problems(predicate)
        if problems:  # a bug in _predicate or in what it reads, never the user's input
            raise RuntimeError(f"the Evidence Pack predicate does not match schemas/"
                               f"{PREDICATE_SCHEMA}: {'; '.join(problems[:5])}")
        files[REPORT] = render_report(predicate).encode()
        _write_signed(app, out, files, predicate, operator)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    report(progress, "Writing the pack", 1, 1)
    if make_zip:
        report(progress, "Zipping the pack", 0, 1)
        zip_pack(out)
        report(progress, "Zipping the pack", 1, 1)
    return out


def _closed_batch(app: LedgerApp, batch_id: str, out: Path) -> tuple[RedactionBatch, Any]:
    """The batch (closed, or ended partial) and its request, if any; ``out`` must be new."""
    try:
        batch = app.reader.aggregate(UUID(str(batch_id)))
    except (ValueError, Exception) as e:
        raise NotFound(f"no redaction batch {batch_id}",
                       hint="see the batch id printed by `ledger redact-user`") from e
    if not isinstance(batch, RedactionBatch) or batch.status not in ("closed", "partial"):
        raise ConflictError(f"batch {batch_id} is {getattr(batch, 'status', 'unknown')}; only a "
                            "closed batch, or one that ended partial, has evidence",
                            hint="finish the erasure first (`ledger requests resume`)")
    if out.exists():
        raise InputError(f"{out} already exists", hint="choose a new --out folder")
    request = app.reader.aggregate(UUID(batch.request_id)) if batch.request_id else None
    return batch, request


def _pack_rows(app: LedgerApp, batch: RedactionBatch, request: Any, progress: Steps | None
               ) -> tuple[dict[tuple[str, int], Any], dict[tuple[str, int], Any],
                          list[tuple[str, int]]]:
    """Which events: the roster (to check every signer), the request, the batch, every
    tombstone and key destruction the batch lists, and what the copies statement rests on
    (the KEK epochs' events, the policy in force). Returns them by (aggregate id, version),
    opened, and the keys in log order."""
    roster_rows = app.reader.notifications(start=1, limit=10**9,
                                    topics=sorted(ROSTER_TOPICS))
    rows = {(str(r.originator_id), r.originator_version): r for r in roster_rows}
    for r in erasure_rows(app, batch, request, progress):
        rows[(str(r.originator_id), r.originator_version)] = r
    for r in evidence_rows(app, list(rows.values())):
        rows[(str(r.originator_id), r.originator_version)] = r
    opened = {k: envelope.open_state(r.state) for k, r in rows.items()}
    ordered = sorted(rows, key=lambda k: opened[k].envelope["seq"])
    return rows, opened, ordered


def _inclusion_proofs(app: LedgerApp, ordered: list[tuple[str, int]],
                      opened: dict[tuple[str, int], Any], after: SignedCheckpoint,
                      progress: Steps | None) -> dict[tuple[str, int], list[bytes]]:
    proofs = {}
    for i, k in enumerate(ordered, start=1):
        if i % 500 == 0 or i == len(ordered):
            report(progress, "Proving inclusion", i, len(ordered))
        proofs[k] = app.reader.inclusion_proof(opened[k].envelope["seq"] - 1, after.size)
    return proofs


def _event_lines(rows: dict[tuple[str, int], Any], opened: dict[tuple[str, int], Any],
                 ordered: list[tuple[str, int]], proofs: dict[tuple[str, int], list[bytes]]
                 ) -> bytes:
    """The pack's events file: one JSON line an event, with its inclusion proof."""
    lines = []
    for k in ordered:
        r, o = rows[k], opened[k]
        lines.append(json.dumps({
            "seq": o.envelope["seq"], "originator_id": str(r.originator_id),
            "version": r.originator_version, "topic": r.topic,
            "state": b64(r.state), "proof": [b64(p) for p in proofs[k]],
        }, sort_keys=True))
    return ("\n".join(lines) + "\n").encode()


def _write_signed(app: LedgerApp, out: Path, files: dict[str, bytes],
                  predicate: dict[str, Any], operator: str) -> None:
    """Write the files, then the statement over their digests, signed by ``operator``."""
    for name, data in files.items():
        path = out / name
        make_dirs(path.parent, exist_ok=True)
        write_file(path, data)
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": sha256_hex(d)}}
                    for n, d in sorted(files.items())],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    payload = envelope.canonical(statement)
    dsse = sign_envelope(payload, app.signer(operator))
    write_file(out / STATEMENT, json.dumps(dsse, indent=2) + "\n")


def _checkpoint_before(app: LedgerApp, first_seq: int) -> SignedCheckpoint:
    before = app.reader.checkpoint_before(first_seq)
    if before is None:
        raise ConflictError("no checkpoint was taken before this batch",
                            hint="erasures take one automatically; this batch predates that")
    return before


def _proof_files(app: LedgerApp, ordered: list[Any], opened: dict[Any, Any],
                 proofs: dict[Any, list[bytes]], after: Any) -> dict[str, bytes]:
    """One c2sp.org/tlog-proof file per tombstone and key destruction, against ``after``
    with its cosignatures; ``extra`` holds the event id (docs/spec/evidence-pack.md)."""
    from ledger.witness.wire import TlogProof

    out = {}
    for k in ordered:
        topic = opened[k].envelope["topic"]
        if topic in TOMBSTONE_TOPICS or topic in KEY_TOPICS:
            seq = opened[k].envelope["seq"]
            proof = TlogProof(seq - 1, tuple(proofs[k]), after.note,
                              extra=envelope.event_id(k[0], k[1]).encode())
            out[f"{PROOFS}/{seq}.tlog-proof"] = proof.text().encode()
    return out


def _witness_claims(app: LedgerApp, before: Any, after: Any, proof_names: list[str]
                    ) -> dict[str, Any]:
    """Which witnesses cosigned which checkpoint (the lines are in the checkpoint files)."""
    def cosigners(cp: Any) -> list[dict[str, Any]]:
        from ledger.witness.cosign import check_cosignatures, parse_witness_vkey

        rows = app.reader.cosignature_rows(cp.size)
        keys = [parse_witness_vkey(vkey) for _, vkey in rows]
        found = check_cosignatures(cp.note, keys).valid
        return [{"witness": vkey, "timestamp": c.timestamp} for vkey, c in sorted(found.items())]

    return {"asked": [vkey for _, vkey in app.config.witnesses],
            "before": cosigners(before), "after": cosigners(after), "proofs": proof_names}


def _predicate(app: LedgerApp, batch: Any, request: Any, opened: dict[Any, Any],
               ordered: list[Any], before: Any, after: Any) -> dict[str, Any]:
    def role_of(topic: str) -> str:
        if topic in ROSTER_TOPICS:
            return "roster"
        if topic in TOMBSTONE_TOPICS:
            return "tombstone"
        if topic in KEY_TOPICS:
            return "key-destroyed"
        return topic.split(":", 1)[1].split(".", 1)[0]

    events = [{"event_id": envelope.event_id(k[0], k[1]), "seq": opened[k].envelope["seq"],
               "topic": opened[k].envelope["topic"], "timestamp": opened[k].envelope["timestamp"],
               "signer": opened[k].kid, "role": role_of(opened[k].envelope["topic"])}
              for k in ordered]
    req = None
    if request is not None:
        req = {"id": str(request.id), "subject_id": request.subject_id,
               "subject_ref": request.subject_ref, "reason": request.reason,
               "legal_basis": request.legal_basis, "operator": request.operator,
               "received_at": request.received_at, "acknowledged_at": request.acknowledged_at,
               "ack_due": request.ack_due, "complete_due": request.complete_due,
               "completed_at": request.completed_at, "sessions": list(request.sessions)}
    out = {
        "ledger": {"id": app.ledger_id, "origin": app.config.origin},
        "request": req,
        "batch": {"id": str(batch.id), "mode": batch.mode, "reason": batch.reason,
                  "approved_by": batch.approved_by,
                  "outcome": PARTIAL if batch.status == "partial" else batch.outcome},
        "targets": batch.targets,
        "events": events,
        "checkpoints": {"before": {"size": before.size, "root": b64(before.root)},
                        "after": {"size": after.size, "root": b64(after.root)}},
        "reach": batch.reach,
        "generated_at": clock.format_instant(clock.now()),
    }
    partials = partial_outcomes({k: (opened[k].envelope["topic"], opened[k].envelope)
                                  for k in ordered}, str(batch.id))
    if partials:  # ADR 0047: each run that ended partial, kept once completed too
        out["partial_outcomes"] = partials
    return out


def zip_pack(folder: Path) -> Path:
    target = folder.with_suffix(".zip")
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            zf.write(path, path.relative_to(folder).as_posix())
    os.chmod(target, PUBLIC)  # zipfile creates it with 0o666 minus the umask
    return target


def countersign(folder: Path, signer: Any) -> None:
    """Add ``signer``'s signature; refused, the pack unchanged, unless the pack still
    verifies with it (the key must hold operator or auditor at the pack's time)."""
    path = folder / STATEMENT
    original = path.read_bytes()
    dsse = json.loads(original)
    write_file(path, json.dumps(add_signature(dsse, signer), indent=2) + "\n")
    try:
        verify_pack(folder)
    except PackInvalid as e:
        write_file(path, original)
        raise InputError(f"{signer.name} may not countersign this pack: {e}",
                         hint="countersign with a key that held the operator or auditor "
                              "role when the pack was built (`ledger keys list`)") from e



__all__ = ["build_pack", "countersign", "zip_pack"]
