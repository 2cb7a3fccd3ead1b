"""Evidence Packs: build (from a ledger) and verify (offline, public keys only).

Layout of a pack folder (docs/spec/evidence-pack.md):

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
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import os
import re
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.copies import (
    NOT_COVERED_WORDS,
    CopiesInvalid,
    check_statement,
    day,
    evidence_rows,
    fact_of,
    group_words,
    keystore_words,
    overall_words,
    summary,
)
from governance.copies import statement as copies_statement
from governance.dsse import (
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    add_signature,
    sign_envelope,
    verify_envelope,
)
from governance.pack_layout import (
    AFTER,
    BEFORE,
    CHECKING,
    CONSISTENCY,
    EVENTS,
    KEY_TOPICS,
    PREDICATE_SCHEMA,
    PROOFS,
    REPORT,
    ROOT_PUB,
    SIGNER_ROLES,
    STATEMENT,
    TOMBSTONE_TOPICS,
    PackInvalid,
)
from governance.partial import LEGAL_HOLD, STORE_UNREACHABLE, words
from governance.witnessed import verify_witnessing
from keys.errors import KeyError_, KeyNotAuthorized, PublicKeyFileError
from keys.files import PUBLIC, make_dirs, write_file
from keys.keyring import parse_public_key_document, public_key_document
from keys.roster import ROSTER_TOPICS, parse_time
from ledger import clock, envelope, json_schemas
from ledger.checkpoint import parse_body, parse_note
from ledger.domain import RedactionBatch
from ledger.errors import (
    ConflictError,
    EnvironmentProblem,
    InputError,
    NotFound,
    VerificationFailed,
)
from ledger.merkle import verify_consistency, verify_inclusion
from ledger.progress import Steps, report
from ledger.text import plural
from ledger.transparency import b64, unb64, verify_with_roster
from ledger.verification import EVERY, VERIFYING
from ledger.verify import LogVerifier

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.transparency import SignedCheckpoint

# ----------------------------------------------------------------------------- schema
def predicate_problems(predicate: Any) -> list[str]:
    """Where ``predicate`` departs from schemas/evidence-pack-predicate.v1.json (empty: valid)."""
    errors = sorted(json_schemas.validator(PREDICATE_SCHEMA).iter_errors(predicate),
                    key=lambda e: (e.json_path, e.validator))
    return [f"{e.json_path}: {e.message[:160]}" for e in errors]


# ----------------------------------------------------------------------------- building
def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def batch_event_rows(app: LedgerApp, event_ids: list[str], progress: Steps | None = None
                     ) -> list[Any]:
    """The stored events a batch names (``"<originator>/<version>"``), in its order; a
    missing one is :class:`NotFound` (used by the pack and the receipt)."""
    rows = []
    for i, eid in enumerate(event_ids, start=1):
        if i % 500 == 0 or i == len(event_ids):
            report(progress, "Reading the batch's events", i, len(event_ids))
        oid, version = eid.rsplit("/", 1)
        found = app.stored_events(UUID(oid), gt=int(version) - 1, lte=int(version))
        if not found:
            raise NotFound(f"event {eid} named by the batch is not in the log")
        rows.append(found[0])
    return rows


def build_pack(app: LedgerApp, batch_id: str, out: Path, make_zip: bool = False,
               operator: str = "operator", progress: Steps | None = None) -> Path:
    """Write the Evidence Pack of a closed batch to ``out`` (which must not exist);
    ``progress`` hears each step and its count (ledger/progress.py)."""
    try:
        batch = app.aggregate(UUID(str(batch_id)))
    except (ValueError, Exception) as e:
        raise NotFound(f"no redaction batch {batch_id}",
                       hint="see the batch id printed by `ledger redact-user`") from e
    if not isinstance(batch, RedactionBatch) or batch.status not in ("closed", "partial"):
        raise ConflictError(f"batch {batch_id} is {getattr(batch, 'status', 'unknown')}; only a "
                            "closed batch, or one that ended partial, has evidence",
                            hint="finish the erasure first (`ledger requests resume`)")
    if out.exists():
        raise InputError(f"{out} already exists", hint="choose a new --out folder")
    request = app.aggregate(UUID(batch.request_id)) if batch.request_id else None

    # Which events: the roster (to check every signer), the request, the batch, and every
    # tombstone and key destruction the batch lists.
    roster_rows = app.notifications(start=1, limit=10**9,
                                    topics=sorted(ROSTER_TOPICS))
    ids = [f"{batch.id}/{v}" for v in range(1, batch.version + 1)]
    if request is not None:
        ids += [f"{request.id}/{v}" for v in range(1, request.version + 1)]
    ids += list(batch.event_ids)
    rows = {(str(r.originator_id), r.originator_version): r for r in roster_rows}
    for r in batch_event_rows(app, ids, progress):
        rows[(str(r.originator_id), r.originator_version)] = r
    # and what the copies statement rests on: the KEK epochs' events, the policy in force
    for r in evidence_rows(app, list(rows.values())):
        rows[(str(r.originator_id), r.originator_version)] = r
    opened = {k: envelope.open_state(r.state) for k, r in rows.items()}
    ordered = sorted(rows, key=lambda k: opened[k].envelope["seq"])

    after = app.checkpoint()
    first_batch_seq = opened[(str(batch.id), 1)].envelope["seq"]
    before = _checkpoint_before(app, first_batch_seq)
    proofs = {}
    for i, k in enumerate(ordered, start=1):
        if i % 500 == 0 or i == len(ordered):
            report(progress, "Proving inclusion", i, len(ordered))
        proofs[k] = app.inclusion_proof(opened[k].envelope["seq"] - 1, after.size)
    consistency = app.consistency_proof(before.size, after.size)
    report(progress, "Writing the pack", 0, 1)

    make_dirs(out)
    try:
        files: dict[str, bytes] = {}
        lines = []
        for k in ordered:
            r, o = rows[k], opened[k]
            lines.append(json.dumps({
                "seq": o.envelope["seq"], "originator_id": str(r.originator_id),
                "version": r.originator_version, "topic": r.topic,
                "state": b64(r.state), "proof": [b64(p) for p in proofs[k]],
            }, sort_keys=True))
        files[EVENTS] = ("\n".join(lines) + "\n").encode()
        files[BEFORE] = before.note.encode()
        files[AFTER] = after.note.encode()
        files[CONSISTENCY] = json.dumps({"old_size": before.size, "new_size": after.size,
                                         "proof": [b64(p) for p in consistency]},
                                        indent=2).encode()
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
        for name, data in files.items():
            path = out / name
            make_dirs(path.parent, exist_ok=True)
            write_file(path, data)
        statement = {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": n, "digest": {"sha256": _sha256(d)}}
                        for n, d in sorted(files.items())],
            "predicateType": PREDICATE_TYPE,
            "predicate": predicate,
        }
        payload = envelope.canonical(statement)
        dsse = sign_envelope(payload, app.signer(operator))
        write_file(out / STATEMENT, json.dumps(dsse, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise
    report(progress, "Writing the pack", 1, 1)
    if make_zip:
        report(progress, "Zipping the pack", 0, 1)
        zip_pack(out)
        report(progress, "Zipping the pack", 1, 1)
    return out


def _checkpoint_before(app: LedgerApp, first_seq: int) -> SignedCheckpoint:
    before = app.checkpoint_before(first_seq)
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

        rows = app.cosignature_rows(cp.size)
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
    partials = _partial_outcomes({k: (opened[k].envelope["topic"], opened[k].envelope)
                                  for k in ordered}, str(batch.id))
    if partials:  # ADR 0047: each run that ended partial, kept once completed too
        out["partial_outcomes"] = partials
    return out


PARTIAL = "partial"
BATCH_PARTIAL = "memory-ledger:batch.ended-partial.v1"


def _partial_outcomes(envelopes: Mapping[tuple[str, int], tuple[str, Mapping[str, Any]]],
                      batch_id: str) -> list[dict[str, Any]]:
    """The batch's ``batch.ended-partial`` events, in version order: event id, time and
    the signed reasons (what ``partial_outcomes`` must say)."""
    rows = sorted((k, env) for k, (topic, env) in envelopes.items()
                  if k[0] == batch_id and topic == BATCH_PARTIAL)
    return [{"event_id": envelope.event_id(k[0], k[1]), "at": env["timestamp"],
             "reasons": env["payload"]["reasons"]} for k, env in rows]


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


# ----------------------------------------------------------------------------- report
def render_report(p: dict[str, Any]) -> str:
    """A self-contained HTML page (no scripts, no network): timeline, stores, flags."""
    e = html.escape
    req = p.get("request") or {}
    bad = ' class="bad"'  # a route not checked (a partial outcome, ADR 0047)
    rows = "".join(
        f"<tr><td>{e(r['route'])}</td><td{'' if r['reach'] == 'not-reachable' else bad}>"
        f"{e(r['reach'])}</td><td>{r.get('items', '')}</td>"
        f"<td>{e(clock.for_people(r.get('checked_at')))}</td></tr>"
        for r in p.get("reach", {}).get("routes", []))
    scan = p.get("reach", {}).get("raw_scan", {})
    flagged_ids = p.get("reach", {}).get("flagged_for_review", [])
    review_arts = p.get("reach", {}).get("flags", {}).get("artifacts_for_review", [])
    flagged = "".join(f"<li><code>{e(a)}</code></li>" for a in flagged_ids) + "".join(
        f"<li>artifact <code>{e(a)}</code></li>" for a in review_arts) or "<li>none</li>"
    timeline = "".join(
        f"<tr><td>{e(label)}</td><td>{e(clock.for_people(req.get(key)))}</td></tr>"
        for label, key in (("received", "received_at"), ("acknowledged", "acknowledged_at"),
                           ("acknowledgment due", "ack_due"), ("completed", "completed_at"),
                           ("completion due", "complete_due")))
    on_time = ""
    if req.get("completed_at") and req.get("complete_due"):
        done = datetime.fromisoformat(req["completed_at"])
        due = datetime.fromisoformat(req["complete_due"].replace("Z", "+00:00"))
        on_time = "within the deadline" if done <= due else "AFTER the deadline"
    targets = p.get("targets", {})
    counts = ", ".join(plural(len(v), k) for k, v in targets.items())
    partial = p["batch"]["outcome"] == "partial"
    done_line = (f"<p>Completed {e(on_time)}.</p>" if not partial else
                 '<p class="bad"><b>Not completed:</b> the erasure ended partial (above); '
                 'the request stays open and its deadline runs.</p>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Evidence Pack {e(p['batch']['id'])}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;color:#222}}
table{{border-collapse:collapse;margin:1rem 0}}td,th{{border:1px solid #ccc;padding:.3rem .6rem}}
.ok{{color:#075}}.bad{{color:#a00}}code{{font-size:.85em}}</style></head><body>
<h1>Erasure evidence</h1>
<p>Ledger <code>{e(p['ledger']['origin'])}</code>, batch <code>{e(p['batch']['id'])}</code>
({e(p['batch']['mode'])}), approved by <b>{e(str(p['batch']['approved_by']))}</b>.
Reason: {e(p['batch']['reason'] or 'sealed, erased with the batch key')}. Targets: {e(counts)}.</p>
{_partial_html(p)}<h2>Request timeline</h2><table>{timeline}</table>{done_line}
<h2>Where the memory could be reached</h2>
<table><tr><th>store</th><th>reach after erasure</th><th>items</th><th>checked</th></tr>
{rows}</table>
<p>Raw scan of {scan.get('files', 0)} files owned by the ledger:
<span class="{'ok' if not scan.get('hits') else 'bad'}">{len(scan.get('hits', []))} hits</span>.</p>
{_copies_html(p)}<h2>Flagged for review</h2>
<p>{plural(len(flagged_ids), 'memories')} of other subjects flagged <code>refers-to-erased</code>,
{len(review_arts)} of their artifacts listed for review; none of them erased.</p>
<ul>{flagged}</ul>
{_witness_html(p)}
<h2>Proofs</h2><p>{len(p['events'])} signed events with inclusion proofs in the tree of size
{p['checkpoints']['after']['size']}; the log before the batch (size
{p['checkpoints']['before']['size']}) is proved to be a prefix of it.
Verify offline: <code>ledger verify-pack PACK --root-key root.pub</code>.</p>
</body></html>
"""


