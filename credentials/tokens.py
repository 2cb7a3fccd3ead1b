"""Bearer tokens of a ledger: issued once, stored as an argon2id hash (ADR 0028).

A token is ``mlt_<16 hex: id>_<43 base64url: 32 random bytes>``. Its id (``tok_<16
hex>``) names it everywhere (``ledger tokens list``, audit records, log lines); the whole
token is shown once, by ``ledger tokens create``, and never stored: the table keeps an
argon2id hash of it (argon2-cffi, salt and parameters inside the encoded hash).

The table, ``auth_tokens`` (stores/tokens.py, ADR 0075), lives in the event store's
database (the SQLite ``events.sqlite`` of the home, or the PostgreSQL schema of
``config.toml``): the one place every server process of a scaled-out ledger shares.
Opening the store needs the home's :class:`~ledger.home.Config` only, not the ledger
application.

Checking a token costs an argon2id verification (tens of milliseconds) the first time a
process sees it; after that a process keeps, in memory, the SHA-256 of the token with
the row it matched, and re-reads only the row's state (revoked, expiry: one primary-key
query) once ``ttl`` seconds have passed since the last read. So a token revoked by any
process is refused by every other process at the latest ``ttl`` seconds after the
revocation (default :data:`DEFAULT_TTL`; 0 reads the row on every request), and at once
by the process that revoked it. Expiry is checked on every request against the clock.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from credentials.auth import ExpiredToken, InsufficientScope, InvalidToken, RevokedToken
from ledger import clock
from ledger.errors import ConflictError, InputError, NotFound
from service.caller import ROLES, TENANT_SEP, Caller, Role
from stores.tokens import AuthTokenStore

if TYPE_CHECKING:
    from ledger.home import Config

__all__ = [
    "DEFAULT_TTL",
    "TOKEN_PREFIX",
    "IssuedToken",
    "TokenRecord",
    "TokenStore",
    "validate_new_token",
]

log = structlog.get_logger("ledger")

TOKEN_PREFIX = "mlt_"  # noqa: S105 -- the prefix every token shows, not a secret
ID_PREFIX = "tok_"
DEFAULT_TTL = 5.0
"""Seconds a process trusts its last read of a token's row (the revocation bound)."""
CACHE_SIZE = 10_000
"""Verified tokens a process remembers (least recently used dropped first)."""

# argon2id at OWASP's minimum for passwords (m=19 MiB, t=2, p=1). The secret is 256
# random bits, so no parameter choice changes what an attacker with the table can do;
# these bound what each first check costs the server (ADR 0028 has the measurements).
ARGON2_TIME_COST = 2
ARGON2_MEMORY_KIB = 19 * 1024
ARGON2_PARALLELISM = 1
MAX_PARALLEL_VERIFY = 2
"""argon2 checks running at once in a process (bounds memory under a flood of guesses)."""

_TOKEN = re.compile(r"mlt_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
_TOKEN_ID = re.compile(r"tok_[0-9a-f]{16}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:@+-]{0,63}")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}")  # ledger/inputs.py REF_PATTERN
_KEY = re.compile(r"[a-z][a-z0-9_-]{0,63}")  # keys/keyring.py key names
_AGENT_ID = re.compile(r"[A-Z_]{1,64}")  # a DRP agent-id (ADR 0056)
AGENT_ROLE = "privacy-agent"


@dataclass(frozen=True)
class TokenRecord:
    """One stored token, without its secret."""

    token_id: str
    name: str
    role: Role
    subjects: tuple[str, ...] | None
    tenant: str | None
    signing_key: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    def status(self, now: datetime) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def caller(self) -> Caller:
        return Caller(credential_id=self.token_id, role=self.role,
                      subjects=None if self.subjects is None else frozenset(self.subjects),
                      tenant=self.tenant, signing_key=self.signing_key,
                      expires_at=self.expires_at, name=self.name)

    def to_json(self, now: datetime | None = None) -> dict[str, Any]:
        """Everything ``ledger tokens list --json`` shows: never a secret or a hash."""
        doc: dict[str, Any] = {
            "token_id": self.token_id, "name": self.name, "role": self.role,
            "subjects": None if self.subjects is None else list(self.subjects),
            "tenant": self.tenant, "signing_key": self.signing_key,
            "created_at": clock.format_instant(self.created_at),
            "expires_at": _fmt(self.expires_at), "revoked_at": _fmt(self.revoked_at)}
        if now is not None:
            doc["status"] = self.status(now)
        return doc


