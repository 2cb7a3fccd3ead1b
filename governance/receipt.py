"""The erasure receipt for the data subject (docs/adr/0023, docs/spec/erasure-receipt.md).

A DSSE envelope (payload type :data:`PAYLOAD_TYPE`) signed by the operator over the RFC
8785 bytes of a small JSON document: the request id, what was erased (count and ids),
when, and each tombstone and key destruction as a leaf of the transparency log with its
inclusion proof (c2sp.org/tlog-proof) against one witnessed checkpoint. No memory
content: ids, counts, times, hashes, signatures.

The file is the canonical JSON of the envelope followed by one newline, so any changed
byte fails verification (a re-serialized but equivalent envelope too: step R1).
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.dsse import (
    DocumentInvalid,
    SignedDocument,
    check_signature,
    read_document,
    sign_document,
)
from keys.signing import key_id
from ledger import clock, envelope
from ledger.checkpoint import CheckpointError, parse_vkey, verify_checkpoint
from ledger.errors import ConflictError, NotFound, VerificationFailed
from ledger.leaf import LEAF_DOMAIN
from ledger.merkle import leaf_hash, verify_inclusion

if TYPE_CHECKING:
    from governance.copies import Fact
    from governance.i18n import Words
    from ledger.application import LedgerApp
    from ledger.checkpoint import Checkpoint
    from ledger.domain import ErasureRequest, RedactionBatch

PAYLOAD_TYPE = "application/vnd.memory-ledger.erasure-receipt.v1+json"
RECEIPT_TYPE = "https://memory-ledger.dev/erasure-receipt/v1"
TOMBSTONES = {"memory-ledger:atom.redacted.v1": "atoms",
              "memory-ledger:artifact.deleted.v1": "artifacts"}
KEY_DESTROYED = {"memory-ledger:atom.data-key-destroyed.v1": "atoms",
                 "memory-ledger:artifact.data-key-destroyed.v1": "artifacts",
                 "memory-ledger:subject.data-key-destroyed.v1": "subjects"}
_HEAD = struct.Struct(">Q16sQH")
MAX_RECEIPT_BYTES = 4 << 20

STEPS = {"R1": "form", "R2": "operator signature", "R3": "content", "R4": "checkpoint",
         "R5": "tombstone proofs", "R6": "witnesses", "R7": "copies"}


class ReceiptInvalid(VerificationFailed):
    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"receipt step {step} ({STEPS[step]}): {message}")
        self.step = step


# ----------------------------------------------------------------------------- building
def build_receipt(app: LedgerApp, request_id: str, operator: str = "operator",
                  locale: str | None = None) -> bytes:
    """The receipt file of a completed erasure request, against a fresh witnessed checkpoint.

    ``locale``: the language of the page for the person (en, es); default: the subject's
    own locale, else the ledger's ``[controller] locale``. It is recorded in the signed
    document as a presentation hint only: no verification step reads it."""
    from governance.batch_events import batch_event_rows
    from ledger.witness.cosign import check_cosignatures, parse_witness_vkey

    req, batch = _completed_request(app, request_id)
    rows = batch_event_rows(app, list(batch.event_ids))
    resting, stated = _resting_copies(app, batch, req)
    cp = app.checkpoint()
    entries = _tombstone_entries(app, rows, cp)
    copy_events = _copy_events(app, resting, cp, {e["leaf"] for e in entries})
    keys = [parse_witness_vkey(v) for _, v in app.config.witnesses]
    found = check_cosignatures(cp.note, keys).valid
    signer = app.signer(operator)
    from governance.i18n import negotiate

    lang = negotiate(locale, _subject_locale(app, req.subject_id), app.config.locale)
    erased = {kind: {"count": len(ids), "ids": sorted(ids)}
              for kind, ids in sorted(batch.targets.items())}
    document = {
        "type": RECEIPT_TYPE,
        "ledger": {"id": app.ledger_id, "origin": app.config.origin, "log_vkey": app.log_vkey()},
        "controller": {"name": app.config.controller, "contact": app.config.contact},
        "locale": lang,
        "request": {"id": str(req.id), "subject": req.subject_ref,
                    "legal_basis": req.legal_basis, "received_at": req.received_at,
                    "completed_at": req.completed_at},
        "erased": erased,
        "tombstones": entries,
        "checkpoint": cp.note,
        "witnesses": [{"witness": v, "timestamp": c.timestamp} for v, c in sorted(found.items())],
        "operator": {"kid": signer.kid,
                     "public_key": base64.b64encode(signer.public_key).decode()},
        "issued_at": clock.format_instant(clock.now()),
        "copies": {"batch": str(batch.id), "statement": stated, "events": copy_events},
    }
    return sign_document(document, PAYLOAD_TYPE, signer)


def _completed_request(app: LedgerApp, request_id: str) -> tuple[ErasureRequest, RedactionBatch]:
    """The erasure request (completed) and its redaction batch; refused otherwise."""
    from ledger.domain import ErasureRequest, RedactionBatch

    try:
        req = app.reader.aggregate(UUID(str(request_id)))
    except Exception as e:
        raise NotFound(f"no erasure request {request_id}",
                       hint="see the request id printed by `ledger redact-user`") from e
    if not isinstance(req, ErasureRequest) or req.completed_at is None or not req.batch_id:
        raise ConflictError(f"request {request_id} is not completed; a receipt proves a "
                            "completed erasure", hint="finish it with `ledger redact-user`")
    batch = app.reader.aggregate(UUID(req.batch_id))
    if not isinstance(batch, RedactionBatch):
        raise NotFound(f"batch {req.batch_id} of request {request_id} is not a redaction batch")
    return req, batch


def _resting_copies(app: LedgerApp, batch: RedactionBatch, req: ErasureRequest
                    ) -> tuple[list[Any], dict[str, Any]]:
    """The signed events the copies statement rests on, and the statement."""
    from governance import copies
    from governance.batch_events import erasure_rows

    erasure = erasure_rows(app, batch, req)
    resting = copies.resting_rows(erasure, copies.evidence_rows(app, erasure), str(batch.id))
    stated = copies.statement(copies.facts_of(r.state for r in resting), str(batch.id))
    if not any(g["state"] == copies.PENDING for g in stated["older_copies"]):
        # the policy and the log's first event date a pending rotation only: left out
        resting = [r for r in resting if r.topic != copies.POLICY_SET
                   and copies.fact_of(r.state).seq != 1]
    return resting, stated


def _proof_text(app: LedgerApp, seq: int, cp: Any) -> str:
    """The tlog-proof of event ``seq`` in checkpoint ``cp``, without the checkpoint."""
    from ledger.witness.wire import TlogProof

    return TlogProof(seq - 1, tuple(app.reader.inclusion_proof(seq - 1, cp.size)),
                     cp.note).text().split("\n\n", 1)[0] + "\n"


def _tombstone_entries(app: LedgerApp, rows: list[Any], cp: Any) -> list[dict[str, Any]]:
    """Each tombstone and key destruction of the batch as a leaf with its proof."""
    from ledger.leaf import leaf_of

    entries = []
    for r in rows:
        if r.topic not in TOMBSTONES and r.topic not in KEY_DESTROYED:
            continue
        opened = envelope.open_state(r.state)
        seq = int(opened.envelope["seq"])
        leaf = leaf_of(r, opened)
        entries.append({
            "event_id": envelope.event_id(r.originator_id, r.originator_version),
            "topic": r.topic, "timestamp": opened.envelope["timestamp"],
            "leaf": base64.b64encode(leaf).decode(),
            "proof": _proof_text(app, seq, cp),
        })
    return entries


def _copy_events(app: LedgerApp, resting: list[Any], cp: Any, listed: set[str]
                 ) -> list[dict[str, Any]]:
    """The events of the copies section, each with its proof unless R5 proves its leaf."""
    from ledger.leaf import leaf_of

    copy_events = []
    for r in resting:
        opened = envelope.open_state(r.state)
        seq = int(opened.envelope["seq"])
        event: dict[str, Any] = {"state": base64.b64encode(r.state).decode()}
        if base64.b64encode(leaf_of(r, opened)).decode() not in listed:  # else R5 proved it
            event["proof"] = _proof_text(app, seq, cp)
        copy_events.append(event)
    return copy_events


def _subject_locale(app: LedgerApp, subject_id: str | None) -> str | None:
    """The locale the subject registered (not a personal field: it outlives the erasure),
    None when unknown."""
    from ledger.domain import Subject

    try:
        subject = app.reader.aggregate(UUID(str(subject_id)))
    except Exception:  # an unknown or unreadable subject: the ledger's default then
        return None
    return subject.locale if isinstance(subject, Subject) else None


# ----------------------------------------------------------------------------- verifying
@dataclass
class ReceiptReport:
    request_id: str
    subject: str
    completed_at: str
    erased: dict[str, int]
    tombstones: int
    checkpoint_size: int
    witnesses: list[str] = field(default_factory=list)
    trusted: dict[str, bool] = field(default_factory=dict)
    policy: str | None = None
    copies: dict[str, Any] | None = None  # governance.copies.summary (R7); None before it

    def as_json(self) -> dict[str, Any]:
        return {"ok": True, "request_id": self.request_id, "subject": self.subject,
                "completed_at": self.completed_at, "erased": self.erased,
                "tombstones": self.tombstones, "checkpoint_size": self.checkpoint_size,
                "witnesses": self.witnesses, "trusted": self.trusted, "policy": self.policy,
                "copies": self.copies}


def _b64(text: Any, step: str, what: str) -> bytes:
    try:
        raw = base64.b64decode(str(text), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ReceiptInvalid(step, f"{what} is not base64") from e
    if base64.b64encode(raw).decode() != text:
        raise ReceiptInvalid(step, f"{what} is not canonical base64")
    return raw


def parse_leaf(leaf: bytes) -> tuple[int, str, int, str]:
    """``(seq, originator id, version, topic)`` of leaf bytes (docs/spec/leaf.md)."""
    if not leaf.startswith(LEAF_DOMAIN) or len(leaf) < len(LEAF_DOMAIN) + _HEAD.size + 96:
        raise ValueError("not memory-ledger leaf bytes")
    seq, oid, version, n = _HEAD.unpack_from(leaf, len(LEAF_DOMAIN))
    start = len(LEAF_DOMAIN) + _HEAD.size
    if len(leaf) != start + n + 32 + 64:
        raise ValueError("leaf length does not match its topic length")
    return seq, str(UUID(bytes=oid)), version, leaf[start:start + n].decode()


def verify_receipt(data: bytes, operator_public_key: bytes | None = None,
                   log_vkey: str | None = None, policy: Any = None) -> ReceiptReport:
    """Steps R1-R7 (docs/spec/erasure-receipt.md); raises :class:`ReceiptInvalid`."""
    signed = _read_receipt(data)
    doc = signed.document
    _check_operator_signature(signed, doc, operator_public_key)
    content = _read_content(doc)
    cp = _verify_checkpoint(content, log_vkey)
    _check_tombstones(content, cp)
    valid, described = _check_witnesses(doc, content.note, policy)
    summ = None
    if "copies" in doc:
        summ = _verify_copies(doc, content.items, content.ids, str(content.request["id"]), cp,
                              content.note)
    req = content.request
    return ReceiptReport(str(req["id"]), str(req["subject"]), str(req["completed_at"]),
                         content.counts, len(content.items), cp.size, sorted(valid),
                         {"operator_key": operator_public_key is not None,
                          "log_key": log_vkey is not None}, described, summ)


def _read_receipt(data: bytes) -> SignedDocument:
    """R1. Form: at most 4 MiB, canonical JSON of a DSSE envelope of our type with one
    signature, over the canonical bytes of a receipt document, then LF."""
    try:
        return read_document(data, PAYLOAD_TYPE, RECEIPT_TYPE, "the receipt",
                             max_bytes=MAX_RECEIPT_BYTES)
    except DocumentInvalid as e:
        raise ReceiptInvalid("R1", str(e)) from None


def _check_operator_signature(signed: SignedDocument, doc: dict[str, Any],
                              operator_public_key: bytes | None) -> None:
    """R2. The operator's signature: under the pinned key, else the key the receipt names."""
    try:
        pub = operator_public_key or _b64(doc["operator"]["public_key"], "R2", "operator key")
        kid = key_id(pub)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, ReceiptInvalid):
            raise
        raise ReceiptInvalid("R2", f"the receipt names no usable operator key: {e}") from e
    if signed.kid != kid:
        raise ReceiptInvalid("R2", f"no signature (or a foreign one) beside key {kid}")
    try:
        check_signature(signed, pub, "the operator's signature")
    except DocumentInvalid as e:
        raise ReceiptInvalid("R2", str(e)) from None


