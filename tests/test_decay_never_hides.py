"""Decay never hides silently (issue 28, ADR 0050): an atom without a decay profile does
not decay, a policy's decayPolicy gives defaults at creation, a decayed atom leaves recall
only through a signed archive by `ledger sweep`, which counts it; `ledger state` ends its
listing with one summary line. Storage tests run on SQLite and PostgreSQL. The acts and
reads go through the facade (the commands' use cases) or the command; the decay
arithmetic and the policy's resolution order are tested as the units they are."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from ledger import clock
from ledger.domain import Atom
from ledger.errors import InputError
from projections import decay
from projections.memory import DecayDefaults, DecayState, fades_at, profile_of
from service.caller import local_operator
from service.facade import MemoryService
from service.models import AtomCorrectionIn, AtomIn, RecallIn, SubjectIn

from .conftest import RawStore, run_cli, snapshot

FEB = clock.parse_instant("2031-02-10T09:00:00Z")  # after the home's own events
MAR = clock.parse_instant("2031-03-15T09:00:00Z")
PERSONA = {"halfLifeDays": 14}  # the seed's profile: 0.5 falls below 0.05 after 46.5 days
OP = local_operator()


@pytest.fixture
def clock_at(monkeypatch: pytest.MonkeyPatch) -> Any:
    def move(t: Any) -> None:
        monkeypatch.setenv("LEDGER_NOW", clock.format_instant(t))
    move(FEB)
    return move


def _row(svc: MemoryService, atom: str) -> dict[str, Any]:
    """`ledger memory inspect ATOM --json`: the atom's read-model row and its decay now."""
    return svc.inspect_memory(OP, atom)


def _recalled(svc: MemoryService, query: str) -> list[str]:
    """`ledger recall QUERY --subject u1 --no-rehearse`: the recalled atoms' ids."""
    got = svc.recall(OP, RecallIn(query=query, subject="u1", k=5, rehearse=False))
    return [item.atom_id for item in got.items]


def _listed(svc: MemoryService) -> dict[str, dict[str, Any]]:
    """`ledger memory list --subject u1 --json`, by atom id."""
    return {r.atom_id: r.model_dump() for r in svc.list_memories(OP, "u1")}


# --- the case ----------------------------------------------------------------------
def test_corrected_fact_is_recalled_a_year_later(svc: MemoryService, home: Path,
                                                 clock_at: Any) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    acme = svc.add_atom(OP, AtomIn(subject="u1", text="Works at Acme as an engineer",
                                   on_similar=None)).atom_id
    clock_at(MAR)
    beta = svc.correct_atom(OP, acme, AtomCorrectionIn(text="Works at Beta as an engineer",
                                                       reason="job change")).new_atom_id
    clock_at(MAR + timedelta(days=365))
    got = _recalled(svc, "works engineer")
    assert beta in got and acme not in got  # superseded, not faded
    listed = _listed(svc)
    assert listed[beta]["salience_now"] == 0.5 and listed[beta]["status"] == "active"
    assert listed[acme]["salience_now"] == 0.5 and listed[acme]["status"] == "superseded"
    assert _row(svc, beta)["profile_source"] == "none"
    r = run_cli("--home", str(home), "recall", "works engineer", "--subject", "u1",
                "--no-rehearse")
    assert r.code == 0, r.err
    assert "Works at Beta as an engineer" in r.out and "Acme" not in r.out


