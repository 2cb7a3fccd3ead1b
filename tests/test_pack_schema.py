"""The event-envelope and evidence-pack-predicate JSON Schemas (schemas/*.v1.json), checked
against what the ledger really writes, and verify-pack's step 1.1."""

from __future__ import annotations

import base64
import json
import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from governance import pack as pack_module
from governance import pack_verify
from governance.dsse import sign_envelope
from governance.erasure import delete_artifact, redact_user
from governance.pack import build_pack
from governance.pack_layout import PREDICATE_SCHEMA, PackInvalid
from governance.pack_verify import verify_pack
from keys import roster
from ledger import envelope
from ledger.application import LedgerApp
from ledger.domain import event_classes
from projections.service import Projections

from .conftest import run_cli
from .test_schemas import POLICY, mutate

ENVELOPE_SCHEMA = "event-envelope.v1.json"
ROOT = Path(__file__).resolve().parents[1]

# docs/spec/event-envelope.md §1 example (a subject.registered event), verbatim.
SPEC_ENVELOPE: dict[str, Any] = {
    "kid": "ed25519:57d6214dba0b88323f4b2dcc1e7462aa",
    "ledger": "139c78a8-e0f9-41b2-afbf-2d735d816ec4",
    "originator_id": "30f75c7d-8c7b-5f60-acea-a1fec342a0ae",
    "payload": {
        "originator_topic": "memory-ledger:subject", "ref": "user_9f4e",
        "sealed": {"alg": "A256GCM",
                   "ct": "H6k2j+bZI1gBaOtk6saCmPxmM4TiEnlgZr7dAARQd4GnMoVHMH48VTXqiok=",
                   "key_id": "30f75c7d-8c7b-5f60-acea-a1fec342a0ae",
                   "nonce": "LbMJHbMFK2SkbZxv"}},
    "seq": 5, "timestamp": "2026-11-29T21:28:28.462087Z",
    "topic": "memory-ledger:subject.registered.v1", "v": 1, "version": 1,
}

# A predicate as build_pack wrote it (redact-user of one subject, trimmed to a few events).
PREDICATE: dict[str, Any] = {
    "batch": {"approved_by": "operator", "id": "fbddb063-85cb-4f63-a895-f78d84372fed",
              "mode": "hard", "outcome": "completed", "reason": "GDPR Art. 17"},
    "checkpoints": {
        "after": {"root": "349x3edL6dRjrDA/SEChBPoMA3U1RT7bfUbU7jAgymk=", "size": 29},
        "before": {"root": "AM7LOUIMBeMdoR4UxBut9QwozK+Dsc37a4sjgB2X544=", "size": 12}},
    "events": [
        {"event_id": "6fe0a351-d269-5d3a-bd87-68971f96d51b/1", "role": "roster", "seq": 1,
         "signer": "ed25519:5a539a400bf52eee8b0cd77721223f8d",
         "timestamp": "2026-11-30T00:24:34.704645Z",
         "topic": "memory-ledger:roster.started.v1"},
        {"event_id": "fbddb063-85cb-4f63-a895-f78d84372fed/1", "role": "batch", "seq": 13,
         "signer": "ed25519:7a72787c64a7c04a4a5b6b8f87752a5e",
         "timestamp": "2026-11-30T00:24:34.791003Z",
         "topic": "memory-ledger:batch.opened.v1"}],
    "generated_at": "2026-11-30T00:24:34.895033+00:00",
    "ledger": {"id": "8c667e7c-2b39-4cb5-b70a-c7cfc40bbb6b",
               "origin": "memory-ledger/8c667e7c-2b39-4cb5-b70a-c7cfc40bbb6b"},
    "reach": {
        "checkpoint_before": 12, "flagged_for_review": [],
        "raw_scan": {"checked_at": "2026-11-30T00:24:34.861881Z", "files": 17, "hits": [],
                     "needles": 5},
        "routes": [{"checked_at": "2026-11-30T00:24:34.861946Z", "items": 6,
                    "reach": "not-reachable", "route": "atom-store"}]},
    "request": {
        "ack_due": "2026-12-01T00:24:34.780224Z",
        "acknowledged_at": "2026-11-30T00:24:34.780224+00:00",
        "complete_due": "2026-12-30T00:24:34.780224Z",
        "completed_at": "2026-11-30T00:24:34.866212+00:00",
        "id": "b8ae3691-f8eb-4038-918d-c34d285a4d5f", "legal_basis": "Art. 17(1)(b)",
        "operator": "operator", "reason": "GDPR Art. 17",
        "received_at": "2026-11-30T00:24:34.780224+00:00", "sessions": ["s1"],
        "subject_id": "3532bdef-a084-53e1-a488-bb5337209fe9", "subject_ref": "u1"},
    "targets": {"artifacts": ["1ee2b4c3-26cf-56ac-930a-e9f3bc06d193"],
                "atoms": ["1445525c-a5da-4d87-947a-4a183e372311"],
                "subjects": ["3532bdef-a084-53e1-a488-bb5337209fe9"]},
}


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(files("schemas").joinpath(name).read_text("utf-8"))
    return schema