@dataclass(frozen=True)
class IssuedToken:
    """A token just created: ``token`` is the secret, shown once and never again."""

    record: TokenRecord
    token: str

    def __repr__(self) -> str:  # a stray log or traceback of this object shows no secret
        return f"IssuedToken(token_id={self.record.token_id!r}, token='mlt_…')"


def _fmt(t: datetime | None) -> str | None:
    return None if t is None else clock.format_instant(t)


def validate_new_token(name: str, role: str, subjects: Iterable[str] = (),
                       tenant: str | None = None, expires_at: datetime | None = None,
                       signing_key: str | None = None,
                       now: datetime | None = None) -> tuple[
                           str, Role, tuple[str, ...] | None, str | None, str | None]:
    """Check a new token's fields before anything is written; returns them normalised
    (``name, role, subjects or None, tenant, signing key``) or raises :class:`InputError`.
    """
    if not _NAME.fullmatch(name):
        raise InputError(f"token name {name!r} is invalid",
                         hint="use 1-64 letters, digits, spaces or . _ : @ + -, starting "
                              "with a letter or digit, e.g. claude-desktop")
    if role not in ROLES:
        raise InputError(f"role {role!r} is not one of {', '.join(ROLES)}",
                         hint="--role assistant for an assistant, operator for erasures "
                              "and keys, auditor to read and verify, privacy-agent for a "
                              "Data Rights Protocol agent")
    if role == AGENT_ROLE and not _AGENT_ID.fullmatch(name):
        raise InputError(f"a privacy-agent token is named by its agent's DRP agent-id; "
                         f"{name!r} is not one (capital letters and _)",
                         hint="use the agent's id in drp.json, e.g. "
                              "ledger tokens create CR_AGENT --role privacy-agent")
    if role == AGENT_ROLE and tuple(subjects):
        raise InputError("a privacy-agent acts for any person of its tenant; --subject does "
                         "not apply", hint="drop --subject (--tenant confines it)")
    refs = tuple(sorted(set(subjects)))
    for ref in refs:
        if not _REF.fullmatch(ref):
            raise InputError(f"--subject {ref!r} is not a subject ref",
                             hint="a ref is 1-128 letters, digits or . _ : -, as given to "
                                  "`ledger subject add`")
    if tenant is not None and not _TENANT.fullmatch(tenant):
        raise InputError(f"--tenant {tenant!r} is invalid",
                         hint=f"use 1-64 letters, digits or . _ - (no {TENANT_SEP!r})")
    if signing_key is not None and role != "operator":
        raise InputError(f"--key names the key that signs an operator's acts; an {role} "
                         "token signs nothing",
                         hint="drop --key, or use --role operator")
    if role == "operator" and signing_key is None:
        signing_key = "operator"
    if signing_key is not None and not _KEY.fullmatch(signing_key):
        raise InputError(f"--key {signing_key!r} is not a key name",
                         hint="see `ledger keys list` for this home's key names")
    when = now if now is not None else clock.now()
    if expires_at is not None and expires_at <= when:
        raise InputError(f"--expires {clock.format_instant(expires_at)} is not in the future "
                         f"(now is {clock.format_instant(when)})",
                         hint="give a later date, e.g. --expires 2027-01-01")
    return name, role, refs or None, tenant, signing_key


