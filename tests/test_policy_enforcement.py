"""The memoryPolicy on write: consent basis per privacy class, minSalienceForCreation,
maxAtoms per subject (ledger/policy_rules.py, ADR 0014). Refused input changes nothing."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import policy_rules
from ledger.application import LedgerApp
from ledger.domain import Atom
from ledger.errors import InputError
from projections.memory import DecayState, profile_of

from .conftest import RawStore, run_cli, snapshot
from .test_portability_support import KONSHUS_EXAMPLE, PERSONA_ATOM, dumps, import_doc

T0 = "2031-01-01T00:00:00Z"


def policy(**extra: Any) -> dict[str, Any]:
    return {"memoryPolicy": {"enabled": True, **extra}}


@pytest.fixture
def at_t0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", T0)


def _atom(**kw: Any) -> dict[str, Any]:
    return {"subject": "u1", "text": "Likes green tea", **kw}


def _state(app: LedgerApp, home: Path) -> tuple[list[Any], int]:
    return RawStore(home).rows(), app.datakeys.count()


def test_sensitive_pii_without_explicit_consent_refused_naming_rule_and_atom(
        app: LedgerApp, home: Path) -> None:
    app.set_policy(policy())
    app.register_subject({"ref": "u1"})
    before = _state(app, home)
    batch = [_atom(privacy_class="sensitive-pii", consent_basis="explicit-consent"),
             _atom(ref="atom_7", privacy_class="sensitive-pii",
                   consent_basis="legitimate-interest")]
    with pytest.raises(InputError) as err:
        app.add_atoms(batch)
    msg = str(err.value)
    assert "rule consent-basis" in msg and "atom 2 of 2 (ref atom_7, subject u1)" in msg
    assert "needs explicit-consent" in msg and "Nothing was written" in msg
    assert "explicit-consent" in (err.value.hint or "")
    assert _state(app, home) == before  # the good atom of the batch was not written either
    # Over the CLI: exit 2, the rule on stderr, nothing changed on disk.
    files = snapshot(home)
    r = run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--text", "x",
                "--privacy-class", "sensitive-pii")
    assert r.code == 2 and "rule consent-basis" in r.err and "hint:" in r.err
    assert "with no consent basis" in r.err
    assert snapshot(home) == files
    app.add_atoms(batch[:1])  # explicit consent: accepted


@pytest.mark.parametrize(("fields", "refused"), [
    ({"privacy_class": "guest-pii"}, True),  # a lawful basis is needed, none given
    ({"privacy_class": "staff-pii", "consent_basis": "not-applicable"}, True),
    ({"privacy_class": "guest-pii", "consent_basis": "service-delivery"}, False),
    ({"privacy_class": "staff-pii", "consent_basis": "legal-obligation"}, False),
    ({"privacy_class": "non-pii"}, False),
    ({"privacy_class": "aggregate"}, False),
    ({"privacy_class": "commercial-confidential"}, False),
    ({"sensitivity": "medical"}, True),  # unclassified special-category data: sensitive-pii
    ({"sensitivity": "medical", "consent_basis": "explicit-consent"}, False),
    ({"sensitivity": "private"}, False),  # unclassified: no class, no consent rule
])
def test_consent_basis_per_privacy_class(app: LedgerApp, fields: dict[str, Any],
                                         refused: bool) -> None:
    app.set_policy(policy())
    app.register_subject({"ref": "u1"})
    if refused:
        with pytest.raises(InputError, match="rule consent-basis"):
            app.add_atom(_atom(**fields))
    else:
        app.add_atom(_atom(**fields))


def test_min_salience_for_creation_refused_with_a_clear_message(app: LedgerApp,
                                                                home: Path) -> None:
    app.set_policy(policy(minSalienceForCreation=0.25))
    app.register_subject({"ref": "u1"})
    before = _state(app, home)
    with pytest.raises(InputError) as err:
        app.add_atoms([_atom(salience=0.9), _atom(salience=0.2)])
    assert "atom 2 of 2 (subject u1) has salience 0.2, below the policy's " \
           "minSalienceForCreation 0.25 (rule min-salience-for-creation)" in str(err.value)
    assert _state(app, home) == before
    app.add_atom(_atom(salience=0.25))  # at the floor: accepted


def test_no_policy_or_disabled_policy_enforces_nothing(app: LedgerApp) -> None:
    app.register_subject({"ref": "u1"})
    bad = _atom(privacy_class="sensitive-pii", salience=0.01)
    app.add_atom(bad)
    app.set_policy({"memoryPolicy": {"enabled": False, "minSalienceForCreation": 0.5,
                                     "maxAtoms": 1}})
    app.add_atoms([bad, bad])
    assert policy_rules.in_force(app.reader) is None
    app.set_policy(policy(maxAtoms=1))
    with pytest.raises(InputError, match="consent-basis"):
        app.add_atom(bad)


def test_max_atoms_archives_the_lowest_salience_atoms_with_signed_events(
        app: LedgerApp, home: Path, at_t0: None) -> None:
    app.set_policy(policy(maxAtoms=3))
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    first = app.add_atoms([_atom(text=f"fact {s}", salience=s) for s in (0.9, 0.5, 0.7)])
    other = app.add_atom({"subject": "u2", "text": "other", "salience": 0.1})
    assert all(app.reader.get_atom(a).status == "active" for a in first)
    rows = len(RawStore(home).rows())
    # Two more: 5 active for u1, the limit is 3 -> the two lowest (0.5 old, 0.6 new) go.
    new = app.add_atoms([_atom(text="fact .6", salience=0.6),
                         _atom(text="fact .95", salience=0.95)])
    status = {str(a): app.reader.get_atom(a).status for a in [*first, *new]}
    assert status == {str(first[0]): "active", str(first[1]): "archived",
                      str(first[2]): "active", str(new[0]): "archived",
                      str(new[1]): "active"}
    added = RawStore(home).rows()[rows:]
    topics = [r[3] for r in added]
    assert topics.count(Atom.Created.TOPIC) == 2 and topics.count(Atom.Redacted.TOPIC) == 2
    hist = app.reader.history(str(first[1]))
    redacted = [h for h in hist if h["topic"] == Atom.Redacted.TOPIC]
    assert redacted and redacted[0]["signer"] == app.signer("writer").kid
    assert "maxAtoms 3" in redacted[0]["summary"]["reason"]
    assert app.reader.get_atom(other).status == "active"  # another subject's atoms are not touched
    assert run_cli("--home", str(home), "verify").code == 0
    check = run_cli("--home", str(home), "policy", "check", "--json")
    assert check.code == 0 and not [w for w in json.loads(check.out)
                                    if w["rule"] == "max-atoms"]


def test_max_atoms_ranks_by_current_salience(app: LedgerApp, home: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", T0)
    app.set_policy(policy(maxAtoms=1))
    app.register_subject({"ref": "u1"})
    persona = {"halfLifeDays": 14}  # ADR 0050: only an atom with a profile decays
    old = app.add_atom(_atom(text="old but strong", salience=0.9, decay_profile=persona))
    # 28 days later (two half-lives) 0.9 has decayed to 0.225: a new 0.5 atom outranks it.
    monkeypatch.setenv("LEDGER_NOW", "2031-01-29T00:00:00Z")
    new = app.add_atom(_atom(text="new", salience=0.5, decay_profile=persona))
    assert app.reader.get_atom(old).status == "archived"
    assert app.reader.get_atom(new).status == "active"


def test_current_salience_agrees_with_the_projection_decay() -> None:
    created = datetime(2031, 1, 1, tzinfo=UTC)
    for profile in (None, {"half_life_days": 3.0, "rehearsal_boost": 1.7,
                           "valence_protection": 0.2, "minimum_salience": 0.05,
                           "detail_decay_rate": 1.5, "function": "ebbinghaus"}):
        for valence in (0.0, -0.4, 0.9):
            state = DecayState(0.6, 0, valence, "2031-01-01T00:00:00.000000Z",
                               profile_of(profile))
            rehearsals = [created + timedelta(days=d) for d in (1.5, 4.0, 9.25)]
            for r in rehearsals:
                state = state.rehearsed(r.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            for days in (9.25, 10.0, 30.0, 400.0):
                now = created + timedelta(days=days)
                ours = policy_rules.current_salience(0.6, len(rehearsals), valence, profile,
                                                     created, now)
                assert ours == pytest.approx(state.salience(now), rel=1e-9, abs=1e-12)


# --- imports ------------------------------------------------------------------------------
def test_imports_keep_their_consent_basis_and_meet_the_rule(app: LedgerApp,
                                                            home: Path) -> None:
    app.set_policy(policy(minSalienceForCreation=0.9, maxAtoms=10))
    # The seed atom is guest-pii with consentBasis service-delivery: accepted; its salience
    # 0.74 is below minSalienceForCreation, but an import is not a creation decision.
    report = import_doc(app, "persona", dumps(PERSONA_ATOM), subject="guest-42")
    assert report["created"]["atoms"] == 1
    no_basis = copy.deepcopy(PERSONA_ATOM)
    del no_basis["consentBasis"]
    no_basis["memId"] = "mem:nobasis1"
    before = _state(app, home)
    with pytest.raises(InputError) as err:
        import_doc(app, "persona", dumps([no_basis]), subject="guest-42")
    assert "import refused by the memoryPolicy (consent-basis)" in str(err.value)
    assert "guest-42:mem:nobasis1" in str(err.value)
    assert "fix it at the source" in (err.value.hint or "")
    assert _state(app, home) == before
    # A Konshus atom about health, unclassified, without explicit consent: refused.
    medical = copy.deepcopy(KONSHUS_EXAMPLE)
    medical["atoms"][1]["sensitivity"] = "medical"
    with pytest.raises(InputError, match="sensitive-pii \\(from sensitivity medical\\)"):
        import_doc(app, "konshus", dumps(medical))
    assert _state(app, home) == before
    assert import_doc(app, "konshus", dumps(KONSHUS_EXAMPLE))["created"]["atoms"] == 2


# --- ledger policy check (Persona Schema §8) ------------------------------------------------
def test_policy_check_warns_with_the_ids_to_fix(app: LedgerApp, home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from governance.erasure import Targets, hard_erase
    from projections.service import Projections

    monkeypatch.setenv("LEDGER_NOW", T0)
    app.register_subject({"ref": "u1"})
    # Written before any policy: nothing refused them.
    bad = str(app.add_atom(_atom(privacy_class="sensitive-pii", emotional_valence=0.6)))
    old = str(app.add_atom(_atom(ref="atom_001", text="Works at the bakery",
                                 privacy_class="non-pii", emotional_valence=0.6)))
    newer = str(app.correct_atom(old, {"text": "Works at the cafe"}))
    mention = str(app.add_atom(_atom(text="Said more about atom_001.", privacy_class="non-pii",
                                     emotional_valence=0.6)))
    proj = Projections(app)
    try:
        hard_erase(app, proj, Targets(atoms=[old]), mode="hard", reason="t",
                   operator="operator")
    finally:
        proj.close()
    app.set_policy(policy(maxAtoms=2, retentionPolicy={"perPrivacyClass": {"non-pii": 7}},
                          rightToBeForgottenSla={"acknowledgmentHours": 48,
                                                 "completionHours": 24}))
    monkeypatch.setenv("LEDGER_NOW", "2031-01-08T00:00:00Z")
    r = run_cli("--home", str(home), "policy", "check", "--json")
    assert r.code == 0 and "WARN: 7 warning(s)" in r.err
    got = {(w["rule"], w["id"]) for w in json.loads(r.out)}
    subject = str(app.reader.resolve_subject("u1"))
    assert ("consent-basis", bad) in got
    assert ("retention", newer) in got and ("retention", mention) in got
    assert ("max-atoms", subject) in got
    assert ("orphan-reference", newer) in got  # supersedes the erased atom
    assert ("orphan-reference", mention) in got  # names its ref in the text
    assert any(rule == "policy-coherence" for rule, _ in got)
    text = run_cli("--home", str(home), "policy", "check")
    assert text.code == 0 and f"consent-basis  {bad}" in text.out


def test_the_max_atoms_census_is_kept_beside_the_events_and_read_from_where_it_stopped(
        app: LedgerApp, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process used to read every atom-created event on its first write (18 s at
    10^6 events); the census keeps the count in the event store's database, so a new
    process reads only the events after it, another process's atoms included, and a
    census that is dropped is rebuilt from the log with the same answer."""
    from ledger.home import Config

    app.set_policy(policy(maxAtoms=2))
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    a1 = app.add_atoms([_atom(text="one", salience=0.9), _atom(text="two", salience=0.8)])
    u1 = str(app.reader.get_atom(a1[0]).subject_id)
    later = LedgerApp(Config.load(home))  # another process
    try:
        app.add_atom({"subject": "u2", "text": "elsewhere"})
        three = app.add_atom(_atom(text="three", salience=0.1))  # over the limit: archived
        reads: list[int] = []
        real = later.recorder.select_notifications

        def counted(start: int, *a: Any, **k: Any) -> Any:
            reads.append(start)
            return real(start, *a, **k)

        monkeypatch.setattr(later.recorder, "select_notifications", counted)
        known = later.census.atoms_of(later.recorder, [u1])
        assert sorted(known[u1]) == sorted(str(x) for x in [*a1, three])
        assert reads and min(reads) > 1  # from where the census stopped, not the start
        b = later.add_atom(_atom(text="four", salience=0.95))  # the other process's atoms
        assert later.reader.get_atom(b).status == "active"  # counted: one more archived
        active = [x for x in [*a1, b] if later.reader.get_atom(x).status == "active"]
        assert len(active) == 2
        with later.tlog.engine.begin() as c:  # derived data: emptied, rebuilt the same
            c.execute(later.census.atoms.delete())
            c.execute(later.census.position.delete())
        reads.clear()
        assert sorted(later.census.atoms_of(later.recorder, [u1])[u1]) == sorted(
            str(x) for x in [*a1, three, b])
        assert min(reads) == 1
    finally:
        later.close()
