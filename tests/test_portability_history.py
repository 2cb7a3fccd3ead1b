"""History and policy effects through portability (issue 19 items 4 and 7, ADR 0018):

* a correction, a supersession and an expiry survive ledger -> format -> fresh ledger in
  every format (``memory list`` does not show "Works at Acme" active beside "Works at
  Beta");
* an import or an add the maxAtoms policy archives says so (counts and ids, text and
  ``--json``), and the three formats agree on archived atoms.

SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_cli
from .test_portability_support import logs_on_stderr, open_app  # noqa: F401

FORMATS = ["konshus", "mem", "persona"]


def _cli(home: Path, *args: str) -> Any:
    r = run_cli("--home", str(home), *args)
    assert r.code == 0, r.err
    return r


def _export(home: Path, fmt: str, out: Path, subject: str = "u_hist") -> dict[str, Any]:
    r = _cli(home, "export", "--format", fmt, "--subject", subject, "--out", str(out),
             "--json")
    doc: dict[str, Any] = json.loads(r.out)
    return doc


def _memories(home: Path, subject: str = "u_hist") -> list[dict[str, Any]]:
    r = _cli(home, "memory", "list", "--subject", subject, "--json")
    out = json.loads(r.out)
    rows: list[dict[str, Any]] = out["memories"] if isinstance(out, dict) else out
    return rows


def _history(home: Path) -> None:
    _cli(home, "subject", "add", "u_hist")
    _cli(home, "atom", "add", "--subject", "u_hist", "--ref", "job", "--text", "Works at Acme")
    _cli(home, "atom", "correct", "job", "--text", "Works at Beta", "--reason",
         "job change")
    _cli(home, "atom", "add", "--subject", "u_hist", "--ref", "trip", "--text",
         "Is in Porto this week")
    _cli(home, "atom", "expire", "trip", "--reason", "trip over")


@pytest.mark.parametrize("fmt", FORMATS)
def test_correction_survives_export_and_reimport_into_a_fresh_ledger(
        home: Path, tmp_path: Path, other_home: Path, fmt: str) -> None:
    _history(home)
    before = {m["text"]: m["status"] for m in _memories(home)}
    assert before == {"Works at Acme": "superseded", "Works at Beta": "active",
                      "Is in Porto this week": "expired"}
    out = tmp_path / f"h.{fmt}"
    rep = _export(home, fmt, out)
    assert rep["counts"]["statuses_in_extension"] == 2  # the export says where they ride
    fresh = other_home
    r = _cli(fresh, "import", str(out), "--format", fmt, "--json")
    assert json.loads(r.out)["statuses_restored"] == 2
    after = {m["text"]: m["status"] for m in _memories(fresh)}
    assert after == before  # Acme is not active beside Beta
    app = open_app(fresh)
    try:
        from portability import view

        by_text = {a.fields["text"]: a for a in view.load(app, "u_hist").atoms}
        old, new = by_text["Works at Acme"], by_text["Works at Beta"]
        atom = app.reader.get_atom(old.id)
        assert atom.status == "superseded" and atom.superseded_by == str(new.id)
        assert app.reader.get_atom(by_text["Is in Porto this week"].id).status == "expired"
    finally:
        app.close()
    # and the fresh ledger exports the same history again
    again = tmp_path / f"again.{fmt}"
    assert _export(fresh, fmt, again)["counts"]["statuses_in_extension"] == 2
    # a second import changes nothing
    r = _cli(fresh, "import", str(out), "--format", fmt, "--json")
    assert "statuses_restored" not in json.loads(r.out)


def test_max_atoms_import_reports_archived_atoms_and_formats_agree(
        home: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"memoryPolicy": {"enabled": True, "maxAtoms": 2}}))
    _cli(home, "policy", "set", str(policy))
    src = tmp_path / "k.json"
    atoms = [{"atom_id": f"a{i:02d}", "kind": "fact", "text": f"Fact number {i}",
              "confidence": 0.9, "sensitivity": "private",
              "created_at": "2026-01-01T00:00:00Z",
              "provenance": {"derivation": "stated", "artifact_ids": [],
                             "human_reviewed": False}}
             for i in range(50)]
    src.write_text(json.dumps({"export_version": "0.1.0", "exported_at": "2026-01-02T00:00:00Z",
                               "source_provider": "test",
                               "subject": {"subject_id": "u_max"},
                               "atoms": atoms, "artifacts": []}))
    r = run_cli("--home", str(home), "import", str(src), "--format", "konshus", "--json")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["created"]["atoms"] == 50
    assert rep["archived"]["atoms"] == 48 and len(rep["archived"]["ids"]) == 48
    assert "48 atoms archived by the policy (maxAtoms)" in r.err
    text = run_cli("--home", str(home), "import", str(src), "--format", "konshus")
    assert text.code == 0  # a repeat archives nothing more
    counts = {}
    for fmt in FORMATS:
        out = tmp_path / f"max.{fmt}"
        counts[fmt] = _export(home, fmt, out, "u_max")["counts"]
    # ADR 0018: archived atoms are withheld from every format, and counted the same
    assert {f: c["atoms"] for f, c in counts.items()} == {f: 2 for f in FORMATS}
    assert {f: c["withheld_archived"] for f, c in counts.items()} == {f: 48 for f in FORMATS}


def test_max_atoms_atom_add_reports_the_archived_atom(home: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"memoryPolicy": {"enabled": True, "maxAtoms": 1}}))
    _cli(home, "policy", "set", str(policy))
    _cli(home, "subject", "add", "u_one")
    _cli(home, "atom", "add", "--subject", "u_one", "--text", "First fact", "--salience", "0.9")
    r = _cli(home, "atom", "add", "--subject", "u_one", "--text", "Second fact",
             "--salience", "0.1", "--json")
    rep = json.loads(r.out)
    assert rep["archived"] == {"atoms": 1, "ids": [rep["atom_id"]]}
    assert "archived by the policy" in r.err


def test_audit_report_puts_policy_archiving_under_its_own_heading(home: Path,
                                                                  tmp_path: Path) -> None:
    """Issue 19 item 4: maxAtoms archives are neither sweeps nor redactions."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"memoryPolicy": {"enabled": True, "maxAtoms": 1}}))
    _cli(home, "policy", "set", str(policy))
    _cli(home, "subject", "add", "u_aud")
    for i in range(4):
        _cli(home, "atom", "add", "--subject", "u_aud", "--text", f"Audit fact {i}")
    rep = json.loads(_cli(home, "audit", "--format", "json").out)
    assert rep["policy_archiving"] == {"events": 3, "by_rule": {"maxAtoms": 3}}
    assert rep["sweeps"]["events"] == 0
    assert rep["redactions"]["by_mode"]["archive"] == 0
    text = _cli(home, "audit").out
    assert "POLICY ARCHIVING" in text and "maxAtoms" in text
    html = tmp_path / "a.html"
    _cli(home, "audit", "--format", "html", "--out", str(html))
    assert "<h2>Policy archiving" in html.read_text()
