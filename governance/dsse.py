"""DSSE envelopes: the one signing and verification of every signed document the ledger
writes besides its events (pure; docs/spec/evidence-pack.md, docs/adr/0023).

Every signature is over PAE(payload type, payload) (:func:`ledger.envelope.pae`), and every
kind has a payload type of its own, so a signed thing of one kind can never pass as
another (an event, a pack statement, a receipt, a certificate, a checkpoint). Two forms:

- **The Evidence Pack's statement**: an in-toto Statement v1 under the payload type
  :data:`PAYLOAD_TYPE`, stored as indented JSON, signed by the operator and countersigned
  by others (:func:`sign_envelope`, :func:`add_signature`, :func:`read_statement`,
  :func:`verify_envelope`). Which keys may sign is the verifier's question (the roster at
  the pack's time).
- **The ledger's own small documents** (the erasure receipt, the certificate of erasure,
  the erasure journal, the backup manifest): the RFC 8785 bytes of one JSON object with a
  ``type`` URI, one signature, stored as the canonical JSON of the envelope and a newline
  (:func:`sign_document`, :func:`read_document`, :func:`check_signature`). Reading checks
  the form only; which key must have signed is the caller's question, so that a verifier
  holding nothing but public keys can check a file offline.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from keys.errors import SignatureInvalid
from keys.signing import Signer, key_id, verify_signature
from ledger import envelope
from ledger.errors import InputError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://memory-ledger.dev/evidence-pack/v1"

MAX_BYTES = 256 << 20
"""The largest small document read (a journal of a million erasures is about 400 MB; the
limit is for files that are no document at all)."""


def _sign(payload_type: str, payload: bytes, signer: Signer) -> dict[str, str]:
    sig = signer.sign(envelope.pae(payload_type, payload))
    return {"keyid": signer.kid, "sig": base64.b64encode(sig).decode()}


def _verify(public_key: bytes, payload_type: str, payload: bytes, sig: bytes) -> None:
    """:class:`SignatureInvalid` unless ``sig`` is ``public_key``'s over the PAE."""
    verify_signature(public_key, envelope.pae(payload_type, payload), sig)


# ----------------------------------------------------------------------------- statements
def sign_envelope(payload: bytes, signer: Signer) -> dict[str, Any]:
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
            "signatures": [_sign(PAYLOAD_TYPE, payload, signer)]}


def add_signature(envelope_: dict[str, Any], signer: Signer) -> dict[str, Any]:
    """Countersign (e.g. a DPO after the operator); an existing key's signature is replaced."""
    payload = base64.b64decode(envelope_["payload"])
    others = [s for s in envelope_["signatures"] if s.get("keyid") != signer.kid]
    return {**envelope_, "signatures": [*others, _sign(PAYLOAD_TYPE, payload, signer)]}


def read_statement(data: bytes) -> tuple[dict[str, Any], bytes, Any]:
    """A statement file's envelope, its payload and the payload parsed as JSON (not yet
    checked: :func:`verify_envelope` does). ``ValueError``, ``KeyError`` or ``TypeError``
    when the file is no DSSE envelope or the payload no JSON."""
    dsse = json.loads(data)
    if not isinstance(dsse, dict):
        raise TypeError("the envelope is not a JSON object")
    payload = base64.b64decode(dsse["payload"], validate=True)
    return dsse, payload, json.loads(payload)


@dataclass(frozen=True)
class Verified:
    statement: dict[str, Any]
    payload: bytes
    signers: list[str]  # key ids whose signatures verified