def errors(name: str, instance: Any) -> list[tuple[str, str]]:
    v = Draft202012Validator(load(name), format_checker=Draft202012Validator.FORMAT_CHECKER)
    return sorted((e.validator, e.json_path) for e in v.iter_errors(instance))


# --- the schemas themselves -------------------------------------------------------------


@pytest.mark.parametrize(("name", "schema_id"), [
    (ENVELOPE_SCHEMA, "urn:memory-ledger:schema:event-envelope:v1"),
    (PREDICATE_SCHEMA, "urn:memory-ledger:schema:evidence-pack-predicate:v1"),
])
def test_schema_is_valid_draft_2020_12_and_ships_in_the_wheel(name: str, schema_id: str) -> None:
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == schema_id
    Draft202012Validator.check_schema(schema)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert "schemas" in pyproject["tool"]["setuptools"]["packages"]
    assert "*.json" in pyproject["tool"]["setuptools"]["package-data"]["schemas"]


def test_envelope_topics_are_the_released_topics() -> None:
    topics = json.loads((ROOT / "tests" / "vectors" / "topics.json").read_text("utf-8"))
    assert load(ENVELOPE_SCHEMA)["properties"]["topic"]["enum"] == sorted(topics)


def test_envelope_personal_fields_are_the_codes() -> None:
    """The schema forbids in clear exactly the fields the mapper seals."""
    in_schema = {}
    for rule in load(ENVELOPE_SCHEMA)["allOf"]:
        topic = rule["if"]["properties"].get("topic", {})
        if "const" in topic:
            names = rule["then"]["properties"]["payload"]["propertyNames"]["not"]["enum"]
            in_schema[topic["const"]] = sorted(names)
    classes: list[Any] = [*event_classes(), *(v for v in vars(roster.KeyRoster).values()
                                              if isinstance(v, type) and getattr(v, "TOPIC", None))]
    in_code = {c.TOPIC: sorted(c.PERSONAL) for c in classes if getattr(c, "PERSONAL", ())}
    assert in_code and in_schema == in_code


# --- event envelope ---------------------------------------------------------------------


def _whole_life(app: LedgerApp, proj: Projections, tmp_path: Path) -> Path:
    """Subject, artifacts, atoms, every ordinary change, a right-to-be-forgotten request
    with identifiers, an artifact deletion, and the Evidence Pack of the erasure."""
    app.set_policy(POLICY)
    app.register_subject({"ref": "u1", "display_name": "Ann Example"})
    app.register_subject({"ref": "u2"})
    app.capture_artifact({"subject": "u1", "ref": "a1", "kind": "chat", "title": "t",
                          "body": "chat about tea"})
    app.capture_artifact({"subject": "u2", "ref": "a2", "kind": "chat", "body": "b"})
    atoms = [str(a) for a in app.add_atoms(
        [{"subject": "u1", "text": f"fact {i}", "gist": "g", "tags": ["x"],
          "details": [{"content": "c", "brightness": 0.5}], "session_id": "s1"}
         for i in range(3)]
        + [{"subject": "u1", "text": "from a1", "derivation": "observed",
            "artifact_ids": ["a1"]}])]
    other = str(app.add_atom({"subject": "u2", "text": "from a2", "derivation": "observed",
                              "artifact_ids": ["a2"]}))
    app.rehearse_atom(atoms[0])
    app.correct_atom(atoms[1], {"text": "fact 1, corrected"})
    app.expire_atom(atoms[2], reason="stale")
    app.redact(atoms[0], "soft", "check", actor="operator")
    app.unredact(atoms[0], "checked", actor="operator")
    proj.catch_up()
    delete_artifact(app, proj, "a2", reason="user deleted the chat", operator="operator")
    assert app.reader.get_atom(other).status == "deleted"
    res = redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator",
                      identifiers=["ann@example.invalid"], sessions=["s1"],
                      legal_basis="Art. 17(1)(b)")
    return build_pack(app, res["batch_id"], tmp_path / "pack")


