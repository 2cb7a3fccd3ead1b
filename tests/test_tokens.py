"""Bearer tokens (credentials/tokens.py, ADR 0028), on SQLite and PostgreSQL: issued once,
stored as an argon2id hash in the event store's database, refused when malformed,
unknown, expired or revoked (also by a second process, within the TTL bound), and never
written to a file, a list, a log line or an error message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from credentials.auth import (
    ExpiredToken,
    InvalidToken,
    MalformedAuthorization,
    MissingCredentials,
    RevokedToken,
    caller_from_authorization,
    www_authenticate,
)
from credentials.tokens import DEFAULT_TTL, TokenStore
from ledger.errors import ConflictError, InputError, NotFound
from ledger.home import Config
from service.caller import Caller

from .conftest import files_under, pg_connect, run_cli, snapshot

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class Clock:
    """The wall clock (for expiry) and the monotonic clock (for the cache), both moved
    by hand."""

    def __init__(self) -> None:
        self.t = T0
        self.mono = 1000.0

    def now(self) -> datetime:
        return self.t

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)
        self.mono += seconds


@pytest.fixture
def clk() -> Clock:
    return Clock()


def open_store(home: Path, clk: Clock, ttl: float = DEFAULT_TTL) -> TokenStore:
    """A store as one server process opens it: its own engine on the home's database."""
    return TokenStore.open(Config.load(home), ttl=ttl, now=clk.now, monotonic=clk.monotonic)


@pytest.fixture
def store(home: Path, clk: Clock) -> Iterator[TokenStore]:
    s = open_store(home, clk)
    yield s
    s.close()


def database_text(home: Path) -> bytes:
    """Every byte the ledger's databases hold: the home's files (SQLite) plus, on
    PostgreSQL, every row of every table of the ledger's schema."""
    blob = b"".join(p.read_bytes() for p in files_under(home))
    schema = Config.load(home).events.schema
    if schema is not None:
        with pg_connect() as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,))]
            assert "auth_tokens" in tables
            for t in tables:
                for (row,) in conn.execute(f'SELECT row_to_json(t)::text FROM "{schema}"."{t}" t'):
                    blob += row.encode()
    return blob


def state(home: Path) -> tuple[dict[str, bytes], list[tuple[object, ...]]]:
    """The home's files, and on PostgreSQL the token table's rows (SQLite: in the files)."""
    return snapshot(home), token_rows(home) if Config.load(home).events.is_postgres else []


def token_rows(home: Path) -> list[tuple[object, ...]]:
    cfg = Config.load(home)
    engine = sa.create_engine(cfg.events.sqlalchemy_url())
    try:
        if not sa.inspect(engine).has_table("auth_tokens", schema=cfg.events.schema):
            return []
        table = sa.Table("auth_tokens", sa.MetaData(schema=cfg.events.schema),
                         autoload_with=engine)
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.select(table).order_by(table.c.token_id))]
    finally:
        engine.dispose()


# ------------------------------------------------------------------ issue, list, revoke
def test_create_list_revoke(store: TokenStore, clk: Clock) -> None:
    issued = store.create("claude-desktop", "assistant", ["user_2", "user_1", "user_1"],
                          tenant="acme", expires_at=T0 + timedelta(days=30))
    rec = issued.record
    assert issued.token.startswith("mlt_") and len(issued.token) == 64
    assert rec.token_id.startswith("tok_") and rec.token_id[4:] in issued.token
    assert rec.subjects == ("user_1", "user_2") and rec.tenant == "acme"
    assert rec.signing_key is None
    ops = store.create("dpo", "operator").record
    assert ops.signing_key == "operator" and ops.subjects is None

    caller = store.authenticate(issued.token)
    assert caller == Caller(credential_id=rec.token_id, role="assistant",
                            subjects=frozenset({"user_1", "user_2"}), tenant="acme",
                            expires_at=T0 + timedelta(days=30), name="claude-desktop")
    assert caller.stored_ref("user_1") == "acme:user_1"
    assert store.authenticate(store.create("ops2", "operator", signing_key="dpo")
                              .token).signing_key == "dpo"

    listed = {r.token_id: r for r in store.list()}
    assert set(listed) >= {rec.token_id, ops.token_id}
    assert listed[rec.token_id].status(clk.now()) == "active"
    assert store.has_active()

    revoked = store.revoke(rec.token_id)
    assert revoked.revoked_at == T0 and revoked.status(clk.now()) == "revoked"
    with pytest.raises(RevokedToken) as e:  # the revoking process refuses it at once
        store.authenticate(issued.token)
    assert e.value.reason == "revoked" and e.value.token_id == rec.token_id
    with pytest.raises(ConflictError, match="already revoked"):
        store.revoke(rec.token_id)
    with pytest.raises(NotFound, match="no token with id"):
        store.revoke("tok_0000000000000000")
    with pytest.raises(NotFound):
        store.get("not-an-id")


