"""Command input, validated at the boundary with pydantic.

Only validated values reach the aggregates. The Konshus provenance rule holds
at the source: an ``inferred`` atom needs artifact ids and an extractor, an
``observed`` atom needs artifact ids.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ledger.errors import InputError

ATOM_KINDS = ("fact", "preference", "relationship", "belief", "goal", "skill",  # Konshus
              "episodic", "semantic", "procedural")  # Persona Schema
ARTIFACT_KINDS = ("chat", "document", "journal", "voice", "message", "email", "calendar")
SENSITIVITIES = ("public", "private", "medical", "financial", "legal")
DERIVATIONS = ("stated", "inferred", "observed")
PRIVACY_CLASSES = ("non-pii", "aggregate", "guest-pii", "staff-pii", "sensitive-pii",
                   "commercial-confidential")
CONSENT_BASES = ("service-delivery", "legitimate-interest", "explicit-consent",
                 "legal-obligation", "not-applicable")

REF_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$"
MAX_BODY = 1_000_000
MAX_ATOM_TEXT = 500
MAX_GIST = 2000
#: Key in an atom's ``extensions`` where an import keeps what has no field of its own (the
#: source's times, counts, a status; a tombstone placeholder's mark). The write side reads
#: it (ledger/policy_rules.py exempts placeholders); portability/ writes it.
SIDECAR = "x-memory-ledger-source"

AtomKind = Literal["fact", "preference", "relationship", "belief", "goal", "skill",
                   "episodic", "semantic", "procedural"]
ArtifactKind = Literal["chat", "document", "journal", "voice", "message", "email", "calendar"]
Sensitivity = Literal["public", "private", "medical", "financial", "legal"]
Derivation = Literal["stated", "inferred", "observed"]
PrivacyClass = Literal["non-pii", "aggregate", "guest-pii", "staff-pii", "sensitive-pii",
                       "commercial-confidential"]
ConsentBasis = Literal["service-delivery", "legitimate-interest", "explicit-consent",
                       "legal-obligation", "not-applicable"]


_M = TypeVar("_M", bound=BaseModel)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _Input(BaseModel):
    # defer_build: a model's validator is built when it is first used, not at import
    # (a command uses one or two of them; ADR 0060)
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True,
                              populate_by_name=True, defer_build=True)


class SubjectInput(_Input):
    ref: str = Field(pattern=REF_PATTERN, description="opaque, user-controlled subject id")
    display_name: str | None = Field(default=None, max_length=200)
    locale: str | None = Field(default=None, max_length=35)


class ArtifactInput(_Input):
    subject: str
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    kind: ArtifactKind
    title: str | None = Field(default=None, max_length=1000)
    body: str | None = Field(default=None, max_length=MAX_BODY)
    media_url: str | None = Field(default=None, max_length=2048)
    captured_at: datetime | None = None
    source: str | None = Field(default=None, max_length=200)
    private: bool = False

    _utc_captured = field_validator("captured_at")(_utc)


class Detail(_Input):
    content: str = Field(min_length=1, max_length=2000)
    brightness: float = Field(ge=0.0, le=1.0)


class DecayProfileInput(_Input):
    function: Literal["ebbinghaus"] = "ebbinghaus"
    half_life_days: float = Field(default=14.0, gt=0, alias="halfLifeDays")
    rehearsal_boost: float = Field(default=1.4, ge=1.0, alias="rehearsalBoost")
    valence_protection: float = Field(default=0.3, ge=0.0, le=1.0, alias="valenceProtection")
    minimum_salience: float = Field(default=0.05, ge=0.0, le=1.0, alias="minimumSalience")
    detail_decay_rate: float = Field(default=1.5, gt=0, alias="detailDecayRate")


MAX_SOURCES = 1000
"""The most artifacts one atom cites, and the most sources it may require."""


class AtomProposal(_Input):
    """An atom's fields as a caller proposes them, declared once: the command's
    (:class:`AtomInput`) and the API's (``service.models.AtomIn``) are this model with
    what each adds, so their limits cannot disagree (issue 32)."""

    subject: str | None = None
    text: str = Field(min_length=1, max_length=MAX_ATOM_TEXT,
                      description="One short sentence a person can review (encrypted).")
    kind: AtomKind = "fact"
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    gist: str | None = Field(default=None, max_length=MAX_GIST)
    details: list[Detail] = Field(default_factory=list, max_length=100)
    tags: list[str] = Field(default_factory=list, max_length=100)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    sensitivity: Sensitivity = "private"
    derivation: Derivation = "stated"
    artifact_ids: list[str] = Field(default_factory=list, max_length=MAX_SOURCES,
                                    description="Artifact refs or ids it was drawn from.")
    extractor: str | None = Field(default=None, max_length=200)
    human_reviewed: bool = False
    salience: float = Field(default=0.5, ge=0.0, le=1.0)
    emotional_valence: float = Field(default=0.0, ge=-1.0, le=1.0)
    privacy_class: PrivacyClass | None = None
    consent_basis: ConsentBasis | None = None
    session_id: str | None = Field(default=None, max_length=200)
    min_sources: int = Field(default=1, ge=1, le=MAX_SOURCES)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        for t in tags:
            if not t or len(t) > 100:
                raise ValueError("each tag must have 1 to 100 characters")
        return tags


class AtomInput(AtomProposal):
    """The atom command's input: a proposal with its subject named, its times parsed,
    and what only an import or the ledger itself gives (a decay profile, extensions, the
    source data an importer carries)."""

    subject: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    decay_profile: DecayProfileInput | None = None
    extensions: dict[str, Any] | None = None
    #: Importer-carried source data (sealed under the atom's data key; ADR 0004).
    source_data: dict[str, Any] | None = None

    _utc_valid = field_validator("valid_from", "valid_to")(_utc)

    @field_validator("extensions")
    @classmethod
    def _extensions(cls, ext: dict[str, Any] | None) -> dict[str, Any] | None:
        if ext and any(not k.startswith("x-") for k in ext):
            raise ValueError("extension keys must start with 'x-' (provider namespace)")
        return ext

    @model_validator(mode="after")
    def _provenance(self) -> AtomInput:
        if self.derivation in ("inferred", "observed") and not self.artifact_ids:
            raise ValueError(
                f"an {self.derivation} atom must cite the artifacts it came from "
                "(Konshus provenance rule): give artifact ids, or use derivation 'stated'")
        if self.derivation == "inferred" and not self.extractor:
            raise ValueError("an inferred atom must name its extractor (Konshus provenance rule)")
        if self.valid_from and self.valid_to and self.valid_to < self.valid_from:
            raise ValueError("valid_to is earlier than valid_from")
        return self


class AtomCorrection(_Input):
    """What changes in a correction; unset fields are carried over from the old atom."""

    text: str = Field(min_length=1, max_length=MAX_ATOM_TEXT)
    gist: str | None = Field(default=None, max_length=MAX_GIST)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    valid_from: datetime | None = None
    reason: str | None = Field(default=None, max_length=500)
    derivation: Derivation | None = None
    artifact_ids: list[str] | None = None
    extractor: str | None = None

    _utc_valid = field_validator("valid_from")(_utc)


def parse(model: type[_M], data: dict[str, Any]) -> _M:
    """Validate ``data`` or raise :class:`InputError` naming each bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors(include_input=False, include_url=False):
            loc = ".".join(str(p) for p in err["loc"]) or model.__name__
            problems.append(f"{loc}: {err['msg']}")
        raise InputError("invalid input: " + "; ".join(problems),
                         hint="fix the fields named above and run the command again") from None


def is_uuid(value: str) -> bool:
    """True when ``value`` reads as a UUID (an id rather than a ref)."""
    try:
        UUID(value)
    except ValueError:
        return False
    return True