def _partial_html(p: dict[str, Any]) -> str:
    """The partial outcome, first and plain (ADR 0047): why the erasure stopped short and
    what it did; for a completed batch, the earlier runs that had ended partial. Empty for
    a batch that never ended partial (its report is as it always was)."""
    runs = p.get("partial_outcomes") or []
    if not runs:
        return ""
    e = html.escape

    def items(reasons: list[dict[str, Any]]) -> str:
        return "".join(f"<li>{e(words(r))}</li>" for r in reasons)

    if p["batch"]["outcome"] == "partial":
        last = runs[-1]
        return (f'<h2 class="bad">PARTIAL: this erasure did not finish</h2>\n'
                f"<p>The run signed at {e(clock.for_people(last['at']))} "
                f"(<code>{e(last['event_id'])}</code>) erased less than the operator "
                f"approved, for these reasons:</p>\n<ul>{items(last['reasons'])}</ul>\n"
                "<p>The data keys it destroyed stay destroyed; the routes below marked "
                "<code>not-reachable</code> were purged and probed. A route marked "
                "<code>not-checked</code> may still hold the erased memory, and items under "
                "a legal hold are kept. The erasure is finished by "
                "<code>ledger requests resume</code>, whose own pack then proves it; this "
                "record stays in the log.</p>\n")
    rows = "".join(f"<li>{e(clock.for_people(r['at']))} (<code>{e(r['event_id'])}</code>): "
                   f"<ul>{items(r['reasons'])}</ul></li>" for r in runs)
    return (f"<h2>Earlier partial outcomes</h2>\n<p>Before it completed, this erasure "
            f"ended partial {plural(len(runs), 'times')}; each record is kept and signed:"
            f"</p>\n<ul>{rows}</ul>\n")


