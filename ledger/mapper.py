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
import json
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
        self._next_seq = 0

    # -- write context, set by the application while it holds the write lock
    def begin(self, signer: Signer, next_seq: int) -> None:
        self._signer = signer
        self._next_seq = next_seq

    def end(self) -> None:
        self._signer = None

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def associated_data(self, originator_id: object, version: int, topic: str) -> bytes:
        """AEAD associated data: ledger id, event id and topic, NUL-separated (never signed)."""
        return b"\x00".join((b"memory-ledger/aad/v1", self.ledger_id.encode(),
                              envelope.event_id(originator_id, version).encode(),
                              topic.encode()))

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        signer = self._signer
        if signer is None:
            raise RuntimeError("events are written only inside a command's write context")
        cls = type(domain_event)
        topic = get_topic(cls)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        version = state.pop("originator_version")
        timestamp: datetime = state.pop("timestamp")
        state.pop("content_erased", None)
        class_version = getattr(cls, "class_version", 1)
        if class_version > 1:
            state["class_version"] = class_version
        personal = {f: state.pop(f) for f in getattr(cls, "PERSONAL", ()) if f in state}
        payload = {k: v for k, v in state.items() if v is not None}
        personal = {k: v for k, v in personal.items() if v is not None}
        if personal:
            key_id = str(originator_id)
            try:
                key = self.datakeys.get(key_id)
            except DataKeyUnavailable as e:
                raise ConflictError(
                    f"cannot write content for {key_id}: {e}",
                    hint="its content was erased; create a new item instead") from e
            plaintext = json.dumps(personal, ensure_ascii=False, separators=(",", ":")).encode()
            nonce, ct = aead.seal(key, plaintext,
                                  self.associated_data(originator_id, version, topic))
            payload["sealed"] = {
                "alg": aead.ALGORITHM, "key_id": key_id,
                "nonce": base64.b64encode(nonce).decode(),
                "ct": base64.b64encode(ct).decode(),
            }
        env = {
            "v": envelope.ENVELOPE_VERSION, "ledger": self.ledger_id, "seq": self._next_seq,
            "topic": topic, "originator_id": str(originator_id), "version": version,
            "timestamp": format_instant(timestamp), "kid": signer.kid, "payload": payload,
        }
        self._next_seq += 1
        return StoredEvent(originator_id=originator_id, originator_version=version,
                           topic=topic, state=envelope.seal(env, signer))

    def open_verified(self, stored: StoredEvent) -> envelope.Opened:
        """Parse, bind to the row, and verify the signature of a stored event."""
        where = envelope.event_id(stored.originator_id, stored.originator_version)
        try:
            opened = envelope.open_state(stored.state)
            env = opened.envelope
            if (env["topic"], env["originator_id"], env["version"], env["ledger"]) != (
                    stored.topic, str(stored.originator_id), stored.originator_version,
                    self.ledger_id):
                raise envelope.EnvelopeError(
                    "2", "envelope does not match its row (topic, id, version or ledger)")
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
