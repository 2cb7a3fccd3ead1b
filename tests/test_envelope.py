"""The signed envelope: vectors with verdicts, and property tests."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keys.signing import Signer
from ledger import envelope
from ledger.domain import event_classes
from ledger.verify import ROLES_BY_TOPIC

from .vectors.make_vectors import build

VECTORS = json.loads((Path(__file__).parent / "vectors" / "envelope.json").read_text("utf-8"))
SIGNER = Signer.from_seed("t", bytes(32))

json_scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | \
    st.floats(min_value=-1e15, max_value=1e15, allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)


def _envelope(payload: dict[str, Any]) -> dict[str, Any]:
    return {"v": 1, "ledger": "L", "seq": 1, "topic": "t", "originator_id": "o", "version": 1,
            "timestamp": "2026-01-01T00:00:00.000000Z", "kid": SIGNER.kid, "payload": payload}


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_vectors_give_their_verdict(case: dict[str, str]) -> None:
    public_key = base64.b64decode(VECTORS["public_key"])
    state = case["state"].encode()
    if case["verdict"] == "valid":
        envelope.verify(envelope.open_state(state), public_key)
        return
    with pytest.raises(envelope.EnvelopeError) as err:
        envelope.verify(envelope.open_state(state), public_key)
    assert err.value.step == case["step"]


def test_vectors_are_regenerable() -> None:
    assert build() == VECTORS  # Ed25519 is deterministic: same seed, same bytes


@given(json_values)
def test_canonical_bytes_stable_through_round_trip(value: Any) -> None:
    once = envelope.canonical(value)
    assert envelope.canonical(json.loads(once)) == once


@settings(max_examples=300)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.data())
def test_any_single_byte_change_fails_verification(payload: dict[str, Any],
                                                   data: st.DataObject) -> None:
    state = envelope.seal(_envelope(payload), SIGNER)
    envelope.verify(envelope.open_state(state), SIGNER.public_key)
    index = data.draw(st.integers(0, len(state) - 1))
    delta = data.draw(st.integers(1, 255))
    tampered = bytearray(state)
    tampered[index] = (tampered[index] + delta) % 256
    with pytest.raises(envelope.EnvelopeError):
        envelope.verify(envelope.open_state(bytes(tampered)), SIGNER.public_key)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_sealed_bodies_are_canonical(payload: dict[str, Any]) -> None:
    opened = envelope.open_state(envelope.seal(_envelope(payload), SIGNER))
    assert envelope.canonical(json.loads(opened.body)) == opened.body


def test_event_signature_never_verifies_as_another_type() -> None:
    body = envelope.canonical(_envelope({}))
    sig = SIGNER.sign(envelope.pae(envelope.PAYLOAD_TYPE, body))
    from keys.errors import SignatureInvalid
    from keys.signing import verify_signature

    with pytest.raises(SignatureInvalid):
        verify_signature(SIGNER.public_key, envelope.pae("application/vnd.in-toto+json", body),
                         sig)


TOPICS = json.loads((Path(__file__).parent / "vectors" / "topics.json").read_text("utf-8"))


def test_topics_are_explicit_unique_and_stable() -> None:
    """A released topic never changes: old logs must keep resolving."""
    topics = sorted(c.TOPIC for c in event_classes())
    assert len(topics) == len(set(topics))
    assert set(TOPICS) <= set(ROLES_BY_TOPIC), "a released topic disappeared"
    assert sorted(ROLES_BY_TOPIC) == sorted(TOPICS), \
        "new topic: add it to tests/vectors/topics.json with its signer roles"
    assert {t: list(r) for t, r in ROLES_BY_TOPIC.items()} == TOPICS


def test_the_envelope_spec_lists_every_topic_with_its_roles() -> None:
    """docs/spec/event-envelope.md §4 is the auditor's table: it must not drift."""
    spec = (Path(__file__).parents[1] / "docs" / "spec" / "event-envelope.md").read_text("utf-8")
    section = spec[spec.index("## 4. Topics"):spec.index("## 5.")]
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([a-z, ]+) \|$", section, re.MULTILINE))
    assert {t: r.split(", ") for t, r in rows.items()} == TOPICS


@settings(max_examples=50, deadline=None)
@given(json_values.filter(lambda v: isinstance(v, dict)) | st.dictionaries(
    st.text(max_size=8), json_scalars, max_size=4))
def test_payload_of_reads_what_open_state_reads(payload: dict[str, Any]) -> None:
    """The census's quick read of a payload gives the verified reader's payload, and
    refuses what is not a signed envelope frame."""
    state = envelope.seal(_envelope(payload), SIGNER)
    assert envelope.payload_of(state) == envelope.open_state(state).envelope["payload"]
    for bad in (state[1:], state[:-1], b'{"envelope":[1],"signature":"' + b"A" * 88 + b'"}'):
        with pytest.raises(envelope.EnvelopeError):
            envelope.payload_of(bad)