@dataclass(frozen=True)
class _Content:
    """What R3 read of a receipt document."""

    request: Any
    items: Any  # the tombstones and key destructions
    note: str  # the checkpoint
    ledger: Any
    counts: dict[str, int]
    ids: dict[str, list[str]]


def _read_content(doc: dict[str, Any]) -> _Content:
    """R3. Content: the fields a receipt has; every erased item id is a UUID."""
    try:
        req, erased, items = doc["request"], doc["erased"], doc["tombstones"]
        note, ledger = str(doc["checkpoint"]), doc["ledger"]
        counts = {kind: int(v["count"]) for kind, v in erased.items()}
        ids = {kind: [str(UUID(i)) for i in v["ids"]] for kind, v in erased.items()}
        if any(len(ids[k]) != counts[k] for k in counts):
            raise ValueError("a count differs from its list of ids")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ReceiptInvalid("R3", f"malformed receipt document: {e}") from e
    return _Content(req, items, note, ledger, counts, ids)


def _verify_checkpoint(content: _Content, log_vkey: str | None) -> Checkpoint:
    """R4. The checkpoint is signed by the log key (pinned, else the receipt's own)."""
    ledger = content.ledger
    try:
        name, log_pub = parse_vkey(log_vkey or str(ledger["log_vkey"]))
        return verify_checkpoint(content.note, name, log_pub,
                                 expected_origin=str(ledger["origin"]))
    except (ValueError, CheckpointError) as e:
        raise ReceiptInvalid("R4", f"the checkpoint does not verify: {e}") from e


