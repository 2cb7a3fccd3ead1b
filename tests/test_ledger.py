"""Commands on both backends: record, read, correct, rehearse, expire; atomic refusals.

The acts and reads go through the facade as the local operator (the ``ledger`` command's
caller, ``svc``); the application is used directly where it is the unit: the fields only
it and the importers take (decay profile, extensions), its aggregates' copies, its batch
read, and ``import_records`` (tests/test_portability_*.py import through the commands)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.application import LedgerApp
from ledger.errors import ClockError, ConflictError, InputError, NotFound
from ledger.home import Config
from service.caller import local_operator
from service.facade import MemoryService
from service.models import ArtifactIn, AtomCorrectionIn, AtomIn, SubjectIn

from .conftest import RawStore, run_cli

OP = local_operator()


def _atom(**fields: object) -> AtomIn:
    """An atom to add without looking for similar memories (``on_similar`` null, a bulk
    loader's choice): these tests are about the write side's rules, and the look opens
    the read models."""
    return AtomIn(**fields, on_similar=None)  # type: ignore[arg-type]


def _seed_through_the_facade(svc: MemoryService) -> str:
    svc.register_subject(OP, SubjectIn(ref="user_9f4e", display_name="J. Miller"))
    svc.capture_artifact(OP, ArtifactIn(subject="user_9f4e", ref="art_101", kind="chat",
                                        body="the whole transcript"))
    return svc.add_atom(OP, _atom(
        subject="user_9f4e", ref="atom_001", text="Prefers direct, unhedged feedback.",
        derivation="inferred", artifact_ids=["art_101"], extractor="claude-opus-4",
        sensitivity="public")).atom_id


def _seed(app: LedgerApp) -> str:
    app.register_subject({"ref": "user_9f4e", "display_name": "J. Miller", "locale": "en-US"})
    app.capture_artifact({"subject": "user_9f4e", "ref": "art_101", "kind": "chat",
                          "title": "Q4 board prep", "body": "the whole transcript"})
    atom = app.add_atom({
        "subject": "user_9f4e", "ref": "atom_001", "kind": "preference",
        "text": "Prefers direct, unhedged feedback in writing.", "confidence": 0.87,
        "sensitivity": "public", "derivation": "inferred", "artifact_ids": ["art_101"],
        "extractor": "claude-opus-4", "human_reviewed": True, "gist": "direct feedback",
        "details": [{"content": "said so twice", "brightness": 0.85}],
        "tags": ["feedback"], "privacy_class": "guest-pii", "consent_basis": "service-delivery",
        "session_id": "sess:1", "salience": 0.74, "emotional_valence": 0.62,
        "decay_profile": {"halfLifeDays": 14, "rehearsalBoost": 1.4},
        "extensions": {"x-konshus": {"score": 3}},
    })
    return str(atom)


def test_atom_round_trip_keeps_every_field(app: LedgerApp) -> None:
    atom_id = _seed(app)
    atom = app.reader.get_atom("atom_001").as_dict()
    assert atom["atom_id"] == atom_id
    assert atom["text"] == "Prefers direct, unhedged feedback in writing."
    assert atom["details"] == [{"content": "said so twice", "brightness": 0.85}]
    assert atom["tags"] == ["feedback"]
    assert atom["confidence"] == 0.87
    assert atom["derivation"] == "inferred"
    assert atom["artifact_ids"] == [str(app.reader.resolve("artifact", "art_101"))]
    assert atom["decay_profile"]["half_life_days"] == 14
    assert atom["extensions"] == {"x-konshus": {"score": 3}}
    assert atom["privacy_class"] == "guest-pii" and atom["session_id"] == "sess:1"
    assert atom["status"] == "active" and not atom["content_erased"]
    subject = app.reader.get_subject("user_9f4e")
    assert subject.display_name == "J. Miller"


def test_a_command_mutating_its_copy_leaves_the_cached_aggregate_alone(app: LedgerApp) -> None:
    """Aggregates copy themselves for the repository's cache (ledger.domain._Copyable):
    every list and dict is new, so a command that changes its copy in place and then
    fails leaves nothing behind in what the next command reads."""
    import copy

    _seed(app)
    atom = app.reader.get_atom("atom_001")
    twin = copy.deepcopy(atom)
    assert twin.as_dict() == atom.as_dict() and twin is not atom
    for name, value in vars(atom).items():
        if isinstance(value, (list, dict)):
            assert getattr(twin, name) is not value, name
    atom.tags.append("leaked")  # the command's copy, as the repository handed it out
    atom.details[0]["content"] = "changed"
    atom.decay_profile["halfLifeDays"] = 1
    atom.extensions["x-konshus"]["score"] = 99
    again = app.reader.get_atom("atom_001").as_dict()
    assert again["tags"] == ["feedback"]
    assert again["details"] == [{"content": "said so twice", "brightness": 0.85}]
    assert again["decay_profile"]["half_life_days"] == 14
    assert again["extensions"] == {"x-konshus": {"score": 3}}


def test_get_many_reads_as_the_repository_does(home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch read (a few ids per query, on SQLite and PostgreSQL) gives what
    ``repository.get`` gives, cached (and brought forward) or not, duplicates once,
    copies that commands may change, and refuses unknown ids; it does not read
    aggregate by aggregate."""
    import uuid

    from eventsourcing.application import AggregateNotFoundError

    from ledger import bulk_reads

    monkeypatch.setattr(bulk_reads, "CHUNK", 2)  # five ids: three statements

    writer = LedgerApp(Config.load(home))
    try:
        _seed(writer)
        ids = [writer.add_atom({"subject": "user_9f4e", "text": f"fact {i}"})
               for i in range(5)]
        writer.rehearse_atom(str(ids[0]))
    finally:
        writer.close()
    app = LedgerApp(Config.load(home))  # a new process: nothing cached
    try:
        warm = app.reader.get_atom(ids[1])  # one of them cached, at version 1
        other = LedgerApp(Config.load(home))  # another process moves it on
        try:
            other.rehearse_atom(str(ids[1]))
        finally:
            other.close()
        singles: list[object] = []
        real_select = app.recorder.select_events
        monkeypatch.setattr(app.recorder, "select_events",
                            lambda *a, **k: (singles.append(a), real_select(*a, **k))[1])
        many = app.reader.get_many([ids[0], ids[1], ids[0], *ids[2:]])
        assert singles == []  # no per-aggregate read
        monkeypatch.setattr(app.recorder, "select_events", real_select)
        assert [a.id for a in many] == ids
        assert [a.as_dict() for a in many] == [app.reader.get_atom(i).as_dict() for i in ids]
        assert many[0].version == 2 and many[0].rehearsal_count == 1
        assert warm.version == 1 and many[1] is not warm
        assert many[1].version == 2 and many[1].rehearsal_count == 1  # brought forward
        many[2].artifact_ids.append("changed")  # a copy: the cache is untouched
        assert app.reader.get_many([ids[2]])[0].artifact_ids == []
        with pytest.raises(AggregateNotFoundError):
            app.reader.get_many([ids[3], uuid.uuid4()])
    finally:
        app.close()


def test_correction_supersedes_and_never_overwrites(svc: MemoryService) -> None:
    old_id = _seed_through_the_facade(svc)
    corrected = svc.correct_atom(OP, old_id, AtomCorrectionIn(text="Prefers gentle feedback.",
                                                              reason="asked"))
    assert corrected.atom_id == old_id
    new_id = corrected.new_atom_id
    old, new = (svc.get_atom(OP, old_id).model_dump(), svc.get_atom(OP, new_id).model_dump())
    assert old["text"] == "Prefers direct, unhedged feedback."  # kept, not overwritten
    assert old["status"] == "superseded" and old["superseded_by"] == new_id
    assert old["valid_to"] is not None
    assert new["supersedes"] == old_id and new["text"] == "Prefers gentle feedback."
    assert new["derivation"] == "inferred" and new["artifact_ids"] == old["artifact_ids"]
    assert new["sensitivity"] == old["sensitivity"] == "public"  # travels to the correction
    topics = [r.topic for r in svc.history(OP, old_id)]
    assert topics == ["memory-ledger:atom.created.v1", "memory-ledger:atom.superseded.v1",
                      "memory-ledger:atom.created.v1"]
    with pytest.raises(ConflictError, match="superseded"):
        svc.correct_atom(OP, old_id, AtomCorrectionIn(text="again"))


def test_rehearse_and_expire(svc: MemoryService) -> None:
    atom_id = _seed_through_the_facade(svc)
    assert svc.rehearse_atom(OP, atom_id, "sess:2").rehearsal_count == 1
    assert svc.rehearse_atom(OP, atom_id, "sess:3").rehearsal_count == 2
    atom = svc.get_atom(OP, atom_id).model_dump()
    assert atom["rehearsal_count"] == 2 and atom["last_rehearsed_at"] is not None
    svc.expire_atom(OP, atom_id, "retention")
    assert svc.get_atom(OP, atom_id).status == "expired"
    with pytest.raises(ConflictError):
        svc.rehearse_atom(OP, atom_id)


@pytest.mark.parametrize("derivation", ["inferred", "observed"])
def test_unsourced_inferred_or_observed_atom_refused(svc: MemoryService, home: Path,
                                                     derivation: str) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    before = RawStore(home).rows()
    with pytest.raises(InputError, match="Konshus provenance rule"):
        svc.add_atom(OP, _atom(subject="u1", text="likes tea", derivation=derivation,
                                extractor="m"))
    assert RawStore(home).rows() == before


def test_unknown_artifact_or_subject_refused(svc: MemoryService) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    with pytest.raises(NotFound, match="art_missing"):
        svc.add_atom(OP, _atom(subject="u1", text="t", derivation="inferred",
                                extractor="m", artifact_ids=["art_missing"]))
    with pytest.raises(NotFound, match="nobody"):
        svc.add_atom(OP, _atom(subject="nobody", text="t"))


def test_bulk_add_is_all_or_nothing(svc: MemoryService, home: Path) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    rows_before = RawStore(home).rows()
    keys_before = svc.app.datakeys.count()  # the keystore: no surface shows its rows
    with pytest.raises(NotFound):
        svc.add_atoms(OP, [AtomIn(subject="u1", text="ok"),
                           AtomIn(subject="u1", text="bad", derivation="observed",
                                  artifact_ids=["nope"])])
    assert RawStore(home).rows() == rows_before
    assert svc.app.datakeys.count() == keys_before
    ids = svc.add_atoms(OP, [AtomIn(subject="u1", text=f"fact {i}") for i in range(5)])
    assert len(ids.atom_ids) == 5 and svc.app.datakeys.count() == keys_before + 5


def test_clock_earlier_than_newest_event_refused(svc: MemoryService, home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_NOW", "2030-01-01T00:00:00Z")
    svc.register_subject(OP, SubjectIn(ref="u1"))
    before = RawStore(home).rows()
    monkeypatch.setenv("LEDGER_NOW", "2029-12-31T23:59:59Z")
    with pytest.raises(ClockError, match="earlier than the newest event"):
        svc.add_atom(OP, _atom(subject="u1", text="backdated"))
    assert RawStore(home).rows() == before
    monkeypatch.setenv("LEDGER_NOW", "2030-01-02")
    svc.add_atom(OP, _atom(subject="u1", text="later"))
    assert RawStore(home).rows()[-1][4].count(b"2030-01-02T00:00:00.000000Z") == 1


def test_revoked_writer_is_refused_and_nothing_written(svc: MemoryService,
                                                       home: Path) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    [writer] = [r.kid for r in svc.roster(OP) if r.name == "writer"]
    svc.revoke_key(OP, writer, reason="laptop lost")
    before = RawStore(home).rows()
    with pytest.raises(InputError, match="revoked"):
        svc.add_atom(OP, _atom(subject="u1", text="after revocation"))
    assert RawStore(home).rows() == before


def test_rotation_keeps_history_verifiable(home: Path) -> None:
    assert run_cli("--home", str(home), "subject", "add", "u1").code == 0
    r = run_cli("--home", str(home), "keys", "rotate", "writer", "--json")
    assert r.code == 0, r.err
    assert run_cli("--home", str(home), "atom", "add", "--subject", "u1", "--text", "t").code == 0
    v = run_cli("--home", str(home), "verify", "--json")
    assert v.code == 0, v.err
    listing = run_cli("--home", str(home), "keys", "list", "--json").out
    assert '"revoked_from": null' in listing and "REVOKED" not in listing


def test_duplicate_subject_and_ref_conflict(svc: MemoryService) -> None:
    svc.register_subject(OP, SubjectIn(ref="u1"))
    with pytest.raises(ConflictError):
        svc.register_subject(OP, SubjectIn(ref="u1"))
    svc.add_atom(OP, _atom(subject="u1", text="a", ref="atom_9"))
    with pytest.raises(ConflictError, match="atom_9"):
        svc.add_atom(OP, _atom(subject="u1", text="b", ref="atom_9"))


def test_import_records_is_atomic_and_idempotent(app: LedgerApp) -> None:
    subjects = [{"ref": "user_9f4e", "display_name": "J. Miller"}]
    artifacts = [{"subject": "user_9f4e", "ref": "art_101", "kind": "chat", "body": "b"}]
    atoms = [{"subject": "user_9f4e", "ref": "atom_001", "text": "t", "derivation": "inferred",
              "artifact_ids": ["art_101"], "extractor": "m"},
             {"subject": "user_9f4e", "ref": "atom_002", "text": "u"}]
    rows = RawStore(app.config.home).rows()
    with pytest.raises(NotFound):  # one bad atom: nothing at all is written
        app.import_records(subjects, artifacts,
                           [*atoms, {"subject": "user_9f4e", "text": "v", "derivation": "observed",
                                     "artifact_ids": ["art_missing"]}])
    assert RawStore(app.config.home).rows() == rows
    first = app.import_records(subjects, artifacts, atoms)
    assert first["created"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    again = app.import_records(subjects, artifacts, atoms)
    assert again["created"] == {"subjects": 0, "artifacts": 0, "atoms": 0}
    assert again["skipped"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    assert app.reader.get_atom("atom_001").artifact_ids == [first["ids"]["artifacts"]["art_101"]]