def verify_envelope(envelope_: dict[str, Any], keys: dict[str, bytes]) -> Verified:
    """Return the statement if at least one signature verifies under ``keys``; else raise.

    Signatures by key ids not in ``keys`` are ignored; a bad signature by a known key fails.
    """
    if envelope_.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureInvalid(f"payload type {envelope_.get('payloadType')!r} is not "
                               f"{PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(envelope_["payload"], validate=True)
        sigs = [(s["keyid"], base64.b64decode(s["sig"], validate=True))
                for s in envelope_["signatures"]]
    except (KeyError, TypeError, ValueError) as e:
        raise SignatureInvalid("the DSSE envelope is malformed") from e
    good = []
    for kid, sig in sigs:
        if kid not in keys:
            continue
        if key_id(keys[kid]) != kid:
            raise SignatureInvalid(f"key id {kid} does not match its key")
        _verify(keys[kid], PAYLOAD_TYPE, payload, sig)
        good.append(kid)
    if not good:
        raise SignatureInvalid("no signature by a trusted key")
    try:
        statement = json.loads(payload)
    except ValueError as e:
        raise SignatureInvalid("the signed payload is not JSON") from e
    return Verified(statement, payload, good)


# ----------------------------------------------------------------------------- documents
class DocumentInvalid(InputError):
    """A signed document is malformed, of another kind or ledger, or its signature does not
    verify (exit 2: the input is bad; nothing was written)."""


def sign_document(document: dict[str, Any], payload_type: str, signer: Signer) -> bytes:
    """The file bytes of ``document`` signed by ``signer``."""
    payload = envelope.canonical(document)
    env = {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
           "signatures": [_sign(payload_type, payload, signer)]}
    return envelope.canonical(env) + b"\n"


@dataclass(frozen=True)
class SignedDocument:
    """A document read from its file: the JSON object, the key id that signed it, and the
    signed bytes (checked by :func:`check_signature`)."""

    document: dict[str, Any]
    kid: str
    payload_type: str
    payload: bytes
    signature: bytes


def read_document(data: bytes, payload_type: str, doc_type: str, what: str,
                  max_bytes: int = MAX_BYTES) -> SignedDocument:
    """Parse ``data`` as a signed document of ``payload_type`` whose ``type`` is
    ``doc_type``; :class:`DocumentInvalid` (naming ``what``) for anything else, a changed
    byte included (the file must be the canonical form of its envelope)."""
    if len(data) > max_bytes:
        raise DocumentInvalid(f"{what}: {len(data)} bytes is no {doc_type} document")
    try:
        env = json.loads(data)
        canonical = envelope.canonical(env) + b"\n"
    except (ValueError, TypeError, UnicodeDecodeError):
        raise DocumentInvalid(f"{what} is not a signed JSON document") from None
    if canonical != data:
        raise DocumentInvalid(f"{what} is not the canonical form of its envelope (a byte "
                              "was changed, added or removed)")
    if not isinstance(env, dict) or set(env) != {"payloadType", "payload", "signatures"} \
            or env["payloadType"] != payload_type or not isinstance(env["signatures"], list) \
            or len(env["signatures"]) != 1 or not isinstance(env["signatures"][0], dict) \
            or set(env["signatures"][0]) != {"keyid", "sig"}:
        raise DocumentInvalid(f"{what} is not a DSSE envelope of type {payload_type} with "
                              "one signature")
    try:
        payload = base64.b64decode(str(env["payload"]), validate=True)
        sig = base64.b64decode(str(env["signatures"][0]["sig"]), validate=True)
        doc = json.loads(payload)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise DocumentInvalid(f"{what}: the payload or signature is not well formed") from None
    if not isinstance(doc, dict) or doc.get("type") != doc_type or \
            _canonical_or_none(doc) != payload:
        raise DocumentInvalid(f"{what}: the payload is not a canonical {doc_type} document")
    return SignedDocument(doc, str(env["signatures"][0]["keyid"]), payload_type, payload, sig)


def _canonical_or_none(doc: dict[str, Any]) -> bytes | None:
    """The canonical bytes of ``doc``; None for a value JSON reads but RFC 8785 cannot
    write (a number such as 1e999 that reads as infinity): such a payload is not canonical."""
    try:
        return envelope.canonical(doc)
    except ValueError:
        return None


def check_signature(signed: SignedDocument, public_key: bytes, what: str) -> None:
    """The document's signature verifies under ``public_key``; else
    :class:`DocumentInvalid`."""
    try:
        _verify(public_key, signed.payload_type, signed.payload, signed.signature)
    except SignatureInvalid:
        raise DocumentInvalid(f"{what}: the signature by {signed.kid} does not verify") \
            from None
