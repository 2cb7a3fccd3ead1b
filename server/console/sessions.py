"""Console sessions: server-side, in this process's memory (ADR 0032).

The browser holds one random id (256 bits, ``secrets.token_urlsafe``) in an HttpOnly,
SameSite=Strict cookie scoped to the console's path; everything else stays here: the
caller's bearer token (re-checked against the token store on every request, so a revoked
or expired token ends the session at its next request), the synchronizer CSRF token, the
times that bound the session, and the Evidence Packs and certificates of erasure built in
it, waiting for download.

Nothing is derived from the client: an id this process did not issue is ignored (a
pre-set cookie is never adopted), and signing in always issues a new id and discards the
one the sign-in form ran under (no fixation). With several server processes, a session
lives in the process that issued it; a request routed to another asks to sign in again
(fail closed; ADR 0032 says what a shared store would take).

Times are the process's monotonic clock, not the ledger's command clock: ``LEDGER_NOW``
moves deadlines, never session lifetimes.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

IDLE_SECONDS = 30 * 60
ABSOLUTE_SECONDS = 8 * 3600
ANONYMOUS_SECONDS = 10 * 60
"""A sign-in form's pre-session (it carries only the form's CSRF token) lasts this long."""
MAX_SESSIONS = 10_000
"""Past this many live sessions the oldest are dropped (memory bound; a flood of sign-in
form loads cannot grow the table without limit)."""
MAX_PACKS_PER_SESSION = 4
"""Evidence Packs kept for download per session (the newest; each is a zip in memory)."""


@dataclass
class Pack:
    batch_id: str
    filename: str
    content: bytes = field(repr=False)
    verification: dict[str, object]


@dataclass
class Certificate:
    """A certificate of erasure issued in this session, its files waiting for download
    (ADR 0046): the PDF, the signed statement, the HTML page and the Evidence Pack it
    rests on."""

    batch_id: str
    files: dict[str, tuple[str, str, bytes]] = field(repr=False)
    """kind (``pdf``, ``json``, ``html``, ``pack``) -> (file name, media type, bytes)."""
    verification: dict[str, object]


@dataclass
class Session:
    """One signed-in (or, before sign-in, anonymous) browser session."""

    sid: str = field(repr=False)
    csrf: str = field(repr=False)
    created: float
    seen: float
    token: str | None = field(default=None, repr=False)
    credential_id: str | None = None
    role: str | None = None
    packs: OrderedDict[str, Pack] = field(default_factory=OrderedDict, repr=False)
    reveals: OrderedDict[str, Any] = field(default_factory=OrderedDict, repr=False)
    certificates: OrderedDict[str, Certificate] = field(default_factory=OrderedDict,
                                                        repr=False)
    flash: list[str] = field(default_factory=list)

    @property
    def signed_in(self) -> bool:
        return self.token is not None

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())

    def keep_pack(self, pack: Pack) -> str:
        """Keep a built pack for download; its download id (random, not the batch id)."""
        pid = secrets.token_urlsafe(16)
        self.packs[pid] = pack
        while len(self.packs) > MAX_PACKS_PER_SESSION:
            self.packs.popitem(last=False)
        return pid

    def keep_certificate(self, certificate: Certificate) -> str:
        """Keep an issued certificate's files for download; its download id (random)."""
        cid = secrets.token_urlsafe(16)
        self.certificates[cid] = certificate
        while len(self.certificates) > MAX_PACKS_PER_SESSION:
            self.certificates.popitem(last=False)
        return cid

    def keep_reveal(self, shown: Any) -> str:
        """Keep revealed content for the one page that shows it (popped there); its id."""
        rid = secrets.token_urlsafe(16)
        self.reveals[rid] = shown
        while len(self.reveals) > MAX_PACKS_PER_SESSION:
            self.reveals.popitem(last=False)
        return rid


class SessionStore:
    """Sessions by id, bounded in number and time. Thread-safe (one lock)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic,
                 idle: float = IDLE_SECONDS, absolute: float = ABSOLUTE_SECONDS) -> None:
        self._now = monotonic
        self.idle = idle
        self.absolute = absolute
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def _new(self) -> Session:
        t = self._now()
        s = Session(sid=secrets.token_urlsafe(32), csrf=secrets.token_urlsafe(32),
                    created=t, seen=t)
        self._by_id[s.sid] = s
        while len(self._by_id) > MAX_SESSIONS:
            self._by_id.popitem(last=False)
        return s

    def anonymous(self) -> Session:
        """A new pre-session for the sign-in form (its CSRF token only)."""
        with self._lock:
            return self._new()

    def _alive(self, s: Session, t: float) -> bool:
        if s.signed_in:
            return t - s.seen < self.idle and t - s.created < self.absolute
        return t - s.created < ANONYMOUS_SECONDS

    def get(self, sid: str | None) -> Session | None:
        """The live session of this id, touched; None for an unknown or expired id."""
        if not sid:
            return None
        with self._lock:
            s = self._by_id.get(sid)
            if s is None:
                return None
            t = self._now()
            if not self._alive(s, t):
                del self._by_id[sid]
                return None
            s.seen = t
            self._by_id.move_to_end(sid)
            return s

    def sign_in(self, previous: Session | None, token: str, credential_id: str,
                role: str) -> Session:
        """A new session (new id, new CSRF token) for a verified credential; the previous
        one (the sign-in form's) is discarded."""
        with self._lock:
            if previous is not None:
                self._by_id.pop(previous.sid, None)
            s = self._new()
            s.token, s.credential_id, s.role = token, credential_id, role
            return s

    def end(self, session: Session | None) -> None:
        if session is None:
            return
        with self._lock:
            self._by_id.pop(session.sid, None)
        session.token = None
        session.packs.clear()
        session.certificates.clear()
        session.reveals.clear()

    def end_credential(self, credential_id: str) -> int:
        """End every session of a credential (after its token was refused)."""
        with self._lock:
            gone = [sid for sid, s in self._by_id.items() if s.credential_id == credential_id]
            for sid in gone:
                self._by_id[sid].token = None
                self._by_id[sid].packs.clear()
                self._by_id[sid].certificates.clear()
                self._by_id[sid].reveals.clear()
                del self._by_id[sid]
        return len(gone)

    def __len__(self) -> int:
        return len(self._by_id)
