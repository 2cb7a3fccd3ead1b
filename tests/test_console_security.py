"""The console's doors, over HTTP (httpx against the console served on loopback):
sessions, CSRF, roles, headers. Each refusal is checked to change nothing in the home.
The browser flow is tests/test_console.py."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from server.console.app import COOKIE
from server.console.sessions import SessionStore

from .console_support import (
    IDENTIFIER,
    MARKERS,
    Served,
    at,
    build_ledger,
    home_digest,
    serve,
    t0,
)


class Clock:
    """A monotonic clock the test moves (session lifetimes)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def start() -> datetime:
    return t0()


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, start: datetime,
           clock: Clock) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("console-sec") / "home"
    old = os.environ.get("LEDGER_NOW")
    build_ledger(home, start)
    os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1))
    try:
        with serve(home, SessionStore(monotonic=clock)) as s:
            yield s
    finally:
        if old is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = old


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field on the page"
    return m[1]


def client(s: Served) -> httpx.Client:
    return httpx.Client(base_url=s.origin, follow_redirects=False, timeout=60)


def sign_in(s: Served, token: str) -> httpx.Client:
    c = client(s)
    form = c.get("/console/signin")
    r = c.post("/console/signin", data={"csrf": csrf_of(form.text), "token": token})
    assert r.status_code == 303 and r.headers["location"] == "/console/requests", r.text
    return c


# ----------------------------------------------------------------------------- sessions
def test_cookie_is_httponly_samesite_strict_on_the_console_path(served: Served) -> None:
    r = client(served).get("/console/signin")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    attrs = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "path=/console", "samesite=strict"} <= attrs
    assert "secure" not in attrs  # plain http on loopback


def test_cookie_is_secure_over_https(served: Served) -> None:
    # The same app, as a TLS-terminating server hands it an https request.
    from credentials.tokens import TokenStore
    from ledger.home import Config
    from server.console import console_app

    app = console_app(served.backend, TokenStore.open(Config.load(served.home)))
    transport = httpx.ASGITransport(app=app)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport,
                                     base_url="https://console.example") as c:
            return await c.get("/signin")

    import asyncio

    r = asyncio.run(get())
    assert "secure" in {a.strip().lower() for a in r.headers["set-cookie"].split(";")}


def test_pages_need_a_session(served: Served) -> None:
    for path in ("/console/requests", "/console/review", "/console/audit",
                 "/console/integrity", "/console/policy", "/console/audit/report.json"):
        r = client(served).get(path)
        assert r.status_code == 303 and r.headers["location"] == "/console/signin", path


def test_session_fixation_a_preset_cookie_is_not_adopted(served: Served) -> None:
    tok = served.tokens.create("fixation", "operator")
    c = client(served)
    chosen = "attacker-chosen-session-id-0123456789abcdef"
    c.cookies.set(COOKIE, chosen, domain="127.0.0.1", path="/console")
    form = c.get("/console/signin")
    issued = form.cookies.get(COOKIE)
    assert issued and issued != chosen  # an id this process did not issue is replaced
    r = c.post("/console/signin", data={"csrf": csrf_of(form.text), "token": tok})
    assert r.status_code == 303
    signed_in = r.cookies.get(COOKIE)
    assert signed_in not in (None, chosen, issued)  # a new id at sign-in
    # the attacker's id, and the pre-session id the victim's form ran under, open nothing
    for stale in (chosen, issued):
        other = client(served)
        other.cookies.set(COOKIE, stale, domain="127.0.0.1", path="/console")
        assert other.get("/console/requests").status_code == 303
    assert c.get("/console/requests").status_code == 200


def test_assistant_token_gets_no_console(served: Served) -> None:
    tok = served.tokens.create("assistant", "assistant")
    c = client(served)
    form = c.get("/console/signin")
    before = len(served.sessions)
    r = c.post("/console/signin", data={"csrf": csrf_of(form.text), "token": tok})
    assert r.status_code == 403
    assert "has no console" in r.text
    assert c.get("/console/requests").status_code == 303
    assert len(served.sessions) == before  # the form's pre-session replaced, none added