# --- archival by the sweep -------------------------------------------------------------------
def test_atom_below_its_minimum_stays_until_a_sweep_archives_and_counts_it(
        svc: MemoryService, home: Path, clock_at: Any) -> None:
    svc.set_policy(OP, {"memoryPolicy": {"enabled": True}})
    svc.register_subject(OP, SubjectIn(ref="u1"))
    # arrange: an atom's own decay profile is taken by the application and the importers
    fading = str(svc.app.add_atom({"subject": "u1", "text": "Had pasta at the harbour",
                                   "kind": "episodic", "salience": 0.5,
                                   "decay_profile": PERSONA}))
    fact = svc.add_atom(OP, AtomIn(subject="u1", text="Allergic to peanuts", salience=0.5,
                                   on_similar=None)).atom_id
    later = FEB + timedelta(days=60)  # 0.5 * 2**(-60/14) = 0.026 < 0.05
    clock_at(later)
    at = clock.format_instant(later)
    row = _row(svc, fading)
    assert row["status"] == "active" and row["decay"]["archivable"]
    assert fading in _recalled(svc, "pasta harbour")  # not dropped at query time
    listed = _listed(svc)
    assert listed[fading]["salience_now"] < 0.05 and listed[fading]["status"] == "active"

    rows = RawStore(home).rows()
    dry = run_cli("--home", str(home), "sweep", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = json.loads(dry.out)
    assert plan["archived"]["by_rule"] == {"retention": 0, "decay": 1}
    assert RawStore(home).rows() == rows  # a dry run records nothing
    assert svc.get_atom(OP, fading).status == "active"

    r = run_cli("--home", str(home), "sweep", "--json")
    assert r.code == 0, r.err
    report = json.loads(r.out)
    assert report["status"] == "swept" and report["archived"]["count"] == 1
    assert report["archived"]["atom_ids"] == [fading]
    assert report["archived"]["by_rule"] == {"retention": 0, "decay": 1}
    assert "1 archived" in r.err
    assert svc.get_atom(OP, fading).status == "archived"
    assert svc.get_atom(OP, fact).status == "active"

    events = [h for h in svc.history(OP, fading) if h.topic == Atom.Archived.TOPIC]
    operator = [k.kid for k in svc.roster(OP) if k.name == "operator"]
    assert len(events) == 1 and [events[0].signer] == operator
    assert events[0].event_id in report["archived"]["event_ids"]
    # what the operator signed (no surface prints an event's whole payload)
    (summary,) = [env["payload"] for env in (
        svc.app.mapper.open_verified(s).envelope  # type: ignore[attr-defined]
        for s in svc.app.recorder.select_events(UUID(fading)))
        if env["topic"] == Atom.Archived.TOPIC]
    assert summary["salience"] == pytest.approx(0.5 * 2 ** (-60 / 14), abs=1e-6)
    assert summary["minimum_salience"] == 0.05 and summary["computed_at"] == at
    assert "below minimumSalience" in summary["reason"]

    row = _row(svc, fading)
    assert row["status"] == "archived"
    assert fading not in _recalled(svc, "pasta harbour")
    assert fact in _recalled(svc, "allergic peanuts")
    listed = _listed(svc)
    assert listed[fading]["status"] == "archived" and listed[fading]["text"] is not None

    audit = run_cli("--home", str(home), "audit", "--json", "--verify", "none")
    assert audit.code == 0, audit.err
    assert json.loads(audit.out)["sweeps"]["by_topic"][Atom.Archived.TOPIC] == 1

    again = svc.sweep(OP)
    assert again.status == "nothing-due" and again.archived["count"] == 0
    assert run_cli("--home", str(home), "verify").code == 0


# --- policy defaults ---------------------------------------------------------------------------
def test_policy_defaults_by_kind_then_class_then_default_fixed_at_creation(
        svc: MemoryService, clock_at: Any) -> None:
    def add(text: str, **kw: Any) -> str:
        return svc.add_atom(OP, AtomIn(subject="u1", text=text, on_similar=None,
                                       **kw)).atom_id

    svc.register_subject(OP, SubjectIn(ref="u1"))
    before = add("recorded before the policy", kind="episodic")
    svc.set_policy(OP, {"memoryPolicy": {"enabled": True, "decayPolicy": {
        "perKind": {"episodic": {"halfLifeDays": 2}},
        "perPrivacyClass": {"non-pii": {"function": "none"}},
        "defaultProfile": {"halfLifeDays": 30, "minimumSalience": 0.1}}}})
    ids = {"episode": add("episode", kind="episodic", privacy_class="non-pii"),
           "non-pii fact": add("non-pii fact", privacy_class="non-pii"),
           "plain fact": add("plain fact"),
           # arrange: an atom's own profile is taken by the application and the importers
           "own profile": str(svc.app.add_atom({"subject": "u1", "text": "own profile",
                                                "kind": "episodic",
                                                "decay_profile": {"halfLifeDays": 5}}))}
    expect = {"episode": ("policy:perKind", 2.0), "non-pii fact": ("policy:perPrivacyClass",
                                                                   None),
              "plain fact": ("policy:defaultProfile", 30.0), "own profile": ("atom", 5.0)}
    for name, (source, half_life) in expect.items():
        row = _row(svc, ids[name])
        assert row["profile_source"] == source, name
        got = profile_of(row["decay_profile"])
        assert got.half_life_days == (math.inf if half_life is None else half_life), name
    assert profile_of(_row(svc, ids["plain fact"])["decay_profile"]).minimum_salience == 0.1
    assert _row(svc, before)["profile_source"] == "none"  # a later policy does not reach it
    # A policy that is not enforced gives no defaults to atoms created under it.
    svc.set_policy(OP, {"memoryPolicy": {"enabled": False, "decayPolicy": {
        "defaultProfile": {"halfLifeDays": 1}}}})
    off = add("under a disabled policy")
    assert _row(svc, off)["profile_source"] == "none"
    # Rebuilt from zero, every atom gets the same profile (the policy is folded in order).
    rows = {a: _row(svc, a) for a in [before, off, *ids.values()]}
    svc.rebuild_read_models(OP, "atoms")
    for a, row in rows.items():
        again = _row(svc, a)
        assert (again["decay_profile"], again["profile_source"], again["fades_at"]) == (
            row["decay_profile"], row["profile_source"], row["fades_at"])


@pytest.mark.parametrize("decay_policy", [
    {"perKind": {"episodc": {"halfLifeDays": 3}}},  # a typo of a kind
    {"defaultProfile": {"function": "none", "halfLifeDays": 3}},  # none takes no keys
    {"perPrivacyClass": {"non-pii": {"halfLifeDays": 0}}},
    {"defaultProfile": {"function": "linear"}},
])
def test_a_bad_decay_policy_is_refused_and_changes_nothing(
        svc: MemoryService, home: Path, decay_policy: dict[str, Any]) -> None:
    files = snapshot(home)
    with pytest.raises(InputError, match="invalid memoryPolicy"):
        svc.set_policy(OP, {"memoryPolicy": {"enabled": True, "decayPolicy": decay_policy}})
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
def test_state_prints_its_summary_once_on_a_line_of_its_own(svc: MemoryService, home: Path,
                                                            clock_at: Any) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    acme = svc.add_atom(OP, AtomIn(subject="u1", text="Works at Acme as an engineer",
                                   on_similar=None)).atom_id
    clock_at(MAR)
    beta = svc.correct_atom(OP, acme, AtomCorrectionIn(
        text="Works at Beta as an engineer")).new_atom_id
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
