"""Recall, memory list and memory inspect on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledger.application import LedgerApp
from ledger.errors import InputError, NotFound
from projections.service import Projections

from .test_projections_contract import T0, Clock, projections


@pytest.fixture
def proj(app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> Projections:
    Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    with projections(app) as p:
        yield p  # type: ignore[misc]


def test_corrected_atom_recalls_the_newer(app: LedgerApp, proj: Projections,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    old = app.add_atom({"subject": "u1", "text": "Works at Acme as an engineer"})
    Clock(monkeypatch, T0 + timedelta(days=1))
    new = app.correct_atom(str(old), {"text": "Works at Beta as a manager"})
    result = proj.recall("where does she work", "u1", now=T0 + timedelta(days=2))
    assert result.atom_ids == [str(new)]
    assert "Works at Beta" in result.prompt and "Acme" not in result.prompt


def test_expired_and_erased_atoms_are_not_recalled(app: LedgerApp, proj: Projections) -> None:
    expired, erased, kept = app.add_atoms([
        {"subject": "u1", "text": "Drinks green tea every morning"},
        {"subject": "u1", "text": "Drinks black tea with milk"},
        {"subject": "u1", "text": "Drinks mint tea at night"}])
    app.expire_atom(str(expired))
    app.destroy_data_key(erased, "erasure")
    result = proj.recall("tea", "u1", now=T0 + timedelta(hours=1))
    assert result.atom_ids == [str(kept)]
    # the expired atom is matched and reported (ADR 0051); the erased one was purged
    assert result.pool == 2 and result.eligible == 1
    assert [o.as_json() for o in result.omitted] == [{"atom_id": str(expired),
                                                      "reason": "expired"}]


def test_faint_and_recent_markers(app: LedgerApp, proj: Projections,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    faint, vivid = app.add_atoms([
        {"subject": "u1", "text": "Visited Lisbon for a conference", "salience": 0.3},
        {"subject": "u1", "text": "Moved to Lisbon last spring", "salience": 0.95}])
    Clock(monkeypatch, T0 + timedelta(days=2))
    recent = app.add_atom({"subject": "u1", "text": "Plans a Lisbon trip", "salience": 0.9})
    result = proj.recall("Lisbon", "u1", now=T0 + timedelta(days=2, hours=1))
    markers = {i.atom_id: i.markers for i in result.items}
    assert markers == {str(faint): ("faint",), str(vivid): ("vivid",),
                       str(recent): ("recent", "vivid")}
    assert f"[mem:{str(faint)[:8]}] (faint)" in result.prompt
    assert f"[mem:{str(recent)[:8]}] (recent, vivid)" in result.prompt
    assert result.prompt.startswith("## What you remember")


def test_ranking_prefers_the_relevant_atom(app: LedgerApp, proj: Projections) -> None:
    piano, allergy = app.add_atoms([
        {"subject": "u1", "text": "Plays the piano on Sundays", "salience": 0.6},
        {"subject": "u1", "text": "Severe allergy to peanuts", "salience": 0.6}])
    result = proj.recall("peanut allergy", "u1", k=2, now=T0 + timedelta(hours=1))
    assert result.atom_ids[0] == str(allergy)
    assert str(piano) not in result.atom_ids  # no keyword and no vector match
    top = result.items[0]
    assert top.keyword == 1.0 and top.vector > 0.15 and top.relevance > 0.5


def test_ranking_prefers_salience_when_relevance_ties(app: LedgerApp,
                                                      proj: Projections) -> None:
    low, high, below = app.add_atoms([
        {"subject": "u1", "text": "Owns a cat named Miso", "salience": 0.4},
        {"subject": "u1", "text": "Owns a cat named Tofu", "salience": 0.9},
        {"subject": "u1", "text": "Owns a cat named Nori", "salience": 0.1}])
    result = proj.recall("cat", "u1", now=T0 + timedelta(hours=1))
    # salience ranks and filters nothing (ADR 0051): the 0.1 one comes last, not out
    assert result.atom_ids == [str(high), str(low), str(below)]


def test_details_render_only_while_brighter_than_0_1(app: LedgerApp, proj: Projections) -> None:
    app.add_atom({"subject": "u1", "text": "Celebrated a birthday at the lake",
                  "decay_profile": {"halfLifeDays": 14},  # ADR 0050: no profile, no fading
                  "details": [{"content": "the cake was lemon", "brightness": 0.9},
                              {"content": "it rained briefly", "brightness": 0.12}]})
    early = proj.recall("birthday", "u1", now=T0 + timedelta(hours=1))
    assert "- the cake was lemon" in early.prompt and "- it rained briefly" in early.prompt
    later = proj.recall("birthday", "u1", now=T0 + timedelta(days=3))
    assert "- the cake was lemon" in later.prompt
    assert "it rained briefly" not in later.prompt  # 0.12 * 2^(-1.5*3/14) = 0.096 < 0.1


def test_recall_writes_nothing_and_checks_its_input(app: LedgerApp, proj: Projections) -> None:
    app.add_atom({"subject": "u1", "text": "Speaks Portuguese"})
    head = app.reader.head_position()
    assert proj.recall("Portuguese", "u1").atom_ids
    assert app.reader.head_position() == head
    with pytest.raises(InputError, match="empty"):
        proj.recall("   ", "u1")
    with pytest.raises(InputError, match="k must be"):
        proj.recall("x", "u1", k=0)
    with pytest.raises(NotFound):
        proj.recall("x", "nobody")


def test_vector_search_is_the_same_with_and_without_numpy(app: LedgerApp,
                                                          proj: Projections) -> None:
    words = ["garden", "roses", "tea", "piano", "Berlin", "sister", "cycling", "books"]
    app.add_atoms([{"subject": "u1", "text": f"Likes {words[i % 8]} and {words[(i * 3) % 8]}"}
                   for i in range(40)])
    proj.catch_up()
    sid = str(app.reader.subject_id("u1"))
    with proj.store.engine.connect() as conn:
        plain = proj.vectors.search(conn, sid, "tea and roses", k=10, use_numpy=False)
        default = proj.vectors.search(conn, sid, "tea and roses", k=10)
    assert [a for a, _ in plain] == [a for a, _ in default]
    assert [round(s, 6) for _, s in plain] == [round(s, 6) for _, s in default]


def test_memory_list_and_inspect(app: LedgerApp, proj: Projections,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    guest, _staff = app.add_atoms([
        {"subject": "u1", "text": "Prefers a quiet room", "privacy_class": "guest-pii",
         "consent_basis": "service-delivery", "salience": 0.8,
         "decay_profile": {"halfLifeDays": 14},  # ADR 0050: without one it would not decay
         "details": [{"content": "room 214", "brightness": 0.5}]},
        {"subject": "u1", "text": "Badge number 7", "privacy_class": "staff-pii",
         "salience": 0.2}])
    Clock(monkeypatch, T0 + timedelta(days=3))
    app.rehearse_atom(str(guest), session_id="sess:2")
    rows = proj.memory_list(privacy_class="guest-pii", now=T0 + timedelta(days=3))
    assert [r["atom_id"] for r in rows] == [str(guest)]
    assert [r["atom_id"] for r in proj.memory_list(min_salience=0.5)] == [str(guest)]
    with pytest.raises(InputError, match="privacy class"):
        proj.memory_list(privacy_class="secret")

    data = proj.memory_inspect(str(guest), now=T0 + timedelta(days=3))
    assert data["text"] == "Prefers a quiet room" and data["rehearsal_count"] == 1
    (rehearsal,) = data["rehearsals"]
    assert rehearsal["topic"] == "memory-ledger:atom.rehearsed.v1"
    assert rehearsal["signer"].startswith("ed25519:")
    decay = data["decay"]
    # ADR 0005: the rehearsal rebased the baseline and the boost applies once
    assert decay["origin"] == rehearsal["timestamp"]
    assert decay["salience_now"] == pytest.approx(0.8 * 2 ** (-3 / 14) * 1.4, abs=1e-6)
    assert data["details_now"][0]["visible"] is True
    with pytest.raises(NotFound):
        proj.memory_inspect("no-such-atom")


def test_vector_segments_survive_purges_flags_and_rebuilds(app: LedgerApp,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Small segments: appends cross segment boundaries, a purge zeroes one slot, a
    correction turns a slot off, and search and dumps agree with a rebuild."""
    Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    atoms = app.add_atoms([{"subject": "u1", "text": f"Sails a boat named Wave {i}"}
                           for i in range(7)])
    with projections(app, vector_segment_size=3) as p:
        p.catch_up()
        app.destroy_data_key(atoms[1], "erasure")
        app.correct_atom(str(atoms[4]), {"text": "Sails a yacht named Tide"})
        p.catch_up()
        sid = str(app.reader.subject_id("u1"))
        with p.store.engine.connect() as conn:
            segments = conn.execute(p.vectors.segments.select()).all()
            found = p.vectors.search(conn, sid, "boat named Wave", k=20)
            plain = p.vectors.search(conn, sid, "boat named Wave", k=20, use_numpy=False)
        assert len(segments) == 3  # 3 + 3 + 2 slots (the correction was appended)
        ids = [a for a, _ in found]
        assert str(atoms[1]) not in ids and str(atoms[4]) not in ids
        assert len(ids) == 6 and ids == [a for a, _ in plain]  # 7 - erased - superseded + new
        assert [round(s, 9) for _, s in found] == [round(s, 9) for _, s in plain]
        incremental = p.dump()["vectors"]
        p.rebuild("vectors")
        assert p.dump()["vectors"] == incremental


