"""Pure helpers that connect stored atom state with the decay functions (no I/O, no clock).

The atom store keeps, per ADR 0005, a stored *baseline* that each rehearsal rebases
(``decay.rehearse``), the rehearsal count, and the decay origin (last rehearsal, else
creation). Everything time-dependent (current salience, detail brightness, markers)
is computed at read time from those values and an explicit ``now``.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger.clock import format_instant
from projections import decay

__all__ = [
    "FAR_FUTURE",
    "RETRIEVAL_THRESHOLD",
    "DecayDefaults",
    "DecayState",
    "fades_at",
    "index_text",
    "parse_time",
    "profile_of",
    "query_terms",
]

RETRIEVAL_THRESHOLD = 0.15
"""memoryPolicy.retrievalThreshold default (Persona Schema §7)."""

FAR_FUTURE = "9999-12-31T23:59:59.999999Z"
_PROFILE_FIELDS = {f.name for f in fields(decay.DecayProfile)}
_TERM = re.compile(r"[^\W_]+", re.UNICODE)


def parse_time(value: str) -> datetime:
    """Parse a stored instant (``...Z`` or with offset) as an aware UTC datetime."""
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def profile_of(data: Mapping[str, Any] | None) -> decay.DecayProfile:
    """A decay profile from its snake_case keys as recorded (missing keys take the Persona
    defaults); no profile at all is no decay (ADR 0050)."""
    if not data:
        return decay.NO_DECAY
    return decay.DecayProfile(**{k: v for k, v in data.items() if k in _PROFILE_FIELDS})


def _snake(profile: decay.DecayProfile) -> dict[str, Any] | None:
    """The recorded (snake_case) form of a profile; None for no decay."""
    if not profile.decays:
        return None
    return {f: getattr(profile, f) for f in sorted(_PROFILE_FIELDS)}


@dataclass(frozen=True, slots=True)
class DecayDefaults:
    """The decay profiles of an enforced memoryPolicy's ``decayPolicy`` (ADR 0050), for
    atoms created without one of their own: per kind, else per privacy class, else the
    policy's ``defaultProfile``, else no decay. Profiles in the policy's camelCase form."""

    per_kind: Mapping[str, Mapping[str, Any]]
    per_privacy_class: Mapping[str, Mapping[str, Any]]
    default: Mapping[str, Any] | None

    @classmethod
    def of_policy(cls, document: Mapping[str, Any] | None) -> DecayDefaults:
        """The defaults of a recorded policy document (``{"memoryPolicy": ...}`` or the
        block); none when the policy is absent or not enforced (``enabled`` not true)."""
        doc = (document or {}).get("memoryPolicy", document) or {}
        dp = doc.get("decayPolicy") if isinstance(doc, Mapping) else None
        if doc.get("enabled") is not True or not isinstance(dp, Mapping):
            return NO_DEFAULTS
        default = dp.get("defaultProfile")
        return cls(dict(dp.get("perKind") or {}), dict(dp.get("perPrivacyClass") or {}),
                   default if isinstance(default, Mapping) else None)

    def as_json(self) -> dict[str, Any]:
        return {"perKind": dict(self.per_kind), "perPrivacyClass": dict(self.per_privacy_class),
                "defaultProfile": self.default}

    def resolve(self, own: Mapping[str, Any] | None, kind: str | None,
                privacy_class: str | None) -> tuple[dict[str, Any] | None, str]:
        """(recorded profile or None for no decay, where it came from) for one atom:
        ``atom``, ``policy:perKind``, ``policy:perPrivacyClass``, ``policy:defaultProfile``
        or ``none``. A policy profile that does not parse counts as absent (the policy's
        schema refuses one, so only a hand-edited log could hold it)."""
        if own:
            return dict(own), "atom"
        for source, table, key in (("policy:perKind", self.per_kind, kind),
                                   ("policy:perPrivacyClass", self.per_privacy_class,
                                    privacy_class)):
            if key is not None and isinstance(table.get(key), Mapping):
                found = _parsed(table[key])
                if found is not None:
                    return _snake(found), source
        if self.default is not None:
            found = _parsed(self.default)
            if found is not None:
                return _snake(found), "policy:defaultProfile"
        return None, "none"


def _parsed(camel: Mapping[str, Any]) -> decay.DecayProfile | None:
    try:
        return decay.DecayProfile.from_json(camel)
    except (TypeError, ValueError):
        return None


NO_DEFAULTS = DecayDefaults({}, {}, None)


@dataclass(frozen=True, slots=True)
class DecayState:
    """What the stored state needs for salience: ADR 0005's baseline, count and origin."""

    baseline: float
    count: int
    valence: float
    origin: str
    profile: decay.DecayProfile

    def rehearsed(self, at: str) -> DecayState:
        """The state after a rehearsal at ``at`` (``decay.rehearse`` from the old origin)."""
        origin = self.origin if at < self.origin else at
        elapsed = decay.days_since(parse_time(self.origin), parse_time(origin))
        baseline, count = decay.rehearse(self.baseline, self.count, elapsed, self.profile)
        return DecayState(baseline, count, self.valence, origin, self.profile)

    def elapsed(self, now: datetime) -> float:
        return decay.days_since(parse_time(self.origin), now)

    def salience(self, now: datetime) -> float:
        return decay.salience(self.baseline, self.count, self.valence, self.elapsed(now),
                              self.profile)

    def raw_salience(self, now: datetime) -> float:
        return decay.raw_salience(self.baseline, self.count, self.valence, self.elapsed(now),
                                  self.profile)

    def rehearsed_brightness(self, brightness: Sequence[float], at: str) -> list[float]:
        """Details at a rehearsal: every detail decays to ``at``; none is 'referenced'.

        Rehearsal events do not name details, so per ADR 0005 no detail is boosted.
        """
        origin = self.origin if at < self.origin else at
        elapsed = decay.days_since(parse_time(self.origin), parse_time(origin))
        return [decay.rehearse_detail(b, elapsed, self.profile, referenced=False)
                for b in brightness]