@pytest.fixture
def proj(app: LedgerApp):  # type: ignore[no-untyped-def]
    p = Projections(app)
    yield p
    p.close()


def test_every_stored_envelope_validates(app: LedgerApp, proj: Projections,
                                         tmp_path: Path) -> None:
    pack = _whole_life(app, proj, tmp_path)
    rows = app.reader.notifications(1, 10**9)
    seen = set()
    for n in rows:
        env = envelope.open_state(n.state).envelope
        assert errors(ENVELOPE_SCHEMA, env) == [], (n.id, env["topic"])
        seen.add(env["topic"])
    # the run covers the personal-field topics (sealed) and a broad share of the rest
    assert {"memory-ledger:subject.registered.v1", "memory-ledger:artifact.captured.v1",
            "memory-ledger:atom.created.v1", "memory-ledger:request.received.v1",
            "memory-ledger:request.data-key-destroyed.v1", "memory-ledger:atom.superseded.v1",
            "memory-ledger:atom.unredacted.v1", "memory-ledger:policy.set.v1",
            "memory-ledger:batch.executed.v1"} <= seen
    assert len(seen) >= 20
    received = [envelope.open_state(n.state).envelope for n in rows
                if n.topic == "memory-ledger:request.received.v1"]
    assert "sealed" in received[0]["payload"]  # the identifiers are sealed
    # and the events shipped in the pack are the same envelopes
    for line in (pack / "events.jsonl").read_text().splitlines():
        state = base64.b64decode(json.loads(line)["state"])
        assert errors(ENVELOPE_SCHEMA, envelope.open_state(state).envelope) == []


