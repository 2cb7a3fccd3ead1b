"""Signed webhooks from the log (issue 29, ADR 0055), against a real receiver on loopback
that verifies every delivery with the `standardwebhooks` package (the Standard Webhooks
reference implementation): every event kind, retries and per-subject order while the
receiver is down, dead letters and retry, kill -9 of `ledger serve` mid-delivery, tenant
scope, private-range targets and DNS rebinding refused. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import signal
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ledger.application import LedgerApp
from ledger.home import Config
from projections.webhooks import EVENT_TYPES, completion_digest
from service.webhooks import DeliveryPolicy, WebhookService, check_url

from .conftest import run_cli
from .serving import free_port, home_digest, issue, serving
from .witness_support import InProcessWitness

FAST = DeliveryPolicy(timeout=3.0, retry_base=0.05, retry_cap=0.2, max_attempts=50,
                      interval=0.1)
CONTENT = ("Prefers green tea", "Works at Acme", "Lives in Lisbon")


# ---------------------------------------------------------------------- the receiver
class Receiver:
    """An HTTP endpoint on 127.0.0.1 that verifies each POST as Standard Webhooks says
    (`standardwebhooks.Webhook.verify`) and records what it accepted; it can go down (the
    port closed) and come back on the same port, or hold requests until released."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.tls = tls
        self.port = free_port()
        self.secrets: dict[str, str] = {}  # path -> secret
        self.received: list[dict[str, Any]] = []  # verified deliveries, in arrival order
        self.refused: list[str] = []  # why a POST failed verification
        self.hold: threading.Event | None = None  # set: respond; unset: wait
        self.arrived = threading.Event()
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.up()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                secret = receiver.secrets.get(self.path)
                try:
                    if secret is None:
                        raise WebhookVerificationError(f"no secret for {self.path}")
                    payload = Webhook(secret).verify(body, dict(self.headers.items()))
                except WebhookVerificationError as e:
                    with receiver.lock:
                        receiver.refused.append(str(e))
                    self.send_response(400)
                    self.end_headers()
                    return
                with receiver.lock:
                    receiver.received.append({
                        "path": self.path, "id": self.headers["webhook-id"],
                        "body": body.decode(), "payload": payload})
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.server = server

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def payloads(self, path: str = "/hook") -> list[dict[str, Any]]:
        with self.lock:
            return [r["payload"] for r in self.received if r["path"] == path]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    if r.hold is not None:
        r.hold.set()
    r.down()


def cli(home: Path, *args: str) -> str:
    r = run_cli("--home", str(home), *args)
    assert r.code == 0, r.err
    return r.out


def subject(home: Path, ref: str) -> str:
    return str(json.loads(cli(home, "subject", "add", ref, "--json"))["subject_id"])


def atom(home: Path, ref: str, text: str) -> str:
    return cli(home, "atom", "add", "--subject", ref, "--text", text).strip()


def subscribe(home: Path, receiver: Receiver, path: str = "/hook", *extra: str) -> str:
    data = json.loads(cli(home, "webhooks", "add", receiver.url(path), "--allow-private",
                          "--json", *extra))
    receiver.secrets[path] = data["secret"]
    assert data["secret"].startswith("whsec_")
    return str(data["subscription_id"])