def test_unknown_token_refused_without_saying_why(served: Served) -> None:
    c = client(served)
    form = c.get("/console/signin")
    r = c.post("/console/signin", data={"csrf": csrf_of(form.text),
                                        "token": "mlt_not-a-real-token"})
    assert r.status_code == 401
    assert "was not accepted" in r.text and "mlt_not-a-real-token" not in r.text


def test_revoked_operator_session_ends_at_its_next_request(served: Served) -> None:
    """Revoked as `ledger tokens revoke` does (another store instance): every server
    process refuses the token within the store's TTL; the console's next request after
    that ends the session, and the form it had open writes nothing."""
    from credentials.tokens import DEFAULT_TTL

    tok = served.tokens.create("revoked", "operator")
    c = sign_in(served, tok)
    page = c.get("/console/requests")
    assert page.status_code == 200
    csrf = csrf_of(page.text)
    served.tokens.revoke(tok)
    time.sleep(DEFAULT_TTL + 0.5)
    before = home_digest(served.home)
    r = c.post("/console/requests", data={"csrf": csrf, "subject": "carol",
                                          "reason": "asked"})
    assert r.status_code == 303 and r.headers["location"] == "/console/signin?ended=credential"
    assert home_digest(served.home) == before
    r = c.get("/console/requests")  # the session is gone, not only refused once
    assert r.status_code == 303 and r.headers["location"] == "/console/signin"
    again = client(served)
    form = again.get("/console/signin")
    r = again.post("/console/signin", data={"csrf": csrf_of(form.text), "token": tok})
    assert r.status_code == 401


def test_idle_and_absolute_expiry(served: Served, clock: Clock) -> None:
    tok = served.tokens.create("expiry", "auditor")
    c = sign_in(served, tok)
    assert c.get("/console/policy").status_code == 200
    clock.t += 29 * 60  # used within 30 minutes: still alive
    assert c.get("/console/policy").status_code == 200
    clock.t += 31 * 60
    assert c.get("/console/policy").status_code == 303  # 31 minutes idle
    c = sign_in(served, tok)
    for _ in range(17):  # used every 29 minutes, for more than 8 hours
        clock.t += 29 * 60
        r = c.get("/console/policy")
    assert r.status_code == 303


def test_sign_out_ends_the_session(served: Served) -> None:
    c = sign_in(served, served.tokens.create("signout", "auditor"))
    page = c.get("/console/requests")
    old = c.cookies.get(COOKIE)
    r = c.post("/console/signout", data={"csrf": csrf_of(page.text)})
    assert r.status_code == 303 and r.headers["location"] == "/console/signin?ended=out"
    again = client(served)
    again.cookies.set(COOKIE, old or "", domain="127.0.0.1", path="/console")
    assert again.get("/console/requests").status_code == 303


# ----------------------------------------------------------------------------- CSRF
def test_csrf_post_without_or_with_a_wrong_token_refused_and_nothing_written(
        served: Served) -> None:
    op = sign_in(served, served.tokens.create("csrf", "operator"))
    other = sign_in(served, served.tokens.create("csrf2", "operator"))
    foreign = csrf_of(other.get("/console/requests").text)
    before = home_digest(served.home)
    for data in ({"subject": "carol", "reason": "asked"},
                 {"subject": "carol", "reason": "asked", "csrf": ""},
                 {"subject": "carol", "reason": "asked", "csrf": foreign}):
        r = op.post("/console/requests", data=data)
        assert r.status_code == 403, data
        assert "security token is missing or wrong" in r.text
    r = op.post("/console/policy/sweep", data={"mode": "run"})
    assert r.status_code == 403
    r = op.post("/console/signout", data={})
    assert r.status_code == 403
    assert home_digest(served.home) == before
    assert op.get("/console/requests").status_code == 200  # still signed in