def test_the_stored_hash_is_argon2id(store: TokenStore, home: Path) -> None:
    store.create("a", "auditor")
    (row,) = token_rows(home)
    assert str(row[-1]).startswith("$argon2id$v=19$m=19456,t=2,p=1$")


def test_expired_token_refused(store: TokenStore, clk: Clock) -> None:
    issued = store.create("short", "assistant", ["u1"], expires_at=T0 + timedelta(hours=1))
    store.authenticate(issued.token)
    clk.advance(3599)
    store.authenticate(issued.token)  # cached and still valid
    clk.advance(1)
    with pytest.raises(ExpiredToken) as e:  # exactly at expiry, even from the cache
        store.authenticate(issued.token)
    assert e.value.reason == "expired"
    assert not store.has_active()
    with pytest.raises(InputError, match="not in the future"):
        store.create("late", "assistant", expires_at=T0)


def test_revoked_in_another_process_is_refused_within_the_ttl(home: Path,
                                                              clk: Clock) -> None:
    """Two stores, two engines: two server processes (or hosts) on one ledger."""
    a, b = open_store(home, clk), open_store(home, clk)
    instant = open_store(home, clk, ttl=0)
    try:
        issued = a.create("both-stores", "assistant", ["u1"])
        assert b.authenticate(issued.token).credential_id == issued.record.token_id
        assert instant.authenticate(issued.token).role == "assistant"
        a.revoke(issued.record.token_id)
        with pytest.raises(RevokedToken):
            instant.authenticate(issued.token)  # ttl 0: the row is read on every request
        clk.advance(DEFAULT_TTL - 0.5)
        b.authenticate(issued.token)  # inside the bound b may still accept it ...
        clk.advance(0.5)
        with pytest.raises(RevokedToken):  # ... never after it
            b.authenticate(issued.token)
    finally:
        a.close()
        b.close()
        instant.close()


