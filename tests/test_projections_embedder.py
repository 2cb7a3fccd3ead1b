"""Pure parts of the read side: the offline embedder, query sanitising, fades_at."""

from __future__ import annotations

import math
import zlib
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import decay
from projections.embedder import Embedder, HashingEmbedder, cosine, from_bytes, to_bytes
from projections.memory import DecayState, fades_at, parse_time, query_terms


def test_embedder_is_stable_across_processes_and_versions() -> None:
    """Stored vectors must keep meaning the same thing: CRC-32 buckets, not hash()."""
    e = HashingEmbedder()
    assert isinstance(e, Embedder) and e.id == "hashing-v1/256" and e.dim == 256
    v = e.embed_one("Green tea, every morning.")
    head = [(i, round(x, 4)) for i, x in enumerate(v) if x][:8]
    assert head == [(12, -0.1562), (41, -0.1562), (44, 0.3123), (51, 0.1562),
                    (56, -0.1562), (67, -0.1562), (74, 0.3123), (78, -0.3123)]
    assert sum(1 for x in v if x) == 26


def _reference(e: HashingEmbedder, text: str) -> list[float]:
    """The definition in ADR 0006, written plainly (no memoisation, dense vector)."""
    vec = [0.0] * e.dim
    for key, weight in e.features(text).items():
        h = zlib.crc32(key.encode("utf-8"))
        vec[h % e.dim] += (-1.0 if h & 0x80000000 else 1.0) * weight
    vec = [math.copysign(1.0 + math.log(abs(v)), v) if abs(v) > 1.0 else v for v in vec]
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec] if norm > 0.0 else vec


@settings(max_examples=80, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("abcdeé tea TEA work the 12 ñ,."), max_size=60))
def test_fast_embedding_equals_its_definition(text: str) -> None:
    e = HashingEmbedder(dim=32)  # few buckets: many collisions and damped values
    assert [round(x, 12) for x in e.embed_one(text)] == [
        round(x, 12) for x in _reference(e, text)]
    assert e.embed_one(text) == e.embed_one(text)  # memoised path, same again


def test_embedder_normalises_and_handles_empty_text() -> None:
    e = HashingEmbedder(dim=64)
    (v, empty, stop) = e.embed(["Works at Acme", "", "the and of"])
    assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-9)
    assert empty == [0.0] * 64 and stop == [0.0] * 64
    assert cosine(empty, v) == 0.0
    with pytest.raises(ValueError):
        HashingEmbedder(dim=8)


def test_embedder_shares_words_and_spelling_not_meaning() -> None:
    e = HashingEmbedder()

    def sim(a: str, b: str) -> float:
        return cosine(*e.embed([a, b]))

    assert sim("green tea", "Likes green tea in the morning") > 0.5
    assert sim("work", "working at a startup") > 0.15  # shared character trigrams
    assert sim("The cat sat on the mat", "A dog slept on the rug") == 0.0  # stop words dropped
    assert sim("job", "Works at Acme") < 0.1  # documented limit: no synonyms


def test_vector_bytes_round_trip() -> None:
    v = HashingEmbedder(dim=32).embed_one("round trip")
    data = to_bytes(v)
    assert len(data) == 32 * 4
    assert [round(x, 6) for x in from_bytes(data)] == [round(x, 6) for x in v]


def test_query_terms_cannot_inject_match_syntax() -> None:
    assert query_terms('tea" OR skey : * NEAR(x) -- ;DROP') == [
        "tea", "or", "skey", "near", "x", "drop"]
    assert query_terms("Ünïcode café_au_lait") == ["ünïcode", "café", "au", "lait"]
    assert query_terms("   ") == []
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


def test_fades_at_edge_cases() -> None:
    origin = "2030-01-01T00:00:00.000000Z"
    p = decay.DEFAULT_PROFILE
    assert fades_at(DecayState(0.5, 0, 0.9, origin, p)) is None  # valence floor 0.27 >= 0.15
    assert fades_at(DecayState(0.0, 0, 0.0, origin, p)) == origin
    assert fades_at(DecayState(0.1, 0, 0.0, origin, p)) == origin  # already below
    # 0.3 halves to 0.15 in exactly one half-life
    assert fades_at(DecayState(0.3, 0, 0.0, origin, p)) == "2030-01-15T00:00:00.000000Z"


@settings(max_examples=60, deadline=None)
@given(baseline=st.floats(0.01, 1.0), count=st.integers(0, 6), valence=st.floats(-1.0, 1.0),
       half_life=st.floats(0.5, 60.0), boost=st.floats(1.0, 2.0))
def test_fades_at_is_where_salience_crosses_the_threshold(
        baseline: float, count: int, valence: float, half_life: float, boost: float) -> None:
    profile = decay.DecayProfile(half_life_days=half_life, rehearsal_boost=boost)
    origin = "2030-01-01T00:00:00.000000Z"
    state = DecayState(baseline, count, valence, origin, profile)
    when = fades_at(state)
    if when is None:
        assert state.salience(parse_time(origin) + timedelta(days=10_000)) >= 0.15
        return
    t = parse_time(when)
    second = timedelta(seconds=1)
    if t > parse_time(origin):
        assert state.salience(t - second) >= 0.15 - 1e-9
    assert state.salience(t + second) < 0.15 + 1e-9


def test_loading_wordllama_leaves_the_root_logger_as_it_was() -> None:
    """wordllama's import calls logging.basicConfig(level=INFO): every library's INFO lines
    (httpx's requests among them) then reached the stderr of every command that embeds."""
    import subprocess
    import sys

    child = ("import logging; from projections.embedder import WordLlamaEmbedder; "
             "WordLlamaEmbedder(64).embed(['tea']); r = logging.getLogger(); "
             "logging.getLogger('httpx').info('a line nobody asked for'); "
             "print(len(r.handlers), r.level)")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["0", "30"]
    assert "a line nobody asked for" not in done.stderr
