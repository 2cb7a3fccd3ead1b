"""Persona Schema decay (projections/decay.py); decisions in docs/adr/0005."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from projections.decay import (
    DEFAULT_PROFILE,
    DecayProfile,
    Detail,
    days_since,
    decay_origin,
    detail_brightness,
    is_archivable,
    marker,
    raw_salience,
    rehearse,
    rehearse_detail,
    salience,
    visible_details,
)

P = DecayProfile()  # seed defaults: half-life 14 d, boost 1.4, protection 0.3, min 0.05, rate 1.5

# The seed's example atom (Persona Schema §2).
SEED_BASELINE = 0.74
SEED_COUNT = 3
SEED_VALENCE = 0.62
SEED_DETAILS = [
    {"content": "she was wearing a blue scarf", "brightness": 0.40},
    {"content": "it was raining outside", "brightness": 0.20},
    {"content": "she said the seafood was excellent", "brightness": 0.85},
]

unit = st.floats(min_value=0.0, max_value=1.0)
valence = st.floats(min_value=-1.0, max_value=1.0)
days = st.floats(min_value=0.0, max_value=3650.0)
counts = st.integers(min_value=0, max_value=40)
profiles = st.builds(
    DecayProfile,
    half_life_days=st.floats(min_value=0.5, max_value=365.0),
    rehearsal_boost=st.floats(min_value=1.0, max_value=3.0),
    valence_protection=unit,
    minimum_salience=unit,
    detail_decay_rate=st.floats(min_value=0.0, max_value=5.0),
)


# --- DecayProfile -----------------------------------------------------------------------


def test_profile_defaults_match_seed() -> None:
    assert P == DEFAULT_PROFILE
    assert P.to_json() == {
        "function": "ebbinghaus",
        "halfLifeDays": 14.0,
        "rehearsalBoost": 1.4,
        "valenceProtection": 0.3,
        "minimumSalience": 0.05,
        "detailDecayRate": 1.5,
    }


def test_profile_from_seed_json_fills_missing_keys() -> None:
    # §2's decayProfile lacks minimumSalience and detailDecayRate: defaults apply.
    seed = {
        "function": "ebbinghaus",
        "halfLifeDays": 14,
        "rehearsalBoost": 1.4,
        "valenceProtection": 0.3,
    }
    assert DecayProfile.from_json(seed) == P
    assert DecayProfile.from_json({"halfLifeDays": 7, "x-vendor": "ok"}).half_life_days == 7.0
    assert DecayProfile.from_json(P.to_json()) == P


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"function": "power-law"}, ValueError),
        ({"halfLifeDays": 0}, ValueError),
        ({"halfLifeDays": -3}, ValueError),
        ({"halfLifeDays": math.inf}, ValueError),
        ({"halfLifeDays": math.nan}, ValueError),
        ({"halfLifeDays": "14"}, TypeError),
        ({"halfLifeDays": True}, TypeError),
        ({"rehearsalBoost": 0.9}, ValueError),
        ({"valenceProtection": 1.5}, ValueError),
        ({"minimumSalience": -0.1}, ValueError),
        ({"detailDecayRate": -1}, ValueError),
        ({"halflifeDays": 14}, ValueError),  # typo: unknown key
    ],
)
def test_profile_rejects_bad_values(data: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        DecayProfile.from_json(data)


# --- salience: hand-computed values -----------------------------------------------------


def test_salience_half_life_no_rehearsal_no_valence() -> None:
    # 0.8 * 1.4**0 * exp(-ln2 * 14/14) + 0 = 0.8 * 0.5 = 0.4
    assert salience(0.8, 0, 0.0, 14, P) == pytest.approx(0.4, abs=1e-12)
    # 0.8 * 2**(-7/14) = 0.8 / sqrt(2) = 0.565685424949238
    assert salience(0.8, 0, 0.0, 7, P) == pytest.approx(0.565685424949238, abs=1e-12)
    # 0.8 * 2**(-28/14) = 0.8 / 4 = 0.2
    assert salience(0.8, 0, 0.0, 28, P) == pytest.approx(0.2, abs=1e-12)


def test_salience_with_valence_floor() -> None:
    # floor = 0.3 * |-0.5| = 0.15; 0.8 * 0.5 + 0.15 = 0.55
    assert salience(0.8, 0, -0.5, 14, P) == pytest.approx(0.55, abs=1e-12)
    # after 100 half-lives the decaying term is ~0.8 * 2**-100 ~ 6e-31: only the floor is left
    assert salience(0.8, 0, -0.5, 1400, P) == pytest.approx(0.15, abs=1e-12)
    assert salience(0.8, 0, -0.5, 1400, P) >= 0.15


def test_salience_with_rehearsals() -> None:
    # 0.2 * 1.4**2 * 2**(-14/14) = 0.2 * 1.96 * 0.5 = 0.196; + 0.3 * 0.4 = 0.12 -> 0.316
    assert salience(0.2, 2, 0.4, 14, P) == pytest.approx(0.316, abs=1e-12)


def test_seed_example_clamps_then_decays() -> None:
    # 0.74 * 1.4**3 = 0.74 * 2.744 = 2.03056; floor = 0.3 * 0.62 = 0.186
    assert raw_salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 0, P) == pytest.approx(2.21656)
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 0, P) == 1.0
    # t=14: 2.03056 * 0.5 + 0.186 = 1.20128 -> clamped to 1
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 14, P) == 1.0
    # t=28: 2.03056 * 0.25 + 0.186 = 0.50764 + 0.186 = 0.69364
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 28, P) == pytest.approx(0.69364)
    # t=42: 2.03056 * 0.125 + 0.186 = 0.25382 + 0.186 = 0.43982 (still vivid)
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 42, P) == pytest.approx(0.43982)
    # t=56: 2.03056 / 16 + 0.186 = 0.12691 + 0.186 = 0.31291 (faint)
    s56 = salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, 56, P)
    assert s56 == pytest.approx(0.31291)
    assert marker(s56, 60) == ["faint"]
    # saturation ends where 2.03056 * 2**(-t/14) = 1 - 0.186, t = 14 * log2(2.03056/0.814)
    t_sat = 14 * math.log2(2.03056 / 0.814)  # = 18.46 days
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, t_sat - 0.01, P) == 1.0
    assert salience(SEED_BASELINE, SEED_COUNT, SEED_VALENCE, t_sat + 0.01, P) < 1.0


def test_floor_itself_is_clamped_to_one() -> None:
    full = DecayProfile(valence_protection=1.0)
    # floor = 1.0 * |-1| = 1; 0.5 * 0.5 + 1 = 1.25 -> 1; at any time the floor keeps it at 1
    assert salience(0.5, 0, -1.0, 14, full) == 1.0
    assert salience(0.0, 0, -1.0, 10_000, full) == 1.0


def test_negative_elapsed_is_zero() -> None:
    # clock skew: t = -3 days counts as t = 0 -> 0.6 * 1 + 0 = 0.6, never more
    assert salience(0.6, 0, 0.0, -3, P) == salience(0.6, 0, 0.0, 0, P) == pytest.approx(0.6)
    assert detail_brightness(0.5, -10, P) == 0.5


def test_huge_rehearsal_count_does_not_overflow() -> None:
    # 1.4**5000 overflows a float; computed in log space it just saturates
    assert salience(0.5, 5000, 0.0, 1, P) == 1.0
    assert raw_salience(0.5, 5000, 0.0, 1, P) == math.inf
    assert salience(0.0, 5000, 0.0, 1, P) == 0.0


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((1.2, 0, 0.0, 1.0), ValueError),  # baseline > 1
        ((-0.1, 0, 0.0, 1.0), ValueError),
        ((0.5, -1, 0.0, 1.0), ValueError),  # negative count
        ((0.5, 1.0, 0.0, 1.0), TypeError),  # count must be int
        ((0.5, 0, 1.5, 1.0), ValueError),  # valence out of [-1, 1]
        ((0.5, 0, 0.0, math.nan), ValueError),
        ((0.5, 0, 0.0, math.inf), ValueError),
    ],
)
def test_salience_rejects_bad_input(
    args: tuple[Any, Any, Any, Any], error: type[Exception]
) -> None:
    baseline, count, v, t = args
    with pytest.raises(error):
        salience(baseline, count, v, t, P)


# --- rehearsal --------------------------------------------------------------------------


def test_rehearse_hand_computed() -> None:
    # rehearsal 14 days after the last one: baseline 0.6 -> 0.6 * 0.5 = 0.3, count 1 -> 2
    baseline, count = rehearse(0.6, 1, 14, P)
    assert count == 2
    assert baseline == pytest.approx(0.3)
    # just before: 0.6 * 1.4 * 0.5 = 0.42; just after: 0.3 * 1.4**2 = 0.588 = 0.42 * 1.4
    assert salience(0.6, 1, 0.0, 14, P) == pytest.approx(0.42)
    assert salience(baseline, count, 0.0, 0, P) == pytest.approx(0.588)


def test_rehearse_zero_baseline_and_skew() -> None:
    assert rehearse(0.0, 0, 5, P) == (0.0, 1)
    # negative elapsed counts as 0: baseline unchanged
    assert rehearse(0.5, 0, -2, P) == (0.5, 1)


@given(baseline=unit, count=counts, v=valence, t=days, profile=profiles)
def test_rehearsal_never_lowers_salience(
    baseline: float, count: int, v: float, t: float, profile: DecayProfile
) -> None:
    before = salience(baseline, count, v, t, profile)
    new_baseline, new_count = rehearse(baseline, count, t, profile)
    assert new_count == count + 1
    assert 0.0 <= new_baseline <= 1.0
    assert new_baseline <= baseline or new_baseline == pytest.approx(baseline, rel=1e-12)
    assert salience(new_baseline, new_count, v, 0.0, profile) >= before  # exactly, no tolerance


def test_rehearsal_monotone_to_the_last_bit_with_boost_near_one() -> None:
    # With boost = 1 + 2**-52, exp(log(b) - k*t) rounds low often enough that a naive
    # rebase loses an ulp in a few % of cases; rehearse() nudges the baseline up.
    near_one = DecayProfile(rehearsal_boost=math.nextafter(1.0, 2.0))
    for i in range(2000):
        baseline, count, t = (i * 0.618034) % 1.0, i % 41, (i * 7.31) % 100.0
        before = salience(baseline, count, 0.0, t, near_one)
        new_baseline, new_count = rehearse(baseline, count, t, near_one)
        assert salience(new_baseline, new_count, 0.0, 0.0, near_one) >= before


@given(baseline=unit, count=counts, v=valence, t=days, later=days, profile=profiles)
def test_rehearsed_memory_stays_at_least_as_strong_later(
    baseline: float, count: int, v: float, t: float, later: float, profile: DecayProfile
) -> None:
    unrehearsed = salience(baseline, count, v, t + later, profile)
    b2, c2 = rehearse(baseline, count, t, profile)
    assert salience(b2, c2, v, later, profile) >= unrehearsed - 1e-12


@given(
    b0=st.floats(min_value=0.01, max_value=1.0),
    gaps=st.lists(st.floats(min_value=0.0, max_value=60.0), max_size=6),
    tail=st.floats(min_value=0.0, max_value=60.0),
)
def test_rehearsal_is_path_independent(b0: float, gaps: list[float], tail: float) -> None:
    # folding rehearsals one by one == b0 * boost**n * 2**(-age/halfLife), age from creation
    baseline, count = b0, 0
    for gap in gaps:
        baseline, count = rehearse(baseline, count, gap, P)
    age = sum(gaps) + tail
    direct = b0 * P.rehearsal_boost**count * 2 ** (-age / P.half_life_days)
    assert raw_salience(baseline, count, 0.0, tail, P) == pytest.approx(direct, rel=1e-9)


# --- monotonicity in time ---------------------------------------------------------------


@given(baseline=unit, count=counts, v=valence, t1=days, t2=days, profile=profiles)
def test_salience_non_increasing_in_time(
    baseline: float, count: int, v: float, t1: float, t2: float, profile: DecayProfile
) -> None:
    early, late = sorted((t1, t2))
    s_early = salience(baseline, count, v, early, profile)
    s_late = salience(baseline, count, v, late, profile)
    assert s_late <= s_early
    floor = min(1.0, profile.valence_protection * abs(v))
    assert floor <= s_late <= 1.0


@given(
    initial=unit,
    t=st.floats(min_value=0.01, max_value=365.0),
    rate=st.floats(min_value=1.01, max_value=5.0),
)
def test_details_fade_faster_than_gist(initial: float, t: float, rate: float) -> None:
    profile = DecayProfile(detail_decay_rate=rate)
    gist = salience(initial, 0, 0.0, t, profile)  # no rehearsal, no valence: pure decay
    detail = detail_brightness(initial, t, profile)
    assert detail <= gist
    assume(initial > 0.0 and gist > 1e-300)
    assert detail < gist


# --- details ----------------------------------------------------------------------------


def test_detail_brightness_hand_computed() -> None:
    # 0.85 * exp(-1.5 * ln2 * 14/14) = 0.85 * 2**-1.5 = 0.85 * 0.3535534 = 0.3005204
    assert detail_brightness(0.85, 14, P) == pytest.approx(0.30052038, abs=1e-8)
    # 0.40 * 2**-1.5 = 0.1414214 ; 0.20 * 2**-1.5 = 0.0707107
    assert detail_brightness(0.40, 14, P) == pytest.approx(0.14142136, abs=1e-8)
    assert detail_brightness(0.20, 14, P) == pytest.approx(0.07071068, abs=1e-8)
    assert detail_brightness(0.3, 0, P) == 0.3
    assert detail_brightness(0.9, 7, DecayProfile(detail_decay_rate=0.0)) == 0.9


def test_visible_details_of_seed_atom() -> None:
    # t=0: all three >= 0.1
    assert [d.content for d in visible_details(SEED_DETAILS, 0, P)] == [
        d["content"] for d in SEED_DETAILS
    ]
    # t=14: scarf 0.141 and seafood 0.301 remain; rain 0.0707 < 0.1 is hidden
    visible = visible_details(SEED_DETAILS, 14, P)
    assert [d.content for d in visible] == [
        "she was wearing a blue scarf",
        "she said the seafood was excellent",
    ]
    assert visible[1].brightness == pytest.approx(0.30052038, abs=1e-8)
    # t=28: seafood 0.85 * 2**-3 = 0.10625 is the last one visible; scarf 0.05 is not
    assert [d.content for d in visible_details(SEED_DETAILS, 28, P)] == [
        "she said the seafood was excellent"
    ]
    # a custom threshold; Detail objects accepted too
    assert visible_details([Detail("x", 0.5)], 0, P, threshold=0.6) == []
    assert visible_details([Detail("x", 0.1)], 0, P) == [Detail("x", 0.1)]  # boundary: >= 0.1


def test_rehearse_detail() -> None:
    # unreferenced: 0.40 * 2**-1.5 = 0.1414214 (decays); referenced: * 1.4 = 0.1979899
    assert rehearse_detail(0.40, 14, P, referenced=False) == pytest.approx(0.14142136, abs=1e-8)
    assert rehearse_detail(0.40, 14, P, referenced=True) == pytest.approx(0.19798990, abs=1e-8)
    assert rehearse_detail(0.9, 0, P, referenced=True) == 1.0  # 1.26 capped


# --- markers and archival ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("s", "age", "expected"),
    [
        (0.9, 0.5, ["recent", "vivid"]),
        (0.4, 3.0, ["vivid"]),  # 0.4 is not below 0.4
        (0.3999, 3.0, ["faint"]),
        (0.2, 0.0, ["recent", "faint"]),
        (0.9, 1.0, ["vivid"]),  # exactly one day old is no longer recent
        (0.9, -0.2, ["recent", "vivid"]),  # skew: negative age counts as 0
    ],
)
def test_marker(s: float, age: float, expected: list[str]) -> None:
    assert marker(s, age) == expected


def test_marker_custom_window() -> None:
    assert marker(0.5, 2.0, recent_window_days=3.0, faint_below=0.6) == ["recent", "faint"]


def test_is_archivable() -> None:
    assert is_archivable(0.049, P)
    assert not is_archivable(0.05, P)  # strictly below minimumSalience
    # 0.8 * 2**(-70/14) = 0.8 / 32 = 0.025 < 0.05 with no valence ...
    assert is_archivable(salience(0.8, 0, 0.0, 70, P), P)
    # ... but a floor of 0.3 * 0.2 = 0.06 >= 0.05 keeps it out of archival forever
    assert not is_archivable(salience(0.8, 0, 0.2, 10_000, P), P)


# --- time origin ------------------------------------------------------------------------


def test_decay_origin_and_days_since() -> None:
    created = datetime(2026, 4, 22, 14, 18, 42, tzinfo=UTC)
    rehearsed = datetime(2026, 4, 29, 10, 2, 11, tzinfo=UTC)
    assert decay_origin(created) == created
    assert decay_origin(created, None) == created
    assert decay_origin(created, rehearsed) == rehearsed
    assert decay_origin(rehearsed, created) == rehearsed  # rehearsal before creation: skew
    now = rehearsed + timedelta(days=14, hours=12)
    assert days_since(rehearsed, now) == pytest.approx(14.5)
    assert days_since(now, rehearsed) == pytest.approx(-14.5)
    cest = timezone(timedelta(hours=2))
    assert days_since(rehearsed, rehearsed.astimezone(cest)) == 0.0
    with pytest.raises(ValueError, match="timezone-aware"):
        days_since(datetime(2026, 1, 1), now)  # naive on purpose
    with pytest.raises(ValueError, match="timezone-aware"):
        decay_origin(created, datetime(2026, 1, 1))
