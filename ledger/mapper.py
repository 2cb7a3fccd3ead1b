"""The signing and encrypting eventsourcing Mapper.

Writing: personal fields are sealed with the aggregate's data key (AES-256-GCM,
associated data = ledger id, event id and topic), the envelope is signed by
the command's actor key and stored as canonical bytes. Reading: the envelope is
parsed, checked against its row, its signature verified, then personal fields
are opened; if the data key was destroyed they read back as ``None`` and the
event carries ``content_erased = True`` while its signature still verifies.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic, resolve_topic

from keys import aead
from keys.datakeys import DataKeyStore
from keys.errors import DataKeyUnavailable, DecryptionFailed, KeyError_
from keys.signing import Signer
from ledger import envelope
from ledger.clock import format_instant
from ledger.errors import ConflictError, VerificationFailed

_BASE_FIELDS = ("originator_id", "originator_version", "timestamp")

OWN_SIGNATURES = 100_000
"""Signatures this process made that it remembers (about 100 bytes each): reading an
event back that this process sealed itself skips the Ed25519 check (see
:meth:`SigningMapper.open_verified`)."""

def _plaintext_encoder() -> Callable[[dict[str, Any]], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``, its C encoder
    built once (``json.dumps`` builds one per call). Plaintext of the sealed fields: it is
    encrypted, never signed as such, so it need not be canonical."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    if c_make_encoder is None:
        encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
        return encoder.encode
    # markers None: no circularity check (validated input has no cycles; a cycle would
    # raise RecursionError instead of ValueError); keys unsorted, allow_nan as json.dumps.
    c_encoder = c_make_encoder(None, json.JSONEncoder().default, json.encoder.encode_basestring,
                               None, ":", ",", False, False, True)

    def encode(value: dict[str, Any]) -> str:
        return "".join(c_encoder(value, 0))

    return encode


_plaintext = _plaintext_encoder()


class EventIntegrityError(VerificationFailed):
    """A stored event failed verification while being read."""


class SigningMapper(Mapper[UUID]):
    ledger_id: str
    datakeys: DataKeyStore
    resolve_key: envelope.KeyResolver

    def configure(self, ledger_id: str, datakeys: DataKeyStore,
                  resolve_key: envelope.KeyResolver) -> None:
        self.ledger_id = ledger_id
        self.datakeys = datakeys
        self.resolve_key = resolve_key
        self._signer: Signer | None = None
        self._kid = ""
        self._next_seq = 0
        self._sealed: list[tuple[int, bytes]] = []
        self._classes: dict[type, tuple[str, tuple[str, ...], int, frozenset[str]]] = {}
        self._time: tuple[datetime | None, str] = (None, "")
        self._aad_prefix: tuple[str, bytes] = ("", b"")
        self._own: dict[bytes, bytes] = {}  # signature -> SHA-256 of the state it sealed

    # -- write context, set by the application while it holds the write lock
    def begin(self, signer: Signer, next_seq: int) -> None:
        self._signer = signer
        self._kid = signer.kid
        self._next_seq = next_seq
        self._sealed = []

    def end(self) -> None:
        self._signer = None
        self._sealed = []

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def take_sealed(self) -> list[tuple[int, bytes]]:
        """``(seq, signature)`` of each event sealed since the last call, in order.

        The application hands them to the transparency log with the saved rows, so the
        tree is extended without parsing the stored bytes again.
        """
        sealed, self._sealed = self._sealed, []
        return sealed

    def _class_info(self, cls: type) -> tuple[str, tuple[str, ...], int, frozenset[str]]:
        """Topic, personal fields, class version, and the attributes not in the payload."""
        info = self._classes.get(cls)
        if info is None:
            personal = tuple(getattr(cls, "PERSONAL", ()))
            info = (get_topic(cls), personal, int(getattr(cls, "class_version", 1)),
                    frozenset((*_BASE_FIELDS, "content_erased", *personal)))
            self._classes[cls] = info
        return info

    def _format_time(self, timestamp: datetime) -> str:
        # Every event of a command has the same timestamp object: format it once.
        cached, text = self._time
        if cached is not timestamp:
            text = format_instant(timestamp)
            self._time = (timestamp, text)
        return text

    def associated_data(self, originator_id: object, version: int, topic: str) -> bytes:
        """AEAD associated data: ledger id, event id and topic, NUL-separated (never signed)."""
        prefix = self._aad_prefix
        if prefix[0] != self.ledger_id:
            prefix = self._aad_prefix = (
                self.ledger_id, b"\x00".join((b"memory-ledger/aad/v1", self.ledger_id.encode(),
                                               b"")))
        return b"".join((prefix[1], envelope.event_id(originator_id, version).encode(),
                         b"\x00", topic.encode()))

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        signer = self._write_signer()
        seq = self._next_seq
        env = self._envelope(domain_event, seq, None)
        stored_state, signature = envelope.seal_signed(env, signer)
        self._next_seq = seq + 1
        self._sealed.append((seq, signature))
        self._remember([(stored_state, signature)])
        return StoredEvent(originator_id=domain_event.originator_id,
                           originator_version=env["version"], topic=env["topic"],
                           state=stored_state)

    def to_stored_events(self, domain_events: Sequence[Any],
                         new_keys: Mapping[str, bytes] | None = None,
                         during: Callable[[], None] | None = None) -> list[StoredEvent]:
        """``[self.to_stored_event(e) for e in domain_events]``, the same bytes, for a
        whole command (ADR 0008): :func:`envelope.seal_many` asks for the envelopes chunk
        by chunk and has each chunk signed (by the signing process for a large batch)
        while the next is built; ``during`` runs on this thread while the last are signed.
        ``new_keys`` are data keys made for this command that ``during`` stores; they are
        used before the keystore holds them."""
        signer = self._write_signer()
        first = self._next_seq
        envs: list[dict[str, Any]] = []

        def build() -> Iterator[dict[str, Any]]:  # envelopes as seal_many asks for them
            for seq, e in enumerate(domain_events, start=first):
                env = self._envelope(e, seq, new_keys)
                envs.append(env)
                yield env

        sealed = envelope.seal_many(build(), signer, during, expected=len(domain_events))
        self._next_seq = first + len(envs)
        self._sealed.extend((env["seq"], signature)
                            for env, (_state, signature) in zip(envs, sealed, strict=True))
        self._remember(sealed)
        return [StoredEvent(originator_id=e.originator_id, originator_version=env["version"],
                            topic=env["topic"], state=state)
                for e, env, (state, _sig) in zip(domain_events, envs, sealed, strict=True)]

    def _write_signer(self) -> Signer:
        signer = self._signer
        if signer is None:
            raise RuntimeError("events are written only inside a command's write context")
        return signer

    def _envelope(self, domain_event: Any, seq: int,
                  new_keys: Mapping[str, bytes] | None) -> dict[str, Any]:
        """The envelope of one event at ``seq``, its personal fields sealed (spec §1)."""
        topic, personal_fields, class_version, not_payload = self._class_info(
            type(domain_event))
        state = vars(domain_event)
        version = state["originator_version"]
        oid = str(state["originator_id"])
        # Fields whose value is None are omitted; personal fields are sealed (spec §1).
        payload = {k: v for k, v in state.items() if v is not None and k not in not_payload}
        if class_version > 1:
            payload["class_version"] = class_version
        personal = {f: state[f] for f in personal_fields if state.get(f) is not None}
        if personal:
            key = None if new_keys is None else new_keys.get(oid)
            if key is None:
                try:
                    key = self.datakeys.get(oid)
                except DataKeyUnavailable as e:
                    raise ConflictError(
                        f"cannot write content for {oid}: {e}",
                        hint="its content was erased; create a new item instead") from e
            nonce, ct = aead.seal(key, _plaintext(personal).encode(),
                                  self.associated_data(oid, version, topic))
            payload["sealed"] = {
                "alg": aead.ALGORITHM, "key_id": oid,
                "nonce": base64.b64encode(nonce).decode(),
                "ct": base64.b64encode(ct).decode(),
            }
        return {
            "v": envelope.ENVELOPE_VERSION, "ledger": self.ledger_id, "seq": seq,
            "topic": topic, "originator_id": oid, "version": version,
            "timestamp": self._format_time(state["timestamp"]), "kid": self._kid,
            "payload": payload,
        }

    def _remember(self, sealed: Sequence[tuple[bytes, bytes]]) -> None:
        own = self._own
        for state, signature in sealed:
            own[signature] = hashlib.sha256(state).digest()
        for _ in range(len(own) - OWN_SIGNATURES):
            del own[next(iter(own))]  # the oldest (dicts keep insertion order)

    def open_verified(self, stored: StoredEvent) -> envelope.Opened:
        """Parse, bind to the row, and verify the signature of a stored event.

        An event this process sealed itself (its signature is one this mapper made, and
        the stored bytes hash to the bytes it signed) needs no Ed25519 check: the check
        would prove that the holder of the signing key signed these bytes, which this
        process knows first-hand. Any other event, or a changed byte, is verified.
        """
        where = envelope.event_id(stored.originator_id, stored.originator_version)
        try:
            opened = envelope.open_state(stored.state)
            env = opened.envelope
            if (env["topic"], env["originator_id"], env["version"], env["ledger"]) != (
                    stored.topic, str(stored.originator_id), stored.originator_version,
                    self.ledger_id):
                raise envelope.EnvelopeError(
                    "2", "envelope does not match its row (topic, id, version or ledger)")
            own = self._own.get(opened.signature)
            if own is None or own != hashlib.sha256(stored.state).digest():
                envelope.verify(opened, self.resolve_key(opened.kid))
        except (envelope.EnvelopeError, KeyError_) as e:
            raise EventIntegrityError(
                f"event {where} failed verification: {e}",
                hint="run `ledger verify` for a full report") from e
        return opened

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        opened = self.open_verified(stored_event)
        cls = resolve_topic(stored_event.topic)
        payload = dict(opened.envelope["payload"])
        sealed = payload.pop("sealed", None)
        state: dict[str, Any] = {
            f.name: None for f in dataclasses.fields(cls) if f.name not in _BASE_FIELDS}
        state.update(payload)
        if sealed is not None:
            state.update(self._open_personal(stored_event, sealed))
        state["originator_id"] = (stored_event.originator_id
                                  if isinstance(stored_event.originator_id, UUID)
                                  else UUID(stored_event.originator_id))
        state["originator_version"] = stored_event.originator_version
        state["timestamp"] = datetime.fromisoformat(
            opened.envelope["timestamp"].replace("Z", "+00:00"))
        class_version = getattr(cls, "class_version", 1)
        from_version = state.pop("class_version", 1)
        while from_version < class_version:
            getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
            from_version += 1
        domain_event = object.__new__(cls)
        object.__setattr__(domain_event, "__dict__", state)
        return domain_event

    def _open_personal(self, stored: StoredEvent, sealed: dict[str, Any]) -> dict[str, Any]:
        try:
            key = self.datakeys.get(str(sealed["key_id"]))
        except DataKeyUnavailable:
            return {"content_erased": True}
        try:
            plain = aead.open_sealed(
                key, base64.b64decode(sealed["nonce"]), base64.b64decode(sealed["ct"]),
                self.associated_data(stored.originator_id, stored.originator_version,
                                     stored.topic))
        except (DecryptionFailed, ValueError) as e:
            raise EventIntegrityError(
                f"event {envelope.event_id(stored.originator_id, stored.originator_version)}: "
                "sealed content does not decrypt under its data key") from e
        opened: dict[str, Any] = json.loads(plain)
        return opened
