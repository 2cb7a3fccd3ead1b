"""The signed event envelope (docs/spec/event-envelope.md). Pure: bytes in, values out.

Stored state bytes are the RFC 8785 canonical JSON of
``{"envelope": <envelope>, "signature": <base64 Ed25519 signature>}``. The
signature is over DSSE's pre-authentication encoding of the canonical envelope
bytes with payload type :data:`PAYLOAD_TYPE`, so an event signature can never
pass as a signature of another kind (an evidence pack, a checkpoint).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rfc8785

from keys.errors import SignatureInvalid
from keys.signing import Signer, verify_signature

PAYLOAD_TYPE = "application/vnd.memory-ledger.event.v1+json"
ENVELOPE_VERSION = 1
ENVELOPE_FIELDS = frozenset(
    {"v", "ledger", "seq", "topic", "originator_id", "version", "timestamp", "kid", "payload"}
)
_PREFIX = b'{"envelope":'
_MIDDLE = b',"signature":"'
_SUFFIX = b'"}'


class EnvelopeError(ValueError):
    """Stored state is not a well-formed, canonical, correctly signed envelope.

    ``step`` is the verification step number of docs/spec/event-envelope.md.
    """

    def __init__(self, step: str, message: str) -> None:
        super().__init__(f"step {step}: {message}")
        self.step = step


def canonical(obj: Any) -> bytes:
    """The one serializer for signed bytes: RFC 8785 (JCS)."""
    return rfc8785.dumps(obj)


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def seal(envelope: dict[str, Any], signer: Signer) -> bytes:
    """Sign an envelope; return the stored state bytes (canonical by construction)."""
    body = canonical(envelope)
    sig = base64.b64encode(signer.sign(pae(PAYLOAD_TYPE, body)))
    return _PREFIX + body + _MIDDLE + sig + _SUFFIX


@dataclass(frozen=True)
class Opened:
    """A parsed stored state; not yet trusted until :func:`verify` returns."""

    envelope: dict[str, Any]
    body: bytes
    signature: bytes

    @property
    def kid(self) -> str:
        return str(self.envelope["kid"])


def open_state(state: bytes) -> Opened:
    """Steps 1.1-1.3: parse, check shape, check the bytes are canonical."""
    try:
        outer = json.loads(state)
    except (ValueError, UnicodeDecodeError) as e:
        raise EnvelopeError("1.1", f"stored state is not JSON ({e.__class__.__name__})") from e
    if not isinstance(outer, dict) or set(outer) != {"envelope", "signature"}:
        raise EnvelopeError("1.2", "stored state must hold exactly 'envelope' and 'signature'")
    env, sig_b64 = outer["envelope"], outer["signature"]
    if not isinstance(env, dict) or set(env) != ENVELOPE_FIELDS or not isinstance(sig_b64, str):
        raise EnvelopeError("1.2", "envelope fields are missing, unknown or of the wrong type")
    if env["v"] != ENVELOPE_VERSION:
        raise EnvelopeError("1.2", f"envelope version {env['v']!r} is not supported")
    try:
        signature = base64.b64decode(sig_b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise EnvelopeError("1.2", "signature is not base64") from e
    if base64.b64encode(signature).decode() != sig_b64:
        raise EnvelopeError("1.3", "signature is not in canonical base64")
    body = canonical(env)
    if state != _PREFIX + body + _MIDDLE + sig_b64.encode() + _SUFFIX:
        raise EnvelopeError("1.3", "stored state is not in canonical form (RFC 8785)")
    return Opened(env, body, signature)


def verify(opened: Opened, public_key: bytes) -> None:
    """Step 5: the signature verifies over PAE(PAYLOAD_TYPE, canonical envelope)."""
    try:
        verify_signature(public_key, pae(PAYLOAD_TYPE, opened.body), opened.signature)
    except SignatureInvalid as e:
        raise EnvelopeError("5", f"signature does not verify under key {opened.kid}") from e


def event_id(originator_id: object, version: int) -> str:
    """The id of an event: its aggregate id and version, ``<uuid>/<version>``."""
    return f"{originator_id}/{version}"


KeyResolver = Callable[[str], bytes]
