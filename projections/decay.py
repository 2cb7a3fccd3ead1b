"""Persona Schema v1.0 memory decay: pure functions, no I/O, no clock.

Formula (Persona Schema §3)::

    salience(t) = baseline * rehearsalBoost ** rehearsalCount * exp(-ln2 * t / halfLifeDays)
                  + valenceProtection * |emotionalValence|

Decisions (docs/adr/0005-decay-and-salience.md):

* ``t`` is measured in days from the last rehearsal, or from creation if the atom was
  never rehearsed; a negative ``t`` (clock skew) counts as 0.
* The result is clamped to [0, 1]; the valence floor (itself capped at 1) is never undercut.
* On rehearsal the stored baseline becomes the decayed, un-boosted value
  ``baseline * exp(-ln2 * t / halfLife)`` and the count goes up by one, so the boost is
  applied through the count only and a rehearsal never lowers salience.
* "recent" means created less than one day ago; "faint" means salience below 0.4.
* An atom without a decay profile of its own (and no memoryPolicy default) does not decay
  (docs/adr/0050): :data:`NO_DECAY`, function ``"none"``, salience is the baseline, and
  it is never archivable by decay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_RECENT_WINDOW_DAYS",
    "DETAIL_VISIBILITY_THRESHOLD",
    "FAINT_BELOW",
    "LN2",
    "NO_DECAY",
    "DecayProfile",
    "Detail",
    "days_since",
    "decay_origin",
    "detail_brightness",
    "is_archivable",
    "marker",
    "raw_salience",
    "rehearse",
    "rehearse_detail",
    "salience",
    "visible_details",
]

LN2 = math.log(2.0)
FAINT_BELOW = 0.4
"""§6 step 4: a memory with salience below this is rendered "faint"."""
DETAIL_VISIBILITY_THRESHOLD = 0.1
"""§3: a detail whose brightness falls below this is not rendered."""
DEFAULT_RECENT_WINDOW_DAYS = 1.0
"""A memory created less than this many days ago is rendered "recent"."""

_SECONDS_PER_DAY = 86_400.0
_EXP_MAX = 709.0  # math.exp overflows just above 709.78
_NUDGE_LIMIT = 64

_JSON_KEYS = {
    "function": "function",
    "halfLifeDays": "half_life_days",
    "rehearsalBoost": "rehearsal_boost",
    "valenceProtection": "valence_protection",
    "minimumSalience": "minimum_salience",
    "detailDecayRate": "detail_decay_rate",
}


def _number(name: str, value: object) -> float:
    """Return ``value`` as a finite float, rejecting bools, strings and NaN/inf."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return result


def _in_unit(name: str, value: object, low: float = 0.0) -> float:
    result = _number(name, value)
    if not low <= result <= 1.0:
        raise ValueError(f"{name} must be in [{low:g}, 1], got {result!r}")
    return result


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"rehearsal_count must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"rehearsal_count must be >= 0, got {value}")
    return value


def _elapsed(value: object) -> float:
    """Elapsed days, negative (clock skew) clamped to 0."""
    return max(0.0, _number("elapsed_days", value))


def _clamp01(value: float) -> float:
    return min(1.0, max(0.0, value))


