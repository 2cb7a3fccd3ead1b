"""The certificate of erasure (governance/certificate.py, docs/spec/certificate.md, ADR
0046): issued by `ledger certificate` after an erasure made as the README's "Use" block makes
it, its PDF's text (extracted with pypdf) holds every field the issue asks for and none of the
erased content, its signed statement verifies offline with the root key alone and against
its Evidence Pack, any changed byte or any claim the pack does not prove fails at a named
step, and the console issues it for download."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import random
import re
import zlib
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from governance.certificate import (
    PAYLOAD_TYPE,
    CertificateInvalid,
    verify_certificate,
)
from governance.dsse import sign_document
from governance.pack_verify import read_pack
from keys.keyring import read_public_key_file
from ledger.home import Config

from .conftest import run_cli

MARKERS = {"name": "Quillon Marchbanks-Vey", "atom": "ZORBLAX-71c3", "atom2": "WUMPET-9e2a",
           "artifact": "GLIMMOCK-4d0b", "title": "FENNIMORE-chat", "reason": "TRELLISWICK-asked",
           "identifier": "quillon.mv@example.org"}
CONTROLLER = ("Acme Assistants GmbH", "privacy@acme.example")


def ok(*args: str) -> Any:
    r = run_cli(*args)
    assert r.code == 0, f"ledger {' '.join(args)}: {r.err}"
    return json.loads(r.out) if "--json" in args else r


def erase(home: Path, tmp: Path, controller: bool = True) -> dict[str, Any]:
    """A subject whose memories, source document, name and request carry marker words;
    another subject's memory names the person's e-mail (flagged, not erased); erased with
    redact-user --dry-run then --plan, as the README's "Use" block does."""
    if controller:
        dataclasses.replace(Config.load(home), controller=CONTROLLER[0],
                            contact=CONTROLLER[1]).write()
    h = ("--home", str(home))
    ok("subject", "add", "user_q1", "--name", MARKERS["name"], *h)
    body = tmp / "chat.txt"
    body.write_text(f"we talked about {MARKERS['artifact']}\n", encoding="utf-8")
    ok("artifact", "add", "--subject", "user_q1", "--kind", "chat", "--ref", "art_q1",
       "--title", MARKERS["title"], "--body-file", str(body), *h)
    ok("atom", "add", "--subject", "user_q1", "--text", f"{MARKERS['atom']} takes tea", *h)
    ok("atom", "add", "--subject", "user_q1", "--text", f"{MARKERS['atom2']} likes trains",
       "--derivation", "inferred", "--artifact", "art_q1", "--extractor", "test", *h)
    ok("subject", "add", "user_q2", *h)
    ok("atom", "add", "--subject", "user_q2", "--text",
       f"met {MARKERS['identifier']} at the fair", *h)
    args = ("redact-user", "user_q1", "--reason", MARKERS["reason"], "--operator", "operator",
            "--identifier", MARKERS["identifier"], "--legal-basis", "GDPR Art. 17(1)(a)", *h)
    plan = ok(*args, "--dry-run", "--json")["plan_digest"]
    return dict(ok(*args, "--plan", plan, "--json"))