def _check_tombstones(content: _Content, cp: Checkpoint) -> None:
    """R5. Each tombstone / key destruction is a leaf included in that checkpoint, naming an
    erased id; every erased atom and artifact has a tombstone, every item a key destroyed."""
    covered: dict[str, set[tuple[str, str]]] = {}
    for n, item in enumerate(content.items, start=1):
        oid, mark = _check_tombstone(n, item, content, cp)
        covered.setdefault(oid, set()).add(mark)
    ids = content.ids
    for kind in ("atoms", "artifacts"):
        for i in ids.get(kind, []):
            if covered.get(i, set()) != {("tomb", kind), ("key", kind)}:
                raise ReceiptInvalid("R5", f"erased {kind[:-1]} {i} has no tombstone and key "
                                           "destruction in the log")
    for i in ids.get("subjects", []):
        if ("key", "subjects") not in covered.get(i, set()):
            raise ReceiptInvalid("R5", f"erased subject {i} has no key destruction in the log")


def _check_tombstone(n: int, item: Any, content: _Content, cp: Checkpoint
                     ) -> tuple[str, tuple[str, str]]:
    """R5 for the ``n``-th entry: returns the item it covers and what it is
    (``("tomb" | "key", kind)``)."""
    from ledger.witness.wire import WireError, parse_tlog_proof

    try:
        leaf = _b64(item["leaf"], "R5", f"tombstone {n} leaf")
        seq, oid, version, topic = parse_leaf(leaf)
        proof = parse_tlog_proof(str(item["proof"]) + "\n" + content.note)
    except (KeyError, TypeError, ValueError, WireError) as e:
        if isinstance(e, ReceiptInvalid):
            raise
        raise ReceiptInvalid("R5", f"tombstone {n}: {e}") from e
    kind = TOMBSTONES.get(topic) or KEY_DESTROYED.get(topic)
    if kind is None or topic != item.get("topic") or \
            item.get("event_id") != f"{oid}/{version}" or oid not in content.ids.get(kind, []):
        raise ReceiptInvalid("R5", f"tombstone {n} ({topic}) does not name an erased "
                                   f"{kind or 'item'}")
    if proof.index != seq - 1:
        raise ReceiptInvalid("R5", f"tombstone {n}: proof index {proof.index} is not leaf "
                                   f"{seq - 1}")
    try:
        verify_inclusion(leaf_hash(leaf), seq - 1, cp.size, list(proof.proof), cp.root)
    except VerificationFailed as e:
        raise ReceiptInvalid("R5", f"tombstone {n}: {e}") from e
    return oid, ("tomb" if topic in TOMBSTONES else "key", kind)


