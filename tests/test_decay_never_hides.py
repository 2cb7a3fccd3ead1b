"""Decay never hides silently (issue 28, ADR 0050): an atom without a decay profile does
not decay, a policy's decayPolicy gives defaults at creation, a decayed atom leaves recall
only through a signed archive by `ledger sweep`, which counts it; `ledger state` ends its
listing with one summary line. Storage tests run on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from governance.sweep import sweep
from ledger import clock
from ledger.application import LedgerApp
from ledger.domain import Atom
from ledger.errors import InputError
from projections import decay
from projections.atoms import is_candidate
from projections.memory import DecayDefaults, DecayState, fades_at, profile_of
from projections.service import Projections

from .conftest import RawStore, run_cli, snapshot

FEB = clock.parse_instant("2031-02-10T09:00:00Z")  # after the home's own events
MAR = clock.parse_instant("2031-03-15T09:00:00Z")
PERSONA = {"halfLifeDays": 14}  # the seed's profile: 0.5 falls below 0.05 after 46.5 days


@pytest.fixture
def proj(app: LedgerApp) -> Iterator[Projections]:
    p = Projections(app)
    yield p
    p.close()


@pytest.fixture
def clock_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    def move(t: Any) -> None:
        monkeypatch.setenv("LEDGER_NOW", clock.format_instant(t))
    move(FEB)
    return move


def _row(proj: Projections, atom: Any) -> dict[str, Any]:
    proj.catch_up()
    with proj.store.engine.connect() as conn:
        row = proj.atoms.atom(conn, str(atom))
    assert row is not None
    return row


# --- the case ----------------------------------------------------------------------
def test_corrected_fact_is_recalled_a_year_later(app: LedgerApp, proj: Projections,
                                                 home: Path, clock_at: Any) -> None:
    app.register_subject({"ref": "u1"})
    acme = str(app.add_atom({"subject": "u1", "text": "Works at Acme as an engineer"}))
    clock_at(MAR)
    beta = str(app.correct_atom(acme, {"text": "Works at Beta as an engineer",
                                       "reason": "job change"}))
    later = MAR + timedelta(days=365)
    clock_at(later)
    got = proj.recall("works engineer", "u1", 5, now=later)
    assert beta in got.atom_ids and acme not in got.atom_ids  # superseded, not faded
    listed = {r["atom_id"]: r for r in proj.memory_list("u1", now=later)}
    assert listed[beta]["salience_now"] == 0.5 and listed[beta]["status"] == "active"
    assert listed[acme]["salience_now"] == 0.5 and listed[acme]["status"] == "superseded"
    assert _row(proj, beta)["profile_source"] == "none"
    r = run_cli("--home", str(home), "recall", "works engineer", "--subject", "u1",
                "--no-rehearse")
    assert r.code == 0, r.err
    assert "Works at Beta as an engineer" in r.out and "Acme" not in r.out


# --- archival by the sweep -------------------------------------------------------------------
def test_atom_below_its_minimum_stays_until_a_sweep_archives_and_counts_it(
        app: LedgerApp, proj: Projections, home: Path, clock_at: Any) -> None:
    app.set_policy({"memoryPolicy": {"enabled": True}})
    app.register_subject({"ref": "u1"})
    fading = str(app.add_atom({"subject": "u1", "text": "Had pasta at the harbour",
                               "kind": "episodic", "salience": 0.5,
                               "decay_profile": PERSONA}))
    fact = str(app.add_atom({"subject": "u1", "text": "Allergic to peanuts",
                             "salience": 0.5}))
    later = FEB + timedelta(days=60)  # 0.5 * 2**(-60/14) = 0.026 < 0.05
    clock_at(later)
    at = clock.format_instant(later)
    row = _row(proj, fading)
    assert row["status"] == "active" and is_candidate(row, at)  # not dropped at query time
    listed = {r["atom_id"]: r for r in proj.memory_list("u1", now=later)}
    assert listed[fading]["salience_now"] < 0.05 and listed[fading]["status"] == "active"

    rows = RawStore(home).rows()
    dry = run_cli("--home", str(home), "sweep", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = json.loads(dry.out)
    assert plan["archived"]["by_rule"] == {"retention": 0, "decay": 1}
    assert RawStore(home).rows() == rows  # a dry run records nothing
    assert app.get_atom(fading).status == "active"

    r = run_cli("--home", str(home), "sweep", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["status"] == "swept" and report["archived"]["count"] == 1
    assert report["archived"]["atom_ids"] == [fading]
    assert report["archived"]["by_rule"] == {"retention": 0, "decay": 1}
    assert "1 archived" in r.err
    assert app.get_atom(fading).status == "archived" and app.get_atom(fact).status == "active"

    events = [h for h in app.history(fading) if h["topic"] == Atom.Archived.TOPIC]
    assert len(events) == 1 and events[0]["signer"] == app.signer("operator").kid
    assert events[0]["event_id"] in report["archived"]["event_ids"]
    (summary,) = [env["payload"] for env in (
        app.mapper.open_verified(s).envelope  # type: ignore[attr-defined]
        for s in app.recorder.select_events(UUID(fading)))
        if env["topic"] == Atom.Archived.TOPIC]
    assert summary["salience"] == pytest.approx(0.5 * 2 ** (-60 / 14), abs=1e-6)
    assert summary["minimum_salience"] == 0.05 and summary["computed_at"] == at
    assert "below minimumSalience" in summary["reason"]

    row = _row(proj, fading)
    assert row["status"] == "archived" and not is_candidate(row, at)
    assert fading not in proj.recall("pasta harbour", "u1", 5, now=later).atom_ids
    assert fact in proj.recall("allergic peanuts", "u1", 5, now=later).atom_ids
    listed = {r["atom_id"]: r for r in proj.memory_list("u1", now=later)}
    assert listed[fading]["status"] == "archived" and listed[fading]["text"] is not None
    assert proj.memory_inspect(fading, now=later)["status"] == "archived"

    audit = run_cli("--home", str(home), "audit", "--json", "--verify", "none")
    assert audit.code == 0, audit.err
    assert json.loads(audit.out)["sweeps"]["by_topic"][Atom.Archived.TOPIC] == 1

    again = sweep(app, proj)
    assert again["status"] == "nothing-due" and again["archived"]["count"] == 0
    assert run_cli("--home", str(home), "verify").code == 0


# --- policy defaults ---------------------------------------------------------------------------
def test_policy_defaults_by_kind_then_class_then_default_fixed_at_creation(
        app: LedgerApp, proj: Projections, clock_at: Any) -> None:
    app.register_subject({"ref": "u1"})
    before = str(app.add_atom({"subject": "u1", "text": "recorded before the policy",
                               "kind": "episodic"}))
    app.set_policy({"memoryPolicy": {"enabled": True, "decayPolicy": {
        "perKind": {"episodic": {"halfLifeDays": 2}},
        "perPrivacyClass": {"non-pii": {"function": "none"}},
        "defaultProfile": {"halfLifeDays": 30, "minimumSalience": 0.1}}}})
    ids = {name: str(app.add_atom({"subject": "u1", "text": name, **kw})) for name, kw in {
        "episode": {"kind": "episodic", "privacy_class": "non-pii"},
        "non-pii fact": {"privacy_class": "non-pii"},
        "plain fact": {},
        "own profile": {"kind": "episodic", "decay_profile": {"halfLifeDays": 5}},
    }.items()}
    expect = {"episode": ("policy:perKind", 2.0), "non-pii fact": ("policy:perPrivacyClass",
                                                                   None),
              "plain fact": ("policy:defaultProfile", 30.0), "own profile": ("atom", 5.0)}
    for name, (source, half_life) in expect.items():
        row = _row(proj, ids[name])
        assert row["profile_source"] == source, name
        got = profile_of(row["decay_profile"])
        assert got.half_life_days == (math.inf if half_life is None else half_life), name
    assert profile_of(_row(proj, ids["plain fact"])["decay_profile"]).minimum_salience == 0.1
    assert _row(proj, before)["profile_source"] == "none"  # a later policy does not reach it
    # A policy that is not enforced gives no defaults to atoms created under it.
    app.set_policy({"memoryPolicy": {"enabled": False, "decayPolicy": {
        "defaultProfile": {"halfLifeDays": 1}}}})
    off = str(app.add_atom({"subject": "u1", "text": "under a disabled policy"}))
    assert _row(proj, off)["profile_source"] == "none"
    # Rebuilt from zero, every atom gets the same profile (the policy is folded in order).
    rows = {a: _row(proj, a) for a in [before, off, *ids.values()]}
    proj.rebuild("atoms")
    for a, row in rows.items():
        again = _row(proj, a)
        assert (again["decay_profile"], again["profile_source"], again["fades_at"]) == (
            row["decay_profile"], row["profile_source"], row["fades_at"])


@pytest.mark.parametrize("decay_policy", [
    {"perKind": {"episodc": {"halfLifeDays": 3}}},  # a typo of a kind
    {"defaultProfile": {"function": "none", "halfLifeDays": 3}},  # none takes no keys
    {"perPrivacyClass": {"non-pii": {"halfLifeDays": 0}}},
    {"defaultProfile": {"function": "linear"}},
])
def test_a_bad_decay_policy_is_refused_and_changes_nothing(
        app: LedgerApp, home: Path, decay_policy: dict[str, Any]) -> None:
    files = snapshot(home)
    with pytest.raises(InputError, match="invalid memoryPolicy"):
        app.set_policy({"memoryPolicy": {"enabled": True, "decayPolicy": decay_policy}})
    assert snapshot(home) == files


# --- the no-decay profile, pure ------------------------------------------------------------------
def test_no_decay_profile_keeps_the_baseline_and_is_never_archivable() -> None:
    p = decay.NO_DECAY
    assert profile_of(None) == p and profile_of({}) == p
    assert decay.DecayProfile.from_json({"function": "none"}) == p
    assert p.to_json() == {"function": "none"} and not p.decays
    assert decay.DEFAULT_PROFILE.decays
    with pytest.raises(ValueError, match="takes no other key"):
        decay.DecayProfile.from_json({"function": "none", "halfLifeDays": 3})
    with pytest.raises(ValueError, match="unsupported decay function"):
        decay.DecayProfile(function="linear")
    for days in (0.0, 14.0, 365.0, 3650.0):
        assert decay.salience(0.3, 0, 0.9, days, p) == 0.3  # no valence term either
        assert decay.detail_brightness(0.4, days, p) == 0.4
    assert decay.rehearse(0.3, 4, 500.0, p) == (0.3, 5)
    assert decay.salience(0.3, 5, 0.0, 500.0, p) == 0.3  # rehearsals do not inflate it
    assert not decay.is_archivable(0.0, p)
    origin = "2026-01-01T00:00:00.000000Z"
    for baseline in (0.0, 0.01, 0.5):
        assert fades_at(DecayState(baseline, 0, 0.0, origin, p)) is None
    state = DecayState(0.3, 0, 0.0, origin, p).rehearsed("2027-01-01T00:00:00.000000Z")
    assert state.salience(clock.parse_instant("2036-01-01T00:00:00Z")) == 0.3


def test_policy_defaults_resolution_order() -> None:
    d = DecayDefaults.of_policy({"memoryPolicy": {"enabled": True, "decayPolicy": {
        "perKind": {"fact": {"function": "none"}, "episodic": {"halfLifeDays": 3}},
        "perPrivacyClass": {"guest-pii": {"halfLifeDays": 7}},
        "defaultProfile": {}}}})
    assert d.resolve({"half_life_days": 9.0}, "fact", None) == (
        {"half_life_days": 9.0}, "atom")
    assert d.resolve(None, "fact", "guest-pii") == (None, "policy:perKind")
    assert d.resolve(None, "episodic", None)[0]["half_life_days"] == 3.0  # type: ignore[index]
    assert d.resolve(None, "goal", "guest-pii")[1] == "policy:perPrivacyClass"
    profile, source = d.resolve(None, "goal", None)
    assert source == "policy:defaultProfile" and profile_of(profile) == decay.DEFAULT_PROFILE
    assert DecayDefaults.of_policy(None).resolve(None, "episodic", None) == (None, "none")
    assert DecayDefaults.of_policy({"enabled": True}).resolve(None, "fact", None) == (
        None, "none")


# --- ledger state -----------------------------------------------------------------------------
def test_state_prints_its_summary_once_on_a_line_of_its_own(app: LedgerApp, home: Path,
                                                            clock_at: Any) -> None:
    app.register_subject({"ref": "u1"})
    acme = str(app.add_atom({"subject": "u1", "text": "Works at Acme as an engineer"}))
    clock_at(MAR)
    beta = str(app.correct_atom(acme, {"text": "Works at Beta as an engineer"}))
    clock_at(MAR + timedelta(days=300))
    r = run_cli("--home", str(home), "state", "--subject", "u1")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[-2] == f"  ({acme}  superseded: Works at Acme as an engineer)"
    assert lines[-1].startswith("1 fact(s) valid at ") and lines[-1].endswith(
        " across 1 subject(s)")
    assert r.out.endswith("engineer)\n" + lines[-1] + "\n")
    assert f"  {beta}  active     Works at Beta as an engineer" in lines
    assert (r.out + r.err).count("fact(s) valid at") == 1
    j = run_cli("--home", str(home), "state", "--subject", "u1", "--json")
    assert j.code == 0 and json.loads(j.out)["valid"][0]["atom_id"] == beta
    assert (j.out + j.err).count("fact(s) valid at") == 1 and "fact(s)" in j.err
