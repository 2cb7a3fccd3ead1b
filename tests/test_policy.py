"""`ledger policy set|show`: a validated memoryPolicy recorded as an operator-signed event."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import RawStore, run_cli

POLICY = {"memoryPolicy": {
    "enabled": True, "scope": "per-session", "maxAtoms": 200, "maxMemoriesPerTurn": 5,
    "retrievalThreshold": 0.15, "minSalienceForCreation": 0.25,
    "retentionPolicy": {"defaultRetentionDays": 7,
                        "perPrivacyClass": {"non-pii": 7, "sensitive-pii": 30}},
    "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 720,
                              "tombstoneRetentionDays": 2190},
    "auditPolicy": {"logCreation": True, "logRetrieval": True, "logRedaction": True,
                    "logRehearsal": True}}}


def test_policy_set_show_and_signed(home: Path, tmp_path: Path) -> None:
    h = ("--home", str(home))
    assert run_cli(*h, "policy", "show").err.startswith("note: no policy")
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(POLICY))
    r = run_cli(*h, "policy", "set", str(path), "--json")
    assert r.code == 0, r.err
    shown = json.loads(run_cli(*h, "policy", "show", "--json").out)
    assert shown["memoryPolicy"] == POLICY["memoryPolicy"]
    assert shown["event_id"] == json.loads(r.out)["event_id"]
    assert run_cli(*h, "verify").code == 0
    refused = run_cli(*h, "policy", "set", str(path), "--as", "writer")
    assert refused.code == 2 and "may not sign" in refused.err


def test_invalid_policy_refused_with_the_reason_and_nothing_written(home: Path,
                                                                    tmp_path: Path) -> None:
    bad = {"memoryPolicy": {**POLICY["memoryPolicy"], "maxAtoms": -1}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    rows = RawStore(home).rows()
    r = run_cli("--home", str(home), "policy", "set", str(path))
    assert r.code == 2 and "maxAtoms" in r.err
    assert RawStore(home).rows() == rows
