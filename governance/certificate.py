"""The certificate of erasure: the page an auditor files (docs/spec/certificate.md, ADR 0046).

A one- or two-page statement, in the spirit of the NIST SP 800-88r2 sanitization
certificate, of one erasure (a redaction batch): the controller, the request, the subject's
reference, the method (cryptographic erase, the purge of each read model), the tool, what
was destroyed, how it was verified and with what result, what older copies remain and until
when, who executed it and who countersigned, and the Evidence Pack it rests on (its digest,
and how to verify it).

Every fact but the controller, the tool and the issue is read from a verified Evidence Pack
(:func:`facts_of_pack`), so the certificate claims nothing the pack does not prove, and a
verifier given the pack derives the same facts again (step C6). The statement is a signed
document of its own kind (governance/dsse.py: a DSSE envelope, payload type
:data:`PAYLOAD_TYPE`, over the RFC 8785 bytes of a JSON object of type
:data:`CERTIFICATE_TYPE`), signed by an operator key and carrying the ledger's roster events,
so that a verifier holding only the root public key checks who signed it (steps C3, C4). No
memory content: ids, counts, times, key ids and names, the request's reference and legal
basis (what the pack's predicate holds, and no more).

:func:`sections` says the facts in words, once, for both renderings: the HTML page here
(:func:`render_html`) and the PDF (governance/certificate_pdf.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from governance.dsse import (
    DocumentInvalid,
    SignedDocument,
    check_signature,
    read_document,
    read_statement,
    sign_document,
)
from governance.pack_layout import EVENTS, SIGNER_ROLES, STATEMENT
from keys.errors import KeyNotAuthorized
from keys.roster import ROSTER_TOPICS, TOPIC_STARTED, RosterState
from keys.signing import key_id
from ledger import clock, envelope, json_schemas
from ledger.errors import InputError, VerificationFailed

if TYPE_CHECKING:
    from governance.pack_verify import PackReport
    from ledger.application import LedgerApp

PAYLOAD_TYPE = "application/vnd.memory-ledger.certificate-of-erasure.v1+json"
CERTIFICATE_TYPE = "https://memory-ledger.dev/certificate-of-erasure/v1"
SCHEMA = "certificate-of-erasure.v1.json"
STANDARD = "NIST SP 800-88r2"
TECHNIQUE = "cryptographic-erase"
TOOL = "memory-ledger"
PACK_FACTS = ("ledger", "request", "subject", "batch", "method", "destroyed", "verification",
              "copies", "people", "pack")
"""The document's keys that :func:`facts_of_pack` derives from the Evidence Pack (C6)."""
STEPS = {"C1": "form", "C2": "schema", "C3": "roster", "C4": "signature",
         "C5": "coherence", "C6": "evidence pack"}
PACK_STEPS = {"1": "statement", "1.1": "schema", "2": "files", "3": "events",
              "4": "signatures", "5": "proofs", "6": "coherence", "7.1": "proof files",
              "7.2": "cosignatures", "8": "copies"}
"""The verify-pack steps (docs/spec/evidence-pack.md) a certificate reports as passed."""
NOT_SET = "not set (config.toml [controller])"

_KEY_DESTROYED = ".data-key-destroyed.v1"
_BATCH = {"opened": "memory-ledger:batch.opened.v1",
          "approved": "memory-ledger:batch.approved.v1",
          "executed": "memory-ledger:batch.executed.v1",
          "closed": "memory-ledger:batch.closed.v1"}


class CertificateInvalid(VerificationFailed):
    """A certificate failed verification; ``step`` is the docs/spec/certificate.md step."""

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"certificate step {step} ({STEPS[step]}): {message}")
        self.step = step


# ----------------------------------------------------------------------------- facts
def pack_digest(files: Mapping[str, bytes]) -> str:
    """The Evidence Pack's digest: SHA-256 (hex) of its signed in-toto Statement, the DSSE
    payload of ``statement.dsse.json``. The statement's subjects are the digests of every
    other file, so this one digest names the whole pack; a countersignature added later
    changes the envelope, not the statement, nor this digest."""
    return hashlib.sha256(read_statement(files[STATEMENT])[1]).hexdigest()


def _statement(files: Mapping[str, bytes]) -> dict[str, Any]:
    statement: dict[str, Any] = read_statement(files[STATEMENT])[2]
    return statement


def _roster(lines: Sequence[Mapping[str, Any]]) -> RosterState:
    """The roster folded from stored roster events (already verified by the caller)."""
    state = RosterState()
    for line in lines:
        if line["topic"] in ROSTER_TOPICS:
            state.apply(str(line["topic"]),
                        envelope.open_state(base64.b64decode(line["state"])).envelope["payload"])
    return state


def _person(roster: RosterState, kid: str) -> dict[str, str]:
    entry = roster.entries.get(kid)
    name = "root" if kid == roster.root_kid else (entry.name if entry else "unknown key")
    return {"kid": kid, "name": name}