def _check_witnesses(doc: dict[str, Any], note: str, policy: Any
                     ) -> tuple[dict[str, Any], str | None]:
    """R6. Witnesses: the cosignatures the receipt claims verify; a policy's quorum is met.
    Returns the valid cosignatures and the policy's description (None without one)."""
    from ledger.witness.cosign import CosignatureError, check_cosignatures, parse_witness_vkey

    try:
        claimed = [parse_witness_vkey(str(w["witness"])) for w in doc["witnesses"]]
        keys = list(policy.witnesses.values()) if policy is not None else claimed
        valid = check_cosignatures(note, keys).valid
    except (KeyError, TypeError, CosignatureError) as e:
        raise ReceiptInvalid("R6", str(e)) from e
    checked = {k.vkey for k in keys}
    for w in doc["witnesses"]:
        c = valid.get(w["witness"])
        if w["witness"] in checked and (c is None or c.timestamp != w["timestamp"]):
            raise ReceiptInvalid("R6", f"claimed cosignature by {w['witness']} is not on the "
                                       "checkpoint")
    if policy is None:
        return valid, None
    names = {n for n, k in policy.witnesses.items() if k.vkey in valid}
    if not policy.satisfied(names):
        raise ReceiptInvalid("R6", f"witness quorum not met: {policy.describe()}; "
                                   f"cosigned by {', '.join(sorted(names)) or 'none'}")
    return valid, policy.describe() + ": met"