def _copies_html(p: dict[str, Any]) -> str:
    """The Copies section (absent in packs built before it): each copy of the erased keys
    and from when none can be decrypted, in words (governance/copies.py)."""
    c = p.get("copies")
    if not c:
        return ""
    e = html.escape
    cls = {"unrecoverable": "ok", "pending": "bad", "unbounded": "bad"}
    rows = [("The live keystore", ' class="ok"', keystore_words(c))]
    rows += [("Older copies of the keystore (backups, WAL segments, replicas, dumps): keys "
              "wrapped under KEK epoch "
              f"{g['kek_epoch']}" if g["kek_epoch"] else "Older copies of the keystore "
              "(backups, WAL segments, replicas, dumps): keys that were not wrapped",
              f' class="{"bad" if g["unwrapped_until"] else cls[g["state"]]}"',
              group_words(g, p.get("generated_at"))) for g in c["older_copies"]]
    rows += [(NOT_COVERED_WORDS[n["what"]][0].format(at=day(n["made_before"])), "",
              NOT_COVERED_WORDS[n["what"]][1].format(at=day(n["made_before"])))
             for n in c["not_covered"]]

    def words(text: str) -> str:  # `ledger ...` as code
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", e(text))

    body = "".join(f"<tr><td>{e(what)}</td><td{k}>{words(said)}</td></tr>\n"
                   for what, k, said in rows)
    return (f"<h2>Copies</h2>\n<p>Where copies of the erased memory's keys can be, and from "
            f"when none of them can be decrypted (checked by <code>ledger verify-pack</code> "
            f"against the signed key-rotation events, step 8).</p>\n"
            f"<table><tr><th>copy</th><th>state</th></tr>\n{body}</table>\n"
            f"<p class=\"{cls[c['state']]}\"><b>{words(overall_words(c))}</b></p>\n")


