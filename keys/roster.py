"""The key roster: which public key holds which role, from when to when.

The roster is event-sourced like everything else and its events are signed by
the root key. :class:`RosterState` is a pure fold over roster event payloads, so
the verifier (which reads raw envelopes) and the application (which reads
aggregates) share one definition of "authorized at time t".
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import Aggregate

from keys.errors import KeyNotAuthorized
from keys.signing import key_id

ROOT = "root"
ROLES = ("writer", "operator", "log", "auditor")

TOPIC_STARTED = "memory-ledger:roster.started.v1"
TOPIC_AUTHORIZED = "memory-ledger:roster.key-authorized.v1"
TOPIC_REVOKED = "memory-ledger:roster.key-revoked.v1"
ROSTER_TOPICS = frozenset({TOPIC_STARTED, TOPIC_AUTHORIZED, TOPIC_REVOKED})


def parse_time(value: str) -> datetime:
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    return t


@dataclass
class Grant:
    role: str
    valid_from: datetime
    revoked_from: datetime | None = None
    revoke_reason: str | None = None

    def active_at(self, at: datetime) -> bool:
        return self.valid_from <= at and (self.revoked_from is None or at < self.revoked_from)


@dataclass
class RosterEntry:
    kid: str
    public_key: bytes
    name: str
    grants: list[Grant] = field(default_factory=list)


@dataclass
class RosterState:
    """Pure fold of roster events. ``apply`` takes the event payload as stored."""

    root_kid: str | None = None
    root_public_key: bytes | None = None
    entries: dict[str, RosterEntry] = field(default_factory=dict)

    def apply(self, topic: str, payload: dict[str, Any]) -> None:
        if topic == TOPIC_STARTED:
            pub = base64.b64decode(payload["root_public_key"])
            if key_id(pub) != payload["root_kid"]:
                raise KeyNotAuthorized("roster start: root key id does not match root key")
            self.root_kid, self.root_public_key = payload["root_kid"], pub
        elif topic == TOPIC_AUTHORIZED:
            pub = base64.b64decode(payload["public_key"])
            kid = payload["kid"]
            if key_id(pub) != kid:
                raise KeyNotAuthorized(f"authorization of {kid}: key id does not match key")
            if payload["role"] not in ROLES:
                raise KeyNotAuthorized(f"authorization of {kid}: unknown role {payload['role']}")
            entry = self.entries.setdefault(kid, RosterEntry(kid, pub, payload["name"]))
            entry.grants.append(Grant(payload["role"], parse_time(payload["valid_from"])))
        elif topic == TOPIC_REVOKED:
            kid = payload["kid"]
            if kid not in self.entries:
                raise KeyNotAuthorized(f"revocation of unknown key {kid}")
            revoked_from = parse_time(payload["revoked_from"])
            for grant in self.entries[kid].grants:
                if payload.get("role") in (None, grant.role) and grant.revoked_from is None:
                    grant.revoked_from = revoked_from
                    grant.revoke_reason = payload.get("reason")
        else:
            raise ValueError(f"not a roster topic: {topic}")

    def public_key(self, kid: str) -> bytes:
        if kid == self.root_kid and self.root_public_key is not None:
            return self.root_public_key
        try:
            return self.entries[kid].public_key
        except KeyError:
            raise KeyNotAuthorized(f"key {kid} is not in the roster") from None

    def check(self, kid: str, role: str, at: datetime) -> bytes:
        """Return the public key of ``kid`` if it held ``role`` at ``at``; else raise."""
        if role == ROOT:
            if kid != self.root_kid or self.root_public_key is None:
                raise KeyNotAuthorized(f"key {kid} is not the root key {self.root_kid}")
            return self.root_public_key
        entry = self.entries.get(kid)
        if entry is None:
            raise KeyNotAuthorized(f"key {kid} is not in the roster")
        grants = [g for g in entry.grants if g.role == role]
        if not grants:
            raise KeyNotAuthorized(f"key {kid} ({entry.name}) was never authorized as {role}")
        if any(g.active_at(at) for g in grants):
            return entry.public_key
        revoked = [g for g in grants if g.revoked_from is not None and g.revoked_from <= at]
        if revoked:
            g = revoked[-1]
            assert g.revoked_from is not None
            raise KeyNotAuthorized(
                f"key {kid} ({entry.name}) was revoked as {role} from "
                f"{g.revoked_from.isoformat()} (reason: {g.revoke_reason or 'none given'}); "
                f"event time {at.isoformat()}"
            )
        first = min(g.valid_from for g in grants)
        raise KeyNotAuthorized(
            f"key {kid} ({entry.name}) is authorized as {role} only from {first.isoformat()}; "
            f"event time {at.isoformat()}"
        )

    def holds(self, kid: str, roles: Sequence[str], at: datetime) -> bytes:
        """The one role check every verifier uses: the public key of ``kid`` if it held
        one of ``roles`` at ``at`` (granted ``valid_from <= at``, not revoked
        ``at < revoked_from``); else raise :class:`KeyNotAuthorized` saying why, per role."""
        problems = []
        for role in roles:
            try:
                return self.check(kid, role, at)
            except KeyNotAuthorized as e:
                problems.append(str(e))
        raise KeyNotAuthorized("; ".join(problems) or f"key {kid}: no role asked for")

    def holders(self, roles: Sequence[str], at: datetime) -> dict[str, bytes]:
        """Key id -> public key of every key that held one of ``roles`` at ``at``."""
        return {kid: e.public_key for kid, e in self.entries.items()
                if any(g.role in roles and g.active_at(at) for g in e.grants)}

    def rows(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.root_kid:
            out.append({"kid": self.root_kid, "name": "root", "role": ROOT,
                        "valid_from": None, "revoked_from": None})
        for e in self.entries.values():
            for g in e.grants:
                out.append({
                    "kid": e.kid, "name": e.name, "role": g.role,
                    "valid_from": g.valid_from.isoformat(),
                    "revoked_from": g.revoked_from.isoformat() if g.revoked_from else None,
                })
        return out


class KeyRoster(Aggregate):
    """The roster aggregate. One per ledger, id fixed by the ledger id."""

    TOPIC = "memory-ledger:roster"
    SIGNER_ROLES = (ROOT,)

    class Event(Aggregate.Event):
        SIGNER_ROLES = (ROOT,)
        PERSONAL: ClassVar[tuple[str, ...]] = ()

        def apply(self, aggregate: Any) -> None:
            payload = {k: v for k, v in vars(self).items()
                       if k not in ("originator_id", "originator_version", "timestamp",
                                    "originator_topic")}
            aggregate.state.apply(getattr(type(self), "TOPIC"), payload)  # noqa: B009

    class Created(Event, Aggregate.Created):
        TOPIC = TOPIC_STARTED
        root_kid: str
        root_public_key: str

    class KeyAuthorized(Event):
        TOPIC = TOPIC_AUTHORIZED
        kid: str
        public_key: str
        name: str
        role: str
        valid_from: str

    class KeyRevoked(Event):
        TOPIC = TOPIC_REVOKED
        kid: str
        role: str | None
        revoked_from: str
        reason: str | None

    def __init__(self) -> None:
        self.state = RosterState()

    @classmethod
    def start(cls, roster_id: UUID, root_public_key: bytes, at: datetime) -> KeyRoster:
        return cls._create(
            cls.Created, id=roster_id, timestamp=at,
            root_kid=key_id(root_public_key),
            root_public_key=base64.b64encode(root_public_key).decode(),
        )

    def authorize(self, public_key: bytes, name: str, role: str, valid_from: datetime,
                  at: datetime) -> None:
        if role not in ROLES:
            raise KeyNotAuthorized(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
        kid = key_id(public_key)
        entry = self.state.entries.get(kid)
        if entry and any(g.role == role and g.revoked_from is None for g in entry.grants):
            raise KeyNotAuthorized(f"key {kid} already holds role {role}")
        self.trigger_event(
            self.KeyAuthorized, timestamp=at, kid=kid,
            public_key=base64.b64encode(public_key).decode(), name=name, role=role,
            valid_from=valid_from.isoformat(),
        )

    def revoke(self, kid: str, role: str | None, revoked_from: datetime, reason: str | None,
               at: datetime) -> None:
        entry = self.state.entries.get(kid)
        if entry is None:
            raise KeyNotAuthorized(f"key {kid} is not in the roster; see `ledger keys list`")
        if not any(g.revoked_from is None and role in (None, g.role) for g in entry.grants):
            raise KeyNotAuthorized(f"key {kid} holds no active {role or 'role'} to revoke")
        self.trigger_event(self.KeyRevoked, timestamp=at, kid=kid, role=role,
                           revoked_from=revoked_from.isoformat(), reason=reason)