def _verify_copies(doc: dict[str, Any], items: list[Any], ids: dict[str, list[str]],
                   request_id: str, cp: Any, note: str) -> dict[str, Any]:
    """Step R7: each event of ``copies.events`` is in the checkpoint (its own proof, or a
    leaf R5 proved), of this ledger; the key destructions are the erased items' (every one
    R5 listed), the request's and the batch's; the statement passes
    governance/copies.py's checks on those events (docs/spec/evidence-pack.md 8.1-8.4)."""
    from governance import copies

    batch_id, claimed, events = _read_copies_section(doc)
    proved = {str(item["leaf"]) for item in items}
    facts = [_copies_event_fact(n, event, doc["ledger"], proved, cp, note)
             for n, event in enumerate(events, start=1)]
    destroyed = {f.event_id: f for f in facts if f.topic.endswith(copies.KEY_DESTROYED_SUFFIX)}
    for item in items:
        if item["topic"] in KEY_DESTROYED and item["event_id"] not in destroyed:
            raise ReceiptInvalid("R7", f"the statement leaves out the key destruction "
                                       f"{item['event_id']} of an erased item")
    erased = {i for v in ids.values() for i in v}
    for f in destroyed.values():
        if f.originator_id not in erased | {request_id, batch_id}:
            raise ReceiptInvalid("R7", f"key destruction {f.event_id} is not of this erasure")
    try:
        copies.check_statement(claimed, facts, batch_id)
    except copies.CopiesInvalid as e:
        raise ReceiptInvalid("R7", f"step {e.step}: {e}") from e
    except (KeyError, TypeError, ValueError) as e:
        raise ReceiptInvalid("R7", f"malformed statement: {e}") from e
    return copies.summary(claimed, str(doc.get("issued_at")))


def _read_copies_section(doc: dict[str, Any]) -> tuple[str, dict[str, Any], list[Any]]:
    """R7: the copies section's batch id, statement and events."""
    try:
        section = doc["copies"]
        batch_id, claimed = str(UUID(section["batch"])), section["statement"]
        events = list(section["events"])
        if not isinstance(claimed, dict):
            raise TypeError("the statement is not an object")
    except (KeyError, TypeError, ValueError) as e:
        raise ReceiptInvalid("R7", f"malformed copies section: {e}") from e
    return batch_id, claimed, events


