"""Signed webhooks from the log (ADR 0055): subscriptions, the outbox, delivery.

A subscription names an endpoint an operator registered (``ledger webhooks add``), the
event types it wants (default: all of :data:`projections.webhooks.EVENT_TYPES`) and,
optionally, a tenant: a tenant-scoped subscription hears only of subjects whose stored
ref is ``TENANT:...``, so a subscriber of tenant A never learns of tenant B. Its secret
(``whsec_`` + base64 of 32 random bytes, the Standard Webhooks form) is shown once; the
ledger keeps it sealed in the keystore as the note of a data key of its own
(``webhook:<subscription id>``, AES-256-GCM, wrapped under the KEK epoch like every data
key); removing the subscription destroys that key.

The outbox: the read model ``webhooks`` (projections/webhooks.py) follows the log; a
*fan-out* step copies each new feed row into one delivery row per subscription that may
see it, with the stable webhook-id ``msg_<subscription hex>_<position>`` and the body
(JSON: type, timestamp, data of ids and digests; never memory content) fixed once, and
moves the subscription's cursor in the same transaction. Deliveries are POSTed signed as
the Standard Webhooks specification says (``webhook-id``, ``webhook-timestamp``,
``webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>``), at least once, in
log order per subject (a delivery waits while an earlier one of the same subject and
subscription is pending), with exponential back-off and jitter; after
:attr:`DeliveryPolicy.max_attempts` failures a delivery is dead (the dead-letter list,
``ledger webhooks list --dead``; ``ledger webhooks retry`` queues it again).

Targets (SSRF): http or https only, no redirects followed, and every address the host
resolves to must be public (not loopback, private, link-local, multicast, reserved or
unspecified) unless the subscription was added with ``allow_private``. The check runs at
``add`` and again before every attempt, and the connection goes to the address just
checked (DNS rebinding cannot swap it in between). Each attempt is bounded by
:attr:`DeliveryPolicy.timeout`; the response body is not read.

Tables ``webhook_subscriptions`` and ``webhook_deliveries`` (stores/webhooks.py, ADR 0075)
live in the event store's database, beside the tokens: every server process of a ledger
shares them. A delivery being attempted is leased (``lease_until``) so that two processes
do not send it at once; a process killed mid-delivery leaves the lease, which expires, and
the delivery is sent again with the same webhook-id.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import os
import random
import re
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from ledger import clock
from ledger.errors import ConflictError, EnvironmentProblem, InputError, NotFound
from service.caller import TENANT_SEP
from stores.webhooks import WebhookStore

if TYPE_CHECKING:
    import httpx

    from ledger.application import LedgerApp
    from projections.runner import Runner
    from projections.store import Store
    from projections.webhooks import WebhookFeed

__all__ = [
    "SECRET_PREFIX",
    "AddedSubscription",
    "DeliveryPolicy",
    "PumpReport",
    "Subscription",
    "WebhookService",
    "check_url",
    "sign",
    "validate_subscription",
]

log = structlog.get_logger("ledger.webhooks")

SECRET_PREFIX = "whsec_"  # noqa: S105 -- the Standard Webhooks prefix, not a secret
SUB_PREFIX = "whk_"
SECRET_BYTES = 32
FANOUT_BATCH = 1000
USER_AGENT = "memory-ledger-webhooks/1"

_SUB_ID = re.compile(r"whk_[0-9a-f]{16}")
_MSG_ID = re.compile(r"msg_[0-9a-f]{16}_[0-9a-z_-]{1,80}")
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # credentials/tokens.py


@dataclass(frozen=True)
class DeliveryPolicy:
    """How deliveries are attempted. ``LEDGER_WEBHOOK_*`` variables override the defaults
    (:meth:`from_env`): ``TIMEOUT``, ``RETRY_BASE``, ``RETRY_CAP``, ``MAX_ATTEMPTS``,
    ``INTERVAL`` (seconds, or a count for ``MAX_ATTEMPTS``)."""

    timeout: float = 10.0
    """Seconds one attempt may take, connection and response headers together."""
    retry_base: float = 5.0
    """The wait after the first failure; it doubles with each failure after that."""
    retry_cap: float = 3600.0
    """The longest wait between two attempts."""
    max_attempts: int = 15
    """Failures after which a delivery is dead (about 14 hours with the defaults)."""
    interval: float = 1.0
    """Seconds the server's sender sleeps between two passes."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> DeliveryPolicy:
        env = dict(os.environ) if env is None else env
        values: dict[str, Any] = {}
        for name, cast in (("timeout", float), ("retry_base", float), ("retry_cap", float),
                           ("max_attempts", int), ("interval", float)):
            raw = env.get(f"LEDGER_WEBHOOK_{name.upper()}")
            if raw is None:
                continue
            try:
                value = cast(raw)
            except ValueError:
                raise InputError(f"LEDGER_WEBHOOK_{name.upper()}={raw!r} is not a number",
                                 hint="unset it or give a positive number") from None
            if value <= 0:
                raise InputError(f"LEDGER_WEBHOOK_{name.upper()} must be positive")
            values[name] = value
        return cls(**values)

    def backoff(self, failures: int, rnd: Callable[[], float] = random.random) -> float:
        """Seconds before the next attempt after ``failures`` failures: exponential, capped,
        with "equal jitter" (between half and all of the step)."""
        step = min(self.retry_cap, self.retry_base * float(2 ** max(0, failures - 1)))
        return step / 2 + step / 2 * rnd()