def fades_at(state: DecayState, threshold: float = RETRIEVAL_THRESHOLD) -> str | None:
    """The instant salience drops below ``threshold`` for good; None if it never does.

    A pure function of stored state (not of the clock), so it can be stored and indexed:
    ``salience(now) >= threshold`` holds exactly when ``now <= fades_at`` (up to
    rounding at the boundary, which recall re-checks with :func:`decay.salience`).
    An atom that does not decay (ADR 0050) never fades: None.
    """
    if not state.profile.decays:
        return None
    floor = min(1.0, state.profile.valence_protection * abs(state.valence))
    if floor >= threshold:
        return None
    if state.baseline <= 0.0:
        return state.origin
    strength = math.log(state.baseline) + state.count * math.log(state.profile.rehearsal_boost)
    days = (strength - math.log(threshold - floor)) * state.profile.half_life_days / decay.LN2
    if days <= 0.0:
        return state.origin
    try:
        return format_instant(parse_time(state.origin) + timedelta(days=days))
    except OverflowError:
        return FAR_FUTURE


def _normal(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def index_text(text: str | None, gist: str | None, tags: Iterable[str] | None,
               details: Iterable[Mapping[str, Any]] | None) -> str:
    """The text the retrieval indexes see for an atom: text, gist, tags, detail contents."""
    parts = [text or "", gist or ""]
    parts.extend(tags or ())
    parts.extend(str(d.get("content", "")) for d in (details or ()))
    return _normal("\n".join(p for p in parts if p))


def query_terms(query: str, limit: int = 32) -> list[str]:
    """Words of a query (letters and digits only, lower case, deduplicated, at most ``limit``).

    Only these reach an FTS5 MATCH or ``to_tsquery`` expression, quoted, so no query
    syntax can be injected.
    """
    out: list[str] = []
    for term in _TERM.findall(_normal(query).lower()):
        term = term[:64]
        if term not in out:
            out.append(term)
        if len(out) >= limit:
            break
    return out