def pump_until(hooks: WebhookService, done: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "deliveries did not arrive in time"
        hooks.pump()
        time.sleep(0.05)


# ---------------------------------------------------------------------- every kind
@pytest.fixture
def witness(tmp_path: Path) -> Iterator[InProcessWitness]:
    w = InProcessWitness(tmp_path / "witness", "w.example/witness")
    yield w
    w.stop()


def test_every_event_kind_is_delivered_signed_with_ids_and_digests_only(
        home: Path, receiver: Receiver, witness: InProcessWitness,
        monkeypatch: pytest.MonkeyPatch) -> None:
    witness.cosign_for(home)
    sub = subscribe(home, receiver)
    scoped = subscribe(home, receiver, "/scoped", "--tenant", "acme")
    jane = subject(home, "jane")
    a1 = atom(home, "jane", CONTENT[0])
    a2 = atom(home, "jane", CONTENT[1])
    corrected = json.loads(cli(home, "atom", "correct", a1, "--text", CONTENT[2], "--json"))
    cli(home, "redact", a2, "--mode", "soft", "--reason", "asked")
    done = json.loads(cli(home, "redact-user", "jane", "--reason", "GDPR Art. 17",
                          "--operator", "operator", "--yes", "--json"))
    subject(home, "late")
    cli(home, "checkpoint")  # cosigned by the witness
    # a request whose deadline passes (the sweep's clock moved past it)
    from service.caller import local_operator
    from service.models import ErasureRequestIn
    from service.root import opened_service

    with opened_service(home) as svc:
        late = svc.file_request(local_operator(), ErasureRequestIn(subject="late",
                                                                   reason="asked"))
    monkeypatch.setenv("LEDGER_NOW", (datetime.now(UTC) + timedelta(days=60))
                       .strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    r = run_cli("--home", str(home), "webhooks", "deliver", "--once", "--json")
    assert r.code == 0, r.err
    with WebhookService.open(home, FAST) as hooks:
        pump_until(hooks, lambda: {p["type"] for p in receiver.payloads()} >= set(EVENT_TYPES))
    assert not receiver.refused
    got = receiver.payloads()
    assert {p["type"] for p in got} == set(EVENT_TYPES)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for p in got:
        by_type.setdefault(p["type"], []).append(p["data"])
    assert {d["atom_id"] for d in by_type["memory.added"]} >= {a1, a2, corrected["atom_id"]}
    assert {d["atom_id"] for d in by_type["memory.corrected"]} == {a1}
    assert {d["mode"] for d in by_type["memory.redacted"]} >= {"soft", "hard"}
    assert {d["request_id"] for d in by_type["erasure.overdue"]} == {late.request_id}
    cosigned = by_type["checkpoint.cosigned"]
    assert {d["witness"] for d in cosigned} == {witness.vkey}
    with _app(home) as app:
        latest = app.latest_checkpoint()
        assert any(d["size"] == latest.checkpoint.size for d in cosigned)
    assert receiver.payloads("/scoped") == []  # no acme subject, and no checkpoint
    assert scoped.startswith("whk_")
    [completed] = by_type["erasure.completed"]
    assert completed["request_id"] == done["request_id"] and completed["subject_id"] == jane
    with _app(home) as app:
        req = app.reader.aggregate(UUID(done["request_id"]))
        assert completed["completion_digest"] == completion_digest(
            done["request_id"], req.batch_id, req.event_ids)
    # ids, kinds, times and digests: no memory content, no ref, in any body
    for rec in receiver.received:
        assert not any(text in rec["body"] for text in CONTENT)
        assert "jane" not in rec["body"]
        assert rec["id"].startswith(f"msg_{sub[4:]}_")
    # each delivery once (nothing failed), and a new pass sends nothing again
    ids = [rec["id"] for rec in receiver.received]
    assert len(ids) == len(set(ids))
    with WebhookService.open(home, FAST) as hooks:
        report = hooks.pump()
        assert report.fanned_out == 0 and report.attempted == 0


@contextmanager
def _app(home: Path) -> Iterator[LedgerApp]:
    app = LedgerApp(Config.load(home))
    try:
        yield app
    finally:
        app.close()


# ---------------------------------------------------------------------- down, then up
def test_receiver_down_then_up_retries_and_keeps_the_order_per_subject(
        home: Path, receiver: Receiver) -> None:
    subscribe(home, receiver)
    subject(home, "ann")
    subject(home, "bob")
    receiver.down()
    with WebhookService.open(home, FAST) as hooks:
        written, failed = [], 0
        for i in range(4):
            for ref in ("ann", "bob"):
                written.append(atom(home, ref, f"fact {i} of {ref}"))
                report = hooks.pump()  # each attempt fails: connection refused
                assert report.delivered == 0
                failed += report.failed
        assert failed >= 2 and report.pending == len(written)
        # one delivery per subject is attempted while it fails: the others wait behind it
        rows = hooks.subscriptions()
        assert rows[0].pending == len(written) and rows[0].delivered == 0
        receiver.up()
        pump_until(hooks, lambda: len(receiver.payloads()) >= len(written))
        report = hooks.pump()
        assert report.pending == 0
    got = receiver.payloads()
    assert sorted(p["data"]["atom_id"] for p in got) == sorted(written)
    for ref_atoms in (written[0::2], written[1::2]):  # ann's, then bob's
        mine = [p["data"]["atom_id"] for p in got if p["data"]["atom_id"] in ref_atoms]
        assert mine == ref_atoms, "deliveries of one subject arrived out of log order"
        positions = [p["data"]["position"] for p in got if p["data"]["atom_id"] in ref_atoms]
        assert positions == sorted(positions)


def test_failed_deliveries_go_to_the_dead_letters_and_retry_sends_them(
        home: Path, receiver: Receiver) -> None:
    sub = subscribe(home, receiver)
    subject(home, "ann")
    receiver.down()
    a = atom(home, "ann", "a fact")
    policy = DeliveryPolicy(timeout=2.0, retry_base=0.01, retry_cap=0.01, max_attempts=2)
    with WebhookService.open(home, policy) as hooks:
        for _ in range(20):
            if hooks.pump().dead:
                break
            time.sleep(0.03)
    dead = json.loads(cli(home, "webhooks", "list", "--dead", "--json"))
    assert [d["type"] for d in dead] == ["memory.added"] and dead[0]["attempts"] == 2
    assert dead[0]["last_error"] == "ConnectError"
    listed = json.loads(cli(home, "webhooks", "list", "--json"))
    assert listed[0]["subscription_id"] == sub and listed[0]["dead"] == 1
    assert "secret" not in json.dumps(listed) and "whsec_" not in json.dumps(listed)
    # a dead letter no longer holds the subject's later deliveries back
    b = atom(home, "ann", "another fact")
    receiver.up()
    r = run_cli("--home", str(home), "webhooks", "deliver", "--once", "--json")
    assert r.code == 0, r.err
    assert [p["data"]["atom_id"] for p in receiver.payloads()] == [b]
    # retrying an unknown or a live delivery is refused and changes nothing
    before = home_digest(home)
    bad = run_cli("--home", str(home), "webhooks", "retry", "msg_0000000000000000_1")
    assert bad.code != 0 and "no delivery msg_0000000000000000_1" in bad.err
    assert home_digest(home) == before
    assert cli(home, "webhooks", "retry", dead[0]["webhook_id"]).strip() == "1"
    cli(home, "webhooks", "deliver", "--once")
    assert [p["data"]["atom_id"] for p in receiver.payloads()] == [b, a]
    assert json.loads(cli(home, "webhooks", "list", "--dead", "--json")) == []


# ---------------------------------------------------------------------- tenants
def test_a_tenant_scoped_subscription_never_receives_another_tenants_event(
        home: Path, receiver: Receiver) -> None:
    subscribe(home, receiver, "/acme", "--tenant", "acme")
    subscribe(home, receiver, "/beta", "--tenant", "beta")
    subscribe(home, receiver, "/all")
    ids = {"acme": {subject(home, "acme:u1")}, "beta": {subject(home, "beta:u1")}}
    for tenant in ("acme", "beta"):
        atom(home, f"{tenant}:u1", f"a fact of {tenant}")
        aid = atom(home, f"{tenant}:u1", f"another fact of {tenant}")
        cli(home, "redact", aid, "--mode", "soft", "--reason", "asked")
    cli(home, "redact-user", "beta:u1", "--reason", "GDPR", "--operator", "operator",
        "--yes")
    with WebhookService.open(home, FAST) as hooks:
        pump_until(hooks, lambda: len(receiver.payloads("/all")) >= 10
                   and any(p["type"] == "erasure.completed"
                           for p in receiver.payloads("/beta")))
        hooks.pump()
    assert not receiver.refused
    for tenant in ("acme", "beta"):
        got = receiver.payloads(f"/{tenant}")
        assert got and {p["data"]["subject_id"] for p in got} == ids[tenant]
    assert "erasure.completed" not in {p["type"] for p in receiver.payloads("/acme")}
    assert {p["data"]["subject_id"] for p in receiver.payloads("/all")} == \
        ids["acme"] | ids["beta"]


# ---------------------------------------------------------------------- SSRF
@pytest.mark.parametrize("url", [
    "http://127.0.0.1/hook", "http://localhost:8080/hook", "http://10.1.2.3/hook",
    "http://192.168.0.10/hook", "http://172.16.0.1/hook", "http://169.254.169.254/latest",
    "http://[::1]/hook", "http://[fd00::1]/hook", "http://0.0.0.0/hook",
    "http://224.0.0.1/hook", "http://[::ffff:127.0.0.1]/hook", "http://100.64.0.1/hook",
])
def test_private_range_url_is_refused_and_nothing_changes(home: Path, url: str) -> None:
    before = home_digest(home)
    r = run_cli("--home", str(home), "webhooks", "add", url)
    assert r.code == 2, r.err
    assert "refused" in r.err and "--allow-private" in r.err
    assert home_digest(home) == before


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://example.com/x", "not an http or https URL"),
    ("https://user:pw@example.com/x", "may not carry a user name"),
    ("http://example.com:99999/x", "invalid port"),
])
def test_malformed_url_is_refused_and_nothing_changes(home: Path, url: str,
                                                      message: str) -> None:
    before = home_digest(home)
    r = run_cli("--home", str(home), "webhooks", "add", url, "--allow-private")
    assert r.code == 2 and message in r.err
    assert home_digest(home) == before