@dataclass(frozen=True)
class Subscription:
    """One subscription, without its secret."""

    sub_id: str
    url: str
    types: tuple[str, ...] | None
    tenant: str | None
    allow_private: bool
    created_at: str
    start: int
    """The feed position when it was added: it hears of nothing before."""
    cursor: int
    pending: int = 0
    delivered: int = 0
    dead: int = 0

    def wants(self, kind: str, subject_ref: str | None) -> bool:
        """Whether this subscription may hear of an event of type ``kind`` about a subject
        whose stored ref is ``subject_ref``."""
        if self.types is not None and kind not in self.types:
            return False
        if self.tenant is None:
            return True
        return subject_ref is not None and subject_ref.startswith(self.tenant + TENANT_SEP)

    def to_json(self) -> dict[str, Any]:
        return {"subscription_id": self.sub_id, "url": self.url,
                "events": None if self.types is None else list(self.types),
                "tenant": self.tenant, "allow_private": self.allow_private,
                "created_at": self.created_at, "position": self.cursor,
                "pending": self.pending, "delivered": self.delivered, "dead": self.dead}


@dataclass(frozen=True)
class AddedSubscription:
    """A subscription just added: ``secret`` is shown once and never again."""

    subscription: Subscription
    secret: str

    def __repr__(self) -> str:  # a stray log or traceback of this object shows no secret
        return f"AddedSubscription(sub_id={self.subscription.sub_id!r}, secret='whsec_…')"


@dataclass
class PumpReport:
    """What one pass of the sender did."""

    fanned_out: int = 0
    attempted: int = 0
    delivered: int = 0
    failed: int = 0
    dead: int = 0
    pending: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"fanned_out": self.fanned_out, "attempted": self.attempted,
                "delivered": self.delivered, "failed": self.failed, "dead": self.dead,
                "pending": self.pending}


def sign(secret: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: ``v1,`` + base64 of HMAC-SHA256 over
    ``msg_id.timestamp.body`` (Standard Webhooks, symmetric signature)."""
    mac = hmac.new(secret, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


# ---------------------------------------------------------------------- targets (SSRF)
def _refused_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why an address may not be a target without ``allow_private`` (None: it may)."""
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    for what, flag in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                       ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified),
                       ("private", ip.is_private), ("reserved", ip.is_reserved)):
        if flag:
            return what
    if not ip.is_global:
        return "not global"
    return None


Resolver = Callable[[str, int], list[str]]


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(i[4][0]) for i in infos})