def pdf_text(data: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return " ".join(" ".join(p.extract_text() or "" for p in reader.pages).split())


def pdf_streams(data: bytes) -> bytes:
    """Every stream of the PDF, inflated (a byte search of the raw file sees only the
    compressed form)."""
    out = []
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", data, re.S):
        try:
            out.append(zlib.decompress(m[1]))
        except zlib.error:
            out.append(m[1])
    return b"\n".join(out)


def no_markers(data: bytes, where: str) -> None:
    for marker in MARKERS.values():
        for form in (marker.encode(), marker.encode("utf-16-be"), marker.lower().encode()):
            assert form not in data, f"{marker!r} in {where}"


def document(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(base64.b64decode(json.loads(data)["payload"]))
    return doc


def when(value: str) -> str:
    from governance.certificate import when as w

    return w(value)


# ----------------------------------------------------------------------------- the flow
def test_certificate_holds_every_field_and_no_erased_content(home: Path, tmp_path: Path
                                                             ) -> None:
    done = erase(home, tmp_path)
    batch, request = done["batch_id"], done["request_id"]
    out = tmp_path / "cert.pdf"
    made = ok("certificate", batch, "--out", str(out), "--html", str(tmp_path / "cert.html"),
              "--home", str(home), "--json")
    assert made["statement"] == str(tmp_path / "cert.json")
    assert made["pack"] == str(tmp_path / "cert.evidence-pack.zip")
    assert made["verification"]["pack_checked"] and made["verification"]["result"] == "passed"
    pdf, html = out.read_bytes(), (tmp_path / "cert.html").read_bytes()
    statement = (tmp_path / "cert.json").read_bytes()
    assert pdf.startswith(b"%PDF-")
    text = pdf_text(pdf)
    doc = document(statement)
    req = doc["request"]

    # no erased content: not in the PDF (raw and inflated), its text, the HTML, the statement
    for data, where in ((pdf, "the PDF"), (pdf_streams(pdf), "the PDF's streams"),
                        (text.encode(), "the PDF's text"), (html, "the HTML"),
                        (statement, "the signed statement"),
                        (json.dumps(doc).encode(), "the signed document")):
        no_markers(data, where)
    assert batch in text and batch.encode() in html  # the search does see what is there

    op = doc["issued_by"]["kid"]
    fields = {
        "controller": [CONTROLLER[0], CONTROLLER[1]],
        "request": [f"Reference {request}", f"Received {when(req['received_at'])}",
                    "Legal basis GDPR Art. 17(1)(a)",
                    f"Completed {when(req['completed_at'])} (within the deadline)"],
        "subject": ["reference user_q1", doc["subject"]["id"]],
        "method": ["Cryptographic erase", "NIST SP 800-88r2", "AES-256-GCM",
                   *[f"{r}" for r in doc["method"]["read_models"]], "mode hard"],
        "tool": [f"memory-ledger {doc['tool']['version']}"],
        "counts": ["2 memories, 1 source document, 1 subject profile",
                   f"{doc['destroyed']['keys']} destroyed"],
        "verification": ["not-reachable", "verify-pack", "passed steps 1 (statement)",
                         "8 (copies)", f"{doc['verification']['raw_scan']['files']} files",
                         "no hits", "Passed: no erased item can be read",
                         "1 memory of another person mentions the subject: flagged for "
                         "review, not erased"],
        "copies": ["Older copies", "KEK of epoch 1", "pending", "Live keystore"],
        "people": [f"Executed by operator (key {op})",
                   "Countersigned by Nobody: the Evidence Pack carries one signature only"],
        "pack": [doc["pack"]["digest"]["sha256"], "ledger verify-pack PACK --root-key",
                 "ledger audit-tools verify-certificate", doc["ledger"]["root_kid"]],
    }
    assert len(doc["method"]["read_models"]) >= 4
    for r in doc["verification"]["reach"]:
        assert f"{r['route']} {r['items']} not-reachable" in text
    page = re.sub(r"</?code>", "", html.decode())
    page = " ".join(unescape(re.sub(r"<[^>]+>", " ", page)).split())
    for what, phrases in fields.items():
        for phrase in phrases:
            assert phrase in text, f"{what}: {phrase!r} not in the PDF's text"
            assert phrase in page, f"{what}: {phrase!r} not in the HTML page"
    assert MARKERS["name"] not in text and "Ann" not in text
    assert 1 <= text.count("page 1 of") <= 1 and "page 2 of 2" in text  # two pages

    # it verifies offline, with the root key, alone and against its pack
    root = str(home / "keys" / "root.pub")
    r = run_cli("audit-tools", "verify-certificate", str(tmp_path / "cert.json"),
                "--root-key", root)
    assert r.code == 0 and "give --pack" in r.err, r.err
    r = run_cli("audit-tools", "verify-certificate", str(tmp_path / "cert.json"),
                "--root-key", root, "--pack", made["pack"], "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["pack_checked"] is True
    assert run_cli("verify-pack", made["pack"], "--root-key", root).code == 0


def test_a_second_person_countersigns_the_pack_and_the_certificate_names_them(
        home: Path, tmp_path: Path) -> None:
    done = erase(home, tmp_path, controller=False)
    h = ("--home", str(home))
    ok("keys", "authorize", "dpo", "--role", "auditor", *h)
    ok("keys", "authorize", "dpo2", "--role", "operator", *h)  # in the pack's roster
    pack = tmp_path / "pack"
    ok("evidence-pack", done["batch_id"], "--out", str(pack), *h)
    ok("evidence-pack", "sign", str(pack), "--as", "dpo", *h)
    out = tmp_path / "signed.pdf"
    made = ok("certificate", done["batch_id"], "--out", str(out), "--pack", str(pack), *h,
              "--json")
    assert made["pack"] == str(pack) and not (tmp_path / "signed.evidence-pack.zip").exists()
    names = [p["name"] for p in made["document"]["people"]["countersigned_by"]]
    assert names == ["dpo"]
    text = pdf_text(out.read_bytes())
    assert "Countersigned by dpo (key ed25519:" in text
    assert "Organisation not set (config.toml [controller])" in text
    assert "Contact not set (config.toml [controller])" in text
    # a countersignature added after the certificate: reported, not a failure
    ok("evidence-pack", "sign", str(pack), "--as", "dpo2", *h)
    root = read_public_key_file(home / "keys" / "root.pub")
    report = verify_certificate((tmp_path / "signed.json").read_bytes(), root,
                                read_pack(pack))
    assert [p["name"] for p in report.later_countersigners] == ["dpo2"]


# ----------------------------------------------------------------------------- attacks
@pytest.fixture
def issued(home: Path, tmp_path: Path) -> dict[str, Any]:
    done = erase(home, tmp_path)
    out = tmp_path / "cert.pdf"
    ok("certificate", done["batch_id"], "--out", str(out), "--home", str(home))
    return {"home": home, "data": (tmp_path / "cert.json").read_bytes(),
            "pack": read_pack(tmp_path / "cert.evidence-pack.zip"),
            "root": read_public_key_file(home / "keys" / "root.pub"),
            "json": tmp_path / "cert.json", "zip": tmp_path / "cert.evidence-pack.zip"}


def _signer(home: Path, name: str = "operator") -> Any:
    from ledger.application import LedgerApp

    app = LedgerApp(Config.load(home))
    try:
        return app.signer(name)
    finally:
        app.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_any_changed_byte_of_the_statement_fails(issued: dict[str, Any],
                                                 tmp_path: Path) -> None:
    data, root = issued["data"], issued["root"]
    verify_certificate(data, root, issued["pack"])
    rng = random.Random(31)
    steps = set()
    for pos in [0, len(data) - 1, *rng.sample(range(len(data)), 150)]:
        changed = bytearray(data)
        changed[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CertificateInvalid) as e:
            verify_certificate(bytes(changed), root)
        steps.add(e.value.step)
    assert steps <= {"C1", "C2", "C3", "C4"} and "C1" in steps  # before C5: nothing read
    # one byte inside the signed payload, the envelope kept canonical: the signature fails
    env = json.loads(data)
    payload = bytearray(base64.b64decode(env["payload"]))
    at = payload.index(b'"hits":0') + len(b'"hits":')
    payload[at:at + 1] = b"1"
    env["payload"] = base64.b64encode(bytes(payload)).decode()
    from ledger import envelope

    bad = tmp_path / "bad.json"
    bad.write_bytes(envelope.canonical(env) + b"\n")
    r = run_cli("audit-tools", "verify-certificate", str(bad), "--root-key",
                str(issued["home"] / "keys" / "root.pub"), "--json")
    assert r.code == 1
    assert json.loads(r.out)["step"] == "C4"
    assert "FAIL: certificate step C4 (signature)" in r.err


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_certificate_claiming_more_than_its_pack_fails_against_the_pack(
        issued: dict[str, Any]) -> None:
    """An operator re-signs a certificate with a fact the pack does not prove (a countersigner
    who never signed, another count): alone it verifies (the signer's word); against the pack
    it fails at C6."""
    doc = document(issued["data"])
    forged = json.loads(json.dumps(doc))
    forged["people"]["countersigned_by"] = [doc["people"]["executed_by"]]
    forged["destroyed"]["items"]["atoms"] = 40
    forged["destroyed"]["keys"] = 50
    data = sign_document(forged, PAYLOAD_TYPE, _signer(issued["home"]))
    verify_certificate(data, issued["root"])
    with pytest.raises(CertificateInvalid, match="countersigners the pack does not carry"):
        verify_certificate(data, issued["root"], issued["pack"])
    forged["people"]["countersigned_by"] = []
    data = sign_document(forged, PAYLOAD_TYPE, _signer(issued["home"]))
    with pytest.raises(CertificateInvalid, match="'destroyed' differs") as e:
        verify_certificate(data, issued["root"], issued["pack"])
    assert e.value.step == "C6"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_forged_certificates_fail_at_their_step(issued: dict[str, Any], tmp_path: Path
                                                ) -> None:
    import nacl.signing

    from keys.signing import Signer

    def generate_signer(name: str) -> Signer:
        return Signer(name, nacl.signing.SigningKey.generate())

    doc, home, root = document(issued["data"]), issued["home"], issued["root"]
    # a field the format does not have (memory content), re-signed by the operator: C2
    extra = {**doc, "text": MARKERS["atom"]}
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(sign_document(extra, PAYLOAD_TYPE, _signer(home)), root)
    assert e.value.step == "C2"
    # signed by a key outside the roster: C4
    with pytest.raises(CertificateInvalid, match="does not hold the operator or auditor"):
        verify_certificate(sign_document(doc, PAYLOAD_TYPE, generate_signer("mallory")), root)
    # signed by the log key, which holds neither role: C4
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(sign_document(doc, PAYLOAD_TYPE, _signer(home, "log")), root)
    assert e.value.step == "C4"
    # another ledger's root key: C3
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(issued["data"], generate_signer("root").public_key)
    assert e.value.step == "C3"
    # a forged roster event (its signature broken): C3
    lines = [dict(x) for x in doc["roster"]]
    state = bytearray(base64.b64decode(lines[-1]["state"]))
    state[-1] ^= 1
    lines[-1]["state"] = base64.b64encode(bytes(state)).decode()
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(sign_document({**doc, "roster": lines}, PAYLOAD_TYPE,
                                         _signer(home)), root)
    assert e.value.step == "C3"
    # a result the reach does not support: C5
    bad = json.loads(json.dumps(doc))
    bad["verification"]["raw_scan"]["hits"] = 2
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(sign_document(bad, PAYLOAD_TYPE, _signer(home)), root)
    assert e.value.step == "C5"
    # another pack (a tampered one) against the certificate: C6
    pack = dict(issued["pack"])
    pack["report.html"] = pack["report.html"] + b" "
    with pytest.raises(CertificateInvalid, match="does not verify: step 2"):
        verify_certificate(issued["data"], root, pack)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_certificate_never_passes_as_a_receipt_or_a_pack_statement(
        issued: dict[str, Any]) -> None:
    from governance.dsse import verify_envelope
    from governance.receipt import ReceiptInvalid, verify_receipt
    from keys.errors import SignatureInvalid

    data = issued["data"]
    assert json.loads(data)["payloadType"] == PAYLOAD_TYPE
    with pytest.raises(ReceiptInvalid):
        verify_receipt(data)
    op = _signer(issued["home"])
    with pytest.raises(SignatureInvalid):
        verify_envelope(json.loads(data), {op.kid: op.public_key})
    statement = issued["pack"]["statement.dsse.json"]
    with pytest.raises(CertificateInvalid) as e:
        verify_certificate(statement, issued["root"])
    assert e.value.step == "C1"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_refusals_write_nothing(home: Path, tmp_path: Path) -> None:
    done = erase(home, tmp_path)
    h = ("--home", str(home))
    (tmp_path / "taken.json").write_text("{}")
    r = run_cli("certificate", done["batch_id"], "--out", str(tmp_path / "taken.pdf"), *h)
    assert r.code == 2 and "taken.json already exists" in r.err
    assert not (tmp_path / "taken.pdf").exists()
    r = run_cli("certificate", done["batch_id"], "--out", str(tmp_path / "c.txt"), *h)
    assert r.code == 2 and "is a PDF file" in r.err
    r = run_cli("certificate", "00000000-0000-4000-8000-000000000000", "--out",
                str(tmp_path / "none.pdf"), *h)
    assert r.code == 2 and not list(tmp_path.glob("none*"))
    # a pack of the same ledger whose files were changed is refused, naming its step
    pack = tmp_path / "pack"
    ok("evidence-pack", done["batch_id"], "--out", str(pack), *h)
    with (pack / "report.html").open("ab") as f:
        f.write(b" ")
    r = run_cli("certificate", done["batch_id"], "--out", str(tmp_path / "p.pdf"),
                "--pack", str(pack), *h)
    assert r.code == 1 and "step 2" in r.err and not list(tmp_path.glob("p.*"))


# ----------------------------------------------------------------------------- console
def test_console_issues_the_certificate_for_download(tmp_path: Path) -> None:
    import os
    from datetime import timedelta

    from .console_support import MARKERS as CONSOLE_MARKERS
    from .console_support import at, build_ledger, serve, t0
    from .test_console_security import csrf_of, sign_in

    start = t0()
    home = tmp_path / "console-home"
    old = os.environ.get("LEDGER_NOW")
    build_ledger(home, start)
    os.environ["LEDGER_NOW"] = at(start + timedelta(hours=1))
    try:
        with serve(home) as s:
            tokens = {"op": s.tokens.create("dpo", "operator"),
                      "au": s.tokens.create("audit", "auditor")}
            c = sign_in(s, tokens["op"])
            page = c.get("/console/requests")
            r = c.post("/console/requests", data={"csrf": csrf_of(page.text),
                                                  "subject": "alice", "reason": "asked"})
            assert r.status_code == 303, r.text
            url = r.headers["location"]
            page = c.get(url)
            digest = re.search(r'id="plan-digest">([^<]+)<', page.text)
            assert digest
            r = c.post(f"{url}/execute", data={"csrf": csrf_of(page.text), "reviewed": "yes",
                                               "plan_digest": digest[1]})
            assert r.status_code == 303, r.text
            page = c.get(url)
            assert "Issue the certificate of erasure" in page.text
            # an auditor sees no button, and a crafted post is refused
            a = sign_in(s, tokens["au"])
            seen = a.get(url).text
            assert "Issue the certificate of erasure" not in seen
            r = a.post(f"{url}/certificate", data={"csrf": csrf_of(seen)})
            assert r.status_code == 403
            # without the CSRF token: refused
            assert c.post(f"{url}/certificate", data={}).status_code == 403
            r = c.post(f"{url}/certificate", data={"csrf": csrf_of(page.text)})
            assert r.status_code == 303 and "certificate=" in r.headers["location"], r.text
            page = c.get(r.headers["location"])
            assert "OK: signed, and it says what its Evidence Pack proves" in page.text
            got = {kind: c.get(link) for link, kind in
                   re.findall(r'href="(/console/certificates/[^"]+/(\w+))"', page.text)}
            assert set(got) == {"pdf", "json", "html", "pack"}
            for resp in got.values():
                assert resp.status_code == 200
                assert resp.headers["content-disposition"].startswith("attachment;")
                assert "default-src 'self'" in resp.headers["content-security-policy"]
            assert got["pdf"].headers["content-type"] == "application/pdf"
            text = pdf_text(got["pdf"].content)
            assert "Reference" in text and "reference alice" in text
            for marker in CONSOLE_MARKERS.values():
                for data in (got["pdf"].content, text.encode(), got["html"].content,
                             got["json"].content, page.content):
                    assert marker.encode() not in data
            # what was downloaded verifies with the root key, against the downloaded pack
            (tmp_path / "c.json").write_bytes(got["json"].content)
            (tmp_path / "p.zip").write_bytes(got["pack"].content)
            r2 = run_cli("audit-tools", "verify-certificate", str(tmp_path / "c.json"),
                         "--root-key", str(home / "keys" / "root.pub"), "--pack",
                         str(tmp_path / "p.zip"))
            assert r2.code == 0, r2.err
            # another session cannot fetch them
            assert a.get(next(iter(got.values())).url.path).status_code in (403, 404)
    finally:
        if old is None:
            os.environ.pop("LEDGER_NOW", None)
        else:
            os.environ["LEDGER_NOW"] = old