def test_a_second_process_verifies_the_secret_once(home: Path, clk: Clock,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    a = open_store(home, clk)
    b = open_store(home, clk, ttl=0)
    try:
        issued = a.create("counted", "assistant", ["u1"])
        calls: list[int] = []
        hasher = b._hasher

        class Counting:
            def verify(self, encoded: str, token: str) -> bool:
                calls.append(1)
                return hasher.verify(encoded, token)

        monkeypatch.setattr(b, "_hasher", Counting())
        for _ in range(5):
            b.authenticate(issued.token)
        assert len(calls) == 1
    finally:
        a.close()
        b.close()


def test_malformed_unknown_and_wrong_secret_refused(store: TokenStore) -> None:
    issued = store.create("real", "assistant", ["u1"])
    hexid = issued.record.token_id[4:]
    wrong_secret = f"mlt_{hexid}_{'A' * 43}"
    unknown_id = f"mlt_{'0' * 16}_{issued.token[-43:]}"
    cases = {"": "malformed", "mlt_": "malformed", issued.token + "x": "malformed",
             issued.token.upper(): "malformed", "Bearer " + issued.token: "malformed",
             unknown_id: "unknown", wrong_secret: "mismatch"}
    for token, reason in cases.items():
        with pytest.raises(InvalidToken) as e:
            store.authenticate(token)
        assert e.value.reason == reason, token
        assert token not in str(e.value) or token == ""
    assert store.authenticate(issued.token).role == "assistant"  # still fine


@pytest.mark.parametrize("kwargs, match", [
    ({"role": "admin"}, "role 'admin' is not one of"),
    ({"role": "assistant", "subjects": ["bad ref"]}, "is not a subject ref"),
    ({"role": "assistant", "tenant": "a:b"}, "--tenant 'a:b' is invalid"),
    ({"role": "assistant", "signing_key": "operator"}, "an assistant token signs nothing"),
    ({"role": "operator", "signing_key": "Not A Key"}, "is not a key name"),
    ({"role": "assistant", "name": ""}, "token name '' is invalid"),
])
def test_invalid_fields_refused_before_anything_is_written(store: TokenStore, home: Path,
                                                           kwargs: dict[str, object],
                                                           match: str) -> None:
    args = {"name": "n", **kwargs}
    before = state(home)
    with pytest.raises(InputError, match=match):
        store.create(**args)  # type: ignore[arg-type]
    assert state(home) == before


# ------------------------------------------------------------------ the CLI
def verdicts(err: str) -> str:
    """stderr without the JSON log lines (the tests log at debug level)."""
    return "".join(line + "\n" for line in err.splitlines() if not line.startswith("{"))


def test_cli_create_list_revoke(home: Path) -> None:
    r = run_cli("--home", str(home), "tokens", "create", "claude", "--role", "assistant",
                "--subject", "u1", "--subject", "u2", "--expires", "2099-01-01")
    assert r.code == 0, r
    token = r.out.strip()
    assert token.startswith("mlt_") and r.out.count("\n") == 1
    assert verdicts(r.err).startswith("OK: created tok_") and "shown this once" in r.err
    assert token not in r.err

    r = run_cli("--home", str(home), "tokens", "create", "dpo", "--role", "operator",
                "--json")
    assert r.code == 0, r
    doc = json.loads(r.out)
    assert doc["token"].startswith("mlt_") and doc["token_id"].startswith("tok_")
    assert doc["role"] == "operator" and doc["signing_key"] == "operator"

    for args in (("tokens", "list"), ("tokens", "list", "--json")):
        r = run_cli("--home", str(home), *args)
        assert r.code == 0, r
        for secret in (token, doc["token"], token[-43:], doc["token"][-43:]):
            assert secret not in r.out + r.err
        assert "argon2" not in r.out and "hash" not in r.out
    rows = json.loads(run_cli("--home", str(home), "tokens", "list", "--json").out)
    assert [x["name"] for x in rows] == ["claude", "dpo"]
    assert rows[0]["subjects"] == ["u1", "u2"] and rows[0]["status"] == "active"
    assert rows[0]["expires_at"] == "2099-01-01T00:00:00.000000Z"

    r = run_cli("--home", str(home), "tokens", "revoke", doc["token_id"])
    assert r.code == 0, r
    assert r.out.strip() == doc["token_id"] and verdicts(r.err).startswith("OK: revoked")
    rows = json.loads(run_cli("--home", str(home), "tokens", "list", "--json").out)
    assert [x["status"] for x in rows] == ["active", "revoked"]
    r = run_cli("--home", str(home), "tokens", "revoke", doc["token_id"])
    assert r.code == 2 and "already revoked" in r.err

    with TokenStore.open(Config.load(home)) as s:
        assert s.authenticate(token).subjects == frozenset({"u1", "u2"})
        with pytest.raises(RevokedToken):
            s.authenticate(doc["token"])


def test_the_secret_is_in_no_file_and_no_database_row(home: Path) -> None:
    r = run_cli("--home", str(home), "tokens", "create", "claude", "--role", "assistant",
                "--subject", "u1", "--json")
    assert r.code == 0, r
    token = json.loads(r.out)["token"]
    with TokenStore.open(Config.load(home)) as s:
        s.authenticate(token)
    blob = database_text(home)
    assert json.loads(r.out)["token_id"].encode() in blob  # the search does see the table
    for needle in (token, token[-43:], token[-43:-20]):
        assert needle.encode() not in blob


def test_no_log_line_holds_a_token(store: TokenStore) -> None:
    with capture_logs() as logs:
        issued = store.create("logged", "assistant", ["u1"])
        store.authenticate(issued.token)
        wrong = issued.token[:-1] + ("A" if issued.token[-1] != "A" else "B")
        for bad in (wrong, "mlt_nope", issued.token + "x"):
            with pytest.raises(InvalidToken):
                store.authenticate(bad)
        store.revoke(issued.record.token_id)
        with pytest.raises(RevokedToken):
            store.authenticate(issued.token)
        with pytest.raises(MalformedAuthorization):
            caller_from_authorization(f"Bearer {issued.token} {issued.token}", store)
    text = repr(logs)
    assert {"auth.token_created", "auth.refused", "auth.token_revoked"} <= \
        {x["event"] for x in logs}
    assert {x.get("reason") for x in logs} >= {"mismatch", "malformed", "revoked"}
    assert issued.token[-43:] not in text and issued.token[-43:-30] not in text
    assert issued.token[-43:] not in repr(issued)


REFUSED_CREATES = [
    ("--role", "admin"),
    ("--role", "assistant", "--expires", "next tuesday"),
    ("--role", "assistant", "--expires", "2001-01-01"),
    ("--role", "assistant", "--subject", "no spaces"),
    ("--role", "assistant", "--key", "operator"),
    ("--role", "operator", "--key", "nokey"),
    ("--role", "assistant", "--tenant", "a:b"),
]


@pytest.mark.parametrize("args", REFUSED_CREATES, ids=" ".join)
def test_a_refused_create_leaves_the_home_byte_identical(home: Path,
                                                         args: tuple[str, ...]) -> None:
    before = state(home)
    r = run_cli("--home", str(home), "tokens", "create", "x", *args)
    assert r.code == 2, r
    assert verdicts(r.err).startswith("error: ") and "hint: " in r.err
    assert state(home) == before


def test_listing_a_home_without_tokens_writes_nothing(home: Path) -> None:
    before = snapshot(home)
    r = run_cli("--home", str(home), "tokens", "list", "--json")
    assert r.code == 0 and json.loads(r.out) == []
    assert snapshot(home) == before


# ------------------------------------------------------------------ the header
class _Store:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def authenticate(self, token: str) -> Caller:
        self.seen.append(token)
        return Caller(credential_id="tok_x", role="auditor")


GOOD = "mlt_0123456789abcdef_" + "a" * 43
MALFORMED_HEADERS = [
    "Basic dXNlcjpwYXNz", GOOD, "Bearer", "Bearer ", f"Bearer {GOOD} {GOOD}",
    f"Bearer {GOOD},{GOOD}", f"Bearer {GOOD}é", f"Bearer\t{GOOD}", f"Bearer {GOOD}\r\nX: y",
    "Bearer " + "a" * 4096, f"Token {GOOD}", f'Bearer "{GOOD}"',
]


@pytest.mark.parametrize("value", MALFORMED_HEADERS, ids=range(len(MALFORMED_HEADERS)))
def test_malformed_authorization_headers_are_refused(value: str) -> None:
    s = _Store()
    with pytest.raises((MalformedAuthorization, MissingCredentials)) as e:
        caller_from_authorization(value, s)
    assert s.seen == []
    assert GOOD not in str(e.value) and GOOD not in str(e.value.hint)
    assert www_authenticate(e.value).startswith('Bearer realm="memory-ledger"')


def test_the_header_parser_accepts_one_bearer_token() -> None:
    s = _Store()
    for value in (f"Bearer {GOOD}", f"bearer {GOOD}", f"BEARER   {GOOD} "):
        assert caller_from_authorization(value, s).role == "auditor"
    assert s.seen == [GOOD] * 3
    for missing in (None, "", "   "):
        with pytest.raises(MissingCredentials) as e:
            caller_from_authorization(missing, s)
        assert www_authenticate(e.value) == 'Bearer realm="memory-ledger"'
    with pytest.raises(InvalidToken) as e2:
        caller_from_authorization("Bearer abc.def", s)  # no OAuth configured
    assert www_authenticate(e2.value) == 'Bearer realm="memory-ledger", error="invalid_token"'
    with pytest.raises(InvalidToken):
        caller_from_authorization(f"Bearer {GOOD}", None)


def test_the_header_parser_on_a_real_store(store: TokenStore) -> None:
    issued = store.create("real", "assistant", ["u1"])
    caller = caller_from_authorization(f"Bearer {issued.token}", store)
    assert caller.credential_id == issued.record.token_id
    store.revoke(issued.record.token_id)
    with pytest.raises(RevokedToken):
        caller_from_authorization(f"Bearer {issued.token}", store)