def _pack_steps(predicate: Mapping[str, Any]) -> list[str]:
    steps = ["1", "1.1", "2", "3", "4", "5", "6"]
    if predicate.get("witnesses"):
        steps += ["7.1", "7.2"]
    if predicate.get("copies"):
        steps += ["8"]
    return steps


def _copies(c: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not c:
        return None
    groups = []
    for g in c["older_copies"]:
        until = (g.get("since") if g["state"] == "unrecoverable" else
                 g.get("due") if g["state"] == "pending" else None)
        groups.append({"kek_epoch": g["kek_epoch"], "keys": g["keys"],
                       "destroyed_at": g["destroyed_at"], "state": g["state"],
                       "until": until, "unwrapped_until": g["unwrapped_until"]})
    return {"state": c["state"], "until": c["until"],
            "keystore": {"keys": c["keystore"]["keys"],
                         "destroyed_at": c["keystore"]["destroyed_at"]},
            "older_copies": groups,
            "not_covered": [{"what": n["what"], "made_before": n["made_before"]}
                            for n in c["not_covered"]]}


def facts_of_pack(files: Mapping[str, bytes], report: PackReport) -> dict[str, Any]:
    """What a certificate says of the erasure, from an Evidence Pack that verified
    (``report``: :func:`governance.pack.verify_pack_bytes` of the same ``files``). Pure: the
    same pack gives the same facts (step C6 derives them again)."""
    p = _statement(files)["predicate"]
    lines = [json.loads(x) for x in files[EVENTS].decode().splitlines() if x.strip()]
    roster = _roster(lines)
    index = p["events"]
    batch_id = p["batch"]["id"]

    def batch_event(kind: str) -> Mapping[str, Any]:
        return next(e for e in index if e["event_id"].startswith(batch_id + "/")
                    and e["topic"] == _BATCH[kind])

    req = p["request"]
    reach = p["reach"]
    scan = reach.get("raw_scan", {})
    signers = list(report.signers)
    cosigned = (p.get("witnesses") or {}).get("after", [])
    return {
        "ledger": {"id": p["ledger"]["id"], "origin": p["ledger"]["origin"],
                   "root_kid": roster.root_kid},
        "request": None if req is None else {
            "id": req["id"], "received_at": req["received_at"],
            "acknowledged_at": req["acknowledged_at"], "complete_due": req["complete_due"],
            "completed_at": req["completed_at"], "legal_basis": req["legal_basis"]},
        "subject": None if req is None else {"id": req["subject_id"],
                                             "reference": req["subject_ref"]},
        "batch": {"id": batch_id, "mode": p["batch"]["mode"], "outcome": p["batch"]["outcome"],
                  **{f"{k}_at": batch_event(k)["timestamp"] for k in _BATCH}},
        "method": {"technique": TECHNIQUE, "standard": STANDARD,
                   "read_models": [r["route"] for r in reach.get("routes", [])]},
        "destroyed": {"items": {k: len(v) for k, v in sorted(p["targets"].items())},
                      "keys": sum(e["topic"].endswith(_KEY_DESTROYED) for e in index)},
        "verification": {
            "reach": [{"route": r["route"], "items": r["items"], "reach": r["reach"],
                       "checked_at": r["checked_at"]} for r in reach.get("routes", [])],
            "raw_scan": {"files": scan.get("files", 0), "needles": scan.get("needles", 0),
                         "hits": len(scan.get("hits", [])),
                         "checked_at": scan.get("checked_at")},
            "pack_steps": _pack_steps(p),
            "witnessed_by": sorted({str(w["witness"]).split("+", 1)[0] for w in cosigned}),
            "flagged_for_review": len(reach.get("flagged_for_review", [])),
            "artifacts_for_review": len(reach.get("flags", {}).get("artifacts_for_review", [])),
            "result": _result(reach),
        },
        "copies": _copies(p.get("copies")),
        "people": {
            "approved_by": _person(roster, batch_event("approved")["signer"]),
            "executed_by": _person(roster, batch_event("executed")["signer"]),
            "pack_signed_by": _person(roster, signers[0]),
            "countersigned_by": [_person(roster, k) for k in signers[1:]],
        },
        "pack": {"digest": {"sha256": pack_digest(files)}, "generated_at": p["generated_at"],
                 "checkpoint": dict(p["checkpoints"]["after"]), "events": len(index)},
    }


def _result(reach: Mapping[str, Any]) -> str:
    routes = reach.get("routes", [])
    ok = bool(routes) and all(r["reach"] == "not-reachable" for r in routes) \
        and not reach.get("raw_scan", {}).get("hits")
    return "passed" if ok else "failed"


def problems(document: Any) -> list[str]:
    """Where ``document`` departs from schemas/certificate-of-erasure.v1.json (empty: valid)."""
    errors = sorted(json_schemas.validator(SCHEMA).iter_errors(document),
                    key=lambda e: (e.json_path, e.validator))
    return [f"{e.json_path}: {e.message[:160]}" for e in errors]


# ----------------------------------------------------------------------------- issuing
def roster_lines(app: LedgerApp) -> list[dict[str, Any]]:
    """The ledger's roster events as the certificate carries them (the form of a pack's
    ``events.jsonl`` line, without the proof)."""
    rows = app.reader.notifications(start=1, limit=10**9, topics=sorted(ROSTER_TOPICS))
    out = []
    for r in rows:
        out.append({"seq": envelope.open_state(r.state).envelope["seq"],
                    "originator_id": str(r.originator_id), "version": r.originator_version,
                    "topic": r.topic, "state": base64.b64encode(r.state).decode()})
    return out


def tool_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(TOOL)
    except PackageNotFoundError:  # a source tree that was never installed
        from ledger import __version__

        return __version__


def issue(app: LedgerApp, files: Mapping[str, bytes], batch_id: str, operator: str
          ) -> tuple[dict[str, Any], bytes]:
    """The certificate of ``batch_id`` resting on the Evidence Pack ``files``: the pack is
    verified first (against the ledger's root key; a pack that fails is refused, naming its
    step), must be this ledger's and this batch's, and must show a completed erasure. The
    document and its signed file bytes (signed by ``operator``'s key)."""
    from governance.pack_layout import PackInvalid
    from governance.pack_verify import verify_pack_bytes

    try:
        report = verify_pack_bytes(files, app.root_public_key)
    except PackInvalid as e:
        raise VerificationFailed(f"the Evidence Pack does not verify ({e}); no certificate "
                                 "was issued", hint="build the pack again: `ledger "
                                 "evidence-pack BATCH --out DIR`") from e
    facts = facts_of_pack(files, report)
    if facts["ledger"]["id"] != app.ledger_id:
        raise InputError(f"the Evidence Pack is of ledger {facts['ledger']['id']}, not of this "
                         f"one ({app.ledger_id})", hint="give this ledger's pack with --pack")
    if facts["batch"]["id"] != str(UUID(batch_id)):
        raise InputError(f"the Evidence Pack is of batch {facts['batch']['id']}, not "
                         f"{batch_id}", hint="give the pack of this batch, or none")
    if facts["batch"]["outcome"] != "completed" or facts["verification"]["result"] != "passed":
        raise InputError(f"batch {batch_id} ended {facts['batch']['outcome']}: a certificate "
                         "of erasure certifies a completed erasure whose every store was "
                         "verified", hint="the Evidence Pack states what was done")
    signer = app.signer(operator)
    lines = roster_lines(app)
    roster = _roster(lines)
    now = clock.format_instant(clock.now())
    try:
        roster.holds(signer.kid, SIGNER_ROLES, clock.parse_instant(now))
    except KeyNotAuthorized as e:
        raise InputError(f"{operator} ({signer.kid}) may not sign a certificate: {e}",
                         hint="sign with an operator key: --as operator") from e
    config = app.config
    document = {
        "type": CERTIFICATE_TYPE,
        **{k: facts[k] for k in PACK_FACTS},
        "controller": {"name": config.controller, "contact": config.contact},
        "tool": {"name": TOOL, "version": tool_version()},
        "issued_at": now,
        "issued_by": _person(roster, signer.kid),
        "roster": lines,
    }
    found = problems(document)
    if found:  # a bug in facts_of_pack or in what it reads, never the user's input
        raise RuntimeError(f"the certificate does not match schemas/{SCHEMA}: "
                           f"{'; '.join(found[:5])}")
    return document, sign_document(document, PAYLOAD_TYPE, signer)


# ----------------------------------------------------------------------------- verifying
@dataclass
class CertificateReport:
    batch_id: str
    request_id: str | None
    subject: str | None
    issued_at: str
    issued_by: dict[str, str]
    pack_digest: str
    result: str
    pack_checked: bool = False
    later_countersigners: list[dict[str, str]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"ok": True, "batch_id": self.batch_id, "request_id": self.request_id,
                "subject": self.subject, "issued_at": self.issued_at,
                "issued_by": self.issued_by, "pack_digest": self.pack_digest,
                "result": self.result, "pack_checked": self.pack_checked,
                "later_countersigners": self.later_countersigners}


@dataclass
class _Line:
    id: int
    originator_id: UUID | str
    originator_version: int
    topic: str
    state: bytes


def read_certificate(data: bytes) -> dict[str, Any]:
    """The document of a certificate file, checked for form only (step C1): for showing
    it, never for trusting it (:func:`verify_certificate`)."""
    return _read_signed(data).document


def verify_certificate(data: bytes, root_public_key: bytes,
                       pack: Mapping[str, bytes] | None = None) -> CertificateReport:
    """Steps C1-C6 of docs/spec/certificate.md; raises :class:`CertificateInvalid` at the
    first that fails. Pure: bytes and the trusted root key in, no file, no clock. With
    ``pack`` (the files of an Evidence Pack, as governance.pack.read_pack gives them), step
    C6 verifies the pack and derives the certificate's facts from it again."""
    signed = _read_signed(data)
    doc = signed.document
    _check_schema(doc)
    roster = _verify_roster(doc, root_public_key)
    _check_signer(signed, roster)
    # C5. Coherence: the facts agree with each other and with the roster.
    _coherent(doc, roster)
    report = CertificateReport(
        doc["batch"]["id"], (doc["request"] or {}).get("id"),
        (doc["subject"] or {}).get("reference"), doc["issued_at"], doc["issued_by"],
        doc["pack"]["digest"]["sha256"], doc["verification"]["result"])
    # C6. Evidence pack (when given): it verifies, it is the one the certificate names, and
    # the certificate's facts are the ones it proves.
    if pack is not None:
        report.pack_checked = True
        report.later_countersigners = _against_pack(doc, pack, root_public_key)
    return report


def _read_signed(data: bytes) -> SignedDocument:
    """C1. Form: the canonical file of a DSSE envelope of our payload type, one signature,
    over the canonical bytes of a document of our type."""
    try:
        return read_document(data, PAYLOAD_TYPE, CERTIFICATE_TYPE, "the certificate")
    except DocumentInvalid as e:
        raise CertificateInvalid("C1", str(e)) from None


def _check_schema(doc: dict[str, Any]) -> None:
    """C2. Schema: every field a certificate has, and no other (no place for content)."""
    found = problems(doc)
    if found:
        raise CertificateInvalid("C2", f"the document does not match schemas/{SCHEMA}: "
                                       f"{'; '.join(found[:3])}")


def _verify_roster(doc: dict[str, Any], root_public_key: bytes) -> RosterState:
    """C3. Roster: the roster events verify under the pinned root key, as the ledger's log
    does (docs/spec/event-envelope.md steps 1-7, a selection in log order)."""
    from ledger.verify import LogVerifier

    if doc["ledger"]["root_kid"] != key_id(root_public_key):
        raise CertificateInvalid("C3", f"the certificate names root key "
                                       f"{doc['ledger']['root_kid']}, not the pinned "
                                       f"{key_id(root_public_key)}")
    v = LogVerifier(ledger_id=doc["ledger"]["id"], root_public_key=root_public_key)
    v.sparse = True
    for line in doc["roster"]:
        if line["topic"] not in ROSTER_TOPICS:
            raise CertificateInvalid("C3", f"event seq {line['seq']} is not a roster event")
        rec = _Line(line["seq"], UUID(line["originator_id"]), line["version"], line["topic"],
                    base64.b64decode(line["state"]))
        if not v.feed(rec):
            f = v.report.failure
            assert f is not None
            raise CertificateInvalid("C3", f"roster event seq {line['seq']}: step {f.step}: "
                                           f"{f.reason}")
    if not doc["roster"] or doc["roster"][0]["topic"] != TOPIC_STARTED:
        raise CertificateInvalid("C3", "the roster does not start with roster.started")
    return v.report.roster


def _check_signer(signed: SignedDocument, roster: RosterState) -> None:
    """C4. Signature: by a key that held the operator or auditor role when the certificate
    was issued (as far as its roster shows), and it verifies."""
    doc = signed.document
    at = clock.parse_instant(doc["issued_at"])
    try:
        public = roster.holds(signed.kid, SIGNER_ROLES, at)
    except KeyNotAuthorized as e:
        raise CertificateInvalid("C4", f"signed by {signed.kid}, which does not hold the "
                                       f"operator or auditor role at "
                                       f"{doc['issued_at']}: {e}") from None
    try:
        check_signature(signed, public, "the certificate")
    except DocumentInvalid as e:
        raise CertificateInvalid("C4", str(e)) from None
    if doc["issued_by"] != _person(roster, signed.kid):
        raise CertificateInvalid("C4", f"issued_by {doc['issued_by']} is not the signer "
                                       f"{_person(roster, signed.kid)}")


def _coherent(doc: Mapping[str, Any], roster: RosterState) -> None:
    people = doc["people"]
    for role, who in [(k, people[k]) for k in ("approved_by", "executed_by", "pack_signed_by")] \
            + [("countersigned_by", p) for p in people["countersigned_by"]]:
        if who != _person(roster, who["kid"]):
            raise CertificateInvalid("C5", f"{role} {who} is not the roster's "
                                           f"{_person(roster, who['kid'])}")
    v = doc["verification"]
    if v["result"] != _result({"routes": v["reach"],
                               "raw_scan": {"hits": [1] * v["raw_scan"]["hits"]}}):
        raise CertificateInvalid("C5", f"the result {v['result']!r} is not what the reach "
                                       "and the raw scan say")
    if [r["route"] for r in v["reach"]] != doc["method"]["read_models"]:
        raise CertificateInvalid("C5", "the read models purged are not those probed")
    items = sum(doc["destroyed"]["items"].values())
    if doc["destroyed"]["keys"] < items:
        raise CertificateInvalid("C5", f"{items} items destroyed but only "
                                       f"{doc['destroyed']['keys']} data keys")
    if (doc["request"] is None) != (doc["subject"] is None):
        raise CertificateInvalid("C5", "a request without a subject, or a subject without one")


def _against_pack(doc: Mapping[str, Any], pack: Mapping[str, bytes], root_public_key: bytes
                  ) -> list[dict[str, str]]:
    """Step C6; the pack's countersigners the certificate does not name (signed later)."""
    from governance.pack_layout import PackInvalid
    from governance.pack_verify import verify_pack_bytes

    try:
        report = verify_pack_bytes(pack, root_public_key)
    except PackInvalid as e:
        raise CertificateInvalid("C6", f"the Evidence Pack does not verify: {e}") from None
    except (KeyError, ValueError, TypeError) as e:
        raise CertificateInvalid("C6", f"the Evidence Pack does not read: {e!r}") from None
    facts = facts_of_pack(pack, report)
    digest = facts["pack"]["digest"]["sha256"]
    if digest != doc["pack"]["digest"]["sha256"]:
        raise CertificateInvalid("C6", f"the Evidence Pack's digest is {digest}; the "
                                       f"certificate names {doc['pack']['digest']['sha256']}")
    said = doc["people"]["countersigned_by"]
    signed = facts["people"]["countersigned_by"]
    missing = [p for p in said if p not in signed]
    if missing:
        raise CertificateInvalid("C6", f"the certificate names countersigners the pack does "
                                       f"not carry: {missing}")
    for key in PACK_FACTS:
        mine, theirs = doc[key], facts[key]
        if key == "people":
            mine = {**mine, "countersigned_by": []}
            theirs = {**theirs, "countersigned_by": []}
        if mine != theirs:
            raise CertificateInvalid("C6", f"{key!r} differs from what the Evidence Pack "
                                           "proves")
    return [p for p in signed if p not in said]


# ----------------------------------------------------------------------------- in words
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_KINDS = {"atoms": ("memory", "memories"), "artifacts": ("source document", "source documents"),
          "subjects": ("subject profile", "subject profiles"),
          "records": ("imported record", "imported records")}


def when(value: str | None) -> str:
    """``4 December 2026, 17:24 UTC``; ``-`` for none."""
    if not value:
        return "-"
    t: datetime = clock.parse_instant(value)
    return f"{t.day} {_MONTHS[t.month - 1]} {t.year}, {t:%H:%M} UTC"


def _count(n: int, kind: str) -> str:
    one, many = _KINDS.get(kind, (kind.rstrip("s"), kind))
    return f"{n} {one if n == 1 else many}"


def _who(p: Mapping[str, str]) -> str:
    return f"{p['name']} (key `{p['kid']}`)"


@dataclass(frozen=True)
class Row:
    """One line of a section: a label and its text; text in backticks is code."""

    label: str
    text: str


@dataclass(frozen=True)
class Section:
    title: str
    rows: list[Row]
    table: tuple[list[str], list[list[str]]] | None = None  # headers, rows (after ``rows``)
    after: list[Row] = field(default_factory=list)  # rows after the table


def title(doc: Mapping[str, Any]) -> str:
    return f"Certificate of erasure {doc['batch']['id']}"


def lead(doc: Mapping[str, Any]) -> str:
    controller = doc["controller"]["name"] or "The controller"
    req = doc["request"]
    what = (f"the personal data held for the data subject of request `{req['id']}` was"
            if req else f"the items of redaction batch `{doc['batch']['id']}` were")
    return (f"{controller} states that {what} erased from the memory ledger "
            f"`{doc['ledger']['origin']}` by cryptographic erase, and that the erasure was "
            f"verified as set out below. Issued on {when(doc['issued_at'])}.")


def summary(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The strip at the top: the result, what was destroyed, the older copies, who
    countersigned."""
    c, people = doc["copies"], doc["people"]
    items = sum(doc["destroyed"]["items"].values())
    copies = ("not stated" if c is None else
              f"unrecoverable since {when(c['until'])}" if c["state"] == "unrecoverable" else
              f"pending until {when(c['until'])}" if c["state"] == "pending" and c["until"] else
              "pending, no rotation scheduled" if c["state"] == "pending" else "not bounded")
    return [("Result", "PASSED" if doc["verification"]["result"] == "passed" else "FAILED"),
            ("Destroyed", f"{items} item{'' if items == 1 else 's'}, "
                          f"{doc['destroyed']['keys']} data keys"),
            ("Older copies", copies),
            ("Countersigned", ", ".join(p["name"] for p in people["countersigned_by"])
             or "nobody")]


def sections(doc: Mapping[str, Any]) -> list[Section]:
    """The certificate in words: the sections both renderings print, in order."""
    return [_controller_section(doc), _request_section(doc), _method_section(doc),
            _destroyed_section(doc), _verification_section(doc["verification"]),
            _copies_section(doc["copies"]), _signatures_section(doc), _evidence_section(doc)]


def _controller_section(doc: Mapping[str, Any]) -> Section:
    c = doc["controller"]
    return Section("Controller", [
        Row("Organisation", c["name"] or NOT_SET),
        Row("Contact", c["contact"] or NOT_SET),
        Row("Ledger", f"`{doc['ledger']['origin']}` (ledger id `{doc['ledger']['id']}`)"),
    ])


def _request_section(doc: Mapping[str, Any]) -> Section:
    req, subj = doc["request"], doc["subject"]
    if req is None:
        return Section("Request", [Row("Reference", "none: this erasure was not made for a "
                                                    "data subject's request (an operator's "
                                                    "or an application's deletion)"),
                                   Row("Data subject", "none named")])
    due, done = req["complete_due"], req["completed_at"]
    met = (" (within the deadline)" if done and clock.parse_instant(done) <=
           clock.parse_instant(due) else " (after the deadline)") if done else ""
    return Section("Request", [
        Row("Reference", f"`{req['id']}`"),
        Row("Received", when(req["received_at"])),
        Row("Legal basis", req["legal_basis"] or "not stated"),
        Row("Completed", f"{when(done)}{met}; deadline {when(due)}"),
        Row("Data subject", f"reference `{subj['reference']}` (subject id `{subj['id']}`). "
                            "No other personal data is on this certificate."),
    ])


def _method_section(doc: Mapping[str, Any]) -> Section:
    people, batch = doc["people"], doc["batch"]
    approved, executed = people["approved_by"], people["executed_by"]
    acts = (f"approved and executed by {_who(executed)}" if approved == executed else
            f"approved by {_who(approved)}, executed by {_who(executed)}")
    return Section("Method", [
        Row("Technique", f"Cryptographic erase, as {doc['method']['standard']} uses the "
                         "term: each item was stored encrypted (AES-256-GCM) under a data key "
                         "of its own, and those keys were destroyed, deleted from the "
                         "keystore with secure deletion. The log keeps the ciphertext, which "
                         "no key opens any more, and a signed tombstone."),
        Row("Read models", "Purged in place (rows deleted, then each store compacted): "
                           + ", ".join(f"`{r}`" for r in doc["method"]["read_models"]) + "."),
        Row("Erasure", f"batch `{batch['id']}`, mode {batch['mode']}, {batch['outcome']}; "
                       f"{acts} on {when(batch['executed_at'])}"),
        Row("Tool", f"{doc['tool']['name']} {doc['tool']['version']} (issued this "
                    "certificate and verified the Evidence Pack)"),
    ])


def _destroyed_section(doc: Mapping[str, Any]) -> Section:
    destroyed = doc["destroyed"]["items"]
    items = ", ".join(_count(destroyed[k], k) for k in sorted(destroyed, key=_kind_order)
                      if destroyed[k])
    return Section("Destroyed", [
        Row("Items", items or "none"),
        Row("Data keys", f"{doc['destroyed']['keys']} destroyed: one per item, and the "
                         + ("erasure's own (its request's and batch's)" if doc["request"] else
                            "batch's own")),
    ])


def _verification_section(v: Mapping[str, Any]) -> Section:
    scan = v["raw_scan"]
    steps = ", ".join(f"{s} ({PACK_STEPS.get(s, s)})" for s in v["pack_steps"])
    witnessed = (f"the log's checkpoint after the erasure is cosigned by "
                 f"{', '.join(v['witnessed_by'])}" if v["witnessed_by"] else
                 "no witness cosigned the log's checkpoints")
    verdict = ("Passed: no erased item can be read from any store the ledger owns."
               if v["result"] == "passed" else "FAILED: an erased item was still reachable.")
    return Section(
        "Verification",
        [Row("Method", "After the purge, each store's probe looked for every erased item, by "
                       "id and by content; every file the ledger owns was scanned byte by "
                       "byte; `ledger verify-pack` checked the Evidence Pack.")],
        (["Store", "Items probed", "Result", "Checked"],
         [[f"`{r['route']}`", str(r["items"]), r["reach"], when(r["checked_at"])]
          for r in v["reach"]]),
        [Row("Raw scan", f"{scan['files']} files, {scan['needles']} values searched: "
                         f"{scan['hits'] or 'no'} hit{'' if scan['hits'] == 1 else 's'} "
                         f"({when(scan['checked_at'])})"),
         Row("verify-pack", f"passed steps {steps}; {witnessed}"),
         Row("Others", _others(v["flagged_for_review"], v["artifacts_for_review"])),
         Row("Result", verdict)])


def _signatures_section(doc: Mapping[str, Any]) -> Section:
    people = doc["people"]
    counter = people["countersigned_by"]
    same = {p["kid"] for p in counter} & {people["executed_by"]["kid"]}
    return Section("Signatures", [
        Row("Executed by", _who(people["executed_by"])),
        Row("Countersigned by",
            "; ".join(_who(p) for p in counter) + (" (the executor's own key)" if same else "")
            + ", on the Evidence Pack" if counter else
            "Nobody: the Evidence Pack carries one signature only "
            f"({people['pack_signed_by']['name']}'s). A second person countersigns it with "
            "`ledger evidence-pack sign PACK --as KEY`; a certificate issued on that pack "
            "(`--pack PACK`) names them."),
        Row("Evidence Pack", f"signed by {_who(people['pack_signed_by'])}"),
        Row("Certificate", f"signed by {_who(doc['issued_by'])} on {when(doc['issued_at'])}"),
    ])


def _evidence_section(doc: Mapping[str, Any]) -> Section:
    pack = doc["pack"]
    return Section("Evidence", [
        Row("Evidence Pack", f"SHA-256 `{pack['digest']['sha256']}` (of its signed "
                             f"statement); built {when(pack['generated_at'])}, "
                             f"{pack['events']} signed events, log checkpoint of size "
                             f"{pack['checkpoint']['size']}"),
        Row("Root key", f"`{doc['ledger']['root_kid']}`: pin it from the ledger's "
                        "`keys/root.pub`, not from any file that came with this certificate"),
        Row("How to verify", "1. `ledger audit-tools verify-certificate CERT.json --root-key "
                             "root.pub --pack PACK`: this certificate's signature, and that "
                             "its facts are those the pack proves.\n2. `ledger verify-pack "
                             "PACK --root-key root.pub`: the erasure itself.\nBoth run "
                             "offline, with public keys only (docs/spec/certificate.md)."),
        Row("Not claimed", "Sanitization of the disks under the ledger's files (blocks a file "
                           "system or an SSD keeps), copies made outside the ledger, and data "
                           "taken out of it before the erasure."),
    ])


def _kind_order(kind: str) -> int:
    order = list(_KINDS)
    return order.index(kind) if kind in order else len(order)


def _others(memories: int, artifacts: int) -> str:
    if not memories and not artifacts:
        return "No memory or source document of another person mentions the subject."
    parts = ([_count(memories, "atoms")] if memories else []) + \
        ([_count(artifacts, "artifacts")] if artifacts else [])
    one = memories + artifacts == 1
    return (f"{' and '.join(parts)} of {'another person' if one else 'other people'} "
            f"{'mentions' if one else 'mention'} the subject: flagged for review, "
            f"{'not' if one else 'none of them'} erased.")


def _copies_section(c: Mapping[str, Any] | None) -> Section:
    if c is None:
        return Section("Copies", [Row("Statement", "not stated: the Evidence Pack was built "
                                                   "before packs stated copies")])
    rows = [Row("Live keystore", f"{c['keystore']['keys']} data keys destroyed on "
                                 f"{when(c['keystore']['destroyed_at'])}")]
    for g in c["older_copies"]:
        held = (f"hold these {g['keys']} keys wrapped under the KEK of epoch "
                f"{g['kek_epoch']}" if g["kek_epoch"] else
                f"hold these {g['keys']} keys unwrapped")
        if g["state"] == "unrecoverable":
            said = (f"unrecoverable since {when(g['until'])}, when the last KEK that could "
                    "unwrap them was destroyed")
        elif g["state"] == "pending":
            said = (f"pending: decryptable with that KEK until the rotation due on "
                    f"{when(g['until'])} destroys it" if g["until"] else
                    "pending: no KEK rotation is scheduled, so no date bounds them yet")
        else:
            said = "not bounded: no key rotation reaches them"
        if g["unwrapped_until"]:
            said += (f"; copies made before {when(g['unwrapped_until'])} hold them unwrapped, "
                     "and no rotation reaches those")
        rows.append(Row("Older copies", f"Backups, WAL segments, replicas and dumps made "
                                        f"before {when(g['destroyed_at'])} {held}: {said}."))
    overall = {"unrecoverable": f"Unrecoverable since {when(c['until'])}: no copy of the "
                                "keystore, wherever it is kept, can decrypt the erased items.",
               "pending": (f"Pending until {when(c['until'])}: after the rotation, no copy "
                           "can decrypt the erased items." if c["until"] else
                           "Pending, with no rotation scheduled: no date bounds the older "
                           "copies yet."),
               "unbounded": "Not bounded: some copies hold keys unwrapped."}[c["state"]]
    rows.append(Row("Conclusion", overall))
    outside = [n["made_before"] for n in c["not_covered"]]
    if outside:
        rows.append(Row("Not covered", f"Copies of the read models made outside the ledger "
                                       f"before {when(max(outside))}, and data taken out of "
                                       "the ledger (exports, an assistant's own logs)."))
    return Section("Copies", rows)


# ----------------------------------------------------------------------------- HTML
_CSS = """body{font:10pt/1.4 "DejaVu Sans",Verdana,sans-serif;color:#111;max-width:52rem;
margin:1.5rem auto;padding:0 1rem}
h1{font-size:18pt;margin:0 0 .2rem}h2{font-size:11pt;margin:1.1rem 0 .3rem;
border-bottom:1px solid #999;padding-bottom:.1rem}
p.lead{margin:.3rem 0 .8rem}table{border-collapse:collapse;width:100%}
th,td{text-align:left;vertical-align:top;padding:.15rem .4rem}
table.fields th{width:10rem;font-weight:600}
table.reach th,table.reach td{border:1px solid #bbb}table.reach{margin:.3rem 0}
code{font:8.5pt "DejaVu Sans Mono",monospace;overflow-wrap:break-word}
.meta{color:#444;font-size:8.5pt}
table.summary{background:#eef1f6;border:1px solid #8a94a6;margin:.4rem 0 .2rem}
table.summary th{font-size:8.5pt;font-weight:400;color:#333;width:25%}
table.summary td{font-weight:400}table.summary td.passed{color:#1f6f3a;font-weight:700}
table.summary td.failed{color:#b00020;font-weight:700}
@page{size:A4;margin:1.6cm}"""


def _inline(text: str) -> str:
    """Escaped text with `code` spans."""
    parts = re.split(r"`([^`]*)`", text)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else
                   html.escape(p).replace("\n", "<br>") for i, p in enumerate(parts))


def render_html(doc: Mapping[str, Any]) -> str:
    """One printable page (no script, nothing fetched; its one style element allowed by
    hash in its own Content-Security-Policy)."""
    digest = base64.b64encode(hashlib.sha256(_CSS.encode()).digest()).decode()
    body = []
    for s in sections(doc):
        rows = "".join(f"<tr><th scope=\"row\">{html.escape(r.label)}</th>"
                       f"<td>{_inline(r.text)}</td></tr>\n" for r in s.rows)
        body.append(f"<h2>{html.escape(s.title)}</h2>\n<table class=\"fields\">\n{rows}"
                    "</table>\n")
        if s.table is not None:
            head = "".join(f"<th scope=\"col\">{html.escape(h)}</th>" for h in s.table[0])
            cells = "".join("<tr>" + "".join(f"<td>{_inline(x)}</td>" for x in r) + "</tr>\n"
                            for r in s.table[1])
            body.append(f"<table class=\"reach\"><thead><tr>{head}</tr></thead>\n<tbody>\n"
                        f"{cells}</tbody></table>\n")
        if s.after:
            rows = "".join(f"<tr><th scope=\"row\">{html.escape(r.label)}</th>"
                           f"<td>{_inline(r.text)}</td></tr>\n" for r in s.after)
            body.append(f"<table class=\"fields\">\n{rows}</table>\n")
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            f"style-src 'sha256-{digest}'\">\n"
            f"<title>{html.escape(title(doc))}</title>\n<style>{_CSS}</style></head><body>\n"
            f"<h1>Certificate of erasure</h1>\n<p class=\"lead\">{_inline(lead(doc))}</p>\n"
            + _summary_html(doc) + "".join(body)
            + f"<p class=\"meta\">The signed statement of this certificate is the JSON file "
              f"issued with it (payload type <code>{html.escape(PAYLOAD_TYPE)}</code>); this "
              f"page and the PDF say the same in words.</p>\n</body></html>\n")


def _summary_html(doc: Mapping[str, Any]) -> str:
    strip = summary(doc)
    heads = "".join(f"<th scope=\"col\">{html.escape(k)}</th>" for k, _ in strip)
    cells = "".join(f"<td>{html.escape(x)}</td>" for _, x in strip[1:])
    result = strip[0][1]
    return (f"<table class=\"summary\"><tr>{heads}</tr>\n<tr><td class=\"{result.lower()}\">"
            f"{html.escape(result)}</td>{cells}</tr></table>\n")


__all__ = ["CERTIFICATE_TYPE", "PACK_FACTS", "PAYLOAD_TYPE", "CertificateInvalid",
           "CertificateReport", "Row", "Section", "facts_of_pack", "issue", "lead",
           "pack_digest", "problems", "read_certificate", "render_html", "roster_lines",
           "sections", "summary", "title", "tool_version", "verify_certificate", "when"]