class TokenStore:
    """Issue, list, revoke and check the bearer tokens of one ledger.

    Safe to share between the threads of a server process; every process (and host)
    opening the same ledger sees the same tokens.
    """

    revocation_bound = DEFAULT_TTL
    """Seconds after which every server process refuses a token revoked here (servers
    trust a row for :data:`DEFAULT_TTL`)."""

    def __init__(self, rows: AuthTokenStore, *, ttl: float = DEFAULT_TTL,
                 now: Callable[[], datetime] = clock.now,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """``rows``: the table (stores/tokens.py); closing this store closes it."""
        if ttl < 0:
            raise ValueError("ttl must be >= 0")
        self.rows = rows
        self.ttl = ttl
        self._now = now
        self._monotonic = monotonic
        self._hasher = PasswordHasher(time_cost=ARGON2_TIME_COST, memory_cost=ARGON2_MEMORY_KIB,
                                      parallelism=ARGON2_PARALLELISM, hash_len=32,
                                      salt_len=16, type=Type.ID)
        self._verify_slots = threading.BoundedSemaphore(MAX_PARALLEL_VERIFY)
        self._lock = threading.Lock()
        # sha256(token) -> (record, monotonic time the row was last read)
        self._cache: OrderedDict[bytes, tuple[TokenRecord, float]] = OrderedDict()
        self._in_flight: dict[bytes, _Flight] = {}  # argon2 checks under way, by digest

    @classmethod
    def open(cls, config: Config, *, ttl: float = DEFAULT_TTL,
             now: Callable[[], datetime] = clock.now,
             monotonic: Callable[[], float] = time.monotonic) -> TokenStore:
        """The token store of a ledger home, in its event store's database, on an engine of
        its own."""
        return cls(AuthTokenStore.open(config.events), ttl=ttl, now=now, monotonic=monotonic)

    def close(self) -> None:
        with self._lock:
            self._cache.clear()
        self.rows.close()

    def __enter__(self) -> TokenStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ records
    def _record(self, row: Any) -> TokenRecord:
        subjects = None if row.subjects is None else tuple(json.loads(row.subjects))
        return TokenRecord(
            token_id=row.token_id, name=row.name, role=row.role, subjects=subjects,
            tenant=row.tenant, signing_key=row.signing_key,
            created_at=clock.parse_instant(row.created_at),
            expires_at=None if row.expires_at is None else clock.parse_instant(row.expires_at),
            revoked_at=None if row.revoked_at is None else clock.parse_instant(row.revoked_at))

    # ------------------------------------------------------------------ commands
    def create(self, name: str, role: str, subjects: Iterable[str] = (),
               tenant: str | None = None, expires_at: datetime | None = None,
               signing_key: str | None = None) -> IssuedToken:
        """Issue a token. The returned :class:`IssuedToken` holds the only copy of the
        secret; the store keeps its argon2id hash."""
        now = self._now()
        name, role_, refs, tenant, signing_key = validate_new_token(
            name, role, subjects, tenant, expires_at, signing_key, now)
        self.rows.make_table()
        for _ in range(8):  # 64-bit random ids: a collision is already unheard of
            hexid = secrets.token_hex(8)
            token = f"{TOKEN_PREFIX}{hexid}_{secrets.token_urlsafe(32)}"
            record = TokenRecord(
                token_id=ID_PREFIX + hexid, name=name, role=role_, subjects=refs,
                tenant=tenant, signing_key=signing_key, created_at=now,
                expires_at=expires_at, revoked_at=None)
            if not self.rows.add({
                    "token_id": record.token_id, "name": name, "role": role_,
                    "subjects": None if refs is None else json.dumps(list(refs)),
                    "tenant": tenant, "signing_key": signing_key,
                    "created_at": clock.format_instant(now), "expires_at": _fmt(expires_at),
                    "revoked_at": None, "secret_hash": self._hasher.hash(token)}):
                continue  # the id was drawn already
            log.info("auth.token_created", token_id=record.token_id, role=role_,
                     subjects=None if refs is None else len(refs), tenant=tenant is not None)
            return IssuedToken(record, token)
        raise ConflictError("could not draw an unused token id in 8 tries",
                            hint="run the command again")

    def list(self) -> list[TokenRecord]:
        """Every token ever issued, oldest first (revoked and expired ones too)."""
        return [self._record(r) for r in self.rows.rows()]

    def get(self, token_id: str) -> TokenRecord:
        row = self.rows.row(token_id) if _TOKEN_ID.fullmatch(token_id) else None
        if row is None:
            raise NotFound(f"no token with id {token_id!r} in this ledger",
                           hint="list the ids with `ledger tokens list`")
        return self._record(row)

    def revoke(self, token_id: str) -> TokenRecord:
        """Revoke a token: refused by this process at once, by every other process of
        the ledger within ``ttl`` seconds."""
        record = self.get(token_id)
        if record.revoked_at is not None:
            raise ConflictError(f"token {token_id} was already revoked at "
                                f"{clock.format_instant(record.revoked_at)}",
                                hint="nothing to do; `ledger tokens list` shows its state")
        now = self._now()
        if not self.rows.mark_revoked(token_id, clock.format_instant(now)):
            return self.revoke(token_id)  # another process revoked it in between
        with self._lock:
            for key in [k for k, (r, _) in self._cache.items() if r.token_id == token_id]:
                del self._cache[key]
        log.info("auth.token_revoked", token_id=token_id)
        return self.get(token_id)

    def revoke_tenant(self, tenant: str) -> builtins.list[str]:  # `list` is the method above
        """Revoke every token of ``tenant`` not yet revoked (offboarding the tenant,
        service/fleet.py); their ids, oldest first."""
        revoked = [r.token_id for r in self.list() if r.tenant == tenant and r.revoked_at is None]
        for token_id in revoked:
            self.revoke(token_id)
        return revoked

    def has_active(self) -> bool:
        """Whether any token is neither revoked nor expired (a server needs one to start)."""
        now = self._now()
        return any(r.status(now) == "active" for r in self.list())

    # ------------------------------------------------------------------ per request
    def authenticate(self, token: str) -> Caller:
        """The caller a token proves, or raise :class:`~credentials.auth.InvalidToken`
        (malformed, unknown), :class:`~credentials.auth.ExpiredToken` or
        :class:`~credentials.auth.RevokedToken`. The token is in no message or log line."""
        try:
            record = self._check(token)
        except (InvalidToken, ExpiredToken, RevokedToken) as e:
            log.info("auth.refused", reason=e.reason, token_id=e.token_id)
            raise
        assert record is not None  # only a cached_only check answers None
        return _not_agent(record)

    def authenticate_agent(self, token: str) -> Caller:
        """The caller of a privacy-agent token, for the Data Rights Protocol's endpoints
        only (ADR 0056): raises as :meth:`authenticate` does, and
        :class:`~credentials.auth.InsufficientScope` for a token of any other role."""
        try:
            record = self._check(token)
        except (InvalidToken, ExpiredToken, RevokedToken) as e:
            log.info("auth.refused", reason=e.reason, token_id=e.token_id)
            raise
        assert record is not None
        if record.role != AGENT_ROLE:
            log.info("auth.refused", reason="not_privacy_agent", token_id=record.token_id)
            raise InsufficientScope("only a privacy-agent token may call the Data Rights "
                                    "Protocol endpoints", reason="not_privacy_agent",
                                    hint="ledger tokens create AGENT_ID --role privacy-agent",
                                    token_id=record.token_id)
        return record.caller()

    def authenticate_cached(self, token: str) -> Caller | None:
        """The caller of a token this process checked less than ``ttl`` seconds ago, with
        no I/O and no argon2 (a SHA-256 and a dict lookup: safe on an event loop); None
        when the token needs :meth:`authenticate` (first sight, stale entry, or not a
        ledger token).
        Raises as :meth:`authenticate` does for a cached token now revoked or expired."""
        if isinstance(token, str) and _TOKEN.fullmatch(token):
            try:
                record = self._check(token, cached_only=True)
            except (InvalidToken, ExpiredToken, RevokedToken) as e:
                log.info("auth.refused", reason=e.reason, token_id=e.token_id)
                raise
            if record is not None:
                return _not_agent(record)
        return None

    def _check(self, token: str, cached_only: bool = False) -> TokenRecord | None:
        """The token's record, its refusals raised; with ``cached_only``, None instead of
        any I/O or hashing (the token is not in the cache, or its entry is stale)."""
        m = _TOKEN.fullmatch(token) if isinstance(token, str) else None
        if m is None:
            raise InvalidToken("the bearer token is not a ledger token", reason="malformed",
                               hint="use the token printed by `ledger tokens create`")
        digest = hashlib.sha256(token.encode("ascii")).digest()
        with self._lock:
            hit = self._cache.get(digest)
            if hit is not None:
                self._cache.move_to_end(digest)
        if hit is not None and self._monotonic() - hit[1] < self.ttl:
            record = hit[0]
        elif cached_only:
            return None
        else:
            token_id = ID_PREFIX + m.group(1)
            read_at = self._monotonic()
            row = self.rows.row(token_id)
            if row is None:
                self._forget(digest)
                raise InvalidToken("the bearer token is not known to this ledger",
                                   reason="unknown",
                                   hint="ask an operator for a token (`ledger tokens create`)")
            if hit is None:  # first sight in this process: the one slow step
                self._verify_once(digest, row.secret_hash, token, token_id)  # raises
            record = self._record(row)
            with self._lock:
                self._cache[digest] = (record, read_at)
                self._cache.move_to_end(digest)
                while len(self._cache) > CACHE_SIZE:
                    self._cache.popitem(last=False)
        if record.revoked_at is not None:
            raise RevokedToken("the bearer token has been revoked", reason="revoked",
                               hint="ask an operator for a new token", token_id=record.token_id)
        if record.expires_at is not None and record.expires_at <= self._now():
            raise ExpiredToken("the bearer token has expired", reason="expired",
                               hint="ask an operator for a new token", token_id=record.token_id)
        return record

    def _verify_once(self, digest: bytes, encoded: str, token: str, token_id: str) -> None:
        """Verify a token's secret once however many requests present it at the same
        moment (32 clients starting together would otherwise pay 32 argon2 checks): the
        first does the work, the others wait for its verdict."""
        with self._lock:
            flight = self._in_flight.get(digest)
            leader = flight is None
            if leader:
                flight = self._in_flight[digest] = _Flight()
        assert flight is not None
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return
        try:
            self._verify_secret(encoded, token, token_id)
        except InvalidToken as e:
            flight.error = e
            raise
        finally:
            with self._lock:
                self._in_flight.pop(digest, None)
            flight.done.set()

    def _verify_secret(self, encoded: str, token: str, token_id: str) -> None:
        with self._verify_slots:
            try:
                self._hasher.verify(encoded, token)
            except VerifyMismatchError:
                raise InvalidToken("the bearer token is not known to this ledger",
                                   reason="mismatch",
                                   hint="ask an operator for a token (`ledger tokens create`)",
                                   token_id=token_id) from None
            except (VerificationError, InvalidHashError):
                log.error("auth.stored_hash_unreadable", token_id=token_id)
                raise InvalidToken("the bearer token cannot be checked",
                                   reason="unreadable_hash",
                                   hint="revoke it and create a new one") from None

    def _forget(self, digest: bytes) -> None:
        with self._lock:
            self._cache.pop(digest, None)


def _not_agent(record: TokenRecord) -> Caller:
    """The caller of a token for every surface but the DRP's: a privacy-agent token is
    refused there (HTTP 403), whatever the route or tool (ADR 0056)."""
    if record.role == AGENT_ROLE:
        log.info("auth.refused", reason="privacy_agent", token_id=record.token_id)
        raise InsufficientScope("a privacy-agent token may call only the Data Rights "
                                "Protocol endpoints (/drp/v1/...)", reason="privacy_agent",
                                hint="use an assistant, operator or auditor token here",
                                token_id=record.token_id)
    return record.caller()


class _Flight:
    """One argon2 check in progress, and its verdict for the requests waiting on it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: InvalidToken | None = None
