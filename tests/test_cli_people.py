"""The CLI's words after an erasure, as a person reads them (issue 31): `evidence-pack
--zip` names the zip it wrote, the pack's report counts in the singular where it should,
and `audit-tools verify-receipt` writes its times for people, not as ISO instants with
microseconds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ledger.application import LedgerApp

from .conftest import run_cli


@pytest.fixture(scope="module")
def erased(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cli-people")
    home = tmp / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LEDGER_HOME", raising=False)
        mp.setenv("LEDGER_NOW", "2026-03-04T09:00:00Z")
        LedgerApp.initialize(home)
        h = ("--home", str(home))
        for args in (("subject", "add", "alice"),
                     ("artifact", "add", "--subject", "alice", "--kind", "chat", "--ref", "c1",
                      "--body", "a chat"),
                     ("atom", "add", "--subject", "alice", "--text", "likes tea")):
            assert run_cli(*h, *args).code == 0
        mp.setenv("LEDGER_NOW", "2026-03-04T10:00:00.128603Z")
        r = run_cli(*h, "redact-user", "alice", "--reason", "asked", "--operator", "operator",
                    "--json")
        assert r.code == 0, r.err
        yield {"home": home, "tmp": tmp, **json.loads(r.out)}


def test_evidence_pack_zip_names_the_zip_it_wrote(erased: dict[str, Any]) -> None:
    out = erased["tmp"] / "pack"
    r = run_cli("--home", str(erased["home"]), "evidence-pack", erased["batch_id"], "--out",
                str(out), "--zip")
    assert r.code == 0, r.err
    assert r.out == f"{out}\n{out}.zip\n"
    assert f"OK: evidence pack written to {out} and {out}.zip\n" in r.err
    assert (erased["tmp"] / "pack.zip").is_file()
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "Targets: 1 artifact, 1 atom, 1 subject." in report
    assert "0 memories of other subjects flagged" in report
    assert "1 atoms" not in report and "1 subjects" not in report
    r = run_cli("--home", str(erased["home"]), "evidence-pack", erased["batch_id"], "--out",
                str(erased["tmp"] / "pack2"))
    assert r.code == 0 and r.out == f"{erased['tmp'] / 'pack2'}\n"
    assert r.err.endswith(f"OK: evidence pack written to {erased['tmp'] / 'pack2'}\n")


def test_verify_receipt_writes_times_for_people(erased: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", "2026-03-04T11:00:00Z")
    receipt = erased["tmp"] / "receipt.json"
    r = run_cli("--home", str(erased["home"]), "receipt", erased["request_id"], "--out",
                str(receipt))
    assert r.code == 0, r.err
    r = run_cli("audit-tools", "verify-receipt", str(receipt))
    assert r.code == 0, r.err
    assert (f"OK: receipt for request {erased['request_id']} verified: erased 1 artifact, "
            "1 atom, 1 subject by 2026-03-04 10:00 UTC; 5 tombstones in the log of size ") \
        in r.err
    assert "copies pending: no KEK rotation scheduled" in r.err
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d", r.err), r.err
    assert "+00:00" not in r.err and ".128603" not in r.err
    doc = json.loads(run_cli("audit-tools", "verify-receipt", str(receipt), "--json").out)
    assert doc["completed_at"].startswith("2026-03-04T10:00:00.128603")  # JSON: the instant