def _copies_event_fact(n: int, event: Any, ledger: Any, proved: set[str], cp: Any,
                       note: str) -> Fact:
    """R7 for the ``n``-th copies event: of this ledger, included in the checkpoint (by
    its own proof, or as a leaf R5 proved); returns its fact."""
    from governance import copies
    from ledger.leaf import leaf_of
    from ledger.witness.wire import WireError, parse_tlog_proof

    try:
        state = _b64(event["state"], "R7", f"copies event {n}")
        opened = envelope.open_state(state)
        env = opened.envelope
        rec = _Stored(UUID(str(env["originator_id"])), int(env["version"]),
                      str(env["topic"]), state)
        leaf = leaf_of(rec, opened)
    except (KeyError, TypeError, ValueError, envelope.EnvelopeError) as e:
        if isinstance(e, ReceiptInvalid):
            raise
        raise ReceiptInvalid("R7", f"copies event {n}: {e}") from e
    seq = int(env["seq"])
    if env["ledger"] != ledger["id"]:
        raise ReceiptInvalid("R7", f"copies event {n} is of another ledger")
    if "proof" in event:
        try:
            proof = parse_tlog_proof(str(event["proof"]) + "\n" + note)
            if proof.index != seq - 1:
                raise ValueError(f"proof index {proof.index} is not leaf {seq - 1}")
            verify_inclusion(leaf_hash(leaf), seq - 1, cp.size, list(proof.proof), cp.root)
        except (ValueError, WireError, VerificationFailed) as e:
            raise ReceiptInvalid("R7", f"copies event {n} (seq {seq}): {e}") from e
    elif base64.b64encode(leaf).decode() not in proved:
        raise ReceiptInvalid("R7", f"copies event {n} (seq {seq}) has no inclusion proof")
    return copies.fact_of(state)


@dataclass
class _Stored:
    originator_id: UUID
    originator_version: int
    topic: str
    state: bytes


# ----------------------------------------------------------------------------- for people
def _copies_html(doc: dict[str, Any], w: Words, controller: str) -> str:
    """The receipt's word on copies: the date after which no copy of the key store can
    decrypt what was erased (or that it is pending, or not bounded), and what it does not
    cover. Empty for a receipt issued before copies were stated."""
    section = doc.get("copies")
    if not section:
        return ""
    from governance.copies import subject_words

    e = html.escape
    s = section["statement"]
    outside = [n["made_before"] for n in s.get("not_covered", [])]
    caveat = ""
    if outside:
        said = w._("Not covered: copies of the search indexes and of the memory store that "
                   "someone made outside the ledger before %(date)s, and anything taken out "
                   "of the ledger before then (exports, an assistant's own records); "
                   "%(controller)s is responsible for those.",
                   date=w.when(max(outside)), controller=controller)
        caveat = f"<p>{e(said)}</p>\n"
    title = w._("Backups and other copies")
    return (f"<h2>{e(title)}</h2>\n"
            f"<p>{e(subject_words(s, w, controller))}</p>\n{caveat}")


def render_html(data: bytes, locale: str | None = None) -> str:
    """One printable page for the person who asked to be forgotten (no scripts, no
    network), in ``locale`` or else the language the receipt names (English by default).
    Presentation only: the signed JSON is the receipt, whatever the page's language."""
    from governance.i18n import words

    env = json.loads(data)
    doc = json.loads(base64.b64decode(env["payload"]))
    w = words(locale, doc.get("locale"))
    e = html.escape
    named = (doc.get("controller") or {}).get("name")
    contact = (doc.get("controller") or {}).get("contact")
    controller = named or w._("the organisation that kept this memory")
    items, ids = _erased_html(doc["erased"], w)
    ask = [w._("Questions about this receipt: %(contact)s.", contact=contact)] if contact else []
    check = w._("This receipt is signed with the operator key of %(controller)s and contains "
                "none of the erased data. Anyone can check it offline, without asking "
                "%(controller)s, with this command or with any DSSE verifier and the "
                "operator's public key:", controller=controller)
    t = _page_words(doc, w)
    return f"""<!doctype html>
<html lang="{e(w.lang)}"><head><meta charset="utf-8">
<title>{e(t["title"])}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<style>body{{font-family:system-ui,sans-serif;max-width:44rem;margin:1.5rem auto;color:#222;
font-size:11pt;line-height:1.45;padding:0 1rem}}h1{{font-size:1.5rem}}h2{{font-size:1.1rem;
margin-top:1.4rem}}td{{padding:.1rem .5rem;font-size:9pt;vertical-align:top}}
code,pre{{font-size:8.5pt}}pre{{background:#f4f4f4;padding:.4rem .6rem;overflow-wrap:anywhere;
white-space:pre-wrap}}.small{{font-size:8.5pt;color:#444}}.small code{{overflow-wrap:anywhere}}
@page{{size:A4;margin:1.5cm}}</style></head><body>
<h1>{e(t["h1"])}</h1>
{"".join(f"<p>{e(p)}</p>" for p in _intro(doc["request"], w, controller))}
<p>{e(t["what"])}</p><ul>{items}</ul>
<p>{e(_what_the_log_holds(doc, w, controller))}</p>
{_copies_html(doc, w, controller)}<h2>{e(t["how"])}</h2>
<p>{e(check)}</p>
<pre><code>ledger audit-tools verify-receipt receipt.json</code></pre>
<p>{e(t["file"])}</p>
<h2>{e(t["items"])}</h2><table>{ids}</table>
<p class="small">{e(t["issued"])} {" ".join(e(a) for a in ask)}<br>
{e(t["operator"])} <code>{e(doc['operator']['kid'])}</code>;
{e(t["log"])} <code>{e(doc['ledger']['log_vkey'])}</code>.</p>
</body></html>
"""


