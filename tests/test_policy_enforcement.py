"""The memoryPolicy on write: consent basis per privacy class, minSalienceForCreation,
maxAtoms per subject (ledger/policy_rules.py, ADR 0014). Refused input changes nothing.
The acts go through the facade as the local operator (the ``ledger`` command's caller) or
through the command; the salience arithmetic and the maxAtoms census are tested as the
units they are."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import policy_rules
from ledger.domain import Atom
from ledger.errors import InputError
from projections.memory import DecayState, profile_of
from service.caller import local_operator
from service.facade import MemoryService
from service.models import AtomCorrectionIn, AtomIn, SubjectIn
from service.root import opened_service

from .conftest import RawStore, run_cli, snapshot
from .test_portability_support import KONSHUS_EXAMPLE, PERSONA_ATOM, dumps

T0 = "2031-01-01T00:00:00Z"
OP = local_operator()


def policy(**extra: Any) -> dict[str, Any]:
    return {"memoryPolicy": {"enabled": True, **extra}}


@pytest.fixture
def at_t0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", T0)


def _atom(**kw: Any) -> AtomIn:
    """`ledger atom add --subject u1 --text "Likes green tea"` with ``kw``; no search for
    similar memories (as the application's add never searched)."""
    return AtomIn(**{"subject": "u1", "text": "Likes green tea", "on_similar": None, **kw})


def _setup(svc: MemoryService, doc: dict[str, Any] | None, *subjects: str) -> None:
    if doc is not None:
        svc.set_policy(OP, doc)
    for ref in subjects:
        svc.register_subject(OP, SubjectIn(ref=ref))


def _state(svc: MemoryService, home: Path) -> tuple[list[Any], int]:
    """The raw event rows and the number of stored data keys (for 'nothing changed')."""
    return RawStore(home).rows(), svc.app.datakeys.count()


def _status(svc: MemoryService, atom: str) -> str:
    return svc.get_atom(OP, atom).status


def test_sensitive_pii_without_explicit_consent_refused_naming_rule_and_atom(
        svc: MemoryService, home: Path) -> None:
    _setup(svc, policy(), "u1")
    before = _state(svc, home)
    batch = [_atom(privacy_class="sensitive-pii", consent_basis="explicit-consent"),
             _atom(ref="atom_7", privacy_class="sensitive-pii",
                   consent_basis="legitimate-interest")]
    with pytest.raises(InputError) as err:
        svc.add_atoms(OP, batch)
    msg = str(err.value)
    assert "rule consent-basis" in msg and "atom 2 of 2 (ref atom_7, subject u1)" in msg
    assert "needs explicit-consent" in msg and "Nothing was written" in msg
    assert "explicit-consent" in (err.value.hint or "")
    assert _state(svc, home) == before  # the good atom of the batch was not written either
    # Over the CLI: exit 2, the rule on stderr, nothing changed on disk.
    files = snapshot(home)
    r = run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--text", "x",
                "--privacy-class", "sensitive-pii")
    assert r.code == 2 and "rule consent-basis" in r.err and "hint:" in r.err
    assert "with no consent basis" in r.err
    assert snapshot(home) == files
    svc.add_atoms(OP, batch[:1])  # explicit consent: accepted


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
def test_consent_basis_per_privacy_class(svc: MemoryService, fields: dict[str, Any],
                                         refused: bool) -> None:
    _setup(svc, policy(), "u1")
    if refused:
        with pytest.raises(InputError, match="rule consent-basis"):
            svc.add_atom(OP, _atom(**fields))
    else:
        svc.add_atom(OP, _atom(**fields))


def test_min_salience_for_creation_refused_with_a_clear_message(svc: MemoryService,
                                                                home: Path) -> None:
    _setup(svc, policy(minSalienceForCreation=0.25), "u1")
    before = _state(svc, home)
    with pytest.raises(InputError) as err:
        svc.add_atoms(OP, [_atom(salience=0.9), _atom(salience=0.2)])
    assert "atom 2 of 2 (subject u1) has salience 0.2, below the policy's " \
           "minSalienceForCreation 0.25 (rule min-salience-for-creation)" in str(err.value)
    assert _state(svc, home) == before
    svc.add_atom(OP, _atom(salience=0.25))  # at the floor: accepted


