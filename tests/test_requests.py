"""Right-to-be-forgotten deadlines: `ledger requests list [--overdue]`, and `redact-user`
taking its deadlines from the policy SLA (governance/requests.py, ADR 0014)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from governance.erasure import Targets, hard_erase
from governance.requests import format_left, sla_hours
from ledger import clock
from ledger.application import LedgerApp
from projections.service import Projections

from .conftest import run_cli

T0 = clock.parse_instant("2031-01-01T00:00:00Z")
SLA = {"acknowledgmentHours": 12, "completionHours": 48}


@pytest.fixture
def proj(app: LedgerApp) -> Iterator[Projections]:
    p = Projections(app)
    yield p
    p.close()


@pytest.fixture
def clock_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    def move(t: Any) -> None:
        monkeypatch.setenv("LEDGER_NOW", clock.format_instant(t))
    move(T0)
    return move


def _policy(app: LedgerApp, **sla: Any) -> None:
    app.set_policy({"memoryPolicy": {"enabled": True, "rightToBeForgottenSla": sla}})


def _listed(home: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    r = run_cli("--home", str(home), "requests", "list", "--json", *args)
    return r.code, json.loads(r.out), r.err


def test_a_request_turns_overdue_exactly_at_its_deadline(app: LedgerApp, home: Path,
                                                         clock_at: Any) -> None:
    _policy(app, **SLA)
    app.register_subject({"ref": "u1"})
    ack, done = sla_hours(app.reader.policy())
    assert (ack, done) == (12.0, 48.0)
    rid = str(app.receive_request("u1", "GDPR Art. 17", "operator", ack, done))
    deadline = T0 + timedelta(hours=48)
    clock_at(deadline - timedelta(seconds=1))
    code, rows, err = _listed(home, "--overdue")
    assert code == 0 and rows == [] and "none overdue" in err
    code, rows, _ = _listed(home)
    assert code == 0 and rows[0]["status"] == "open" and rows[0]["seconds_left"] == 1.0
    assert rows[0]["time_left"] == "0d 00:00:01"
    assert rows[0]["complete_due"] == clock.format_instant(deadline)
    assert rows[0]["ack_due"] == clock.format_instant(T0 + timedelta(hours=12))
    clock_at(deadline)
    code, rows, err = _listed(home, "--overdue")
    assert code == 1 and [r["request_id"] for r in rows] == [rid]
    assert rows[0]["status"] == "overdue" and rows[0]["seconds_left"] == 0.0
    assert err.startswith("FAIL: 1 erasure request(s) overdue")
    plain = run_cli("--home", str(home), "requests", "list")  # listing alone: exit 0
    assert plain.code == 0 and rid in plain.out and "overdue" in plain.out


def test_redact_user_takes_its_deadlines_from_the_policy_sla(app: LedgerApp, home: Path,
                                                             clock_at: Any) -> None:
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    app.add_atom({"subject": "u1", "text": "first person's memory"})
    app.add_atom({"subject": "u2", "text": "second person's memory"})
    h = ("--home", str(home))
    # No policy: the Persona §7 defaults, 24 h and 720 h.
    assert run_cli(*h, "redact-user", "u1", "--reason", "GDPR", "--operator",
                   "operator").code == 0
    _policy(app, **SLA)
    assert run_cli(*h, "redact-user", "u2", "--reason", "GDPR", "--operator",
                   "operator").code == 0
    code, rows, _ = _listed(home)
    assert code == 0 and [r["status"] for r in rows] == ["completed", "completed"]
    assert [r["subject_ref"] for r in rows] == ["u1", "u2"]
    assert rows[0]["ack_due"] == clock.format_instant(T0 + timedelta(hours=24))
    assert rows[0]["complete_due"] == clock.format_instant(T0 + timedelta(hours=720))
    assert rows[1]["ack_due"] == clock.format_instant(T0 + timedelta(hours=12))
    assert rows[1]["complete_due"] == clock.format_instant(T0 + timedelta(hours=48))
    assert all("identifiers" not in r for r in rows)


def test_a_late_completion_is_listed_but_no_longer_overdue(app: LedgerApp, proj: Projections,
                                                          home: Path, clock_at: Any) -> None:
    app.register_subject({"ref": "u1"})
    atom = str(app.add_atom({"subject": "u1", "text": "to be erased late"}))
    rid = app.receive_request("u1", "GDPR Art. 17", "operator", 1, 2)
    clock_at(T0 + timedelta(hours=3))
    assert _listed(home, "--overdue")[0] == 1
    hard_erase(app, proj, Targets(atoms=[atom]), mode="hard", reason="late",
               operator="operator", request_id=rid)
    code, rows, _ = _listed(home, "--overdue")
    assert code == 0 and rows == []
    assert _listed(home)[1][0]["status"] == "completed-late"


def test_sla_defaults_without_an_enforced_policy() -> None:
    assert sla_hours(None) == (24.0, 720.0)
    assert sla_hours({"memoryPolicy": {"enabled": False, "rightToBeForgottenSla": SLA}}) \
        == (24.0, 720.0)
    assert sla_hours({"memoryPolicy": {"enabled": True,
                                       "rightToBeForgottenSla": {"completionHours": 5}}}) \
        == (24.0, 5.0)
    assert format_left(-90061) == "-1d 01:01:01"