def test_unknown_event_type_and_tenant_are_refused(home: Path, receiver: Receiver) -> None:
    before = home_digest(home)
    r = run_cli("--home", str(home), "webhooks", "add", receiver.url(), "--allow-private",
                "--event", "memory.read")
    assert r.code == 2 and "unknown event type memory.read" in r.err
    r = run_cli("--home", str(home), "webhooks", "add", receiver.url(), "--allow-private",
                "--tenant", "a:b")
    assert r.code == 2 and "--tenant 'a:b' is invalid" in r.err
    r = run_cli("--home", str(home), "webhooks", "add", receiver.url(), "--allow-private",
                "--tenant", "acme", "--event", "checkpoint.cosigned")
    assert r.code == 2 and "not told of checkpoints" in r.err
    assert home_digest(home) == before


def test_dns_rebinding_to_loopback_is_refused_at_delivery(
        home: Path, receiver: Receiver) -> None:
    """The host resolved to a public address when it was added, to 127.0.0.1 when the
    delivery is due: the attempt is refused before any connection."""
    answers = {"now": "93.184.215.14"}

    def resolve(host: str, port: int) -> list[str]:
        return [answers["now"]]

    subject(home, "ann")
    app = LedgerApp(Config.load(home))
    from projections.store import Store

    store = Store.open(app.config.projections)
    hooks = WebhookService(app, store, FAST, resolve=resolve)
    try:
        added = hooks.add(f"http://hooks.example.com:{receiver.port}/hook")
        receiver.secrets["/hook"] = added.secret
        atom(home, "ann", "a fact")
        answers["now"] = "127.0.0.1"
        report = hooks.pump()
        assert report.attempted == 1 and report.errors == {"target refused": 1}
        assert receiver.received == [] and receiver.refused == []
    finally:
        hooks.close()
        store.close()
        app.close()
    assert check_url(receiver.url(), True)[1] == ["127.0.0.1"]


