"""The bulk append path (ADR 0008) writes the same events as the aggregate path.

``add_atoms`` builds ``Atom.Created`` events without aggregates and commits them as they
are; commands that need aggregates (correction, import, a policy in force) build the
aggregate from the same event. Both must give the same envelopes, decrypted fields,
topics and versions, and a log that verifies with the transparency tree intact.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ledger import envelope
from ledger.application import LedgerApp
from ledger.domain import Atom
from ledger.errors import InputError
from ledger.inputs import AtomInput, parse

from .conftest import run_cli

ATOMS: list[dict[str, Any]] = [
    {"subject": "u1", "text": "Plain fact."},
    {"subject": "u1", "kind": "preference", "text": "Likes tea, not coffee \u2615.",
     "confidence": 1.0, "salience": 0.25, "emotional_valence": -0.5, "tags": ["drinks", "\u00e9"],
     "gist": "tea", "details": [{"content": "said at breakfast", "brightness": 0.4}],
     "sensitivity": "public", "privacy_class": "guest-pii", "consent_basis": "service-delivery",
     "session_id": "sess:7", "valid_from": "2026-01-01T00:00:00Z", "min_sources": 2,
     "decay_profile": {"halfLifeDays": 3}, "extensions": {"x-app": {"n": [1, 2.5, None]}},
     "human_reviewed": True, "extractor": "model-x"},
    {"subject": "u1", "text": "Cited fact.", "derivation": "observed", "artifact_ids": ["a1"]},
]
_IDS = ("originator_id", "timestamp", "subject_id")


def _setup(app: LedgerApp) -> None:
    app.register_subject({"ref": "u1", "display_name": "U. One"})
    app.capture_artifact({"subject": "u1", "ref": "a1", "kind": "chat", "body": "transcript"})


def _aggregate_path(app: LedgerApp, items: list[dict[str, Any]]) -> list[uuid.UUID]:
    """What add_atoms and commit did before ADR 0008: aggregates, data keys, eventsourcing's
    ``save``, then the tree extended from the saved rows."""
    inputs = [parse(AtomInput, d) for d in items]
    with app.writing(app.signer(None)) as at:
        atoms = [app._new_atom(inp, at) for inp in inputs]
        app.datakeys.create_many([str(a.id) for a in atoms], at)
        recordings = app.save(*atoms)
        app.tlog.append_recorded([r.notification for r in recordings], app.recorder)
    return [a.id for a in atoms]


def _written(app: LedgerApp, atom_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    """Envelope shape and decrypted event of each atom's events, ids left out."""
    out = []
    for aid in atom_ids:
        for stored in app.recorder.select_events(aid):
            env = envelope.open_state(stored.state).envelope
            payload = dict(env["payload"])
            sealed = payload.pop("sealed", None)
            event = vars(app.mapper.to_domain_event(stored))
            out.append({
                "topic": stored.topic, "version": stored.originator_version,
                "envelope_keys": sorted(env), "env_topic": env["topic"],
                "env_version": env["version"], "payload_keys": sorted(env["payload"]),
                "payload": {k: v for k, v in payload.items() if k not in _IDS},
                "sealed_keys": sorted(sealed) if sealed else None,
                "sealed_key_is_own": sealed["key_id"] == str(aid) if sealed else None,
                "event": {k: v for k, v in event.items() if k not in _IDS},
            })
    return out


def test_built_event_is_the_event_atom_create_builds(app: LedgerApp) -> None:
    _setup(app)
    with app.writing(app.signer(None)) as at:
        for item in ATOMS:
            event = app._atom_created(parse(AtomInput, item), at)
            fields = {k: v for k, v in vars(event).items()
                      if k not in ("originator_id", "originator_version", "timestamp",
                                   "originator_topic")}
            atom = Atom._create(Atom.Created, id=event.originator_id, timestamp=at, **fields)
            assert vars(atom.pending_events[0]) == vars(event)
            # exactly the dataclass's fields: its __init__ accepts them and sets nothing else
            assert vars(Atom.Created(**vars(event))) == vars(event)
            assert type(event) is Atom.Created


