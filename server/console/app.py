"""The console: server-rendered pages for compliance officers and auditors (ADR 0032).

``console_app(backend, token_store)`` is an ASGI app (Starlette) that a server mounts at
``/console``::

    Mount("/console", app=console_app(backend, token_store))

It holds no domain logic: every page calls the facade (``service.facade.MemoryService``)
through the server's :class:`server.backend.Backend`, reads on the reader thread, writes
on the writer thread, under the signed-in person's :class:`service.caller.Caller`.

Security, in the order a request meets it:

* every response carries a strict Content-Security-Policy (``default-src 'self'``; no
  inline script or style anywhere in the pages), ``nosniff``, no framing, no referrer,
  and ``Cache-Control: no-store`` on pages;
* a page needs a live server-side session (sessions.py): its id in an HttpOnly,
  SameSite=Strict cookie on the console's path, Secure over https;
* the session's bearer token is checked again by the token store on every request: a
  revoked or expired token ends the session there and then;
* only operator and auditor tokens get a console; an assistant token is refused at
  sign-in and on any request;
* every POST carries the session's CSRF token (synchronizer pattern) and, when the browser
  sends one, an Origin of this host; otherwise 403 and nothing is written;
* role checks before any write: an auditor's POST to an operator act is refused with 403
  whatever the form says, and the facade checks the role again.

Memory content appears on one page only, once: the page an explicit reveal leads to (a
POST that first writes a signed retrieval event, then redirects to a one-time view; a
reload shows nothing). Everything else shows ids, counts and times.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

import jinja2
import structlog
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import clock
from ledger.errors import LedgerError, NotFound
from server.console.sessions import Certificate, Pack, Session, SessionStore
from service.caller import Caller
from service.facade import Forbidden, MemoryService
from service.models import ErasureRequestIn, RequestRejectIn, SweepReport
from service.oversight_cases import Revealed

log = structlog.get_logger("ledger.console")

HERE = Path(__file__).resolve().parent
COOKIE = "ledger_console"
CONSOLE_ROLES = ("operator", "auditor")
STATUSES = ("open", "overdue", "partial", "completed", "completed-late", "rejected")
CSP = ("default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
       "object-src 'none'")
MAX_FORM_FIELDS = 50
MAX_FIELD_BYTES = 64 * 1024


class TokenAuthenticator(Protocol):
    """What the console needs of the token store (credentials/tokens.py ``TokenStore``):
    a token in, its caller out, or a :class:`ledger.errors.LedgerError` when refused."""

    def authenticate(self, token: str) -> Caller: ...


class BackendLike(Protocol):
    async def read(self, fn: Callable[[MemoryService], Any]) -> Any: ...

    async def write(self, fn: Callable[[MemoryService], Any]) -> Any: ...


class SecurityHeaders:
    """Headers on every answer of the console, static files included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in (b"content-security-policy",)]
                headers += [
                    (b"content-security-policy", CSP.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-frame-options", b"DENY"),
                    (b"referrer-policy", b"same-origin"),
                    (b"cross-origin-opener-policy", b"same-origin"),
                    (b"cross-origin-resource-policy", b"same-origin"),
                    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
                ]
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


class Refused(Exception):
    """An answer that is not a page of the console: status and what to say."""

    def __init__(self, status: int, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.hint = hint


@dataclass
class Verified:
    at: str
    by: str
    result: dict[str, Any]


def _status_of(e: LedgerError) -> int:
    if isinstance(e, Forbidden):
        return 403
    if isinstance(e, NotFound):
        return 404
    from ledger.errors import ConflictError, EnvironmentProblem

    if isinstance(e, ConflictError):
        return 409
    if isinstance(e, EnvironmentProblem):
        return 503
    return 400


class Console:
    def __init__(self, backend: BackendLike, token_store: TokenAuthenticator,
                 sessions: SessionStore, secure_cookies: bool | None) -> None:
        self.backend = backend
        self.tokens = token_store
        self.sessions = sessions
        self.secure_cookies = secure_cookies
        self.last_verified: Verified | None = None
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        self.env.filters["short"] = lambda v: (str(v)[:8] + "…") if v else "-"
        self.env.filters["when"] = _when
        self.env.filters["plural"] = _plural
        self.env.filters["left"] = _left
        self.env.filters["copies"] = _copies
        self.env.filters["why"] = _why

    # ------------------------------------------------------------------ plumbing
    def base(self, request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _cookie(self, request: Request, response: Response, sid: str) -> None:
        secure = (request.url.scheme == "https" if self.secure_cookies is None
                  else self.secure_cookies)
        response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", secure=secure,
                            path=self.base(request) or "/")

    def _drop_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path=self.base(request) or "/", httponly=True,
                               samesite="strict")

    def render(self, request: Request, template: str, status: int = 200,
               session: Session | None = None, caller: Caller | None = None,
               **context: Any) -> HTMLResponse:
        flash: list[str] = []
        if session is not None and session.flash:
            flash, session.flash = session.flash, []
        context.setdefault("nav", "")
        body = self.env.get_template(template).render(
            base=self.base(request), csrf=session.csrf if session is not None else "",
            caller=caller, flash=flash, now=clock.format_instant(clock.now()), **context)
        return HTMLResponse(body, status_code=status)

    def refusal(self, request: Request, e: Refused, session: Session | None = None,
                caller: Caller | None = None) -> HTMLResponse:
        return self.render(request, "error.html", status=e.status, session=session,
                           caller=caller, title=_REASONS.get(e.status, "Refused"),
                           message=str(e), hint=e.hint)

    def redirect(self, request: Request, path: str, **query: str) -> RedirectResponse:
        q = f"?{urlencode(query)}" if query else ""
        return RedirectResponse(self.base(request) + path + q, status_code=303)

    async def authenticated(self, request: Request) -> tuple[Session, Caller] | Response:
        """The signed-in session and its caller, re-checked now; or the way to sign-in."""
        s = self.sessions.get(request.cookies.get(COOKIE))
        if s is None or not s.signed_in or s.token is None:
            resp = self.redirect(request, "/signin")
            if request.cookies.get(COOKIE):
                self._drop_cookie(request, resp)
            return resp
        try:
            caller = await run_in_threadpool(self.tokens.authenticate, s.token)
        except LedgerError as e:
            log.info("console.session_ended", credential_id=s.credential_id,
                     reason=getattr(e, "reason", type(e).__name__))
            self.sessions.end(s)
            resp = self.redirect(request, "/signin", ended="credential")
            self._drop_cookie(request, resp)
            return resp
        if caller.role not in CONSOLE_ROLES or caller.credential_id != s.credential_id:
            self.sessions.end(s)
            resp = self.redirect(request, "/signin", ended="role")
            self._drop_cookie(request, resp)
            return resp
        return s, caller

    async def posted(self, request: Request, session: Session) -> FormData:
        """The form of a POST whose CSRF token and origin are this session's; else 403."""
        origin = request.headers.get("origin")
        if origin is not None and origin != "null":
            own = f"{request.url.scheme}://{request.url.netloc}"
            if origin.rstrip("/") != own:
                raise Refused(403, "this form was not sent from this console (its Origin "
                                   "is another site); nothing was written")
        elif origin == "null":
            raise Refused(403, "this form was sent from an opaque origin; nothing was written")
        try:
            form = await request.form(max_files=0, max_fields=MAX_FORM_FIELDS,
                                      max_part_size=MAX_FIELD_BYTES)
        except Exception as e:  # multipart's own limits and parse errors
            raise Refused(400, "the form could not be read; nothing was written",
                          hint=type(e).__name__) from None
        given = form.get("csrf")
        if not isinstance(given, str) or not session.csrf_ok(given):
            raise Refused(403, "the form's security token is missing or wrong (reload the "
                               "page and send it again); nothing was written",
                          hint="forms expire with the session")
        return form

    # ------------------------------------------------------------------ page wrapper
    def page(self, roles: tuple[str, ...] = CONSOLE_ROLES, post: bool = False
             ) -> Callable[[Callable[..., Awaitable[Response]]],
                           Callable[[Request], Awaitable[Response]]]:
        """A handler that runs only for a live session of one of ``roles``; POSTs are
        CSRF-checked (before the role, so a forged request learns nothing)."""

        def wrap(handler: Callable[..., Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
            async def endpoint(request: Request) -> Response:
                got = await self.authenticated(request)
                if isinstance(got, Response):
                    return got
                session, caller = got
                try:
                    form = await self.posted(request, session) if post else None
                    if caller.role not in roles:
                        raise Refused(403, f"a {caller.role} may not do this here; nothing "
                                           "was written",
                                      hint=f"it needs an {' or '.join(roles)} token")
                    if post:
                        return await handler(request, session, caller, form)
                    return await handler(request, session, caller)
                except Refused as e:
                    return self.refusal(request, e, session, caller)
                except LedgerError as e:
                    return self.refusal(request, Refused(_status_of(e), str(e), e.hint),
                                        session, caller)
            return endpoint
        return wrap


_REASONS = {400: "Not accepted", 401: "Not signed in", 403: "Refused", 404: "Not found",
            409: "Conflict", 503: "Unavailable"}


def _when(value: Any) -> str:
    """An instant as ``2026-05-01 14:03 UTC`` (the full value stays in a <time>)."""
    if not value:
        return "-"
    try:
        t = clock.parse_instant(str(value))
    except LedgerError:
        return str(value)
    return t.strftime("%Y-%m-%d %H:%M UTC")


_IRREGULAR = {"memory": "memories", "batch": "batches", "witness": "witnesses",
              "entry": "entries"}


def _plural(n: Any, word: str) -> str:
    """``1 atom``, ``2 atoms``, ``2 memories``."""
    count = int(n or 0)
    return f"{count} {word if count == 1 else _IRREGULAR.get(word, word + 's')}"


def _left(row: Mapping[str, Any]) -> str:
    """Time left of a request, or how long ago its deadline passed."""
    left = row.get("time_left")
    if not left:
        return "-"
    return f"overdue by {left[1:]}" if str(left).startswith("-") else str(left)


def _copies(summary: Mapping[str, Any] | None) -> str:
    """What older copies of an erasure's keys are worth (a request's ``copies``, from
    governance/copies.py's summary): ``copies pending until 2026-05-01 14:03 UTC``."""
    if not summary:
        return "-"
    until = summary.get("until")
    if summary["state"] == "unrecoverable":
        return f"copies unrecoverable since {_when(until)}"
    if summary["state"] == "pending":
        if not until:
            return "copies pending: no key rotation scheduled"
        return f"copies pending until {_when(until)}" + (
            " (rotation overdue)" if summary.get("rotation_overdue") else "")
    return "copies not bounded: some were made before keys were wrapped"


def _why(reason: Mapping[str, Any]) -> str:
    """One reason of a partial outcome in words (governance/partial.py; ids only)."""
    from governance.partial import words

    return words(reason)


def _lines(value: Any) -> list[str]:
    if not isinstance(value, str):
        return []
    return [x.strip() for x in value.replace(",", "\n").splitlines() if x.strip()]


def _field(form: FormData | None, name: str) -> str | None:
    if form is None:
        return None
    v = form.get(name)
    return v.strip() if isinstance(v, str) and v.strip() else None


def _validation_message(e: ValidationError) -> str:
    """pydantic's errors by field, without the input values (they may be personal)."""
    return "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
                     for err in e.errors(include_input=False, include_url=False))


# ---------------------------------------------------------------------------- the app
def console_app(backend: BackendLike, token_store: TokenAuthenticator, *,
                sessions: SessionStore | None = None,
                secure_cookies: bool | None = None) -> Starlette:
    """The console as an ASGI app, to mount at ``/console`` (module docstring).

    ``secure_cookies``: None sets the cookie's Secure attribute when the request came over
    https (behind a TLS proxy, run uvicorn with ``--proxy-headers``); True or False forces it.
    """
    c = Console(backend, token_store,
                sessions if sessions is not None else SessionStore(), secure_cookies)

    # -------------------------------------------------------------- sign-in / sign-out
    async def signin_form(request: Request) -> Response:
        s = c.sessions.get(request.cookies.get(COOKIE))
        if s is not None and s.signed_in:
            return c.redirect(request, "/requests")
        s = c.sessions.anonymous()  # a fresh id: a cookie this process did not issue is
        ended = request.query_params.get("ended")  # never adopted
        note = {"credential": "Your session ended: its token is no longer accepted.",
                "role": "Your session ended: this token has no console.",
                "out": "You are signed out."}.get(ended or "")
        resp = c.render(request, "signin.html", session=s, title="Sign in", note=note,
                        error=None)
        c._cookie(request, resp, s.sid)
        return resp

    async def signin(request: Request) -> Response:
        s = c.sessions.get(request.cookies.get(COOKIE))

        def again(status: int, error: str) -> Response:
            if s is not None and not s.signed_in:
                c.sessions.end(s)  # a form is good for one attempt: the next gets a new id
            fresh = c.sessions.anonymous()
            resp = c.render(request, "signin.html", status=status, session=fresh,
                            title="Sign in", note=None, error=error)
            c._cookie(request, resp, fresh.sid)
            return resp

        if s is None or s.signed_in:
            return again(403, "The sign-in form expired or was not sent from this console. "
                              "Sign in again.")
        try:
            form = await c.posted(request, s)
        except Refused as e:
            return again(e.status, str(e))
        token = _field(form, "token")
        if token is None:
            return again(400, "Enter a token (from `ledger tokens create NAME --role "
                              "operator` or `--role auditor`).")
        try:
            caller = await run_in_threadpool(c.tokens.authenticate, token)
        except LedgerError as e:
            log.info("console.signin_refused", reason=getattr(e, "reason", type(e).__name__))
            return again(401, "This token was not accepted (unknown, expired or revoked).")
        if caller.role not in CONSOLE_ROLES:
            log.info("console.signin_refused", reason="role", credential_id=caller.credential_id)
            return again(403, f"A {caller.role} token has no console: sign in with an "
                              "operator or auditor token.")
        new = c.sessions.sign_in(s, token, caller.credential_id, caller.role)
        log.info("console.signed_in", credential_id=caller.credential_id, role=caller.role)
        resp = c.redirect(request, "/requests")
        c._cookie(request, resp, new.sid)
        return resp

    async def signout(request: Request) -> Response:
        s = c.sessions.get(request.cookies.get(COOKIE))
        if s is None:
            return c.redirect(request, "/signin")
        try:
            await c.posted(request, s)
        except Refused as e:
            return c.refusal(request, e, s)
        c.sessions.end(s)
        resp = c.redirect(request, "/signin", ended="out")
        c._drop_cookie(request, resp)
        return resp

    async def home(request: Request) -> Response:
        return c.redirect(request, "/requests")

    def _period(request: Request) -> tuple[str | None, str | None]:
        return (request.query_params.get("from") or None,
                request.query_params.get("to") or None)

    # -------------------------------------------------------------- requests
    @c.page()
    async def requests_page(request: Request, s: Session, caller: Caller) -> Response:
        wanted = request.query_params.get("status") or None
        if wanted is not None and wanted not in STATUSES:
            raise Refused(400, f"unknown status {wanted!r}",
                          hint="one of: " + ", ".join(STATUSES))
        rows, subjects = await c.backend.read(
            lambda svc: (svc.list_requests(caller), [x.ref for x in svc.list_subjects(caller)]))
        overdue = sum(r.status == "overdue" or (r.status == "partial" and r.overdue)
                      for r in rows)  # a partial request past its deadline is late too
        shown = [r for r in rows if wanted is None or r.status == wanted]
        items = [{**r.model_dump(), "subject": _visible(caller, r)} for r in shown]
        counts = {st: sum(r.status == st for r in rows) for st in STATUSES}
        title = f"Requests ({overdue} overdue)" if overdue else "Requests"
        return c.render(request, "requests.html", session=s, caller=caller,
                        title=title, nav="requests", items=items, overdue=overdue,
                        total=len(rows), counts=counts, wanted=wanted, statuses=STATUSES,
                        subjects=subjects)

    @c.page(roles=("operator",), post=True)
    async def file_request(request: Request, s: Session, caller: Caller,
                           form: FormData) -> Response:
        try:
            data = ErasureRequestIn(subject=_field(form, "subject") or "",
                                    reason=_field(form, "reason") or "",
                                    legal_basis=_field(form, "legal_basis"),
                                    identifiers=_lines(form.get("identifiers")),
                                    sessions=_lines(form.get("sessions")))
        except ValidationError as e:
            raise Refused(400, "the request was not filed: " + _validation_message(e),
                          hint="subject and reason are required") from None
        st = await c.backend.write(lambda svc: svc.file_request(caller, data))
        s.flash.append(f"Request {st.request_id} filed; completion due {_when(st.complete_due)}.")
        log.info("console.request_filed", request_id=st.request_id,
                 credential_id=caller.credential_id)
        return c.redirect(request, f"/requests/{st.request_id}")

    # -------------------------------------------------------------- request detail
    @c.page()
    async def request_page(request: Request, s: Session, caller: Caller) -> Response:
        rid = request.path_params["rid"]
        detail = await c.backend.read(lambda svc: svc.request_detail(caller, rid))
        routes = await c.backend.read(lambda svc: svc.erasure_routes(caller))
        pid = request.query_params.get("pack")
        pack = s.packs.get(pid) if pid else None
        if pack is None and detail.batch is not None:  # the newest built in this session
            pid, pack = next(((k, p) for k, p in reversed(s.packs.items())
                              if p.batch_id == detail.batch["batch_id"]), (None, None))
        cid = request.query_params.get("certificate")
        certificate = s.certificates.get(cid) if cid else None
        st = detail.status
        return c.render(request, "request.html", session=s, caller=caller,
                        title=f"Request {rid[:8]}" + (" (overdue)" if st.status == "overdue"
                                                      else ""),
                        nav="requests", d=detail, st=st.model_dump(), plan=detail.plan,
                        batch=detail.batch, routes=routes, pack=pack, pack_id=pid,
                        certificate=certificate, certificate_id=cid,
                        bar=_deadline_bar(st.model_dump()))

    @c.page(roles=("operator",), post=True)
    async def execute(request: Request, s: Session, caller: Caller, form: FormData
                      ) -> Response:
        rid = request.path_params["rid"]
        digest = _field(form, "plan_digest")
        if digest is None:
            raise Refused(400, "the plan's digest is missing; nothing was written",
                          hint="approve from the request's page, which shows the plan")
        if _field(form, "reviewed") != "yes":
            raise Refused(400, "confirm that you reviewed the plan; nothing was written")
        out = await c.backend.write(lambda svc: svc.execute_request(caller, rid, digest))
        log.info("console.request_executed", request_id=rid, batch_id=out.batch_id,
                 credential_id=caller.credential_id)
        s.flash.append(_executed(out.model_dump(), "Executed"))
        return c.redirect(request, f"/requests/{rid}")

    @c.page(roles=("operator",), post=True)
    async def resume(request: Request, s: Session, caller: Caller, form: FormData
                     ) -> Response:
        rid = request.path_params["rid"]
        out = await c.backend.write(lambda svc: svc.resume_request(caller, rid).report)
        log.info("console.request_resumed", request_id=rid, batch_id=out.get("batch_id"),
                 status=out.get("status"), credential_id=caller.credential_id)
        s.flash.append(_executed(out, "Resumed"))
        return c.redirect(request, f"/requests/{rid}")

    @c.page(roles=("operator",), post=True)
    async def reject(request: Request, s: Session, caller: Caller, form: FormData
                     ) -> Response:
        rid = request.path_params["rid"]
        try:
            data = RequestRejectIn(code=_field(form, "code") or "other",
                                   reason=_field(form, "reason") or "")
        except ValidationError as e:
            raise Refused(400, "the request was not rejected: " + _validation_message(e),
                          hint="a reason is required") from None
        st = await c.backend.write(lambda svc: svc.reject_request(caller, rid, data))
        log.info("console.request_rejected", request_id=rid, code=data.code,
                 credential_id=caller.credential_id)
        s.flash.append(f"Request {st.request_id} rejected ({data.code}); it is closed and "
                       "will not be executed.")
        return c.redirect(request, f"/requests/{rid}")

    @c.page()
    async def register_download(request: Request, s: Session, caller: Caller) -> Response:
        from governance.register import render_csv

        f, t = _period(request)
        reg = await c.backend.read(lambda svc: svc.request_register(caller, f, t))
        stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
        log.info("console.register_downloaded", rows=len(reg.rows),
                 credential_id=caller.credential_id)
        return Response(render_csv(reg.rows), media_type="text/csv; charset=utf-8",
                        headers={"content-disposition":
                                 f'attachment; filename="request-register-{stamp}.csv"'})

    @c.page(roles=("operator",), post=True)
    async def build_pack(request: Request, s: Session, caller: Caller, form: FormData
                         ) -> Response:
        rid = request.path_params["rid"]
        batch = await c.backend.read(lambda svc: svc.request_batch(caller, rid))
        out = await c.backend.write(lambda svc: svc.build_pack(caller, batch["batch_id"]))
        pid = s.keep_pack(Pack(out.batch_id, out.filename, out.content, out.verification))
        log.info("console.pack_built", batch_id=out.batch_id, ok=out.verification.get("ok"),
                 credential_id=caller.credential_id)
        return c.redirect(request, f"/requests/{rid}", pack=pid)

    @c.page(roles=("operator",))
    async def download_pack(request: Request, s: Session, caller: Caller) -> Response:
        pack = s.packs.get(request.path_params["pid"])
        if pack is None:
            raise Refused(404, "no such pack in this session (packs are kept for the session "
                               "that built them)", hint="build it again")
        return Response(pack.content, media_type="application/zip", headers={
            "content-disposition": f'attachment; filename="{pack.filename}"'})

    @c.page(roles=("operator",), post=True)
    async def issue_certificate(request: Request, s: Session, caller: Caller,
                                form: FormData) -> Response:
        rid = request.path_params["rid"]
        batch = await c.backend.read(lambda svc: svc.request_batch(caller, rid))
        out = await c.backend.write(lambda svc: svc.certificate(caller, batch["batch_id"]))
        name = f"certificate-of-erasure-{out.batch_id}"
        files = {"pdf": (f"{name}.pdf", "application/pdf", out.pdf),
                 "json": (f"{name}.json", "application/json", out.statement),
                 "html": (f"{name}.html", "text/html; charset=utf-8", out.html.encode())}
        if out.pack_zip is not None:
            files["pack"] = (f"evidence-pack-{out.batch_id}.zip", "application/zip",
                             out.pack_zip)
        people = out.document["people"]["countersigned_by"]
        cid = s.keep_certificate(Certificate(out.batch_id, files, {
            **out.verification, "countersigned_by": [p["name"] for p in people]}))
        log.info("console.certificate_issued", batch_id=out.batch_id,
                 ok=out.verification.get("ok"), credential_id=caller.credential_id)
        return c.redirect(request, f"/requests/{rid}", certificate=cid)

    @c.page(roles=("operator",))
    async def download_certificate(request: Request, s: Session, caller: Caller
                                   ) -> Response:
        cert = s.certificates.get(request.path_params["cid"])
        kind = request.path_params["kind"]
        if cert is None or kind not in cert.files:
            raise Refused(404, "no such certificate file in this session (certificates are "
                               "kept for the session that issued them)", hint="issue it again")
        filename, media, data = cert.files[kind]
        return Response(data, media_type=media, headers={
            "content-disposition": f'attachment; filename="{filename}"'})

    # -------------------------------------------------------------- review queue
    async def _review(request: Request, s: Session, caller: Caller,
                      revealed: Revealed | None = None) -> Response:
        flags = await c.backend.read(lambda svc: svc.list_flags(caller))
        refs = await c.backend.read(lambda svc: {
            f.subject_id: _ref(svc, caller, f.subject_id) for f in flags if f.subject_id})
        return c.render(request, "review.html", session=s, caller=caller,
                        title=f"Review queue ({len(flags)})", nav="review", flags=flags,
                        refs=refs, revealed=revealed)

    @c.page()
    async def review_page(request: Request, s: Session, caller: Caller) -> Response:
        shown = request.query_params.get("shown")
        revealed = s.reveals.pop(shown, None) if shown else None  # shown once
        return await _review(request, s, caller, revealed=revealed)

    @c.page(roles=("operator",), post=True)
    async def reveal(request: Request, s: Session, caller: Caller, form: FormData
                     ) -> Response:
        atom = request.path_params["atom"]
        shown = await c.backend.write(lambda svc: svc.reveal_flagged(caller, atom))
        log.info("console.revealed", atom_id=atom, event_id=shown.event_id,
                 credential_id=caller.credential_id)
        return c.redirect(request, "/review", shown=s.keep_reveal(shown))

    @c.page(roles=("operator",), post=True)
    async def resolve(request: Request, s: Session, caller: Caller, form: FormData
                      ) -> Response:
        atom = request.path_params["atom"]
        action = _field(form, "action") or ""
        text = _field(form, "text")
        out = await c.backend.write(lambda svc: svc.resolve_review(caller, atom, action,
                                                                   text=text))
        log.info("console.flag_resolved", atom_id=atom, action=action,
                 credential_id=caller.credential_id)
        s.flash.append(f"Flag on {atom} resolved ({action}); "
                       f"{len(out.report.get('event_ids', []))} signed events.")
        return c.redirect(request, "/review")

    # -------------------------------------------------------------- audit

    @c.page()
    async def audit_page(request: Request, s: Session, caller: Caller) -> Response:
        from governance.audit_render import render_html_body

        f, t = _period(request)
        report = await c.backend.read(lambda svc: svc.audit_report(caller, f, t))
        q = urlencode({k: v for k, v in (("from", f), ("to", t)) if v})
        return c.render(request, "audit.html", session=s, caller=caller, title="Audit",
                        nav="audit", report=report, body=render_html_body(report, level=3),
                        period_from=f or "", period_to=t or "", query=q)

    @c.page()
    async def audit_download(request: Request, s: Session, caller: Caller) -> Response:
        from governance.audit_render import render_html, render_json

        f, t = _period(request)
        fmt = request.path_params["fmt"]
        report = await c.backend.read(lambda svc: svc.audit_report(caller, f, t))
        stamp = clock.now().strftime("%Y%m%dT%H%M%SZ")
        if fmt == "json":
            body, media = render_json(report), "application/json"
        else:
            body, media = render_html(report), "text/html; charset=utf-8"
        return Response(body, media_type=media, headers={
            "content-disposition": f'attachment; filename="audit-{stamp}.{fmt}"'})

    # -------------------------------------------------------------- integrity
    @c.page()
    async def integrity_page(request: Request, s: Session, caller: Caller) -> Response:
        fresh = None
        if request.url.path.endswith("/verification"):
            v = await c.backend.read(lambda svc: svc.verification(caller))
            fresh = Verified(at=v.checked_at, by=caller.credential_id, result=v.model_dump())
            c.last_verified = fresh
            log.info("console.verified", ok=v.ok, events=v.events,
                     credential_id=caller.credential_id)
        data = await c.backend.read(lambda svc: svc.integrity(caller))
        return c.render(request, "integrity.html", session=s, caller=caller,
                        title="Integrity", nav="integrity", data=data,
                        last=c.last_verified, fresh=fresh)

    # -------------------------------------------------------------- policy
    async def _policy(request: Request, s: Session, caller: Caller,
                      swept: SweepReport | None = None) -> Response:
        data = await c.backend.read(lambda svc: svc.policy_view(caller))
        doc = data["in_force"]
        return c.render(request, "policy.html", session=s, caller=caller, title="Policy",
                        nav="policy", data=data,
                        document=json.dumps(doc.get("memoryPolicy"), indent=2, sort_keys=True)
                        if doc else None, swept=swept)

    @c.page()
    async def policy_page(request: Request, s: Session, caller: Caller) -> Response:
        return await _policy(request, s, caller)

    @c.page(roles=("operator",), post=True)
    async def sweep(request: Request, s: Session, caller: Caller, form: FormData
                    ) -> Response:
        mode = _field(form, "mode")
        if mode not in ("dry-run", "run"):
            raise Refused(400, "choose a dry run or a run; nothing was written")
        out = await c.backend.write(lambda svc: svc.sweep(caller, dry_run=mode == "dry-run"))
        log.info("console.sweep", status=out.status, dry_run=mode == "dry-run",
                 credential_id=caller.credential_id)
        return await _policy(request, s, caller, swept=out)

    routes = [
        Route("/", home),
        Route("/signin", signin_form, methods=["GET"]),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/requests", requests_page, methods=["GET"]),
        Route("/requests", file_request, methods=["POST"]),
        Route("/requests/register.csv", register_download, methods=["GET"]),
        Route("/requests/{rid}", request_page, methods=["GET"]),
        Route("/requests/{rid}/execute", execute, methods=["POST"]),
        Route("/requests/{rid}/resume", resume, methods=["POST"]),
        Route("/requests/{rid}/reject", reject, methods=["POST"]),
        Route("/requests/{rid}/evidence-pack", build_pack, methods=["POST"]),
        Route("/packs/{pid}", download_pack, methods=["GET"]),
        Route("/requests/{rid}/certificate", issue_certificate, methods=["POST"]),
        Route("/certificates/{cid}/{kind}", download_certificate, methods=["GET"]),
        Route("/review", review_page, methods=["GET"]),
        Route("/review/{atom}/reveal", reveal, methods=["POST"]),
        Route("/review/{atom}/resolve", resolve, methods=["POST"]),
        Route("/audit", audit_page, methods=["GET"]),
        Route("/audit/report.{fmt:str}", audit_download, methods=["GET"]),
        Route("/integrity", integrity_page, methods=["GET"]),
        Route("/integrity/verification", integrity_page, methods=["GET"]),
        Route("/policy", policy_page, methods=["GET"]),
        Route("/policy/sweep", sweep, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]

    async def no_such_page(request: Request, exc: Exception) -> Response:
        # the console's own page (its layout, no session: nothing about the caller)
        return c.refusal(request, Refused(404, "there is no such page in the console"))

    app = Starlette(routes=routes, exception_handlers={404: no_such_page})
    app.add_middleware(SecurityHeaders)
    app.state.console = c
    return app


def _visible(caller: Caller, r: Any) -> str | None:
    ref = r.model_dump().get("subject_ref")
    return caller.visible_ref(ref) if isinstance(ref, str) else None


def _ref(svc: MemoryService, caller: Caller, subject_id: str) -> str | None:
    try:
        return svc.get_subject(caller, subject_id).ref
    except LedgerError:
        return None


def _executed(out: Mapping[str, Any], done: str) -> str:
    """The flash after an execution or a resume: a partial outcome says so, first."""
    if out.get("status") == "partial":
        from governance.partial import partial_line

        return (f"PARTIAL: batch {out.get('batch_id')} did not finish: "
                f"{partial_line(out.get('reasons') or [])}. Resume it once that is resolved.")
    if out.get("no_op"):
        return f"Nothing to do: the request was completed at {_when(out.get('completed_at'))}."
    return f"{done}: batch {out.get('batch_id')}, {len(out.get('event_ids') or [])} signed events."


def _deadline_bar(st: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where now (or completion) stands between receipt and the completion deadline, for
    the request page's timeline bar (an SVG drawn by the template): the elapsed part is at
    least a few pixels wide (an erasure done in minutes of a 30-day deadline still shows),
    received, completion (or now) and the deadline are each marked and labelled, and
    ``words`` says it for people."""
    try:
        received = clock.parse_instant(st["received_at"])
        due = clock.parse_instant(st["complete_due"])
    except (KeyError, TypeError, LedgerError):
        return None
    done = bool(st.get("completed_at"))
    end = clock.parse_instant(st["completed_at"]) if done else clock.now()
    span = max((due - received).total_seconds(), 1.0)
    elapsed = max((end - received).total_seconds(), 0.0)
    scale = max(span, elapsed) * 1.05
    due_x, end_x = round(600 * span / scale, 1), round(600 * elapsed / scale, 1)
    hours, deadline = round(elapsed / 3600, 1), round(span / 3600, 1)
    late = elapsed > span
    if done:
        words = (f"Completed {hours} h after receipt, "
                 + (f"{round(hours - deadline, 1)} h after" if late else "within")
                 + f" its {deadline} h deadline.")
    else:
        words = (f"Open for {hours} h since receipt: "
                 + (f"overdue by {round(hours - deadline, 1)} h of its {deadline} h deadline."
                    if late else f"{round(deadline - hours, 1)} h left of its {deadline} h "
                                 "deadline."))
    return {"due_x": due_x, "end_x": end_x, "fill_w": max(end_x, 3.0), "late": late,
            "done": done, "hours": hours, "deadline_hours": deadline,
            "end_label": "completed" if done else "now",
            "end_anchor": "start" if end_x < 60 else "end" if end_x > 540 else "middle",
            "due_label_y": 54 if due_x > 90 else 10, "words": words}