def test_cross_origin_post_refused_even_with_the_token(served: Served) -> None:
    op = sign_in(served, served.tokens.create("origin", "operator"))
    csrf = csrf_of(op.get("/console/requests").text)
    before = home_digest(served.home)
    for origin in ("http://evil.example", "null"):
        r = op.post("/console/requests", data={"csrf": csrf, "subject": "carol",
                                               "reason": "asked"},
                    headers={"origin": origin})
        assert r.status_code == 403, origin
    assert home_digest(served.home) == before


def test_login_csrf_sign_in_form_needs_its_own_token(served: Served) -> None:
    tok = served.tokens.create("logincsrf", "operator")
    c = client(served)
    c.get("/console/signin")
    r = c.post("/console/signin", data={"token": tok})
    assert r.status_code == 403
    assert c.get("/console/requests").status_code == 303


# ----------------------------------------------------------------------------- roles
def test_auditor_posts_refused_with_403_and_nothing_written(served: Served) -> None:
    aud = sign_in(served, served.tokens.create("auditor", "auditor"))
    page = aud.get("/console/requests")
    csrf = csrf_of(page.text)
    assert "File a new request" not in page.text
    op = sign_in(served, served.tokens.create("op-for-auditor", "operator"))
    op_page = op.get("/console/requests")
    r = op.post("/console/requests", data={"csrf": csrf_of(op_page.text), "subject": "carol",
                                           "reason": "asked"})
    assert r.status_code == 303
    rid = r.headers["location"].rsplit("/", 1)[1]
    detail = aud.get(f"/console/requests/{rid}")
    assert detail.status_code == 200
    assert "Approve and execute" not in detail.text and "plan_digest" not in detail.text
    digest = re.search(r'id="plan-digest">([^<]+)<', detail.text)
    assert digest
    before = home_digest(served.home)
    for path, data in ((f"/console/requests/{rid}/execute",
                        {"plan_digest": digest[1], "reviewed": "yes"}),
                       (f"/console/requests/{rid}/evidence-pack", {}),
                       ("/console/requests", {"subject": "bob", "reason": "x"}),
                       ("/console/policy/sweep", {"mode": "run"}),
                       ("/console/review/00000000-0000-0000-0000-000000000000/reveal", {}),
                       ("/console/review/00000000-0000-0000-0000-000000000000/resolve",
                        {"action": "dismiss"})):
        r = aud.post(path, data={**data, "csrf": csrf})
        assert r.status_code == 403, (path, r.text)
        assert "nothing was written" in r.text
    assert home_digest(served.home) == before
    assert aud.get(f"/console/requests/{rid}").text.count('id="request-status">open') == 1


# ----------------------------------------------------------------------------- headers
def test_every_answer_carries_a_strict_csp_and_no_store(served: Served) -> None:
    c = sign_in(served, served.tokens.create("headers", "auditor"))
    for path in ("/console/signin", "/console/requests", "/console/static/console.css",
                 "/console/audit"):
        r = c.get(path)
        assert r.status_code in (200, 303), path
        csp = r.headers["content-security-policy"]
        assert csp.startswith("default-src 'self'") and "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "same-origin"
        if path.endswith(".css"):
            continue
        assert r.headers["cache-control"] == "no-store"
        assert "<script" not in r.text and " style=" not in r.text, path


def test_no_memory_content_in_pages_an_auditor_sees(served: Served) -> None:
    aud = sign_in(served, served.tokens.create("markers", "auditor"))
    html = "".join(aud.get(p).text for p in (
        "/console/requests", "/console/review", "/console/audit", "/console/integrity",
        "/console/policy", "/console/audit/report.json", "/console/audit/report.html"))
    for marker in (*MARKERS.values(), IDENTIFIER):
        assert marker not in html, marker