def test_no_policy_or_disabled_policy_enforces_nothing(svc: MemoryService) -> None:
    _setup(svc, None, "u1")
    bad = _atom(privacy_class="sensitive-pii", salience=0.01)
    svc.add_atom(OP, bad)
    svc.set_policy(OP, {"memoryPolicy": {"enabled": False, "minSalienceForCreation": 0.5,
                                         "maxAtoms": 1}})
    svc.add_atoms(OP, [bad, bad])
    assert policy_rules.in_force(svc.app.reader) is None
    svc.set_policy(OP, policy(maxAtoms=1))
    with pytest.raises(InputError, match="consent-basis"):
        svc.add_atom(OP, bad)


def test_max_atoms_archives_the_lowest_salience_atoms_with_signed_events(
        svc: MemoryService, home: Path, at_t0: None) -> None:
    _setup(svc, policy(maxAtoms=3), "u1", "u2")
    first = svc.add_atoms(OP, [_atom(text=f"fact {s}", salience=s)
                               for s in (0.9, 0.5, 0.7)]).atom_ids
    other = svc.add_atom(OP, _atom(subject="u2", text="other", salience=0.1)).atom_id
    assert all(_status(svc, a) == "active" for a in first)
    rows = len(RawStore(home).rows())
    # Two more: 5 active for u1, the limit is 3 -> the two lowest (0.5 old, 0.6 new) go.
    added = svc.add_atoms(OP, [_atom(text="fact .6", salience=0.6),
                               _atom(text="fact .95", salience=0.95)])
    new = added.atom_ids
    assert sorted(added.archived) == sorted([first[1], new[0]])
    status = {a: _status(svc, a) for a in [*first, *new]}
    assert status == {first[0]: "active", first[1]: "archived", first[2]: "active",
                      new[0]: "archived", new[1]: "active"}
    topics = [r[3] for r in RawStore(home).rows()[rows:]]
    assert topics.count(Atom.Created.TOPIC) == 2 and topics.count(Atom.Redacted.TOPIC) == 2
    redacted = [h for h in svc.history(OP, first[1]) if h.topic == Atom.Redacted.TOPIC]
    (writer,) = {k.kid for k in svc.roster(OP) if k.name == "writer"}
    assert redacted and redacted[0].signer == writer
    assert "maxAtoms 3" in redacted[0].summary["reason"]
    assert _status(svc, other) == "active"  # another subject's atoms are not touched
    assert run_cli("--home", str(home), "verify").code == 0
    check = run_cli("--home", str(home), "policy", "check", "--json")
    assert check.code == 0 and not [w for w in json.loads(check.out)
                                    if w["rule"] == "max-atoms"]


