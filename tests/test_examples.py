"""The example policies under docs/examples/ are valid and recorded as they are; a policy
with mistakes is refused with the field path and what is allowed there, changing nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_cli, snapshot

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "docs" / "examples").glob("*.json"))


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_policy_is_recorded_as_written(example: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "init").code == 0
    r = run_cli("--home", str(home), "policy", "set", str(example))
    assert r.code == 0, r.err
    shown = json.loads(run_cli("--home", str(home), "policy", "show", "--json").out)
    assert shown["memoryPolicy"] == json.loads(example.read_text())["memoryPolicy"]


def test_a_policy_with_mistakes_names_each_field_and_what_is_allowed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert run_cli("--home", str(home), "init").code == 0
    bad = tmp_path / "policy.json"
    bad.write_text(json.dumps({"memoryPolicy": {
        "enabled": "yes", "maxAtom": 5, "confabulationPolicy": "lenient",
        "rightToBeForgottenSla": {"acknowledgmentHours": -1}}}))
    before = snapshot(home)
    r = run_cli("--home", str(home), "policy", "set", str(bad))
    assert r.code == 2
    assert "memoryPolicy: unknown field 'maxAtom' (did you mean 'maxAtoms'?); allowed " \
           "here: enabled, scope, maxAtoms" in r.err
    assert "memoryPolicy.enabled: must be true or false, not \"yes\"" in r.err
    assert "memoryPolicy.confabulationPolicy: must be one of \"strict\", \"moderate\", " \
           "\"permissive\"; not \"lenient\"" in r.err
    assert "memoryPolicy.rightToBeForgottenSla.acknowledgmentHours: must be at least 0, " \
           "not -1" in r.err
    assert "regexes" not in r.err and "is not of type" not in r.err  # not jsonschema's text
    assert "hint: examples in docs/examples/" in r.err
    assert snapshot(home) == before