def test_spec_example_envelope_validates() -> None:
    assert errors(ENVELOPE_SCHEMA, SPEC_ENVELOPE) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("payload.display_name", "Ann", [("not", "$.payload")]),  # personal field in clear
        ("extra", 1, [("additionalProperties", "$")]),
        ("kid", ..., [("required", "$")]),
        ("kid", "ed25519:57D6214DBA0B88323F4B2DCC1E7462AA", [("pattern", "$.kid")]),
        ("ledger", "139C78A8-E0F9-41B2-AFBF-2D735D816EC4", [("pattern", "$.ledger")]),
        ("originator_id", "30f75c7d8c7b5f60acea a1fec342a0ae", [("pattern", "$.originator_id")]),
        ("v", 2, [("const", "$.v")]),
        ("seq", 0, [("minimum", "$.seq")]),
        ("seq", "5", [("type", "$.seq")]),
        ("version", 0, [("minimum", "$.version"), ("not", "$.payload")]),  # + originator_topic
        ("timestamp", "2026-11-29T21:28:28.462087+00:00", [("pattern", "$.timestamp")]),
        ("timestamp", "2026-13-29T21:28:28.462087Z", [("format", "$.timestamp")]),
        ("topic", "memory-ledger:subject.renamed.v1",
         [("enum", "$.topic"), ("not", "$.payload")]),  # + sealed on a topic without
        ("payload.ref", None, [("not", "$.payload.ref")]),  # nulls are omitted
        ("payload.content_erased", True, [("not", "$.payload")]),
        ("payload.timestamp", "2026-11-29T21:28:28Z", [("not", "$.payload")]),
        ("payload.originator_topic", ..., [("required", "$.payload")]),
        ("payload.class_version", 1, [("minimum", "$.payload.class_version")]),
        ("payload.sealed.alg", "A128GCM", [("const", "$.payload.sealed.alg")]),
        ("payload.sealed.nonce", "LbMJHbMFK2Skb", [("pattern", "$.payload.sealed.nonce")]),
        ("payload.sealed.ct", "not base64!", [("minLength", "$.payload.sealed.ct"),
                                              ("pattern", "$.payload.sealed.ct")]),
        ("payload.sealed.plaintext", "Ann", [("additionalProperties", "$.payload.sealed")]),
        ("payload", [], [("type", "$.payload")]),
    ],
)
def test_envelope_schema_rejects(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert errors(ENVELOPE_SCHEMA, mutate(SPEC_ENVELOPE, path, value)) == expected


def test_envelope_originator_topic_only_on_version_1_and_sealed_only_on_personal_topics(
        ) -> None:
    later = mutate(SPEC_ENVELOPE, "version", 2)
    assert errors(ENVELOPE_SCHEMA, later) == [("not", "$.payload")]
    ack = {**SPEC_ENVELOPE, "topic": "memory-ledger:request.acknowledged.v1", "version": 2,
           "payload": {"sealed": SPEC_ENVELOPE["payload"]["sealed"]}}
    assert errors(ENVELOPE_SCHEMA, ack) == [("not", "$.payload")]
    created = {**SPEC_ENVELOPE, "topic": "memory-ledger:atom.created.v1",
               "payload": {"originator_topic": "memory-ledger:atom", "text": "in clear"}}
    assert errors(ENVELOPE_SCHEMA, created) == [("not", "$.payload")]


# --- evidence-pack predicate ------------------------------------------------------------


def _statement(pack: Path) -> dict[str, Any]:
    dsse = json.loads((pack / "statement.dsse.json").read_text())
    statement: dict[str, Any] = json.loads(base64.b64decode(dsse["payload"]))
    return statement


def test_example_predicate_validates() -> None:
    assert errors(PREDICATE_SCHEMA, PREDICATE) == []


def test_built_predicates_validate(app: LedgerApp, proj: Projections, tmp_path: Path) -> None:
    pack = _whole_life(app, proj, tmp_path)
    predicate = _statement(pack)["predicate"]
    assert errors(PREDICATE_SCHEMA, predicate) == []
    assert predicate["request"]["legal_basis"] == "Art. 17(1)(b)"
    # the artifact deletion's batch has no request: its predicate says null
    app.capture_artifact({"subject": "u2", "ref": "a3", "kind": "chat", "body": "b3"})
    res = delete_artifact(app, proj, "a3", reason="user deleted the chat", operator="operator")
    other = build_pack(app, res["batch_id"], tmp_path / "other")
    predicate = _statement(other)["predicate"]
    assert predicate["request"] is None and predicate["batch"]["mode"] == "delete"
    assert errors(PREDICATE_SCHEMA, predicate) == []
    assert verify_pack(other, app.root_public_key).ok


def test_raw_scan_may_carry_repaired_bytes_and_engine() -> None:
    scan = {**PREDICATE["reach"]["raw_scan"], "bytes": 123456, "engine": "aho-corasick",
            "repaired": {"action": "vacuum", "files": ["projections.db"], "seconds": 0.0312}}
    assert errors(PREDICATE_SCHEMA, mutate(PREDICATE, "reach.raw_scan", scan)) == []
    bad = {**scan, "repaired": {"action": "vacuum", "files": ["p.db"], "seconds": 1,
                                "needle": "x"}}
    assert errors(PREDICATE_SCHEMA, mutate(PREDICATE, "reach.raw_scan", bad)) == [
        ("additionalProperties", "$.reach.raw_scan.repaired")]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # no place for content, anywhere
        ("text", "Allergic to penicillin", [("additionalProperties", "$")]),
        ("batch.gist", "allergy", [("additionalProperties", "$.batch")]),
        ("request.identifiers", ["ann@example.invalid"], [("additionalProperties", "$.request")]),
        ("targets.texts", ["x"], [("additionalProperties", "$.targets")]),
        ("events.0.payload", {"text": "x"}, [("additionalProperties", "$.events[0]")]),
        ("reach.routes.0.sample", "x", [("additionalProperties", "$.reach.routes[0]")]),
        ("reach.raw_scan.needle_values", ["x"], [("additionalProperties", "$.reach.raw_scan")]),
        ("reach.raw_scan.hits", [{"file": "p.db", "count": 1, "excerpt": "x"}],
         [("additionalProperties", "$.reach.raw_scan.hits[0]")]),
        ("x-note", "x", [("additionalProperties", "$")]),
        # required keys
        ("generated_at", ..., [("required", "$")]),
        ("reach", ..., [("required", "$")]),
        ("request.completed_at", ..., [("required", "$.request")]),
        ("events.1.signer", ..., [("required", "$.events[1]")]),
        ("reach.checkpoint_before", ..., [("required", "$.reach")]),
        ("targets.subjects", ..., [("required", "$.targets")]),
        # types and formats
        ("request", "none", [("type", "$.request")]),
        ("batch.mode", "soft", [("enum", "$.batch.mode")]),
        ("batch.outcome", "failed", [("enum", "$.batch.outcome")]),
        ("batch.id", "FBDDB063-85CB-4F63-A895-F78D84372FED", [("pattern", "$.batch.id")]),
        ("targets.atoms", ["atom_001"], [("pattern", "$.targets.atoms[0]")]),
        ("targets.atoms", ["1445525c-a5da-4d87-947a-4a183e372311"] * 2,
         [("uniqueItems", "$.targets.atoms")]),
        ("events", [], [("minItems", "$.events")]),
        ("events.0.event_id", "6fe0a351-d269-5d3a-bd87-68971f96d51b/0",
         [("pattern", "$.events[0].event_id")]),
        ("events.0.seq", 0, [("minimum", "$.events[0].seq")]),
        ("events.0.signer", "ed25519:5a53", [("pattern", "$.events[0].signer")]),
        ("events.0.timestamp", "2026-11-30 00:24:34", [("format", "$.events[0].timestamp"),
                                                       ("pattern", "$.events[0].timestamp")]),
        ("events.0.role", "writer", [("enum", "$.events[0].role")]),
        ("events.0.topic", "roster.started", [("pattern", "$.events[0].topic")]),
        ("checkpoints.after.root", "349x3edL6dRjrDA", [("pattern", "$.checkpoints.after.root")]),
        ("checkpoints.before.size", -1, [("minimum", "$.checkpoints.before.size")]),
        ("reach.routes.0.reach", "maybe", [("enum", "$.reach.routes[0].reach")]),
        ("reach.raw_scan.files", 1.5, [("type", "$.reach.raw_scan.files")]),
        ("request.ack_due", "tomorrow", [("format", "$.request.ack_due"),
                                         ("pattern", "$.request.ack_due")]),
        ("generated_at", "2026-11-30", [("format", "$.generated_at")]),
        ("ledger.origin", "two\nlines", [("pattern", "$.ledger.origin")]),
    ],
)
def test_predicate_schema_rejects(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert errors(PREDICATE_SCHEMA, mutate(PREDICATE, path, value)) == expected


# --- verify-pack step 1.1 ---------------------------------------------------------------


def _erased_pack(app: LedgerApp, proj: Projections, out: Path) -> Path:
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(3)])
    res = redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator")
    return build_pack(app, res["batch_id"], out)


