"""ledger.canonical.dumps is rfc8785.dumps: same bytes, or the same exception type.

Differential (hypothesis) over arbitrary JSON-like values, with the cases where orjson
and RFC 8785 differ (floats, big integers, key order beyond U+D800, lone surrogates,
non-string keys, subclasses, types orjson serialises and RFC 8785 refuses), every code
point as a string, plus the examples of RFC 8785 itself.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
import struct
import uuid
from collections import OrderedDict
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import canonical, envelope


def outcome(dumps: Any, value: Any) -> tuple[str, Any]:
    try:
        return "ok", dumps(value)
    except Exception as e:  # the type is what must match
        return "error", type(e)


def assert_same(value: Any) -> None:
    assert outcome(canonical.dumps, value) == outcome(rfc8785.dumps, value)


SPECIAL_CHARS = ["\x00", "\x07", "\b", "\t", "\n", "\x0b", "\f", "\r", "\x1f", " ", '"', "\\",
                 "/", "\x7f", "\x80", "\u00f6", "\u2028", "\u2029", "\u20ac", "\ud7ff",
                 "\ud800", "\udbff", "\udc00", "\udfff", "\ue000", "\ufb33", "\ufeff",
                 "\uffff", "\U00010000", "\U0001f600", "\U0010ffff"]
# Every code point, lone surrogates included (hypothesis leaves them out by default).
chars = st.characters(exclude_categories=()) | st.sampled_from(SPECIAL_CHARS)
texts = st.text(chars, max_size=12)
EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-4, -1e-4, 9.999999999999999e-05, 1e-5, 1e-7,
               1e-6, 9.999999999999997e-07, 5e-324, -5e-324, 2.2250738585072014e-308,
               1.7976931348623157e308, 1e15, 9999999999999998.0, 1e16, 1e16 + 2, 1e17,
               1e21, 1e20, 123456789012345680000.0, 2.0**53 - 1, 2.0**53, -(2.0**53),
               2.0**53 + 2, 2.0**63, 333333333.3333333, 0.1, 0.2 + 0.1,
               float("inf"), float("-inf"), float("nan")]
floats = (st.floats() | st.sampled_from(EDGE_FLOATS)
          | st.integers(-(2**60), 2**60).map(float)
          | st.integers(-(2**53), 2**53).map(lambda i: i / 1024))
EDGE_INTS = [0, -0, 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**64, -(2**64), 10**30]
ints = st.integers() | st.integers(-(2**54), 2**54) | st.sampled_from(EDGE_INTS)
scalars = st.none() | st.booleans() | ints | floats | texts
keys = texts | st.sampled_from(SPECIAL_CHARS) | st.sampled_from(["a", "b", "1", "\u20ac"])
json_values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=5) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(keys, inner, max_size=5)),
    max_leaves=25)
odd_keys = st.integers() | st.none() | st.booleans() | st.floats(allow_nan=False) | \
    st.binary(max_size=3) | st.tuples(st.integers())


@settings(max_examples=2000)
@given(json_values)
def test_same_bytes_or_same_error_as_rfc8785(value: Any) -> None:
    assert_same(value)


@settings(max_examples=500)
@given(st.dictionaries(texts, scalars, max_size=8))
def test_key_order_is_utf16_order(value: dict[str, Any]) -> None:
    assert_same(value)


@given(st.dictionaries(odd_keys | keys, scalars, min_size=1, max_size=4))
def test_non_string_keys_fail_like_rfc8785(value: dict[Any, Any]) -> None:
    assert_same(value)
    assert_same({"outer": [value]})


@settings(max_examples=500)
@given(floats)
def test_every_float_formats_like_rfc8785(value: float) -> None:
    assert_same(value)
    assert_same([value, {"x": -value}])


@given(ints)
def test_integers_outside_the_safe_range_are_refused_like_rfc8785(value: int) -> None:
    assert_same(value)
    assert_same({"n": [value]})
    if abs(value) > 2**53 - 1:
        with pytest.raises(rfc8785.IntegerDomainError):
            canonical.dumps(value)


class Color(enum.IntEnum):
    RED = 1


class Kind(enum.StrEnum):
    FACT = "fact"


class MyStr(str):
    pass


class MyFloat(float):
    pass


class MyList(list[Any]):
    pass


class Plain(enum.Enum):
    A = "a"


@dataclasses.dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    Color.RED, {"c": Color.RED}, Kind.FACT, [Kind.FACT], MyStr("x"), {MyStr("k"): 1},
    MyFloat(1.5), MyFloat(2.0), MyList([1, 2]), OrderedDict([("b", 1), ("a", 2)]),
    {"a": {1, 2}}, b"bytes", object(), {"a": 1j}, float("nan"), {"x": float("inf")},
    "\ud800", {"\udc00": 1}, {"\udc00": 1, "a": 2}, ["ok", "\udfff"],
    {"\U0001f600": 1, "\ufb33": 2, "\ue000": 3, "a": 4},
    # serialised by orjson natively, refused by rfc8785
    uuid.UUID(int=7), {"id": uuid.UUID(int=7)}, Plain.A, [Plain.A],
    datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), datetime.date(2026, 1, 1),
    datetime.time(1, 2), Point(1), orjson.Fragment(b"1"), {"f": orjson.Fragment(b"{}")},
    # orjson's own limits: 64-bit integers, nesting depth
    2**63, -(2**63) - 1, 2**64,
], ids=lambda v: re.sub(r" at 0x[0-9a-f]+", "", repr(v)))  # stable ids: pytest-xdist
def test_subclasses_and_invalid_values_match_rfc8785(value: Any) -> None:
    assert_same(value)


def test_circular_and_deep_values_match_rfc8785() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert_same(loop)
    for depth in (200, 5000):  # within and beyond the interpreter's recursion limit
        deep: Any = "leaf"
        for i in range(depth):
            deep = [deep] if i % 2 else {"k": deep}
        assert_same(deep)


def test_rfc8785_section_3_2_2_example() -> None:
    # RFC 8785 §3.2.2: the input, parsed as JSON, and its canonical form.
    text = ('{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
            ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
            ' "literals": [null, true, false]}')
    expected = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,'
                '1e-27],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}').encode()
    value = json.loads(text)
    assert canonical.dumps(value) == expected
    assert rfc8785.dumps(value) == expected


def test_rfc8785_section_3_2_3_sorting_example() -> None:
    value = {"\u20ac": "Euro Sign", "\r": "Carriage Return",
             "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One",
             "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
             "\u00f6": "Latin Small Letter O With Diaeresis"}
    expected = ('{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
                '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
                '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
                ).encode()
    assert canonical.dumps(value) == expected
    assert rfc8785.dumps(value) == expected


# RFC 8785 Appendix B: IEEE 754 bit patterns and their canonical number.
APPENDIX_B = [
    ("0000000000000000", "0"), ("8000000000000000", "0"), ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"), ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"), ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"), ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"), ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"), ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"), ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"), ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"), ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, expected: str) -> None:
    value = struct.unpack(">d", bytes.fromhex(bits))[0]
    assert canonical.dumps(value) == expected.encode()
    assert rfc8785.dumps(value) == expected.encode()


@pytest.mark.parametrize("bits", ["7fffffffffffffff", "7ff0000000000000", "fff0000000000000"])
def test_rfc8785_appendix_b_nan_and_infinity_are_refused(bits: str) -> None:
    with pytest.raises(rfc8785.FloatDomainError):
        canonical.dumps(struct.unpack(">d", bytes.fromhex(bits))[0])


def test_ledger_envelopes_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """An atom envelope never needs the pure-Python fallback (ADR 0008)."""
    value: dict[str, Any] = {"v": 1, "ledger": "8e0f0d52-2a3c-4d55-b0a9-5a7c5f1d2b11", "seq": 12,
             "topic": "memory-ledger:atom.created.v1", "originator_id": "o", "version": 1,
             "timestamp": "2026-01-01T00:00:00.000000Z", "kid": "ed25519:00",
             "payload": {"confidence": 0.9, "salience": 1.0, "emotional_valence": -0.0,
                         "artifact_ids": [], "human_reviewed": False, "min_sources": 1,
                         "decay_profile": {"halfLife": 30.0, "floor": 0.05},
                         "extensions": {"caf\u00e9": ["\u2028", "\U0001f600"]},
                         "sealed": {"alg": "A256GCM", "ct": "AAAA", "nonce": "BBBB"}}}
    expected = rfc8785.dumps(value)

    def refuse(_: Any) -> bytes:
        raise AssertionError("fell back to rfc8785")

    monkeypatch.setattr(rfc8785, "dumps", refuse)
    assert canonical.dumps(value) == expected
    assert envelope.canonical(value) == expected


def test_every_code_point_as_a_string_matches_rfc8785() -> None:
    """orjson escapes exactly what rfc8785 escapes, code point by code point."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 4096):
        chunk = points[start:start + 4096]
        assert orjson.dumps(chunk, option=canonical._OPTIONS) == rfc8785.dumps(chunk), start
        assert canonical.dumps(chunk) == rfc8785.dumps(chunk)
    for c in range(0xD800, 0xE000):  # lone surrogates: refused by both
        assert_same(chr(c))
