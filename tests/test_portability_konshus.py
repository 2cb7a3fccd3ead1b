"""Konshus v0.1 import and export: the seed's worked example, the schema and the
provenance rule, privacy invariants, idempotency; refused input changes nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import InputError
from portability import konshus

from .conftest import run_cli, snapshot
from .test_portability_support import (
    KONSHUS_EXAMPLE,
    canon,
    dumps,
    export_doc,
    import_doc,
    logs_on_stderr,  # noqa: F401  (autouse fixture)
    open_app,
)
from .test_schemas import mutate


def _plan(doc: Any) -> Any:
    return konshus.plan_import(dumps(doc), subject=None, artifact_exists=lambda r: False)


# --- the seed's worked example (both backends) -------------------------------------------


def test_seed_example_imports_with_art_144_kept_unresolved(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "example.export.json"
    src.write_bytes(dumps(KONSHUS_EXAMPLE))
    r = run_cli("--home", str(home), "import", str(src), "--format", "konshus", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["created"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    assert report["refused"] == {"artifacts": 0, "atoms": 0, "other": 0}
    assert "art_144" in r.err and "unresolved" in r.err
    app = open_app(home)
    try:
        a1 = app.reader.get_atom("user_9f4e...:atom_001")
        art = app.reader.get_artifact("user_9f4e...:art_101")
        assert a1.artifact_ids == [str(art.id)]  # cites the artifact that was shipped
        assert a1.derivation == "inferred" and a1.sensitivity == "public"
        assert a1.extensions["x-memory-ledger-source"] == {
            "created_at": "2026-01-12T18:44:00Z", "unresolved": ["art_144"]}
        assert app.reader.get_subject("user_9f4e...").display_name == "J. Miller"
        # nothing lost: our export is the seed, but for who exported it and when
        out = export_doc(app, "konshus", "user_9f4e...")
    finally:
        app.close()
    assert canon(out, ("exported_at", "source_provider")) == \
        canon(KONSHUS_EXAMPLE, ("exported_at", "source_provider"))

    before = snapshot(home)
    again = run_cli("--home", str(home), "import", str(src), "--format", "konshus", "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["skipped"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    assert json.loads(again.out)["created"] == {"subjects": 0, "artifacts": 0, "atoms": 0}
    assert snapshot(home) == before  # the second import is a no-op


def test_dry_run_reports_and_writes_nothing(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "k.json"
    src.write_bytes(dumps(KONSHUS_EXAMPLE))
    before = snapshot(home)
    r = run_cli("--home", str(home), "import", str(src), "--format", "konshus", "--dry-run",
                "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["created"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    assert snapshot(home) == before


def test_atom_citing_only_absent_artifacts_rejects_the_export() -> None:
    doc = mutate(KONSHUS_EXAMPLE, "atoms.0.provenance.artifact_ids", ["art_144"])
    with pytest.raises(InputError, match=r"atom 'atom_001' .* cites only artifacts .*art_144"):
        _plan(doc)


def test_citation_resolves_against_artifacts_already_in_the_ledger(app: Any) -> None:
    import_doc(app, "konshus", dumps(KONSHUS_EXAMPLE))
    later = copy.deepcopy(KONSHUS_EXAMPLE)
    later["artifacts"] = []
    later["atoms"] = [mutate(KONSHUS_EXAMPLE, "atoms.0.atom_id", "atom_003")["atoms"][0]]
    later["atoms"][0]["provenance"]["artifact_ids"] = ["art_101"]
    report = import_doc(app, "konshus", dumps(later))
    assert report["created"]["atoms"] == 1
    assert app.reader.get_atom("user_9f4e...:atom_003").artifact_ids == \
        [str(app.reader.get_artifact("user_9f4e...:art_101").id)]


# --- the schema and the provenance rule reject what the standard rejects -------------------


@pytest.mark.parametrize(("path", "value", "message"), [
    ("atoms.0.kind", "opinion", r"\$\.atoms\[0\]\.kind: \"opinion\" is not one of .*\(enum\)"),
    ("atoms.0.sensitivity", "secret", r"\$\.atoms\[0\]\.sensitivity: .*\(enum\)"),
    ("atoms.1.provenance", ..., r"\$\.atoms\[1\]: 'provenance' is a required property"),
    ("atoms.0.text", "x" * 501, r"\$\.atoms\[0\]\.text: is 501 characters, more than the 500"),
    ("atoms.0.confidence", 1.5, r"\$\.atoms\[0\]\.confidence: 1\.5 violates maximum 1"),
    ("atoms.0.created_at", "2026-01-12 18:44", r"created_at: .* is not a valid date-time"),
    ("atoms.0.valid_from", "2025-13-04T00:00:00Z", r"valid_from: .* is not a valid date-time"),
    ("exported_at", "yesterday", r"\$\.exported_at: .* not a valid date-time"),
    ("export_version", "0.2.0", r"\$\.export_version: .* is not '0\.1\.0' \(const\)"),
    ("artifacts.0.private", "no", r"\$\.artifacts\[0\]\.private: .* is not of type boolean"),
    ("subject.subject_id", ..., r"'subject_id' is a required property"),
])
def test_schema_rejects_with_the_reason(path: str, value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message) as e:
        _plan(mutate(KONSHUS_EXAMPLE, path, value))
    assert "step 2" in str(e.value)


@pytest.mark.parametrize(("derivation", "drop", "message"), [
    ("inferred", "artifact_ids", r"atom 'atom_001' .* is inferred but cites no artifact_ids"),
    ("observed", "artifact_ids", r"atom 'atom_001' .* is observed but cites no artifact_ids"),
    ("inferred", "extractor", r"atom 'atom_001' .* is inferred but names no extractor"),
])
def test_provenance_rule_rejects_the_whole_export(derivation: str, drop: str,
                                                  message: str) -> None:
    doc = mutate(KONSHUS_EXAMPLE, "atoms.0.provenance.derivation", derivation)
    doc = mutate(doc, f"atoms.0.provenance.{drop}", ...)
    with pytest.raises(InputError, match=message) as e:
        _plan(doc)
    assert "step 3" in str(e.value)


def test_unknown_core_key_and_duplicate_ids_are_refused() -> None:
    with pytest.raises(InputError, match=r"\$\.atoms\[0\]\.mood.*only under 'x-'"):
        _plan(mutate(KONSHUS_EXAMPLE, "atoms.0.mood", "happy"))
    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["atoms"][1]["atom_id"] = "atom_001"
    with pytest.raises(InputError, match=r"names atoms twice.*atom_001"):
        _plan(doc)


def test_refused_export_over_the_cli_changes_nothing(home: Path, tmp_path: Path) -> None:
    doc = mutate(KONSHUS_EXAMPLE, "atoms.0.provenance.artifact_ids", ...)
    src = tmp_path / "bad.json"
    src.write_bytes(dumps(doc))
    before = snapshot(home)
    r = run_cli("--home", str(home), "import", str(src), "--format", "konshus")
    assert r.code == 2
    assert "provenance rule" in r.err and "atom_001" in r.err
    assert r.out == ""
    assert snapshot(home) == before


# --- privacy invariants -------------------------------------------------------------------


def test_private_artifacts_are_stubs_unless_include_private(home: Path, tmp_path: Path) -> None:
    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["artifacts"][0].update(private=True, body="PRIVATE-BODY-MARKER")
    doc["atoms"][0]["sensitivity"] = "medical"
    src = tmp_path / "k.json"
    src.write_bytes(dumps(doc))
    assert run_cli("--home", str(home), "import", str(src), "--format", "konshus").code == 0
    shared = tmp_path / "shared.json"
    r = run_cli("--home", str(home), "export", "--format", "konshus", "--out", str(shared),
                "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["counts"]["private_withheld"] == 1
    out = json.loads(shared.read_text())
    assert out["artifacts"][0] == {"artifact_id": "art_101", "kind": "chat",
                                   "captured_at": "2025-11-04T20:11:00Z",
                                   "source": "chatgpt-export", "atom_ids": ["atom_001"],
                                   "private": True}
    assert b"PRIVATE-BODY-MARKER" not in shared.read_bytes()
    assert out["atoms"][0]["sensitivity"] == "medical"  # sensitivity travels
    assert oct(shared.stat().st_mode & 0o777) == "0o600"
    full = tmp_path / "full.json"
    assert run_cli("--home", str(home), "export", "--format", "konshus", "--out", str(full),
                   "--include-private").code == 0
    assert json.loads(full.read_text())["artifacts"][0]["body"] == "PRIVATE-BODY-MARKER"
    again = run_cli("--home", str(home), "export", "--format", "konshus", "--out", str(full))
    assert again.code == 2 and "already exists" in again.err


def test_provider_fields_are_kept_and_exported_again(app: Any) -> None:
    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["atoms"][1]["x-konshus-vault"] = {"slot": 7, "tags": ["a"]}
    doc["atoms"][1]["valid_to"] = "2026-03-01T00:00:00Z"
    doc["x-provider"] = {"konshus": True}
    report = import_doc(app, "konshus", dumps(doc))
    assert any("$.x-provider" in w for w in report["warnings"])  # no place for it: reported
    atom = app.reader.get_atom("user_9f4e...:atom_002")
    # kept sealed with the atom (issue 20 item 6), not in the plaintext extensions
    assert "x-konshus-vault" not in atom.extensions
    assert atom.source_data["provider"]["x-konshus-vault"] == {"slot": 7, "tags": ["a"]}
    out = export_doc(app, "konshus", None)
    assert out["atoms"][1]["x-konshus-vault"] == {"slot": 7, "tags": ["a"]}
    assert out["atoms"][1]["valid_to"] == "2026-03-01T00:00:00Z"


def test_subject_controls_the_id(app: Any) -> None:
    import_doc(app, "konshus", dumps(KONSHUS_EXAMPLE), subject="my-own-id")
    out = export_doc(app, "konshus", "my-own-id")
    assert out["subject"]["subject_id"] == "my-own-id"
    assert [a["atom_id"] for a in out["atoms"]] == ["atom_001", "atom_002"]


def test_erased_atoms_never_leave_and_are_not_resurrected(app: Any) -> None:
    import_doc(app, "konshus", dumps(KONSHUS_EXAMPLE))
    atom = app.reader.get_atom("user_9f4e...:atom_002")
    app.destroy_data_key(atom.id, "erasure")
    out = export_doc(app, "konshus", None)
    assert [a["atom_id"] for a in out["atoms"]] == ["atom_001"]
    report = import_doc(app, "konshus", dumps(KONSHUS_EXAMPLE))  # the stale export again
    assert report["created"]["atoms"] == 0
    assert app.reader.get_atom("user_9f4e...:atom_002").content_erased


def test_import_and_export_log_ids_and_counts_never_content(app: Any, tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["atoms"][0]["text"] = "LOG-MARKER-TEXT"
    doc["artifacts"][0]["body"] = "LOG-MARKER-BODY"
    with capture_logs() as logs:
        import_doc(app, "konshus", dumps(doc))
        export_doc(app, "konshus", None)
        export_doc(app, "mem", None, tmp_path / "b.mem")
    events = {e["event"] for e in logs}
    assert {"portability.imported", "portability.view_loaded"} <= events
    assert "LOG-MARKER" not in repr(logs) and "J. Miller" not in repr(logs)