# ---------------------------------------------------------------------- the read model
def test_the_feed_rebuilds_to_the_same_rows_and_the_outbox_sends_nothing_twice(
        home: Path, receiver: Receiver) -> None:
    subscribe(home, receiver)
    subject(home, "ann")
    for i in range(3):
        atom(home, "ann", f"fact {i}")
    cli(home, "redact-user", "ann", "--reason", "GDPR", "--operator", "operator", "--yes")
    with WebhookService.open(home, FAST) as hooks:
        pump_until(hooks, lambda: any(p["type"] == "erasure.completed"
                                      for p in receiver.payloads()))
        hooks.pump()
        sent = len(receiver.received)
        with hooks.store.engine.connect() as conn:
            incremental = hooks.feed.dump(conn)
        hooks.runner.rebuild(["webhooks"])
        with hooks.store.engine.connect() as conn:
            assert hooks.feed.dump(conn) == incremental
        report = hooks.pump()
        assert report.fanned_out == 0 and report.attempted == 0
    assert len(receiver.received) == sent
    # the feed holds no content and no route: erasure has nothing to purge there
    assert not any(text in json.dumps(incremental) for text in ("fact 0", "fact 1"))


def test_remove_destroys_the_secret_and_stops_deliveries(home: Path,
                                                         receiver: Receiver) -> None:
    sub = subscribe(home, receiver)
    subject(home, "ann")
    assert cli(home, "webhooks", "remove", sub).strip() == sub
    atom(home, "ann", "a fact")
    cli(home, "webhooks", "deliver", "--once")
    assert receiver.received == []
    with _app(home) as app:
        assert app.datakeys.destroyed_at(f"webhook:{sub}") is not None
        assert app.datakeys.open_note(f"webhook:{sub}") is None
    r = run_cli("--home", str(home), "webhooks", "remove", sub)
    assert r.code == 2 and "no webhook subscription" in r.err