def test_bulk_and_aggregate_paths_write_the_same_events(home: Path, app: LedgerApp) -> None:
    _setup(app)
    bulk = app.add_atoms(ATOMS)
    legacy = _aggregate_path(app, ATOMS)
    assert _written(app, bulk) == _written(app, legacy)
    for aid, item in zip(bulk, ATOMS, strict=True):
        atom = app.reader.get_atom(aid)
        assert atom.version == 1 and atom.text == item["text"]
    v = run_cli("--home", str(home), "verify", "--json")
    assert v.code == 0, v.err
    report = json.loads(v.out)
    assert report["ok"] and report["events"] == report["head_seq"]


def test_bulk_append_extends_the_tree_to_every_event(home: Path, app: LedgerApp) -> None:
    _setup(app)
    for start in range(0, 30, 10):
        app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(start, start + 10)])
    head_seq, _ = app.reader.head()
    assert app.tlog.store.size() == head_seq
    cp = app.checkpoint()
    assert cp.size == head_seq
    assert run_cli("--home", str(home), "verify").code == 0


def test_bulk_append_with_duplicate_refs_writes_nothing(app: LedgerApp) -> None:
    _setup(app)
    before = app.reader.head()
    with pytest.raises(InputError, match="same ref"):
        app.add_atoms([{"subject": "u1", "ref": "r1", "text": "a"},
                       {"subject": "u1", "ref": "r1", "text": "b"}])
    assert app.reader.head() == before
    assert app.tlog.store.size() == before[0]


def test_invalid_item_in_a_batch_is_named_like_a_single_parse(app: LedgerApp) -> None:
    _setup(app)
    before = app.reader.head()
    bad = {"subject": "u1", "text": "", "salience": 2}
    with pytest.raises(InputError) as single:
        parse(AtomInput, bad)
    with pytest.raises(InputError) as batch:
        app.add_atoms([{"subject": "u1", "text": "fine"}, bad])
    assert str(batch.value) == str(single.value)
    assert app.reader.head() == before


def test_stored_tree_reads_many_nodes_across_levels(app: LedgerApp) -> None:
    """get_many splits large reads into statements of bounded size, on both backends."""
    from ledger.merkle import MemoryTreeStore, MerkleTree

    store = app.tlog.store
    size = store.size()
    memory = MemoryTreeStore()
    MerkleTree(memory).extend(store.get_many([(0, i) for i in range(size)]))
    hashes = [bytes([i % 256, i // 256]) * 16 for i in range(1300)]
    store.leaf_notifications = {}
    MerkleTree(store).extend(hashes)
    MerkleTree(memory).extend(hashes)
    keys = [(level, i) for level in range(4) for i in range((size + 1300) >> level)]
    keys.reverse()
    assert len(keys) > 2000
    assert store.get_many(keys) == memory.get_many(keys)
    with pytest.raises(KeyError, match="level 0 index 999999"):
        store.get_many([(0, 1), (0, 999999)])


def test_the_atom_fields_are_declared_once() -> None:
    """ADR 0038: ``AtomFields`` is the one list; the event's dataclass fields keep the
    order they had (base fields, the atom's, ``source_data``), and the derived lists
    follow it."""
    import dataclasses

    from ledger.domain import ATOM_FIELDS, ATOM_PERSONAL, AtomFields
    from portability.record import _OPTIONAL_ATOM_FIELDS
    from projections.atoms import _AS_IS

    assert ATOM_FIELDS == tuple(AtomFields.__annotations__)
    assert [f.name for f in dataclasses.fields(Atom.Created)] == [
        "originator_id", "originator_version", "timestamp", "originator_topic",
        *ATOM_FIELDS, "source_data"]
    assert Atom.Created.PERSONAL == Atom.PERSONAL_STATE == ATOM_PERSONAL
    assert set(_OPTIONAL_ATOM_FIELDS) | set(_AS_IS) <= set(ATOM_FIELDS)
    assert "text" not in _AS_IS and "subject_id" in _AS_IS