def _resign(app: LedgerApp, pack: Path, statement: dict[str, Any]) -> None:
    """Write ``statement`` as the pack's statement, signed by the operator key as
    build_pack signs it: the signature is valid, only the schema can object."""
    dsse = sign_envelope(envelope.canonical(statement), app.signer("operator"))
    (pack / "statement.dsse.json").write_text(json.dumps(dsse, indent=2) + "\n")


@pytest.mark.parametrize(("path", "value", "why"), [
    ("text", "Allergic to penicillin", "'text' was unexpected"),
    ("batch.text", "Allergic to penicillin", "'text' was unexpected"),
    ("generated_at", ..., "'generated_at' is a required property"),
    ("request.received_at", ..., "'received_at' is a required property"),
])
def test_resigned_pack_with_altered_predicate_fails_at_step_1_1(
        app: LedgerApp, proj: Projections, tmp_path: Path, path: str, value: Any, why: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pack = _erased_pack(app, proj, tmp_path / "pack")
    statement = _statement(pack)
    _resign(app, pack, mutate(statement, "predicate", mutate(statement["predicate"], path,
                                                             value)))
    with pytest.raises(PackInvalid) as err:
        verify_pack(pack, app.root_public_key)
    assert err.value.step == "1.1" and why in str(err.value)
    r = run_cli("verify-pack", str(pack), "--json")
    assert r.code == 1 and r.err.startswith("FAIL: step 1.1: the predicate does not match")
    assert json.loads(r.out)["step"] == "1.1"
    if path == "text":  # the signature and every other step accept it: only 1.1 objects
        monkeypatch.setattr(pack_verify, "predicate_problems", lambda _p: [])
        assert verify_pack(pack, app.root_public_key).ok


def test_the_untouched_pack_passes_step_1_1(app: LedgerApp, proj: Projections,
                                            tmp_path: Path) -> None:
    pack = _erased_pack(app, proj, tmp_path / "pack")
    _resign(app, pack, _statement(pack))  # re-signing alone changes nothing
    assert verify_pack(pack, app.root_public_key).ok


def test_build_pack_refuses_a_predicate_outside_the_schema(
        app: LedgerApp, proj: Projections, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = pack_module._predicate

    def leaky(*args: Any) -> dict[str, Any]:
        return {**real(*args), "text": "Allergic to penicillin"}

    monkeypatch.setattr(pack_module, "_predicate", leaky)
    with pytest.raises(RuntimeError, match="does not match schemas/evidence-pack-predicate"):
        _erased_pack(app, proj, tmp_path / "pack")
    assert not (tmp_path / "pack").exists()