def test_redactions_leave_recall_and_soft_redaction_is_reversible(
        app: LedgerApp, proj: Projections) -> None:
    soft, archived, hard, kept = app.add_atoms([
        {"subject": "u1", "text": f"Drinks {kind} tea"} for kind in
        ("green", "black", "white", "mint")])
    app.redact(str(soft), "soft", "asked to hide it")
    app.redact(str(archived), "archive", "retention")
    app.shred([hard], "erasure")
    app.tombstone([hard], [], "hard", "erasure", ["test"])
    app.flag(kept, "unsourced", "no artifact")
    at = T0 + timedelta(hours=1)
    assert proj.recall("tea", "u1", now=at).atom_ids == [str(kept)]
    rows = {r["atom_id"]: r for r in proj.memory_list(now=at)}
    assert (rows[str(soft)]["status"], rows[str(soft)]["redaction_mode"]) == (
        "soft-redacted", "soft")
    assert rows[str(archived)]["status"] == "archived"
    assert rows[str(hard)]["status"] == "hard-redacted" and rows[str(hard)]["text"] is None
    assert rows[str(kept)]["flags"] == ["unsourced"]
    app.unredact(str(soft), "hidden by mistake")
    assert set(proj.recall("tea", "u1", now=at).atom_ids) == {str(soft), str(kept)}
