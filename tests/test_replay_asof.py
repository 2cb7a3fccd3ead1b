"""Bitemporal replay: what the ledger knew at T (transaction time) about facts valid at V.

Scenario: A1 "works at Acme" recorded at t1; corrected at t2 by A2 "works at Beta";
A1's data key destroyed at t3. Asked at t1.5, t2.5 and now, by as-of and by valid-at,
through the facade (``ledger state``'s use case); the as-of read model's own economy
(it reads only the subject's events) against the read models themselves.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from ledger.application import LedgerApp
from ledger.errors import NotFound
from service.caller import local_operator
from service.facade import MemoryService
from service.models import AtomCorrectionIn, AtomIn, SubjectIn

from .test_projections_contract import T0, Clock, projections

DAY = timedelta(days=1)
T1, T2, T3 = T0, T0 + 10 * DAY, T0 + 20 * DAY
T15, T25, NOW = T1 + 5 * DAY, T2 + 5 * DAY, T3 + DAY
ERASED = "[erased]"
OP = local_operator()


def ids(facts: list[dict[str, Any]]) -> list[str]:
    return [f["atom_id"] for f in facts]


def test_as_of_and_valid_at_after_correction_and_erasure(
        svc: MemoryService, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch, T1)
    svc.register_subject(OP, SubjectIn(ref="u1", display_name="Ann"))
    svc.register_subject(OP, SubjectIn(ref="u2"))
    a1, other = svc.add_atoms(OP, [AtomIn(subject="u1", text="Works at Acme"),
                                   AtomIn(subject="u2", text="Works at Initech")]).atom_ids
    clock.set(T2)
    a2 = svc.correct_atom(OP, a1, AtomCorrectionIn(text="Works at Beta",
                                                   reason="job change")).new_atom_id
    svc.rehearse_atom(OP, other)

    def state(as_of: datetime, valid_at: datetime | None = None) -> dict[str, Any]:
        """`ledger state --subject u1 --as-of AS_OF [--valid-at VALID_AT]`"""
        return svc.state(OP, "u1", as_of.isoformat(),
                         valid_at.isoformat() if valid_at else None)

    before = state(T15)
    assert ids(before["valid"]) == [a1] and before["valid"][0]["text"] == "Works at Acme"

    clock.set(T3)
    # arrange: the key alone destroyed (the step of an erasure this test is about)
    svc.app.destroy_data_key(UUID(a1), "right to be forgotten")
    clock.set(NOW)

    # transaction time: what the ledger knew then (valid time defaults to the same instant)
    s15 = state(T15)
    assert ids(s15["valid"]) == [a1] and s15["not_valid"] == []
    assert s15["valid"][0]["status"] == "active"  # not yet corrected at t1.5
    assert s15["valid"][0]["text"] == ERASED and s15["valid"][0]["content_erased"] is True
    assert s15["subject"] is not None and s15["subject"]["display_name"] == "Ann"

    s25 = state(T25)
    assert ids(s25["valid"]) == [a2] and s25["valid"][0]["text"] == "Works at Beta"
    assert ids(s25["not_valid"]) == [a1]
    assert s25["not_valid"][0]["status"] == "superseded"
    assert s25["not_valid"][0]["text"] == ERASED  # erased content stays erased in the past

    now = state(NOW)
    assert ids(now["valid"]) == [a2] and ids(now["not_valid"]) == [a1]
    assert now["not_valid"][0]["data_key_destroyed_at"] is not None

    # valid time: which fact held at V, as the ledger knows it now
    v15 = state(NOW, valid_at=T15)
    assert ids(v15["valid"]) == [a1] and v15["valid"][0]["text"] == ERASED
    assert ids(v15["not_valid"]) == [a2]
    assert v15["not_valid"][0]["not_valid_because"] == "not yet valid"
    assert ids(state(NOW, valid_at=T25)["valid"]) == [a2]
    assert ids(state(NOW, valid_at=NOW)["valid"]) == [a2]
    # as known at t1.5, A1 was open-ended, so it was believed valid at t2.5 too
    assert ids(state(T15, valid_at=T25)["valid"]) == [a1]

    # before anything was recorded: nothing known
    empty = state(T1 - DAY)
    assert empty["subject"] is None and empty["valid"] == [] and empty["not_valid"] == []

    # the other subject's history is untouched by all of this
    (u2,) = [v for v in svc.state_views(OP, None, NOW)
             if v["subject"] and v["subject"]["ref"] == "u2"]
    assert ids(u2["valid"]) == [other] and u2["valid"][0]["rehearsal_count"] == 1


def test_state_reads_only_that_subjects_events(app: LedgerApp,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    Clock(monkeypatch, T1)
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    mine = app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(3)])
    theirs = app.add_atoms([{"subject": "u2", "text": f"fact {i}"} for i in range(30)])
    with projections(app) as p:
        p.catch_up()
        read: list[str] = []
        original = app.recorder.select_events

        def spy(originator_id: Any, **kw: Any) -> Any:
            read.append(str(originator_id))
            return original(originator_id, **kw)

        monkeypatch.setattr(app.recorder, "select_events", spy)
        view = p.state_as_of("u1", NOW)
        assert sorted(ids(view.valid)) == sorted(str(a) for a in mine)
        # (the subject id is also read once to resolve the ref)
        assert set(read) == {str(app.reader.subject_id("u1"))} | {str(a) for a in mine}
        assert not set(read) & {str(a) for a in theirs}
        with pytest.raises(NotFound):
            p.state_as_of("nobody", NOW)