def _erased_html(erased: dict[str, Any], w: Words) -> tuple[str, str]:
    """What was erased, in words (list items) and by id (table rows)."""
    e = html.escape
    what = {
        "atoms": lambda n: w.ngettext(
            "%(num)d memory: something an AI assistant remembered about you",
            "%(num)d memories: things an AI assistant remembered about you", n),
        "artifacts": lambda n: w.ngettext(
            "%(num)d source document (a chat, a note) that memories were drawn from",
            "%(num)d source documents (chats, notes) that memories were drawn from", n),
        "subjects": lambda n: w.ngettext(
            "your profile (your name and details)", "%(num)d profiles (names and details)",
            n),
    }
    label = {"atoms": w._("memory"), "artifacts": w._("source document"),
             "subjects": w._("profile")}
    order = sorted(erased, key=lambda k: (list(what).index(k) if k in what else 9, k))
    items = "".join(f"<li>{e(what[k](erased[k]['count']) if k in what else k)}</li>"
                    for k in order if erased[k]["count"])
    ids = "".join(f"<tr><td>{e(label.get(k, k))}</td><td><code>{e(i)}</code></td></tr>"
                  for k in order for i in erased[k]["ids"])
    return items, ids


def _intro(req: dict[str, Any], w: Words, controller: str) -> list[str]:
    """The page's opening paragraphs: the request, the person's reference, the basis."""
    basis = req.get("legal_basis")
    return [
        w._("You asked %(controller)s to erase the data it held about you. Your request was "
            "received on %(received)s and completed on %(completed)s.",
            controller=controller, received=w.when(req["received_at"]),
            completed=w.when(req["completed_at"])),
        w._("Your reference: %(ref)s. Request number: %(request)s.",
            ref=str(req["subject"]), request=str(req["id"])),
        *([w._("Legal basis given: %(basis)s.", basis=basis)] if basis else []),
    ]


def _what_the_log_holds(doc: dict[str, Any], w: Words, controller: str) -> str:
    """The keys destroyed, the signed entries and who witnessed the log, in one paragraph."""
    names = ", ".join(c["witness"].split("+", 1)[0] for c in doc["witnesses"])
    witnessed = (w._("Independent witnesses (%(names)s) have checked that this log was never "
                     "rewritten.", names=names) if names else
                 w._("No independent witness has cosigned this log yet."))
    log = w.ngettext(
        "The erasure is recorded as %(num)d signed entry in the ledger's log, which cannot "
        "be altered without it being noticed.",
        "The erasure is recorded as %(num)d signed entries in the ledger's log, which cannot "
        "be altered without it being noticed.", len(doc["tombstones"]))
    keys = w._("The keys that could decrypt it were destroyed, so no one, %(controller)s "
               "included, can read it from the ledger any more.", controller=controller)
    return f"{keys} {log} {witnessed}"


def _page_words(doc: dict[str, Any], w: Words) -> dict[str, str]:
    """The page's headings and small print."""
    req = doc["request"]
    return {"title": w._("Erasure receipt %(request)s", request=req["id"]),
            "h1": w._("Your erasure receipt"), "what": w._("What was erased:"),
            "how": w._("How to check this receipt"),
            "file": w._("What is checked is the signed file receipt.json; this page only "
                        "presents it."),
            "items": w._("Erased items"), "issued": w._("Issued on %(issued)s.",
                                                         issued=w.when(doc["issued_at"])),
            "operator": w._("Operator key"), "log": w._("log key")}
