"""JSON Schemas shipped in schemas/: Konshus v0.1, Persona memory atom, memoryPolicy."""

from __future__ import annotations

import copy
import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator, FormatChecker

from projections.decay import DecayProfile

VECTORS = Path(__file__).resolve().parent / "vectors"  # nothing is read outside the repo

# Konshus v0.1 worked example, verbatim from the seed.
KONSHUS_EXAMPLE: dict[str, Any] = {
    "export_version": "0.1.0",
    "exported_at": "2026-07-13T14:22:00Z",
    "source_provider": "konshus",
    "subject": {"subject_id": "user_9f4e...", "display_name": "J. Miller", "locale": "en-US"},
    "atoms": [
        {
            "atom_id": "atom_001",
            "kind": "preference",
            "text": "Prefers direct, unhedged feedback in writing; softens things in person.",
            "confidence": 0.87,
            "sensitivity": "public",
            "valid_from": "2025-11-04T00:00:00Z",
            "created_at": "2026-01-12T18:44:00Z",
            "provenance": {
                "derivation": "inferred",
                "artifact_ids": ["art_101", "art_144"],
                "extractor": "claude-opus-4",
                "human_reviewed": True,
            },
        },
        {
            "atom_id": "atom_002",
            "kind": "relationship",
            "text": "Co-founder of a health-tech startup; primary collaborator is R. Kim.",
            "confidence": 0.98,
            "sensitivity": "public",
            "created_at": "2025-09-01T12:00:00Z",
            "provenance": {"derivation": "stated"},
        },
    ],
    "artifacts": [
        {
            "artifact_id": "art_101",
            "kind": "chat",
            "title": "Q4 board prep",
            "body": "…the whole conversation transcript, unchanged…",
            "captured_at": "2025-11-04T20:11:00Z",
            "source": "chatgpt-export",
            "atom_ids": ["atom_001"],
            "private": False,
        }
    ],
}

# Persona Schema v1.0 §2 example atom, verbatim.
PERSONA_ATOM: dict[str, Any] = {
    "memId": "mem:7f3a8b2c0d3e",
    "kind": "episodic",
    "createdAt": "2026-04-22T14:18:42Z",
    "lastRehearsedAt": "2026-04-29T10:02:11Z",
    "rehearsalCount": 3,
    "gist": (
        "A returning guest recognized me by name and thanked me for last week's "
        "restaurant suggestion."
    ),
    "details": [
        {"content": "she was wearing a blue scarf", "brightness": 0.40},
        {"content": "it was raining outside", "brightness": 0.20},
        {"content": "she said the seafood was excellent", "brightness": 0.85},
    ],
    "salience": 0.74,
    "emotionalValence": 0.62,
    "decayProfile": {
        "function": "ebbinghaus",
        "halfLifeDays": 14,
        "rehearsalBoost": 1.4,
        "valenceProtection": 0.3,
    },
    "privacyClass": "guest-pii",
    "consentBasis": "service-delivery",
    "redactionStatus": "active",
    "sessionId": "sess:example",
    "tags": ["returning-guest", "positive-feedback", "restaurant-recommendation"],
}

# Persona Schema v1.0 §3 full decayProfile.
SEED_DECAY_PROFILE: dict[str, Any] = {
    "function": "ebbinghaus",
    "halfLifeDays": 14,
    "rehearsalBoost": 1.4,
    "valenceProtection": 0.3,
    "minimumSalience": 0.05,
    "detailDecayRate": 1.5,
}

# Persona Schema v1.0 §7, verbatim (the schema describes the value of "memoryPolicy").
MEMORY_POLICY_DOC: dict[str, Any] = {
    "memoryPolicy": {
        "enabled": True,
        "scope": "per-session",
        "maxAtoms": 200,
        "maxMemoriesPerTurn": 5,
        "rehearsalCooldownTurns": 4,
        "retrievalThreshold": 0.15,
        "confabulationPolicy": "strict",
        "creationPolicy": "automatic",
        "minSalienceForCreation": 0.25,
        "salienceClassifier": "heuristic-v1",
        "retentionPolicy": {
            "defaultRetentionDays": 7,
            "perPrivacyClass": {
                "non-pii": 7,
                "aggregate": 7,
                "guest-pii": 90,
                "staff-pii": 365,
                "sensitive-pii": 30,
                "commercial-confidential": 1095,
            },
        },
        "rightToBeForgottenSla": {
            "acknowledgmentHours": 24,
            "completionHours": 720,
            "tombstoneRetentionDays": 2190,
        },
        "auditPolicy": {
            "logCreation": True,
            "logRetrieval": True,
            "logRedaction": True,
            "logRehearsal": True,
        },
    }
}
POLICY: dict[str, Any] = MEMORY_POLICY_DOC["memoryPolicy"]