def test_unknown_request_and_bad_filter_answer_plainly(served: Served) -> None:
    c = sign_in(served, served.tokens.create("notfound", "auditor"))
    r = c.get("/console/requests/not-a-request")
    assert r.status_code == 404 and "no erasure request" in r.text
    r = c.get("/console/requests?status=lost")
    assert r.status_code == 400 and "unknown status" in r.text
    # a page the console does not have: its own page, not a bare "Not Found"
    r = c.get("/console/memories")
    assert r.status_code == 404 and "there is no such page in the console" in r.text
    assert "<h1>Not found</h1>" in r.text and r.headers["cache-control"] == "no-store"


def test_reveal_only_for_a_flagged_memory_and_nothing_written_otherwise(
        served: Served) -> None:
    from service.caller import local_operator

    atom = served.backend.call_sync(lambda svc: svc.get_atom(local_operator(), "c1").atom_id)
    op = sign_in(served, served.tokens.create("reveal", "operator"))
    csrf = csrf_of(op.get("/console/review").text)
    before = home_digest(served.home)
    for target in (atom, "c1", "not-an-atom"):
        r = op.post(f"/console/review/{target}/reveal", data={"csrf": csrf})
        assert r.status_code == 400 and "has no open review flag" in r.text, target
        assert MARKERS["carol_atom"] not in r.text
    r = op.post(f"/console/review/{atom}/resolve", data={"csrf": csrf, "action": "dismiss"})
    assert r.status_code == 400
    assert home_digest(served.home) == before


def test_home_digest_sees_a_write(served: Served, tmp_path: Path) -> None:
    """The refusal checks above can fail: a real filing changes the home's files."""
    op = sign_in(served, served.tokens.create("digest", "operator"))
    before = home_digest(served.home)
    r = op.post("/console/requests", data={"csrf": csrf_of(op.get("/console/requests").text),
                                           "subject": "bob", "reason": "asked"})
    assert r.status_code == 303
    assert home_digest(served.home) != before


@pytest.mark.slow
def test_ledger_serve_serves_the_console_end_to_end(tmp_path: Path) -> None:
    """The real `ledger serve` process (tests/serving.py): sign in, file, approve and
    execute, build the pack, download it, and `ledger verify-pack` it: exit 0."""
    from .conftest import run_cli
    from .serving import issue, serving

    home = tmp_path / "home"
    start = t0()
    old = os.environ.get("LEDGER_NOW")
    try:
        build_ledger(home, start)
        os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1))
        _, token = issue(home, "dpo", "operator")
        with serving(home) as server:
            c = httpx.Client(base_url=server.url, follow_redirects=False, timeout=120)
            form = c.get("/console/signin")
            assert form.headers["content-security-policy"].startswith("default-src 'self'")
            r = c.post("/console/signin", data={"csrf": csrf_of(form.text), "token": token})
            assert r.status_code == 303, r.text
            csrf = csrf_of(c.get("/console/requests").text)
            r = c.post("/console/requests", data={"csrf": csrf, "subject": "alice",
                                                  "reason": "asked", "identifiers": IDENTIFIER})
            assert r.status_code == 303, r.text
            detail = r.headers["location"]
            page = c.get(detail).text
            digest = re.search(r'name="plan_digest" value="([^"]+)"', page)
            assert digest
            r = c.post(f"{detail}/execute", data={"csrf": csrf, "plan_digest": digest[1],
                                                  "reviewed": "yes"})
            assert r.status_code == 303, r.text
            r = c.post(f"{detail}/evidence-pack", data={"csrf": csrf})
            assert r.status_code == 303, r.text
            page = c.get(r.headers["location"]).text
            assert "OK: the erasure is proven" in page
            link = re.search(r'href="(/console/packs/[^"]+)"', page)
            assert link
            pack = c.get(link[1])
            assert pack.headers["content-type"] == "application/zip"
            out = tmp_path / "pack.zip"
            out.write_bytes(pack.content)
        r = run_cli("verify-pack", str(out), "--root-key", str(home / "keys" / "root.pub"))
        assert r.code == 0, r.err
    finally:
        if old is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = old
