"""DSSE envelopes over in-toto Statement v1 (pure; docs/spec/evidence-pack.md).

The signature is over PAE("application/vnd.in-toto+json", payload), so it can never
pass as an event signature (those use the ledger's own payload type).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from keys.errors import SignatureInvalid
from keys.signing import Signer, key_id, verify_signature
from ledger.envelope import pae

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://memory-ledger.dev/evidence-pack/v1"


def sign_envelope(payload: bytes, signer: Signer) -> dict[str, Any]:
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
            "signatures": [_signature(payload, signer)]}


def _signature(payload: bytes, signer: Signer) -> dict[str, str]:
    sig = signer.sign(pae(PAYLOAD_TYPE, payload))
    return {"keyid": signer.kid, "sig": base64.b64encode(sig).decode()}


def add_signature(envelope: dict[str, Any], signer: Signer) -> dict[str, Any]:
    """Countersign (e.g. a DPO after the operator); an existing key's signature is replaced."""
    payload = base64.b64decode(envelope["payload"])
    others = [s for s in envelope["signatures"] if s.get("keyid") != signer.kid]
    return {**envelope, "signatures": [*others, _signature(payload, signer)]}


@dataclass(frozen=True)
class Verified:
    statement: dict[str, Any]
    payload: bytes
    signers: list[str]  # key ids whose signatures verified


def verify_envelope(envelope: dict[str, Any], keys: dict[str, bytes]) -> Verified:
    """Return the statement if at least one signature verifies under ``keys``; else raise.

    Signatures by key ids not in ``keys`` are ignored; a bad signature by a known key fails.
    """
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureInvalid(f"payload type {envelope.get('payloadType')!r} is not "
                               f"{PAYLOAD_TYPE}")
    try:
        payload = base64.b64decode(envelope["payload"], validate=True)
        sigs = [(s["keyid"], base64.b64decode(s["sig"], validate=True))
                for s in envelope["signatures"]]
    except (KeyError, TypeError, ValueError) as e:
        raise SignatureInvalid("the DSSE envelope is malformed") from e
    good = []
    for kid, sig in sigs:
        if kid not in keys:
            continue
        if key_id(keys[kid]) != kid:
            raise SignatureInvalid(f"key id {kid} does not match its key")
        verify_signature(keys[kid], pae(PAYLOAD_TYPE, payload), sig)
        good.append(kid)
    if not good:
        raise SignatureInvalid("no signature by a trusted key")
    try:
        statement = json.loads(payload)
    except ValueError as e:
        raise SignatureInvalid("the signed payload is not JSON") from e
    return Verified(statement, payload, good)