SCHEMA_FILES = ["konshus-v0.1.json", "persona-memory-atom.json", "memory-policy.json"]


def load(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(files("schemas").joinpath(name).read_text("utf-8"))
    return schema


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(load(name), format_checker=Draft202012Validator.FORMAT_CHECKER)


def errors(name: str, instance: Any) -> list[tuple[str, str]]:
    """(failed keyword, JSON path of the instance) for each error, sorted."""
    return sorted((e.validator, e.json_path) for e in validator(name).iter_errors(instance))


def mutate(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Copy ``base`` with the dotted ``path`` set to ``value`` (``...`` deletes it)."""
    doc = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is ...:
        del node[leaf]
    elif isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return doc


# --- the schemas themselves -------------------------------------------------------------


@pytest.mark.parametrize("name", SCHEMA_FILES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    schema = load(name)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_date_time_format_is_really_checked() -> None:
    # jsonschema checks "date-time" only when rfc3339-validator is installed; without it
    # every bad-date test below would pass vacuously.
    assert "date-time" in FormatChecker().checkers
    assert not Draft202012Validator.FORMAT_CHECKER.conforms("2026-02-30T00:00:00Z", "date-time")


def test_konshus_schema_is_the_published_one() -> None:
    schema = load("konshus-v0.1.json")
    assert schema["$id"] == "https://konshus.ai/schemas/ai-memory-portability/v0.1.json"
    assert schema["version"] == "0.1.0"
    published = json.loads((VECTORS / "konshus-v0.1-published.json").read_text("utf-8"))
    assert schema == published


def test_privacy_class_enums_agree_across_schemas() -> None:
    atom_classes = load("persona-memory-atom.json")["properties"]["privacyClass"]["enum"]
    retention = load("memory-policy.json")["$defs"]["RetentionPolicy"]["properties"]
    assert set(retention["perPrivacyClass"]["properties"]) == set(atom_classes)
    assert set(POLICY["retentionPolicy"]["perPrivacyClass"]) == set(atom_classes)


# --- Konshus v0.1 -----------------------------------------------------------------------


def test_konshus_worked_example_validates() -> None:
    assert errors("konshus-v0.1.json", KONSHUS_EXAMPLE) == []


def test_konshus_provider_extension_keys_allowed() -> None:
    doc = mutate(KONSHUS_EXAMPLE, "x-provider", {"konshus": {"vault": "v1"}})
    assert errors("konshus-v0.1.json", doc) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("atoms.0.kind", "opinion", [("enum", "$.atoms[0].kind")]),
        ("atoms.0.sensitivity", "secret", [("enum", "$.atoms[0].sensitivity")]),
        ("artifacts.0.kind", "video", [("enum", "$.artifacts[0].kind")]),
        (
            "atoms.0.provenance.derivation",
            "guessed",
            [("enum", "$.atoms[0].provenance.derivation")],
        ),
        ("atoms.1.provenance", ..., [("required", "$.atoms[1]")]),
        ("atoms.0.provenance.derivation", ..., [("required", "$.atoms[0].provenance")]),
        ("subject.subject_id", ..., [("required", "$.subject")]),
        ("exported_at", ..., [("required", "$")]),
        ("atoms.0.text", "x" * 501, [("maxLength", "$.atoms[0].text")]),
        ("atoms.0.confidence", 1.5, [("maximum", "$.atoms[0].confidence")]),
        ("atoms.0.confidence", -0.1, [("minimum", "$.atoms[0].confidence")]),
        ("atoms.0.created_at", "2026-01-12 18:44", [("format", "$.atoms[0].created_at")]),
        ("atoms.0.valid_from", "2025-13-04T00:00:00Z", [("format", "$.atoms[0].valid_from")]),
        ("exported_at", "yesterday", [("format", "$.exported_at")]),
        ("artifacts.0.captured_at", "2025-11-04", [("format", "$.artifacts[0].captured_at")]),
        ("export_version", "0.2.0", [("const", "$.export_version")]),
        ("artifacts.0.private", "no", [("type", "$.artifacts[0].private")]),
    ],
)
def test_konshus_rejects(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert errors("konshus-v0.1.json", mutate(KONSHUS_EXAMPLE, path, value)) == expected


def test_konshus_text_limit_is_500_inclusive() -> None:
    assert errors("konshus-v0.1.json", mutate(KONSHUS_EXAMPLE, "atoms.0.text", "x" * 500)) == []


def test_konshus_valid_to_may_be_null() -> None:
    assert errors("konshus-v0.1.json", mutate(KONSHUS_EXAMPLE, "atoms.0.valid_to", None)) == []


# --- Persona memory atom ----------------------------------------------------------------


def test_persona_seed_atom_validates() -> None:
    assert errors("persona-memory-atom.json", PERSONA_ATOM) == []


def test_persona_full_decay_profile_validates_and_matches_decay_module() -> None:
    atom = mutate(PERSONA_ATOM, "decayProfile", SEED_DECAY_PROFILE)
    assert errors("persona-memory-atom.json", atom) == []
    # decay.py reads the same block, and its defaults are the §3 values
    assert DecayProfile.from_json(SEED_DECAY_PROFILE) == DecayProfile()
    assert DecayProfile.from_json(PERSONA_ATOM["decayProfile"]) == DecayProfile()
    atom = mutate(PERSONA_ATOM, "decayProfile", DecayProfile().to_json())
    assert errors("persona-memory-atom.json", atom) == []


@pytest.mark.parametrize(
    "minimal",
    [
        {
            "memId": "mem:1",
            "kind": "semantic",
            "createdAt": "2026-04-22T14:18:42+02:00",
            "gist": "Guests prefer the quiet wing.",
            "salience": 0.3,
            "privacyClass": "aggregate",
        },
        {
            "memId": "mem:0b6f2f0e-2c1c-4c53-9d39-0e6c1f9d3a10",
            "kind": "procedural",
            "createdAt": "2026-04-22T14:18:42Z",
            "lastRehearsedAt": None,
            "gist": "How to book the shuttle.",
            "salience": 0.5,
            "privacyClass": "non-pii",
            "consentBasis": "not-applicable",
            "x-memory-ledger": {"atomId": "anything"},
        },
    ],
)
def test_persona_minimal_atoms_validate(minimal: dict[str, Any]) -> None:
    assert errors("persona-memory-atom.json", minimal) == []


def test_persona_hard_redacted_tombstone_validates_without_content() -> None:
    tombstone = {k: v for k, v in PERSONA_ATOM.items() if k not in {"gist", "details", "tags"}} | {
        "redactionStatus": "hard-redacted"
    }
    assert errors("persona-memory-atom.json", tombstone) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("kind", "fact", [("enum", "$.kind")]),
        ("privacyClass", "pii", [("enum", "$.privacyClass")]),
        ("consentBasis", "implied", [("enum", "$.consentBasis")]),
        ("redactionStatus", "deleted", [("enum", "$.redactionStatus")]),
        ("memId", "7f3a8b2c0d3e", [("pattern", "$.memId")]),
        ("memId", "mem:", [("pattern", "$.memId")]),
        ("memId", ..., [("required", "$")]),
        ("privacyClass", ..., [("required", "$")]),
        ("gist", ..., [("required", "$")]),  # an active atom needs its gist
        ("gist", "", [("minLength", "$.gist")]),
        ("salience", 1.2, [("maximum", "$.salience")]),
        ("salience", -0.01, [("minimum", "$.salience")]),
        ("emotionalValence", -1.5, [("minimum", "$.emotionalValence")]),
        ("rehearsalCount", -1, [("minimum", "$.rehearsalCount")]),
        ("rehearsalCount", 2.5, [("type", "$.rehearsalCount")]),
        ("details.1.brightness", 1.01, [("maximum", "$.details[1].brightness")]),
        ("details.1.content", ..., [("required", "$.details[1]")]),
        ("details.1.extra", 1, [("additionalProperties", "$.details[1]")]),
        ("createdAt", "2026-04-22", [("format", "$.createdAt")]),
        ("lastRehearsedAt", "2026-04-29T25:02:11Z", [("format", "$.lastRehearsedAt")]),
        ("decayProfile.halfLifeDays", 0, [("exclusiveMinimum", "$.decayProfile.halfLifeDays")]),
        ("decayProfile.rehearsalBoost", 0.9, [("minimum", "$.decayProfile.rehearsalBoost")]),
        ("decayProfile.valenceProtection", 2, [("maximum", "$.decayProfile.valenceProtection")]),
        ("decayProfile.halflifeDays", 14, [("additionalProperties", "$.decayProfile")]),
        ("tags", ["a", "a"], [("uniqueItems", "$.tags")]),
        ("unknownField", True, [("additionalProperties", "$")]),
        ("provenance", {"derivation": "guessed"}, [("enum", "$.provenance.derivation")]),
    ],
)
def test_persona_atom_rejects(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert errors("persona-memory-atom.json", mutate(PERSONA_ATOM, path, value)) == expected


def test_persona_hard_redacted_atom_must_not_keep_content() -> None:
    atom = mutate(PERSONA_ATOM, "redactionStatus", "hard-redacted")  # gist/details/tags kept
    assert errors("persona-memory-atom.json", atom) == [("not", "$")]


# --- memoryPolicy -----------------------------------------------------------------------


def test_seed_memory_policy_validates() -> None:
    assert errors("memory-policy.json", POLICY) == []


def test_minimal_disabled_policy_validates() -> None:
    # §10 adoption step 2: a block with enabled: false
    assert errors("memory-policy.json", {"enabled": False}) == []


def test_policy_extension_keys_allowed_everywhere() -> None:
    doc = copy.deepcopy(POLICY)
    doc["x-vendor"] = {"tier": "gold"}
    doc["retentionPolicy"]["x-note"] = "reviewed 2026-05"
    doc["retentionPolicy"]["perPrivacyClass"]["x-biometric"] = 0
    doc["rightToBeForgottenSla"]["x-escalation"] = "dpo@example.invalid"
    doc["auditPolicy"]["x-logExport"] = True
    assert errors("memory-policy.json", doc) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("enabled", ..., [("required", "$")]),
        ("enabled", "yes", [("type", "$.enabled")]),
        ("confabulationPolicy", "creative", [("enum", "$.confabulationPolicy")]),
        ("retrievalThreshold", 1.5, [("maximum", "$.retrievalThreshold")]),
        ("minSalienceForCreation", -0.2, [("minimum", "$.minSalienceForCreation")]),
        ("maxAtoms", 0, [("minimum", "$.maxAtoms")]),
        ("maxAtoms", 10.5, [("type", "$.maxAtoms")]),
        ("maxMemoriesPerTurn", -1, [("minimum", "$.maxMemoriesPerTurn")]),
        ("scope", "", [("minLength", "$.scope")]),
        ("maxatoms", 200, [("additionalProperties", "$")]),
        (
            "retentionPolicy.perPrivacyClass.guest-pii",
            -1,
            [("minimum", "$.retentionPolicy.perPrivacyClass['guest-pii']")],
        ),
        (
            "retentionPolicy.perPrivacyClass.biometric",
            30,
            [("additionalProperties", "$.retentionPolicy.perPrivacyClass")],
        ),
        (
            "retentionPolicy.defaultRetentionDays",
            "7",
            [("type", "$.retentionPolicy.defaultRetentionDays")],
        ),
        (
            "rightToBeForgottenSla.completionHours",
            -24,
            [("minimum", "$.rightToBeForgottenSla.completionHours")],
        ),
        ("auditPolicy.logEverything", True, [("additionalProperties", "$.auditPolicy")]),
        ("auditPolicy.logRedaction", 1, [("type", "$.auditPolicy.logRedaction")]),
    ],
)
def test_memory_policy_rejects(path: str, value: Any, expected: list[tuple[str, str]]) -> None:
    assert errors("memory-policy.json", mutate(POLICY, path, value)) == expected