def check_url(url: str, allow_private: bool, resolve: Resolver = _resolve
              ) -> tuple[str, list[str]]:
    """Check a target URL; returns ``(normalised url, addresses to connect to)`` or raises
    :class:`InputError` (a URL that is not http(s), has credentials, or resolves to an
    address refused without ``allow_private``)."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"webhook URL {url!r} is not an http or https URL with a host",
                         hint="e.g. https://hooks.example.com/ledger")
    if parts.username is not None or parts.password is not None:
        raise InputError("a webhook URL may not carry a user name or password",
                         hint="authenticate the deliveries by their signature instead")
    if parts.fragment:
        raise InputError("a webhook URL may not have a #fragment")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InputError(f"webhook URL {url!r} has an invalid port") from None
    host = parts.hostname
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError) as e:
        raise InputError(f"the webhook host {host!r} does not resolve ({e.__class__.__name__})",
                         hint="check the name, or the resolver of this machine") from None
    if not addresses:
        raise InputError(f"the webhook host {host!r} resolves to no address")
    if not allow_private:
        for a in addresses:
            why = _refused_address(ipaddress.ip_address(a.split("%")[0]))
            if why is not None:
                raise InputError(
                    f"the webhook host {host!r} resolves to {a}, a {why} address: refused "
                    "(deliveries could reach internal services)",
                    hint="give a public endpoint, or add it with --allow-private if this "
                         "private target is meant")
    return urlunsplit(parts), addresses


# ---------------------------------------------------------------------- the service
class WebhookService:
    """Subscriptions, the outbox and delivery for one ledger (module docstring).

    Not thread-safe: a server's sender thread opens its own (:meth:`open`)."""

    def __init__(self, app: LedgerApp, store: Store, policy: DeliveryPolicy | None = None,
                 *, resolve: Resolver = _resolve, owns: bool = False,
                 verify: ssl.SSLContext | bool = True) -> None:
        """``resolve`` and ``verify`` (the TLS trust: default, the system's CAs) are for
        tests."""
        from projections.routes import RouteRegistry
        from projections.runner import Runner
        from projections.webhooks import WebhookFeed

        self.app = app
        self.store = store
        self.policy = policy or DeliveryPolicy()
        self.resolve = resolve
        self.verify = verify
        self._owns = owns
        self.feed: WebhookFeed = WebhookFeed(store)
        self.runner: Runner = Runner(app.reader, store, [self.feed], RouteRegistry())
        self.tables = WebhookStore(app.config.events)  # subscriptions and deliveries
        self._secrets: dict[str, bytes] = {}
        self._client: httpx.Client | None = None

    @classmethod
    def open(cls, home: Path | None = None, policy: DeliveryPolicy | None = None
             ) -> WebhookService:
        """Open the ledger at ``home`` (its log, keystore and projections database)."""
        from ledger.application import LedgerApp
        from ledger.home import Config, find_home
        from projections.store import Store

        app = LedgerApp(Config.load(find_home(home)))
        try:
            store = Store.open(app.config.projections)
        except BaseException:
            app.close()
            raise
        try:
            return cls(app, store, policy, owns=True)
        except BaseException:
            store.close()
            app.close()
            raise

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._secrets.clear()
        self.tables.close()
        if self._owns:
            self.store.close()
            self.app.close()

    def __enter__(self) -> WebhookService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ rows and the feed
    def _subscription(self, row: Any, counts: dict[str, int] | None = None) -> Subscription:
        counts = counts or {}
        return Subscription(
            sub_id=row.sub_id, url=row.url,
            types=None if row.types is None else tuple(json.loads(row.types)),
            tenant=row.tenant, allow_private=bool(row.allow_private),
            created_at=row.created_at, start=int(row.start), cursor=int(row.cursor),
            pending=counts.get("pending", 0), delivered=counts.get("delivered", 0),
            dead=counts.get("dead", 0))

    def catch_up(self) -> int:
        """Bring the feed to the head of the log; returns the feed's position."""
        self.runner.catch_up()
        return self.runner.positions()[self.feed.name]

    # ------------------------------------------------------------------ commands
    def add(self, url: str, events: Iterable[str] = (), tenant: str | None = None,
            allow_private: bool = False) -> AddedSubscription:
        """Register an endpoint: it hears of events from now on. Every check runs before
        anything is written."""
        types, clean = validate_subscription(url, events, tenant, allow_private, self.resolve)
        position = self.catch_up()
        self.tables.make_tables()
        raw = secrets.token_bytes(SECRET_BYTES)
        secret = SECRET_PREFIX + base64.b64encode(raw).decode("ascii")
        now = clock.now()
        sub_id = SUB_PREFIX + secrets.token_hex(8)
        key_id = _key_id(sub_id)
        self.app.seal_secret(key_id, raw)
        try:
            self.tables.add_subscription({
                "sub_id": sub_id, "url": clean,
                "types": json.dumps(list(types)) if types else None, "tenant": tenant,
                "allow_private": allow_private, "created_at": clock.format_instant(now),
                "start": position, "cursor": position})
        except BaseException:
            self.app.destroy_secret(key_id)
            raise
        log.info("webhooks.subscription_added", subscription_id=sub_id,
                 tenant=tenant is not None, allow_private=allow_private,
                 events=len(types) or None, position=position)
        return AddedSubscription(self.get(sub_id), secret)

    def subscriptions(self) -> list[Subscription]:
        if not self.tables.exists():
            return []
        rows, counts = self.tables.listing()
        return [self._subscription(r, counts.get(r.sub_id)) for r in rows]

    def get(self, sub_id: str) -> Subscription:
        for s in self.subscriptions() if _SUB_ID.fullmatch(sub_id) else []:
            if s.sub_id == sub_id:
                return s
        raise NotFound(f"no webhook subscription with id {sub_id!r} in this ledger",
                       hint="list the ids with `ledger webhooks list`")

    def remove(self, sub_id: str) -> Subscription:
        """Remove a subscription, its deliveries (pending and dead) and its secret (the
        keystore key that sealed it is destroyed)."""
        sub = self.get(sub_id)
        self.tables.remove_subscription(sub_id)
        self.app.destroy_secret(_key_id(sub_id))
        self._secrets.pop(sub_id, None)
        log.info("webhooks.subscription_removed", subscription_id=sub_id)
        return sub

    def dead(self, sub_id: str | None = None) -> list[dict[str, Any]]:
        """The dead-letter list: deliveries that failed every attempt, oldest first."""
        if not self.tables.exists():
            return []
        if sub_id is not None:
            self.get(sub_id)
        return [{"webhook_id": r.webhook_id, "subscription_id": r.sub_id, "type": r.type,
                 "attempts": int(r.attempts), "last_status": r.last_status,
                 "last_error": r.last_error, "created_at": r.created_at}
                for r in self.tables.dead(sub_id)]

    def retry(self, webhook_ids: Sequence[str] = (), sub_id: str | None = None) -> int:
        """Queue dead deliveries again (these ids, or all of one subscription's, or all):
        each is attempted at once, with a fresh count of attempts. Returns how many."""
        for w in webhook_ids:
            if not _MSG_ID.fullmatch(w):
                raise InputError(f"{w!r} is not a webhook id",
                                 hint="see `ledger webhooks list --dead`")
        if sub_id is not None:
            self.get(sub_id)
        if not self.tables.exists():
            return 0
        if webhook_ids:
            found = self.tables.statuses(webhook_ids)
            missing = [w for w in webhook_ids if w not in found]
            if missing:
                raise NotFound(f"no delivery {', '.join(missing)} in this ledger",
                               hint="see `ledger webhooks list --dead`")
            alive = [w for w in webhook_ids if found[w] != "dead"]
            if alive:
                raise ConflictError(f"delivery {', '.join(alive)} is not dead "
                                    f"({', '.join(sorted({found[w] for w in alive}))})",
                                    hint="only dead deliveries are retried")
        n = self.tables.requeue_dead(webhook_ids, sub_id, time.time())
        log.info("webhooks.retry_queued", deliveries=n)
        return n

    # ------------------------------------------------------------------ the outbox
    def fan_out(self) -> int:
        """Copy new feed rows into deliveries of every subscription that may see them, and
        the requests now overdue; returns how many deliveries were queued."""
        if not self.tables.exists():
            return 0
        subs = [self._subscription(r) for r in self.tables.subscriptions()]
        if not subs:
            return 0
        self.catch_up()
        queued = 0
        now_iso = clock.format_instant(clock.now())
        for sub in subs:
            queued += self._fan_out_one(sub, now_iso)
        return queued

    def _fan_out_one(self, sub: Subscription, now_iso: str) -> int:
        queued = 0
        cursor = sub.cursor
        hexid = sub.sub_id[len(SUB_PREFIX):]
        while True:
            rows = self.feed.rows_after(cursor, FANOUT_BATCH)
            if not rows:
                break
            new = [self._delivery(sub, f"msg_{hexid}_{r['position']}", int(r["position"]),
                                  r["type"], r["subject_id"], r["timestamp"],
                                  {"event_id": r["event_id"], "position": int(r["position"]),
                                   "subject_id": r["subject_id"], **json.loads(r["data"])})
                   for r in rows if sub.wants(r["type"], r["subject_ref"])]
            last = int(rows[-1]["position"])
            if not self.tables.fan_out(sub.sub_id, cursor, last, new):
                return queued  # another process fanned this range out, or it was removed
            queued += len(new)
            cursor = last
        if sub.types is None or "erasure.overdue" in sub.types:
            late = self.feed.overdue_after(now_iso, sub.start)
            for r in late:
                if not sub.wants("erasure.overdue", r["ref"]):
                    continue
                webhook_id = f"msg_{hexid}_overdue-{r['position']}"
                row = self._delivery(sub, webhook_id, cursor, "erasure.overdue",
                                     r["subject_id"], r["complete_due"],
                                     {"request_id": r["request_id"],
                                      "subject_id": r["subject_id"],
                                      "complete_due": r["complete_due"]})
                if self.tables.queue_once(row):  # else said already
                    queued += 1
        if sub.tenant is None and (sub.types is None or "checkpoint.cosigned" in sub.types):
            queued += self._fan_out_cosigned(sub, hexid)
        return queued

    def _fan_out_cosigned(self, sub: Subscription, hexid: str) -> int:
        """Queue ``checkpoint.cosigned`` for each witness cosignature recorded for a
        checkpoint of a size past the subscription's start (tenant-scoped subscriptions
        are not told: a checkpoint's size counts every tenant's events)."""
        done = self.tables.last_seq(sub.sub_id, "checkpoint.cosigned")
        since = done if done is not None else sub.start + 1
        rows = self.app.reader.cosignatures_since(since)
        queued = 0
        for r in rows:
            witness = str(r.witness)
            tag = hashlib.sha256(witness.encode()).hexdigest()[:16]
            at = clock.format_instant(datetime.fromtimestamp(int(r.timestamp), UTC))
            row = self._delivery(sub, f"msg_{hexid}_cosigned-{int(r.size)}-{tag}",
                                 int(r.size), "checkpoint.cosigned", None, at,
                                 {"size": int(r.size), "witness": witness,
                                  "root_hash": base64.b64encode(bytes(r.root)).decode("ascii"),
                                  "cosigned_at": at})
            if self.tables.queue_once(row):  # else said already
                queued += 1
        return queued

    def _delivery(self, sub: Subscription, webhook_id: str, seq: int, kind: str,
                  subject_id: str | None, timestamp: str, data: dict[str, Any]
                  ) -> dict[str, Any]:
        body = json.dumps({"type": kind, "timestamp": timestamp, "data": data},
                          sort_keys=True, separators=(",", ":"))
        return {"webhook_id": webhook_id, "sub_id": sub.sub_id, "seq": seq,
                "order_key": subject_id or kind, "type": kind, "body": body,
                "status": "pending", "attempts": 0, "next_at": 0.0, "lease_until": None,
                "last_status": None, "last_error": None,
                "created_at": clock.format_instant(clock.now()), "delivered_at": None}

    # ------------------------------------------------------------------ delivery
    def _secret(self, sub_id: str) -> bytes:
        if sub_id not in self._secrets:
            raw = self.app.reader.open_note(_key_id(sub_id))
            if raw is None:
                raise EnvironmentProblem(f"the secret of webhook subscription {sub_id} is gone",
                                         hint="remove the subscription and add it again")
            self._secrets[sub_id] = raw
        return self._secrets[sub_id]

    def _http(self) -> httpx.Client:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.policy.timeout, follow_redirects=False,
                                        trust_env=False, verify=self.verify,
                                        headers={"User-Agent": USER_AGENT})
        return self._client

    def due(self, limit: int = 1000) -> list[Any]:
        """Deliveries to attempt now: the first pending one of each subject of each
        subscription (the later ones wait behind it), when its time has come and no
        process holds it; at most ``limit``, oldest first."""
        rows = self.tables.heads_due(time.time(), limit)
        seen: set[tuple[str, str]] = set()
        out = []
        for r in rows:  # two heads of one subject at the same position: the first only
            if (r.sub_id, r.order_key) not in seen:
                seen.add((r.sub_id, r.order_key))
                out.append(r)
        return out

    def deliver_due(self, report: PumpReport | None = None) -> PumpReport:
        """Attempt every due delivery once (a subscription whose endpoint fails is left for
        the next pass after its first failure)."""
        report = report or PumpReport()
        if not self.tables.exists():
            return report
        subs = {r.sub_id: self._subscription(r) for r in self.tables.subscriptions()}
        failing: set[str] = set()
        for r in self.due():
            sub = subs.get(r.sub_id)
            if sub is None or r.sub_id in failing:
                continue
            if not self._lease(r.webhook_id):
                continue
            report.attempted += 1
            status, error = self._attempt(sub, r.webhook_id, r.body.encode("utf-8"))
            if error is None:
                self._done(r.webhook_id, status)
                report.delivered += 1
            else:
                failing.add(r.sub_id)
                report.failed += 1
                report.errors[error] = report.errors.get(error, 0) + 1
                if self._failed(r.webhook_id, int(r.attempts) + 1, status, error):
                    report.dead += 1
        report.pending = self.tables.pending_count()
        return report

    def pump(self) -> PumpReport:
        """One pass: catch the feed up, fan out, attempt what is due."""
        report = PumpReport(fanned_out=self.fan_out())
        return self.deliver_due(report)

    def _lease(self, webhook_id: str) -> bool:
        now = time.time()
        return self.tables.lease(webhook_id, now, now + self.policy.timeout + 5.0)

    def _attempt(self, sub: Subscription, webhook_id: str, body: bytes
                 ) -> tuple[int | None, str | None]:
        """POST one delivery; ``(HTTP status, None)`` on a 2xx, else ``(status, error)``."""
        import httpx

        try:
            _, addresses = check_url(sub.url, sub.allow_private, self.resolve)
        except InputError:
            return None, "target refused"
        parts = urlsplit(sub.url)
        host = parts.hostname or ""
        ip = addresses[0]
        netloc = (f"[{ip}]" if ":" in ip else ip) + (f":{parts.port}" if parts.port else "")
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        ts = int(time.time())
        headers = {"content-type": "application/json", "webhook-id": webhook_id,
                   "webhook-timestamp": str(ts),
                   "webhook-signature": sign(self._secret(sub.sub_id), webhook_id, ts, body),
                   "host": parts.netloc.rsplit("@", 1)[-1]}
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        try:
            request = self._http().build_request("POST", pinned, content=body, headers=headers,
                                                 extensions=extensions)
            response = self._http().send(request, stream=True)
            response.close()  # the body is not read: its size does not matter
        except httpx.TimeoutException:
            return None, "timeout"
        except httpx.HTTPError as e:
            return None, e.__class__.__name__
        if 200 <= response.status_code < 300:
            return response.status_code, None
        return response.status_code, f"HTTP {response.status_code}"

    def _done(self, webhook_id: str, status: int | None) -> None:
        self.tables.mark_delivered(webhook_id, status, clock.format_instant(clock.now()))
        log.info("webhooks.delivered", webhook_id=webhook_id, status=status)

    def _failed(self, webhook_id: str, attempts: int, status: int | None, error: str) -> bool:
        """Record a failed attempt; True when the delivery is now dead."""
        dead = attempts >= self.policy.max_attempts
        self.tables.mark_failed(webhook_id, dead=dead, attempts=attempts,
                                next_at=time.time() + self.policy.backoff(attempts),
                                status=status, error=error)
        log.info("webhooks.attempt_failed", webhook_id=webhook_id, attempts=attempts,
                 status=status, error=error, dead=dead)
        return dead


def validate_subscription(url: str, events: Iterable[str] = (), tenant: str | None = None,
                          allow_private: bool = False, resolve: Resolver = _resolve
                          ) -> tuple[tuple[str, ...], str]:
    """Check a new subscription before anything is opened or written; returns its event
    types (sorted; empty: every type) and its normalised URL, or raises
    :class:`InputError`."""
    from projections.webhooks import EVENT_TYPES

    types = tuple(sorted(set(events)))
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown:
        raise InputError(f"unknown event type {', '.join(unknown)}",
                         hint=f"event types: {', '.join(EVENT_TYPES)}")
    if tenant is not None and not _TENANT.fullmatch(tenant):
        raise InputError(f"--tenant {tenant!r} is invalid",
                         hint=f"use 1-64 letters, digits or . _ - (no {TENANT_SEP!r})")
    if tenant is not None and "checkpoint.cosigned" in types:
        raise InputError("a tenant-scoped subscription is not told of checkpoints (a "
                         "checkpoint's size counts every tenant's events)",
                         hint="drop --event checkpoint.cosigned, or --tenant")
    clean, _ = check_url(url, allow_private, resolve)
    return types, clean


def _key_id(sub_id: str) -> str:
    return f"webhook:{sub_id}"