@dataclass(frozen=True, slots=True)
class DecayProfile:
    """The §3 ``decayProfile`` block, with the seed's defaults."""

    function: str = "ebbinghaus"
    half_life_days: float = 14.0
    rehearsal_boost: float = 1.4
    valence_protection: float = 0.3
    minimum_salience: float = 0.05
    detail_decay_rate: float = 1.5

    def __post_init__(self) -> None:
        if self.function == "none":
            # No decay (ADR 0050): an infinite half-life makes every formula below give the
            # baseline at any age (no rate, no boost, no floor, never archivable).
            for name, value in (("half_life_days", math.inf), ("rehearsal_boost", 1.0),
                                ("valence_protection", 0.0), ("minimum_salience", 0.0),
                                ("detail_decay_rate", 0.0)):
                object.__setattr__(self, name, value)
            return
        if self.function != "ebbinghaus":
            raise ValueError(f"unsupported decay function {self.function!r} "
                             "('ebbinghaus', or 'none' for no decay)")
        half_life = _number("half_life_days", self.half_life_days)
        if half_life <= 0.0:
            raise ValueError(f"half_life_days must be > 0, got {half_life!r}")
        boost = _number("rehearsal_boost", self.rehearsal_boost)
        if boost < 1.0:
            raise ValueError(
                f"rehearsal_boost must be >= 1 (a rehearsal must not weaken), got {boost!r}"
            )
        detail_rate = _number("detail_decay_rate", self.detail_decay_rate)
        if detail_rate < 0.0:
            raise ValueError(f"detail_decay_rate must be >= 0, got {detail_rate!r}")
        for name, value in (
            ("half_life_days", half_life),
            ("rehearsal_boost", boost),
            ("valence_protection", _in_unit("valence_protection", self.valence_protection)),
            ("minimum_salience", _in_unit("minimum_salience", self.minimum_salience)),
            ("detail_decay_rate", detail_rate),
        ):
            object.__setattr__(self, name, value)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DecayProfile:
        """Build from the seed's camelCase JSON; missing keys take defaults.

        Unknown keys are rejected (they are usually typos) unless they start with ``x-``.
        ``{"function": "none"}`` is no decay and takes no other key.
        """
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key in _JSON_KEYS:
                kwargs[_JSON_KEYS[key]] = value
            elif not (isinstance(key, str) and key.startswith("x-")):
                raise ValueError(f"unknown decayProfile key {key!r}")
        if kwargs.get("function") == "none" and len(kwargs) > 1:
            raise ValueError("a decayProfile with function 'none' (no decay) takes no other "
                             f"key, got {sorted(k for k in data if k != 'function')}")
        return cls(**kwargs)

    @property
    def decays(self) -> bool:
        """False for the no-decay profile (function ``"none"``)."""
        return self.function != "none"

    def to_json(self) -> dict[str, Any]:
        """Return the camelCase JSON form (all six keys; ``{"function": "none"}`` for no
        decay, whose infinite half-life JSON cannot carry)."""
        if not self.decays:
            return {"function": "none"}
        return {key: getattr(self, attr) for key, attr in _JSON_KEYS.items()}


DEFAULT_PROFILE = DecayProfile()
"""The Persona Schema §3 defaults: what a profile given without some keys fills them with."""
NO_DECAY = DecayProfile(function="none")
"""The profile of an atom with none of its own and no memoryPolicy default (ADR 0050)."""


@dataclass(frozen=True, slots=True)
class Detail:
    """One entry of an atom's ``details[]``: content and brightness in [0, 1]."""

    content: str
    brightness: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "brightness", _in_unit("brightness", self.brightness))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Detail:
        """Build from ``{"content": ..., "brightness": ...}``."""
        return cls(content=str(data["content"]), brightness=data["brightness"])


def _log_decayed(baseline: float, rehearsal_count: int, t: float, profile: DecayProfile) -> float:
    """log(baseline * boost**count * exp(-ln2 * t / halfLife)); baseline must be > 0."""
    return (
        math.log(baseline)
        + rehearsal_count * math.log(profile.rehearsal_boost)
        - LN2 * t / profile.half_life_days
    )


def _decayed(baseline: float, rehearsal_count: int, t: float, profile: DecayProfile) -> float:
    """The decaying term of the formula, computed in log space (no overflow)."""
    if baseline == 0.0:
        return 0.0
    exponent = _log_decayed(baseline, rehearsal_count, t, profile)
    return math.inf if exponent > _EXP_MAX else math.exp(exponent)


def raw_salience(
    baseline: float,
    rehearsal_count: int,
    emotional_valence: float,
    elapsed_days: float,
    profile: DecayProfile = DEFAULT_PROFILE,
) -> float:
    """The §3 formula without the upper clamp (may exceed 1, even be ``inf``).

    Use it only to break ties between atoms whose clamped salience is 1.0.
    """
    baseline = _in_unit("baseline", baseline)
    count = _count(rehearsal_count)
    valence = _in_unit("emotional_valence", emotional_valence, low=-1.0)
    t = _elapsed(elapsed_days)
    return _decayed(baseline, count, t, profile) + profile.valence_protection * abs(valence)


def salience(
    baseline: float,
    rehearsal_count: int,
    emotional_valence: float,
    elapsed_days: float,
    profile: DecayProfile = DEFAULT_PROFILE,
) -> float:
    """Current salience in [0, 1].

    ``baseline`` is the stored baseline (the atom's ``salience`` field), ``elapsed_days``
    the days since the last rehearsal (or creation); negative time counts as 0. The result
    never goes below ``min(1, valenceProtection * |emotionalValence|)``.
    """
    raw = raw_salience(baseline, rehearsal_count, emotional_valence, elapsed_days, profile)
    return _clamp01(raw)