def _witness_html(p: dict[str, Any]) -> str:
    w = p.get("witnesses")
    if not w:
        return ""
    e = html.escape

    def names(rows: list[dict[str, Any]]) -> str:
        return ", ".join(e(r["witness"].split("+", 1)[0]) for r in rows) or "none"

    return (f"<h2>Witnesses</h2><p>Checkpoint before the erasure cosigned by: "
            f"{names(w['before'])}. Checkpoint after: {names(w['after'])}. "
            f"{plural(len(w['asked']), 'witnesses')} asked; "
            f"{plural(len(w['proofs']), 'offline proof files')} (c2sp.org/tlog-proof).</p>")


# ----------------------------------------------------------------------------- verifying
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
    # Step 1: the statement is a DSSE envelope of an in-toto Statement v1 of our type.
    try:
        dsse = json.loads(files.pop(STATEMENT))
        statement = json.loads(base64.b64decode(dsse["payload"], validate=True))
    except (KeyError, ValueError, TypeError) as e:
        raise PackInvalid("1", f"{STATEMENT} is missing or not a DSSE envelope") from e
    if not isinstance(statement, dict):
        raise PackInvalid("1", "the DSSE payload is not a JSON object (an in-toto Statement)")
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != \
            PREDICATE_TYPE:
        raise PackInvalid("1", "the statement is not an evidence-pack in-toto Statement v1")
    # Step 1.1: the predicate matches its JSON Schema (no field the format does not have).
    problems = predicate_problems(statement.get("predicate"))
    if problems:
        raise PackInvalid("1.1", f"the predicate does not match schemas/{PREDICATE_SCHEMA}: "
                                 f"{'; '.join(problems[:3])}")
    predicate = statement["predicate"]
    # Step 2: every file is a subject with the right digest; no file missing or extra.
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    if set(subjects) != set(files):
        missing = sorted(set(subjects) - set(files))
        extra = sorted(set(files) - set(subjects))
        raise PackInvalid("2", f"files missing {missing} or not covered {extra}")
    for name, digest in subjects.items():
        if _sha256(files[name]) != digest:
            raise PackInvalid("2", f"{name}: SHA-256 does not match the signed statement")
    # Step 3: every event verifies against the roster folded from the pack's roster events.
    if root_public_key is None:
        try:
            root_public_key = parse_public_key_document(files[ROOT_PUB], ROOT_PUB)
        except PublicKeyFileError as e:
            raise PackInvalid("3", str(e)) from None
    ledger_id = predicate["ledger"]["id"]
    v = LogVerifier(ledger_id=ledger_id, root_public_key=root_public_key, collect_leaves=True)
    v.sparse = True
    events = []
    lines = files[EVENTS].decode().splitlines()
    report(progress, VERIFYING, 0, len(lines))
    for done, line in enumerate(lines, 1):
        if progress is not None and (done % EVERY == 0 or done == len(lines)):
            progress(VERIFYING, done, len(lines))
        doc = json.loads(line)
        rec = _Rec(doc["seq"], UUID(doc["originator_id"]), doc["version"], doc["topic"],
                   unb64(doc["state"]))
        if not v.feed(rec):
            f = v.report.failure
            assert f is not None
            raise PackInvalid("3", f"event seq {doc['seq']}: step {f.step}: {f.reason}")
        events.append((doc, rec))
    roster = v.report.roster
    # Step 4: every signature on the statement is by a key that holds the operator or
    # auditor role at the pack's time, in the pack's roster (revoked keys refused).
    at = pack_time(predicate, [rec for _doc, rec in events])
    signers = _statement_signers(dsse, roster, at)
    try:
        verified = verify_envelope(dsse, signers)
    except KeyError_ as e:
        raise PackInvalid("4", f"statement signature: {e}") from e
    if verified.payload != envelope.canonical(statement):
        raise PackInvalid("4", "the statement is not in canonical form")
    # Step 5: checkpoints are signed by a key holding the log role when they were signed
    # (no earlier than the newest pack event they cover); events included; before -> after.
    origin = predicate["ledger"]["origin"]
    before_note, after_note = files[BEFORE].decode(), files[AFTER].decode()
    try:
        before = verify_with_roster(before_note, origin, roster,
                                    _covered_time(before_note, events))
        after = verify_with_roster(after_note, origin, roster, at)
    except VerificationFailed as e:
        raise PackInvalid("5", str(e)) from e
    report(progress, CHECKING, 0, len(events))
    for done, ((doc, _rec), leaf) in enumerate(zip(events, v.leaves or [], strict=True), 1):
        if progress is not None and (done % EVERY == 0 or done == len(events)):
            progress(CHECKING, done, len(events))
        try:
            verify_inclusion(leaf, doc["seq"] - 1, after.size, [unb64(p) for p in doc["proof"]],
                             after.root)
        except VerificationFailed as e:
            raise PackInvalid("5", f"event seq {doc['seq']}: {e}") from e
    cons = json.loads(files[CONSISTENCY])
    if (cons["old_size"], cons["new_size"]) != (before.size, after.size):
        raise PackInvalid("5", "the consistency proof is for other checkpoints")
    try:
        verify_consistency(before.size, after.size, before.root, after.root,
                           [unb64(p) for p in cons["proof"]])
    except VerificationFailed as e:
        raise PackInvalid("5", f"before -> after: {e}") from e
    # Step 6: the predicate says what the signed events say.
    _check_predicate(predicate, events)
    # Steps 7.1-7.3: proof files, cosignatures, the witness policy (governance/witnessed.py).

    witnessing = verify_witnessing(files, predicate, events, v.leaves or [], before, after,
                                   policy)
    # Steps 8.1-8.4: the copies statement is what the signed events support.
    copies = predicate.get("copies")
    if copies is not None:
        try:
            check_statement(copies, [fact_of(rec.state) for _doc, rec in events],
                            predicate["batch"]["id"])
        except CopiesInvalid as e:
            raise PackInvalid(f"8.{e.step}", f"copies: {e}") from e
        except (KeyError, TypeError, ValueError) as e:  # a signed event it cannot read
            raise PackInvalid("8", f"copies: the statement's events do not read: {e!r}") from e
    reach = predicate["reach"]
    partials = predicate.get("partial_outcomes") or []
    is_partial = predicate["batch"]["outcome"] == PARTIAL
    return PackReport(True, None, None, verified.signers, len(events),
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
    signed_partials = _partial_outcomes(
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


__all__ = ["PREDICATE_SCHEMA", "SIGNER_ROLES", "PackInvalid", "PackReport", "batch_event_rows",
           "build_pack", "countersign", "pack_time", "predicate_problems", "read_pack",
           "read_pack_zip", "render_report", "verify_pack", "verify_pack_bytes", "zip_pack"]
