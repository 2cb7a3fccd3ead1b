"""Persona Schema memory atoms: the seed atom imports and exports, the schema and the
consent rule are enforced on import, hard-redacted atoms create nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import InputError
from portability import persona

from .conftest import run_cli, snapshot
from .test_portability_support import (  # logs_on_stderr: autouse fixture
    PERSONA_ATOM,
    canon,
    dumps,
    export_doc,
    import_doc,
    logs_on_stderr,  # noqa: F401
)
from .test_schemas import mutate


def _plan(doc: Any, subject: str | None = "guest-42") -> Any:
    return persona.plan_import(dumps(doc), subject=subject, artifact_exists=lambda r: False)


def test_seed_atom_imports_and_exports_unchanged(app: Any) -> None:
    report = import_doc(app, "persona", dumps(PERSONA_ATOM), subject="guest-42")
    assert report["created"] == {"subjects": 1, "artifacts": 1, "atoms": 1}  # + import source
    atom = app.reader.get_atom("guest-42:mem:7f3a8b2c0d3e")
    assert atom.kind == "episodic" and atom.privacy_class == "guest-pii"
    assert atom.details[2] == {"content": "she said the seafood was excellent",
                               "brightness": 0.85}
    assert atom.decay_profile["half_life_days"] == 14
    # no provenance in the seed: an inference by an unknown extractor, never 'stated'
    assert atom.derivation == "inferred" and atom.extractor == "unknown"
    assert atom.extensions["x-memory-ledger-source"]["rehearsal_count"] == 3
    doc = export_doc(app, "persona", "guest-42")
    (out,) = doc["memory"]
    for key, value in PERSONA_ATOM.items():
        if key != "decayProfile":
            assert out[key] == value, key
    assert out["decayProfile"] == {**PERSONA_ATOM["decayProfile"], "minimumSalience": 0.05,
                                   "detailDecayRate": 1.5}  # the seed's defaults, made explicit
    assert out["provenance"] == {"derivation": "inferred", "artifactIds": ["import.persona"],
                                 "extractor": "unknown"}


def test_persona_export_reimports_to_the_same_document(app: Any, tmp_path: Path) -> None:
    import_doc(app, "persona", dumps(PERSONA_ATOM), subject="guest-42")
    first = export_doc(app, "persona", "guest-42")
    import_doc(app, "persona", dumps(first), subject="guest-43")
    second = export_doc(app, "persona", "guest-43")
    first["x-memory-ledger"]["subject"]["subject_id"] = "guest-43"
    assert canon(second) == canon(first)


@pytest.mark.parametrize(("path", "value", "message"), [
    ("kind", "fact", r"memory 'mem:7f3a8b2c0d3e': \$\.kind: .* is not one of episodic"),
    ("salience", 1.2, r"\$\.salience: 1\.2 violates maximum 1"),
    ("memId", "7f3a8b2c0d3e", r"\$\.memId: .*\(pattern\)"),
    ("createdAt", "2026-04-22", r"\$\.createdAt: .* is not a valid date-time"),
    ("details.1.brightness", 1.01, r"\$\.details\[1\]\.brightness: 1\.01 violates maximum"),
    ("unknownField", True, r"\(additionalProperties\)"),
])
def test_schema_rejects_with_the_reason(path: str, value: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        _plan(mutate(PERSONA_ATOM, path, value))


def test_consent_rule_rejects_the_whole_file_naming_each_memory() -> None:
    ok = copy.deepcopy(PERSONA_ATOM)
    bad1 = mutate(PERSONA_ATOM, "privacyClass", "sensitive-pii")
    bad1["memId"] = "mem:bad1"
    bad2 = mutate(bad1, "consentBasis", ...)
    bad2["memId"] = "mem:bad2"
    with pytest.raises(InputError, match=r"consent rule.*'mem:bad1'.*'mem:bad2'"):
        _plan({"memory": [ok, bad1, bad2]})
    good = mutate(bad1, "consentBasis", "explicit-consent")
    assert len(_plan([ok, good]).atoms) == 2


def test_consent_rule_over_the_cli_changes_nothing(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "p.json"
    src.write_bytes(dumps([mutate(PERSONA_ATOM, "privacyClass", "sensitive-pii")]))
    before = snapshot(home)
    r = run_cli("--home", str(home), "import", str(src), "--format", "persona",
                "--subject", "guest-42")
    assert r.code == 2
    assert "consent rule" in r.err and "mem:7f3a8b2c0d3e" in r.err
    assert snapshot(home) == before


def test_hard_redacted_atom_creates_nothing_and_erases_only_when_applied(app: Any) -> None:
    import_doc(app, "persona", dumps(PERSONA_ATOM), subject="guest-42")
    tomb = {k: v for k, v in PERSONA_ATOM.items() if k not in ("gist", "details", "tags")}
    tomb["redactionStatus"] = "hard-redacted"
    report = import_doc(app, "persona", dumps([tomb]), subject="guest-42")
    assert report["refused"]["atoms"] == 1
    assert report["tombstones"]["not_applied_untrusted"] == ["memory 'mem:7f3a8b2c0d3e'"]
    assert not app.reader.get_atom("guest-42:mem:7f3a8b2c0d3e").content_erased  # unsigned claim
    report = import_doc(app, "persona", dumps([tomb]), subject="guest-42",
                        apply_untrusted=True)
    assert report["tombstones"]["erased_existing"] == 1
    assert app.reader.get_atom("guest-42:mem:7f3a8b2c0d3e").content_erased
    out = export_doc(app, "persona", "guest-42")["memory"][0]
    assert out["redactionStatus"] == "hard-redacted"
    assert not {"gist", "details", "tags"} & set(out)


def test_cli_export_signs_with_a_dsse_envelope(home: Path, tmp_path: Path) -> None:
    import base64

    from keys.keyring import read_public_key_file
    from keys.signing import verify_signature
    from ledger.envelope import pae

    src = tmp_path / "p.json"
    src.write_bytes(dumps(PERSONA_ATOM))
    assert run_cli("--home", str(home), "import", str(src), "--format", "persona",
                   "--subject", "guest-42").code == 0
    out = tmp_path / "out.json"
    r = run_cli("--home", str(home), "export", "--format", "persona", "--out", str(out),
                "--sign", "--json")
    assert r.code == 0, r.err
    env = json.loads((tmp_path / "out.json.dsse.json").read_text())
    assert base64.b64decode(env["payload"]) == out.read_bytes()
    verify_signature(read_public_key_file(home / "keys" / "writer.pub"),
                     pae(env["payloadType"], out.read_bytes()),
                     base64.b64decode(env["signatures"][0]["sig"]))


def test_soft_redacted_memory_is_refused_not_made_visible(app: Any) -> None:
    soft = mutate(PERSONA_ATOM, "redactionStatus", "soft-redacted")
    report = import_doc(app, "persona", dumps([soft]), subject="guest-42")
    assert report["created"]["atoms"] == 0
    assert report["refusals"][0]["id"] == "mem:7f3a8b2c0d3e"
    assert "soft-redacted at the source" in report["refusals"][0]["reason"]