def rehearse(
    baseline: float,
    rehearsal_count: int,
    elapsed_days: float,
    profile: DecayProfile = DEFAULT_PROFILE,
) -> tuple[float, int]:
    """Apply one rehearsal ``elapsed_days`` after the previous one (or creation).

    Returns ``(new_baseline, rehearsal_count + 1)``. The new baseline is the decayed,
    un-boosted value ``baseline * exp(-ln2 * t / halfLife)``; the boost enters through
    the count. The new baseline stays in [0, 1] and salience right after the rehearsal is
    never below salience just before it (guaranteed to the last bit, not just in theory).
    """
    baseline = _in_unit("baseline", baseline)
    count = _count(rehearsal_count)
    t = _elapsed(elapsed_days)
    if baseline == 0.0:
        return 0.0, count + 1
    new_baseline = min(1.0, math.exp(math.log(baseline) - LN2 * t / profile.half_life_days))
    before = _decayed(baseline, count, t, profile)
    # Rounding in log/exp can cost an ulp when boost is (nearly) 1; nudge upward so the
    # monotonicity promise holds exactly. At new_baseline == 1 it holds by construction.
    for _ in range(_NUDGE_LIMIT):
        if new_baseline >= 1.0 or _decayed(new_baseline, count + 1, 0.0, profile) >= before:
            break
        new_baseline = math.nextafter(new_baseline, 1.0)
    return new_baseline, count + 1


def detail_brightness(
    initial: float, elapsed_days: float, profile: DecayProfile = DEFAULT_PROFILE
) -> float:
    """§3 detail decay: ``initial * exp(-detailDecayRate * ln2 * t / halfLife)`` in [0, 1].

    ``initial`` is the brightness stored at the last rehearsal (or creation).
    """
    initial = _in_unit("brightness", initial)
    t = _elapsed(elapsed_days)
    return _clamp01(
        initial * math.exp(-profile.detail_decay_rate * LN2 * t / profile.half_life_days)
    )


def rehearse_detail(
    brightness: float,
    elapsed_days: float,
    profile: DecayProfile = DEFAULT_PROFILE,
    *,
    referenced: bool,
) -> float:
    """New stored brightness of one detail at a rehearsal.

    Every detail is first decayed to now (that becomes its new initial value, matching the
    rebased time origin); a detail the rehearsal referenced is then multiplied by
    ``rehearsalBoost`` (capped at 1). Unreferenced details simply keep decaying.
    """
    decayed = detail_brightness(brightness, elapsed_days, profile)
    return min(1.0, decayed * profile.rehearsal_boost) if referenced else decayed


def visible_details(
    details: Iterable[Detail | Mapping[str, Any]],
    elapsed_days: float,
    profile: DecayProfile = DEFAULT_PROFILE,
    threshold: float = DETAIL_VISIBILITY_THRESHOLD,
) -> list[Detail]:
    """Details whose current brightness is >= ``threshold``, in order, with that brightness."""
    threshold = _in_unit("threshold", threshold)
    visible: list[Detail] = []
    for item in details:
        detail = item if isinstance(item, Detail) else Detail.from_json(item)
        now = detail_brightness(detail.brightness, elapsed_days, profile)
        if now >= threshold:
            visible.append(Detail(detail.content, now))
    return visible


def marker(
    salience_now: float,
    created_age_days: float,
    *,
    recent_window_days: float = DEFAULT_RECENT_WINDOW_DAYS,
    faint_below: float = FAINT_BELOW,
) -> list[str]:
    """Rendering markers, e.g. ``["recent", "vivid"]`` or ``["faint"]``.

    ``created_age_days`` is the age since *creation* (not since the last rehearsal: every
    recall is a rehearsal, so that would mark everything just recalled as recent). An
    atom is "recent" when younger than ``recent_window_days`` (negative age counts as 0);
    "faint" when ``salience_now < faint_below``, else "vivid".
    """
    s = _in_unit("salience_now", salience_now)
    age = _elapsed(created_age_days)
    window = _number("recent_window_days", recent_window_days)
    faint = _in_unit("faint_below", faint_below)
    markers = ["recent"] if age < window else []
    markers.append("faint" if s < faint else "vivid")
    return markers


def is_archivable(salience_now: float, profile: DecayProfile = DEFAULT_PROFILE) -> bool:
    """True when salience has fallen below ``minimumSalience`` (§3: eligible for archival)."""
    return _in_unit("salience_now", salience_now) < profile.minimum_salience


def decay_origin(created_at: datetime, last_rehearsed_at: datetime | None = None) -> datetime:
    """The instant decay is measured from: the last rehearsal, else creation.

    If both are given the later one wins (a rehearsal recorded before creation is skew).
    Both must be timezone-aware.
    """
    _require_aware("created_at", created_at)
    if last_rehearsed_at is None:
        return created_at
    _require_aware("last_rehearsed_at", last_rehearsed_at)
    return max(created_at, last_rehearsed_at)


def days_since(origin: datetime, now: datetime) -> float:
    """Days from ``origin`` to ``now`` (may be negative; the decay functions clamp it)."""
    _require_aware("origin", origin)
    _require_aware("now", now)
    return (now - origin).total_seconds() / _SECONDS_PER_DAY


def _require_aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value.isoformat()}")
