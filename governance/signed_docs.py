"""Small signed JSON documents of the ledger's own kinds: a DSSE envelope over the RFC 8785
bytes of one JSON object, stored as the canonical JSON of the envelope and a newline
(the form of the erasure receipt, docs/adr/0023).

Each kind has a payload type of its own (``application/vnd.memory-ledger.<kind>.v1+json``)
and a ``type`` URI inside the document, and the signature is over
PAE(payload type, payload): a document of one kind can never pass as another signed kind
(an event, a receipt, an Evidence Pack, a checkpoint). The erasure journal
(governance/journal.py) and the backup manifest (governance/backup.py) are two of them.

Reading (:func:`read_document`) checks the form only; which key must have signed is the
caller's question (:func:`check_signature` with the key the roster names), so that a
verifier holding nothing but public keys can check a file offline.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from keys.errors import SignatureInvalid
from keys.signing import Signer, verify_signature
from ledger import envelope
from ledger.errors import InputError

MAX_BYTES = 256 << 20
"""The largest document read (a journal of a million erasures is about 400 MB; the
limit is for files that are no document at all)."""


class DocumentInvalid(InputError):
    """A signed document is malformed, of another kind or ledger, or its signature does not
    verify (exit 2: the input is bad; nothing was written)."""


def sign_document(document: dict[str, Any], payload_type: str, signer: Signer) -> bytes:
    """The file bytes of ``document`` signed by ``signer``."""
    payload = envelope.canonical(document)
    sig = signer.sign(envelope.pae(payload_type, payload))
    env = {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": signer.kid, "sig": base64.b64encode(sig).decode()}]}
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


def read_document(data: bytes, payload_type: str, doc_type: str, what: str) -> SignedDocument:
    """Parse ``data`` as a signed document of ``payload_type`` whose ``type`` is
    ``doc_type``; :class:`DocumentInvalid` (naming ``what``) for anything else, a changed
    byte included (the file must be the canonical form of its envelope)."""
    if len(data) > MAX_BYTES:
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
            envelope.canonical(doc) != payload:
        raise DocumentInvalid(f"{what}: the payload is not a canonical {doc_type} document")
    return SignedDocument(doc, str(env["signatures"][0]["keyid"]), payload_type, payload, sig)


def check_signature(signed: SignedDocument, public_key: bytes, what: str) -> None:
    """The document's signature verifies under ``public_key``; else
    :class:`DocumentInvalid`."""
    try:
        verify_signature(public_key, envelope.pae(signed.payload_type, signed.payload),
                         signed.signature)
    except SignatureInvalid:
        raise DocumentInvalid(f"{what}: the signature by {signed.kid} does not verify") \
            from None
