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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from keys.errors import SignatureInvalid
from keys.signing import Signer, verify_signature
from ledger import canonical as _canonical

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
    """The one serializer for signed bytes: RFC 8785 (JCS), exactly ``rfc8785.dumps``
    (:mod:`ledger.canonical`, ADR 0008)."""
    return _canonical.dumps(obj)


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def seal(envelope: dict[str, Any], signer: Signer) -> bytes:
    """Sign an envelope; return the stored state bytes (canonical by construction)."""
    return seal_signed(envelope, signer)[0]


def seal_signed(envelope: dict[str, Any], signer: Signer) -> tuple[bytes, bytes]:
    """:func:`seal`, also returning the 64-byte signature (the transparency leaf needs it)."""
    body = canonical(envelope)
    signature = signer.sign(pae(PAYLOAD_TYPE, body))
    return _frame(body, signature), signature


def seal_many(envelopes: Iterable[dict[str, Any]], signer: Signer,
              during: Callable[[], None] | None = None,
              expected: int | None = None) -> list[tuple[bytes, bytes]]:
    """``[seal_signed(e, signer) for e in envelopes]``, the same bytes (ADR 0008).

    ``envelopes`` is consumed chunk by chunk: each chunk is serialised and handed to a
    :class:`keys.signing.SignatureStream`, which signs it in the signing process while
    the next chunk is built (``envelopes`` may be a generator that builds them), for a
    batch of ``expected`` envelopes or more than :data:`keys.signing.PROCESS_MIN`; then
    ``during`` runs on this thread while the last signatures are made."""
    if expected is None:
        envelopes = list(envelopes)
        expected = len(envelopes)
    stream = signer.stream(expected)
    bodies: list[bytes] = []
    try:
        iterator = iter(envelopes)
        while chunk := [canonical(e) for e in islice(iterator, _SEAL_CHUNK)]:
            bodies.extend(chunk)
            stream.add([pae(PAYLOAD_TYPE, b) for b in chunk])
        signatures = stream.finish(during)
    except BaseException:
        stream.cancel()
        raise
    return [(_frame(b, s), s) for b, s in zip(bodies, signatures, strict=True)]


_SEAL_CHUNK = 64  # envelopes per hand-over to the signing process


def _frame(body: bytes, signature: bytes) -> bytes:
    return b"".join((_PREFIX, body, _MIDDLE, base64.b64encode(signature), _SUFFIX))


@dataclass(frozen=True)
class Opened:
    """A parsed stored state; not yet trusted until :func:`verify` returns."""

    envelope: dict[str, Any]
    body: bytes
    signature: bytes

    @property
    def kid(self) -> str:
        return str(self.envelope["kid"])


_SIG_B64_LEN = 88  # base64 of a 64-byte Ed25519 signature
_TAIL = len(_MIDDLE) + _SIG_B64_LEN + len(_SUFFIX)


def open_state(state: bytes) -> Opened:
    """Steps 1.1-1.2: check the frame, then parse the signed body.

    The signature (step 5) is checked over the body bytes exactly as stored, as DSSE
    does; nothing is re-serialised on the way, so verification costs no canonicalisation.
    Bodies are canonical because :func:`seal` is the only writer (tested).
    """
    if (len(state) <= len(_PREFIX) + _TAIL or not state.startswith(_PREFIX)
            or not state.endswith(_SUFFIX)
            or state[-_TAIL:-_TAIL + len(_MIDDLE)] != _MIDDLE):
        raise EnvelopeError("1.1", "stored state is not a signed envelope frame "
                                   '{"envelope":...,"signature":"..."}')
    body = state[len(_PREFIX):-_TAIL]
    sig_b64 = state[-_TAIL + len(_MIDDLE):-len(_SUFFIX)]
    try:
        signature = base64.b64decode(sig_b64, validate=True)
    except (binascii.Error, ValueError) as e:
        raise EnvelopeError("1.1", "signature is not base64") from e
    if len(signature) != 64 or base64.b64encode(signature) != sig_b64:
        raise EnvelopeError("1.1", "signature is not 64 bytes in canonical base64")
    try:
        env = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise EnvelopeError("1.2", f"envelope is not JSON ({e.__class__.__name__})") from e
    if not isinstance(env, dict) or set(env) != ENVELOPE_FIELDS:
        raise EnvelopeError("1.2", "envelope fields are missing or unknown")
    if env["v"] != ENVELOPE_VERSION:
        raise EnvelopeError("1.2", f"envelope version {env['v']!r} is not supported")
    if any(type(env[k]) is not int for k in ("seq", "version")):
        raise EnvelopeError("1.2", "envelope fields 'seq' and 'version' must be integers")
    if not isinstance(env["kid"], str) or not isinstance(env["payload"], dict):
        raise EnvelopeError("1.2", "envelope field 'kid' or 'payload' has the wrong type")
    return Opened(env, body, signature)


def payload_of(state: bytes) -> dict[str, Any]:
    """The payload of a stored state, parsed without the checks of :func:`open_state`
    (frame, fields, signature encoding): for indexes that read every event of a kind
    and must be rebuilt from the log anyway (ledger/census.py), never for a decision
    about an event's validity. Raises :class:`EnvelopeError` if it is not a frame."""
    if not (state.startswith(_PREFIX) and state.endswith(_SUFFIX)) or len(state) <= len(
            _PREFIX) + _TAIL:
        raise EnvelopeError("1.1", "stored state is not a signed envelope frame")
    try:
        payload = orjson.loads(state[len(_PREFIX):-_TAIL])["payload"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise EnvelopeError("1.2", f"envelope has no payload ({e.__class__.__name__})") from e
    if not isinstance(payload, dict):
        raise EnvelopeError("1.2", "envelope field 'payload' has the wrong type")
    return payload


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