# ---------------------------------------------------------------------- kill -9
@pytest.mark.slow
def test_kill_9_of_the_server_mid_delivery_then_restart_delivers_everything(
        home: Path, receiver: Receiver) -> None:
    """`ledger serve` delivers; it is killed (SIGKILL) while the receiver holds a delivery
    it has already accepted; after a restart every event arrives, and the only duplicates
    carry the same webhook-id and the same body."""
    issue(home, "ops", "operator")
    subscribe(home, receiver)
    subject(home, "ann")
    subject(home, "bob")
    written = [atom(home, ref, f"fact {i} of {ref}") for i in range(3) for ref in ("ann", "bob")]
    env = {"LEDGER_WEBHOOK_TIMEOUT": "2", "LEDGER_WEBHOOK_INTERVAL": "0.1",
           "LEDGER_WEBHOOK_RETRY_BASE": "0.1", "LEDGER_WEBHOOK_RETRY_CAP": "0.5"}
    receiver.hold = threading.Event()  # the first delivery is accepted, then held
    with serving(home, env=env) as server:
        assert receiver.arrived.wait(60), server.output()
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)
    in_flight = receiver.received[0]["id"]
    receiver.hold.set()
    receiver.hold = None
    written += [atom(home, "ann", f"later fact {i}") for i in range(2)]  # while it is down
    with serving(home, env=env) as server:
        deadline = time.monotonic() + 90
        while {p["data"]["atom_id"] for p in receiver.payloads()} != set(written):
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.2)
        assert server.stop(), server.output()
    assert not receiver.refused
    bodies: dict[str, set[str]] = {}
    for rec in receiver.received:
        bodies.setdefault(rec["id"], set()).add(rec["body"])
    assert all(len(b) == 1 for b in bodies.values()), "a webhook-id came with two bodies"
    assert len(bodies) == len(written)  # one id per event
    assert [r["id"] for r in receiver.received].count(in_flight) >= 2  # sent again
    for ref_atoms in (written[0::2][:3] + written[6:], written[1::2][:3]):  # order per subject
        first = {}
        for rec in receiver.received:
            aid = rec["payload"]["data"]["atom_id"]
            if aid in ref_atoms and aid not in first:
                first[aid] = len(first)
        assert sorted(first, key=first.__getitem__) == ref_atoms


def test_no_secret_url_or_content_in_any_log_line(home: Path, receiver: Receiver) -> None:
    from structlog.testing import capture_logs

    subject(home, "ann")
    with capture_logs() as logs, WebhookService.open(home, FAST) as hooks:
        added = hooks.add(receiver.url("/secret-path"), allow_private=True)
        receiver.secrets["/secret-path"] = added.secret
        atom(home, "ann", CONTENT[0])
        receiver.down()
        hooks.pump()  # a failed attempt logs too
        receiver.up()
        pump_until(hooks, lambda: len(receiver.payloads("/secret-path")) == 1)
    text = repr(logs)
    assert "webhooks.delivered" in text and "webhooks.attempt_failed" in text
    assert added.secret not in text and added.secret[6:] not in text
    assert "secret-path" not in text and CONTENT[0] not in text
    assert added.secret not in repr(added) and added.secret[6:] not in repr(added)


def test_deliver_without_once_is_a_usage_error(home: Path) -> None:
    before = home_digest(home)
    r = run_cli("--home", str(home), "webhooks", "deliver")
    assert r.code == 2 and "only --once is supported" in r.err
    assert home_digest(home) == before


def _certificate(tmp_path: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context that trusts it) of a self-signed cert for ``name``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return server, ssl.create_default_context(cadata=pem.decode())


@pytest.mark.parametrize("cert_name", ["hooks.test", "other.test"])
def test_https_goes_to_the_checked_address_and_still_checks_the_name(
        home: Path, tmp_path: Path, cert_name: str) -> None:
    """The connection is pinned to the address just resolved, while TLS still verifies the
    certificate against the URL's host name (SNI): a certificate for another name fails."""
    from projections.store import Store

    server_tls, client_tls = _certificate(tmp_path, cert_name)
    receiver = Receiver(tls=server_tls)
    subject(home, "ann")
    app = LedgerApp(Config.load(home))
    store = Store.open(app.config.projections)
    hooks = WebhookService(app, store, FAST, resolve=lambda host, port: ["127.0.0.1"],
                           verify=client_tls)
    try:
        added = hooks.add(f"https://hooks.test:{receiver.port}/hook", allow_private=True)
        receiver.secrets["/hook"] = added.secret
        atom(home, "ann", "a fact")
        report = hooks.pump()
        if cert_name == "hooks.test":
            assert report.delivered == 1 and len(receiver.payloads()) == 1
        else:
            assert report.delivered == 0 and report.errors == {"ConnectError": 1}
            assert receiver.received == []
    finally:
        hooks.close()
        store.close()
        app.close()
        receiver.down()