def test_max_atoms_ranks_by_current_salience(svc: MemoryService,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", T0)
    _setup(svc, policy(maxAtoms=1), "u1")
    # arrange: an atom's own decay profile (ADR 0050: only an atom with a profile decays)
    # is taken by the application and the importers, not by the facade's AtomIn
    old = str(svc.app.add_atom({"subject": "u1", "text": "old but strong", "salience": 0.9,
                                "decay_profile": {"halfLifeDays": 14}}))
    # 28 days later (two half-lives) 0.9 has decayed to 0.225: a new 0.5 atom outranks it.
    monkeypatch.setenv("LEDGER_NOW", "2031-01-29T00:00:00Z")
    added = svc.add_atom(OP, _atom(text="new", salience=0.5))
    assert added.archived == [old]
    assert _status(svc, old) == "archived"
    assert _status(svc, added.atom_id) == "active"


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
def test_imports_keep_their_consent_basis_and_meet_the_rule(svc: MemoryService, home: Path,
                                                            tmp_path: Path) -> None:
    def imported(fmt: str, doc: Any, subject: str | None = None) -> dict[str, int]:
        """`ledger import FILE --format FMT [--subject S]`: the atoms created."""
        path = tmp_path / f"{fmt}-{len(list(tmp_path.iterdir()))}.json"
        path.write_bytes(dumps(doc))
        return svc.import_file(OP, path, fmt, subject=subject).created

    svc.set_policy(OP, policy(minSalienceForCreation=0.9, maxAtoms=10))
    # The seed atom is guest-pii with consentBasis service-delivery: accepted; its salience
    # 0.74 is below minSalienceForCreation, but an import is not a creation decision.
    assert imported("persona", PERSONA_ATOM, subject="guest-42")["atoms"] == 1
    no_basis = copy.deepcopy(PERSONA_ATOM)
    del no_basis["consentBasis"]
    no_basis["memId"] = "mem:nobasis1"
    before = _state(svc, home)
    with pytest.raises(InputError) as err:
        imported("persona", [no_basis], subject="guest-42")
    assert "import refused by the memoryPolicy (consent-basis)" in str(err.value)
    assert "guest-42:mem:nobasis1" in str(err.value)
    assert "fix it at the source" in (err.value.hint or "")
    assert _state(svc, home) == before
    # A Konshus atom about health, unclassified, without explicit consent: refused.
    medical = copy.deepcopy(KONSHUS_EXAMPLE)
    medical["atoms"][1]["sensitivity"] = "medical"
    with pytest.raises(InputError, match="sensitive-pii \\(from sensitivity medical\\)"):
        imported("konshus", medical)
    assert _state(svc, home) == before
    assert imported("konshus", KONSHUS_EXAMPLE)["atoms"] == 2


# --- ledger policy check (Persona Schema §8) ------------------------------------------------
def test_policy_check_warns_with_the_ids_to_fix(svc: MemoryService, home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", T0)
    _setup(svc, None, "u1")

    def add(**kw: Any) -> str:
        return svc.add_atom(OP, _atom(emotional_valence=0.6, **kw)).atom_id

    # Written before any policy: nothing refused them.
    bad = add(privacy_class="sensitive-pii")
    old = add(ref="atom_001", text="Works at the bakery", privacy_class="non-pii")
    newer = svc.correct_atom(OP, old, AtomCorrectionIn(text="Works at the cafe")).new_atom_id
    mention = add(text="Said more about atom_001.", privacy_class="non-pii")
    svc.redact(OP, old, "hard", "t")
    svc.set_policy(OP, policy(maxAtoms=2, retentionPolicy={"perPrivacyClass": {"non-pii": 7}},
                              rightToBeForgottenSla={"acknowledgmentHours": 48,
                                                     "completionHours": 24}))
    monkeypatch.setenv("LEDGER_NOW", "2031-01-08T00:00:00Z")
    r = run_cli("--home", str(home), "policy", "check", "--json")
    assert r.code == 0 and "WARN: 7 warning(s)" in r.err
    got = {(w["rule"], w["id"]) for w in json.loads(r.out)}
    subject = svc.get_subject(OP, "u1").subject_id
    assert ("consent-basis", bad) in got
    assert ("retention", newer) in got and ("retention", mention) in got
    assert ("max-atoms", subject) in got
    assert ("orphan-reference", newer) in got  # supersedes the erased atom
    assert ("orphan-reference", mention) in got  # names its ref in the text
    assert any(rule == "policy-coherence" for rule, _ in got)
    text = run_cli("--home", str(home), "policy", "check")
    assert text.code == 0 and f"consent-basis  {bad}" in text.out


def test_the_max_atoms_census_is_kept_beside_the_events_and_read_from_where_it_stopped(
        svc: MemoryService, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process used to read every atom-created event on its first write (18 s at
    10^6 events); the census keeps the count in the event store's database, so a new
    process reads only the events after it, another process's atoms included, and a
    census that is dropped is rebuilt from the log with the same answer. The writes go
    through the facade; the census, the unit here, is read directly."""
    _setup(svc, policy(maxAtoms=2), "u1", "u2")
    a1 = svc.add_atoms(OP, [_atom(text="one", salience=0.9),
                            _atom(text="two", salience=0.8)]).atom_ids
    u1 = svc.get_subject(OP, "u1").subject_id
    with opened_service(home, lazy=True) as later:  # another process
        svc.add_atom(OP, _atom(subject="u2", text="elsewhere"))
        three = svc.add_atom(OP, _atom(text="three", salience=0.1))  # over the limit
        assert three.archived == [three.atom_id]
        census, recorder = later.app.census, later.app.recorder
        reads: list[int] = []
        real = recorder.select_notifications

        def counted(start: int, *a: Any, **k: Any) -> Any:
            reads.append(start)
            return real(start, *a, **k)

        monkeypatch.setattr(recorder, "select_notifications", counted)
        known = census.atoms_of(recorder, [u1])
        assert sorted(known[u1]) == sorted([*a1, three.atom_id])
        assert reads and min(reads) > 1  # from where the census stopped, not the start
        b = later.add_atom(OP, _atom(text="four", salience=0.95)).atom_id  # others' atoms
        assert later.get_atom(OP, b).status == "active"  # counted: one more archived
        active = [x for x in [*a1, b] if later.get_atom(OP, x).status == "active"]
        assert len(active) == 2
        with later.app.tlog.engine.begin() as c:  # derived data: emptied, rebuilt the same
            c.execute(census.atoms.delete())
            c.execute(census.position.delete())
        reads.clear()
        assert sorted(census.atoms_of(recorder, [u1])[u1]) == sorted(
            [*a1, three.atom_id, b])
        assert min(reads) == 1
