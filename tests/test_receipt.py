"""The erasure receipt for the data subject: verifies offline and with a standard DSSE
verifier; any changed byte fails; it holds none of the erased content."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance.erasure import redact_user
from governance.receipt import ReceiptInvalid, build_receipt, render_html, verify_receipt
from ledger.application import LedgerApp
from ledger.home import Config
from ledger.witness.policy import parse_policy
from projections.service import Projections

from .conftest import run_cli
from .witness_support import InProcessWitness


@pytest.fixture
def receipt(home: Path, tmp_path: Path) -> Iterator[dict[str, Any]]:
    w = InProcessWitness(tmp_path / "w", "dpo.example/witness")
    app = LedgerApp(Config.load(home))
    w.follow(app.config.origin, app.log_vkey())
    dataclasses.replace(app.config, witnesses=((w.url, w.vkey),)).write()
    app.close()
    app = LedgerApp(Config.load(home))
    proj = Projections(app)
    marker = f"zq{uuid.uuid4().hex[:12]}"
    app.register_subject({"ref": "u1", "display_name": f"Ann {marker}"})
    app.capture_artifact({"subject": "u1", "ref": "a1", "kind": "chat", "body": f"c {marker}"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i} {marker}"} for i in range(3)])
    app.register_subject({"ref": "u2"})
    app.add_atom({"subject": "u2", "text": "someone else"})
    res = redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator",
                      legal_basis="GDPR Art. 17(1)(a)")
    data = build_receipt(app, res["request_id"])
    yield {"app": app, "data": data, "marker": marker, "res": res, "witness": w,
           "home": home}
    proj.close()
    app.close()
    w.stop()


def test_receipt_verifies_offline(receipt: dict[str, Any], tmp_path: Path) -> None:
    app, data, w = receipt["app"], receipt["data"], receipt["witness"]
    report = verify_receipt(data, app.signer("operator").public_key, app.log_vkey())
    assert report.erased == {"artifacts": 1, "atoms": 3, "subjects": 1}
    assert report.tombstones == 4 + 5  # 3 atom + 1 artifact tombstones; 5 keys destroyed
    assert report.witnesses == [w.vkey]
    policy = parse_policy(f"witness DPO {w.vkey}\nquorum DPO\n".encode())
    assert verify_receipt(data, policy=policy).policy == "quorum: witness DPO: met"
    path = tmp_path / "receipt.json"
    path.write_bytes(data)
    pub = receipt["home"] / "keys" / "operator.pub"
    r = run_cli("audit-tools", "verify-receipt", str(path), "--operator-key", str(pub),
                "--log-key", app.log_vkey(), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["erased"]["atoms"] == 3 and "dpo.example/witness" in r.err


def test_receipt_verifies_with_a_standard_dsse_verifier(receipt: dict[str, Any]) -> None:
    from securesystemslib.dsse import Envelope
    from securesystemslib.signer import SSlibKey

    op = receipt["app"].signer("operator")
    key = SSlibKey(op.kid, "ed25519", "ed25519", {"public": op.public_key.hex()})
    env = Envelope.from_dict(json.loads(receipt["data"]))
    assert op.kid in env.verify([key], 1)
    assert env.payload_type == "application/vnd.memory-ledger.erasure-receipt.v1+json"


def test_receipt_any_byte_changed_fails(receipt: dict[str, Any]) -> None:
    data = receipt["data"]
    steps: dict[str, int] = {}
    for at in range(len(data)):
        changed = bytearray(data)
        changed[at] ^= 0x01
        with pytest.raises(ReceiptInvalid) as e:
            verify_receipt(bytes(changed))
        steps[e.value.step] = steps.get(e.value.step, 0) + 1
    assert sum(steps.values()) == len(data) and set(steps) <= {"R1", "R2"}
    with pytest.raises(ReceiptInvalid, match="R1"):
        verify_receipt(data + b" ")
    with pytest.raises(ReceiptInvalid, match="R1"):
        verify_receipt(json.dumps(json.loads(data), indent=1).encode() + b"\n")


def test_receipt_contains_none_of_the_erased_markers(receipt: dict[str, Any]) -> None:
    data, marker = receipt["data"], receipt["marker"]
    doc = json.loads(base64.b64decode(json.loads(data)["payload"]))
    page = render_html(data)
    name = f"Ann {marker}".encode()  # not b"Ann" alone: base64 holds it by chance (~4%)
    for blob in (data, json.dumps(doc).encode(), page.encode()):
        assert marker.encode() not in blob and name not in blob
        assert marker.lower().encode() not in blob.lower()
    assert "3 memories" in page and "<script" not in page


def test_receipt_under_another_key_or_log_fails(receipt: dict[str, Any]) -> None:
    app, data = receipt["app"], receipt["data"]
    with pytest.raises(ReceiptInvalid, match="R2"):
        verify_receipt(data, operator_public_key=app.signer("writer").public_key)
    from ledger.checkpoint import vkey_string

    other = vkey_string(app.config.origin, app.signer("writer").public_key)
    with pytest.raises(ReceiptInvalid, match="R4"):
        verify_receipt(data, log_vkey=other)
    from ledger.witness.cosign import witness_vkey

    stranger = witness_vkey("x.example", bytes(32))
    with pytest.raises(ReceiptInvalid, match=r"R6 \(witnesses\): witness quorum not met"):
        verify_receipt(data, policy=parse_policy(f"witness X {stranger}\nquorum X\n".encode()))


def test_receipt_cli_writes_json_and_html(receipt: dict[str, Any], tmp_path: Path) -> None:
    home, rid = receipt["home"], receipt["res"]["request_id"]
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    r = run_cli("--home", str(home), "receipt", rid, "--out", str(out), "--html", str(page))
    assert r.code == 0, r.err
    assert verify_receipt(out.read_bytes()).request_id == rid
    assert "Your erasure receipt" in page.read_text()
    r = run_cli("--home", str(home), "receipt", rid, "--out", str(out))
    assert r.code == 2 and "already exists" in r.err
    r = run_cli("--home", str(home), "receipt", str(uuid.uuid4()), "--out", str(tmp_path / "x"))
    assert r.code == 2 and not (tmp_path / "x").exists()
