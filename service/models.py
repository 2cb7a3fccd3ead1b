"""The facade's typed values: what a surface sends in and gets back (ADR 0027).

Inputs are pydantic models (the HTTP API and the MCP server take them as request bodies,
so their JSON Schemas are the API's). Outputs are pydantic models too, so every surface
renders the same fields; a deep report whose shape belongs to a spec (an Evidence Pack's
predicate, the audit report, an erasure's reach record) travels as one typed field of
``dict[str, Any]`` and is documented where it is specified.

Content fields that were erased read as the ``ERASED`` marker, never as a plaintext or
an empty string, in every output here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

from ledger.inputs import (  # the application's limits and its atom's fields
    MAX_ATOM_TEXT,
    MAX_GIST,
    REF_PATTERN,
    AtomProposal,
)
from ledger.inputs import AtomKind as AtomKind  # the surfaces name these from here
from ledger.inputs import Derivation as Derivation
from ledger.inputs import Detail as Detail
from ledger.inputs import Sensitivity as Sensitivity


class _FormatName:
    """A format's name, checked against the registry of :mod:`portability.formats`
    when a value arrives, and published as the registry's enum when a schema is drawn: a
    format registered later is accepted and listed without touching this module."""

    def __init__(self, direction: Literal["read", "write"], shape: str | None = None) -> None:
        self.direction, self.shape = direction, shape

    def _names(self) -> tuple[str, ...]:
        from portability import formats

        return formats.names(self.direction, shape=cast(Any, self.shape))

    def _check(self, value: str) -> str:
        if value not in self._names():
            raise ValueError(f"unknown format {value!r}; use one of {', '.join(self._names())}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check,
                                                            core_schema.str_schema())

    def __get_pydantic_json_schema__(self, schema: core_schema.CoreSchema,
                                     handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {"type": "string", "enum": list(self._names())}


#: A format an export is written in; :data:`ImportFormat` one an import is read from;
#: :data:`DocumentFormat` one written as a single JSON document (what an MCP tool carries).
ExportFormat = Annotated[str, _FormatName("write")]
ImportFormat = Annotated[str, _FormatName("read")]
DocumentFormat = Annotated[str, _FormatName("write", "document")]
RedactMode = Literal["soft", "archive", "hard"]
OnSimilar = Literal["add", "rehearse", "supersede", "refuse"]
"""What an add does when the subject already has memories that say the same (ADR 0052)."""

MAX_BATCH = 1_000


_I = TypeVar("_I", bound="_In")


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @classmethod
    def unchecked(cls: type[_I], **fields: Any) -> _I:
        """The input as given, not validated here: for the local caller (the CLI), whose
        input the application validates with its own limits and words (ledger/inputs.py,
        ADR 0040). Other surfaces validate (the model's limits are the API's)."""
        return cast(_I, cls.model_construct(**fields))


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)


# ----------------------------------------------------------------------------- subjects
class SubjectIn(_In):
    ref: str = Field(pattern=REF_PATTERN, description="The subject's opaque id (not an e-mail "
                                                      "or a name).")
    display_name: str | None = Field(default=None, max_length=200,
                                     description="Encrypted under the subject's data key.")
    locale: str | None = Field(default=None, max_length=35)


class SubjectOut(_Out):
    subject_id: str
    ref: str
    display_name: str | None
    locale: str | None
    content_erased: bool


# ----------------------------------------------------------------------------- artifacts
class ArtifactIn(_In):
    subject: str = Field(description="Subject ref or id.")
    kind: Literal["chat", "document", "journal", "voice", "message", "email", "calendar"]
    ref: str | None = Field(default=None, pattern=REF_PATTERN)
    title: str | None = Field(default=None, max_length=1_000)
    body: str | None = Field(default=None, max_length=1_000_000)
    source: str | None = Field(default=None, max_length=200)
    private: bool = False
    captured_at: str | None = Field(default=None, description="RFC 3339 instant.")


class ArtifactOut(_Out):
    artifact_id: str
    ref: str | None
    subject_id: str
    subject: str
    kind: str
    captured_at: str | None
    source: str | None
    private: bool
    content_erased: bool
    title: str | None
    body: str | None


# ----------------------------------------------------------------------------- atoms
# The atom's fields and limits are declared once, on the command (ledger.inputs.
# AtomProposal); the API's model adds its times as strings and the update-or-add choice.
class AtomIn(AtomProposal):
    """A memory proposed about a subject: its fields and limits are the ledger's atom
    command's, its times RFC 3339 strings; ``on_similar`` says what to do when the subject
    already has a memory that says the same."""

    subject: str | None = Field(default=None, description=(
        "Subject ref or id; may be left out when the credential sees exactly one subject "
        "(that one is meant)."))
    valid_from: str | None = None
    valid_to: str | None = None
    on_similar: OnSimilar | None = Field(
        default="add",
        description="When the subject already has memories that say the same thing: "
                    "'add' adds anyway and lists them in `similar`; 'rehearse' records a "
                    "rehearsal of the most similar one instead of a new memory; "
                    "'supersede' adds this one as the correction of the most similar "
                    "one; 'refuse' writes nothing and names them; null adds without "
                    "looking (no `similar`: a bulk loader's choice) (ADR 0052).")

    def as_command(self) -> dict[str, Any]:
        data = self.model_dump(exclude={"on_similar"})
        data["details"] = [d.model_dump() for d in self.details]
        return data

    @classmethod
    def unchecked(cls, **fields: Any) -> AtomIn:
        """The input as given, not validated here (``_In.unchecked``): the application
        validates the same fields with the same limits, in its own words."""
        return cls.model_construct(**fields)


class SimilarOut(_Out):
    """A memory of the same subject that says the same thing (ADR 0052)."""

    atom_id: str
    score: float = Field(description="Cosine similarity of the two texts, 0 to 1.")


class AtomAdded(_Out):
    atom_id: str = Field(description="The new atom, or the rehearsed one "
                                     "(outcome 'rehearsed').")
    archived: list[str] = Field(default_factory=list,
                                description="Atoms the policy's maxAtoms archived.")
    outcome: Literal["added", "rehearsed", "superseded"] = "added"
    supersedes: str | None = Field(default=None,
                                   description="The similar atom this one superseded.")
    similar: list[SimilarOut] = Field(
        default_factory=list,
        description="The subject's memories that say the same thing, most similar first.")


class SourcedAtomAdded(AtomAdded):
    artifact_id: str | None = Field(
        description="The source artifact captured with it (none when the memory was "
                    "rehearsed instead: nothing cites it, ADR 0052).")


class AtomsAdded(_Out):
    atom_ids: list[str]
    archived: list[str] = Field(default_factory=list)


class Rehearsed(_Out):
    atom_id: str
    rehearsal_count: int


class AtomExpired(_Out):
    atom_id: str
    status: Literal["expired"] = "expired"


class KeyAuthorized(_Out):
    kid: str
    name: str
    role: str


class KeyRevoked(_Out):
    kid: str
    revoked: bool = True


class KeyRotated(_Out):
    name: str
    old_kid: str
    new_kid: str


class KekRotated(_Out):
    """A finished KEK rotation (`ledger keys rotate-kek`, ADR 0044)."""

    epoch: int
    previous: int
    store: str
    resumed: bool
    rewrapped: int
    destroyed: list[int]
    event_ids: list[str]
    started_at: str | None
    finished_at: str | None


class KekEpoch(_Out):
    """One KEK epoch of the keystore (`ledger keys epochs`)."""

    epoch: int
    store: str
    state: str
    started_at: str
    destroyed_at: str | None
    keys: int


class BackupWritten(_Out):
    """A backup written by `ledger backup` (governance/backup.py, ADR 0045): the folder,
    the log it holds (size, root, time of its last event), the KEK epochs its keys are
    wrapped under, each file with its digest, and what it leaves to pg_dump."""

    backup: str
    ledger_id: str
    created_at: str
    log: dict[str, Any]
    kek: dict[str, Any]
    files: list[dict[str, Any]]
    with_keys: bool
    event_store: dict[str, Any]
    keystore: dict[str, Any]
    journal: dict[str, Any]
    notes: list[str]
    warnings: list[str]


class JournalExported(_Out):
    """The erasure journal brought up to the log's head and copied out (`ledger journal
    export`): its size (the checkpoint it covers), counts and file size; ``content`` is the
    signed file itself (ids, positions and times only)."""

    out: str | None
    ledger_id: str
    size: int
    head_time: str | None
    generated_at: str
    keys: int
    tombstones: int
    batches: int
    file_bytes: int
    content: bytes


class Restored(_Out):
    """A home restored from a backup (`ledger restore`, governance/restore.py): the
    restore's report whole (the backup and journal, the rollback if any, the erasures
    re-applied, the new KEK epoch, the read models, the verification)."""

    home: str
    ledger_id: str
    report: dict[str, Any]


class PolicyRecorded(_Out):
    event_id: str


class CheckpointSigned(_Out):
    """A checkpoint just signed (`ledger checkpoint`), with each witness's answer."""

    origin: str
    size: int
    root_hash: str
    note: str
    witnesses: list[dict[str, Any]] = Field(default_factory=list)


class LogVkey(_Out):
    origin: str
    vkey: str


class WitnessUsed(_Out):
    """A witness added to config.toml's ``[[witnesses]]`` (`ledger witness use`)."""

    url: str
    vkey: str


class WitnessForgotten(_Out):
    removed: str = Field(description="The vkey or URL given.")


class WitnessPolicyOut(_Out):
    """A c2sp.org/tlog-policy file for this ledger's checkpoints (`ledger witness policy`):
    its log key, the witnesses it asks and a quorum of them."""

    policy: str = Field(description="The policy file's text.")
    log: str = Field(description="The log's vkey (named by its origin).")
    witnesses: list[WitnessUsed]
    quorum: str = Field(description="The quorum, in words.")


class AtomCorrectionIn(_In):
    text: str | None = Field(default=None, min_length=1, max_length=MAX_ATOM_TEXT)
    gist: str | None = Field(default=None, max_length=MAX_GIST)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    reason: str | None = Field(default=None, max_length=500)


class AtomOut(_Out):
    """An atom's current state; ``text``/``gist``/``details``/``tags`` read ``ERASED``
    once its data key is destroyed."""

    model_config = ConfigDict(frozen=True, extra="allow")
    atom_id: str
    subject_id: str
    subject: str
    ref: str | None
    kind: str
    status: str
    text: str | None
    content_erased: bool


class HistoryEntry(_Out):
    event_id: str
    seq: int
    atom_id: str
    topic: str
    timestamp: str
    signer: str
    summary: dict[str, Any]


class EventIds(_Out):
    event_ids: list[str]


class Corrected(_Out):
    atom_id: str
    new_atom_id: str


class RedactIn(_In):
    mode: RedactMode
    reason: str = Field(min_length=1, max_length=1_000)


class ErasureOutcome(_Out):
    """A hard redaction, a deletion or a request's execution, as `ledger ... --json`
    reports it: the batch, the signed events and the reach record."""

    model_config = ConfigDict(frozen=True, extra="allow")
    batch_id: str | None = None
    event_ids: list[str] = Field(default_factory=list)
    tombstone_ids: list[str] = Field(default_factory=list,
                                     description="The atom.redacted / deleted events.")


class ErasureReport(_Out):
    """What an erasure command of the CLI did (``ledger redact|unredact|delete``,
    ``artifact delete``, ``redact-user``, ``review resolve``, ``requests resume``): the
    governance layer's report whole, as their ``--json`` prints it (a dry run's plan, a
    batch's events and reach record, a request finished or found completed), and the
    atom acted on, as resolved, when one was named."""

    report: dict[str, Any]
    atom_id: str | None = None


class RepairReport(_Out):
    """`ledger repair`: the data keys stored for events never committed (orphans)."""

    orphan_keys: list[str]
    discarded: int


class PackWritten(_Out):
    """An Evidence Pack written to a folder (`ledger evidence-pack BATCH --out DIR`)."""

    pack: str
    files: list[str] = Field(description="Its files, relative to the folder, sorted.")
    zip: str | None = Field(default=None, description="DIR.zip, when asked for.")


class PackCountersigned(_Out):
    pack: str
    signed_by: str = Field(description="The key's name, as given.")


class RehearseIn(_In):
    atom_ids: list[str] = Field(min_length=1, max_length=MAX_BATCH)
    session_id: str | None = Field(default=None, max_length=200)


# ----------------------------------------------------------------------------- recall
class RecallIn(_In):
    query: str = Field(min_length=1, max_length=2_000)
    subject: str | None = Field(default=None, description=(
        "Subject ref or id; may be left out when the credential sees exactly one subject "
        "(that one is meant)."))
    k: int = Field(default=5, ge=1, le=100)
    session_id: str | None = Field(default=None, max_length=200)
    rehearse: bool = Field(default=True, description="Record a signed rehearsal event for "
                                                     "each recalled memory.")
    since: str | None = Field(default=None, max_length=40, description=(
        "Only memories true or said from this date or instant on (ADR 0051)."))
    until: str | None = Field(default=None, max_length=40, description=(
        "Only memories true or said up to this date (its whole day) or instant."))


class RecallItemOut(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    atom_id: str
    text: str
    marker: str
    rehearsed: bool


class RecallOut(_Out):
    prompt: str = Field(description='The "What you remember" block for a model\'s context.')
    items: list[RecallItemOut]
    eligible: int
    pool: int
    omitted: list[dict[str, str]] = Field(default_factory=list, description=(
        "Matched memories left out, the first 20 by id with the reason (archived, "
        "redacted, erased, superseded, expired, inactive, not-valid-at-time, "
        "outside-since-until); never their text."))
    omitted_counts: dict[str, int] = Field(default_factory=dict, description=(
        "Every matched memory left out, counted by reason."))


PAGE = 100
"""Rows of a listing per answer of the HTTP API and the MCP tool, unless asked otherwise."""
MAX_PAGE = 1000
"""The most rows one answer of a listing holds: every response is bounded."""


class MemoryRow(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    atom_id: str
    subject_id: str
    status: str
    salience_now: float
    markers: list[str]
    content_erased: bool
    text: str | None


# ----------------------------------------------------------------------------- portability
class ExportOut(_Out):
    format: ExportFormat
    subject: str
    media_type: str
    filename: str
    content: bytes = Field(description="The document (JSON) or the .mem bundle as a zip.")
    counts: dict[str, int]


class ImportIn(_In):
    format: ImportFormat
    subject: str | None = None
    dry_run: bool = False
    skip_unsupported: bool = False


class ImportReport(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    subject: str
    created: dict[str, int]
    skipped: dict[str, int]
    refused: dict[str, int]


# ----------------------------------------------------------------------------- governance
class ErasureRequestIn(_In):
    subject: str = Field(description="Subject ref or id.")
    reason: str = Field(min_length=1, max_length=1_000)
    legal_basis: str | None = Field(default=None, max_length=200)
    identifiers: list[str] = Field(default_factory=list, max_length=50,
                                   description="Names or e-mails that find references in "
                                               "others' memories: flagged for review, never "
                                               "erased.")
    sessions: list[str] = Field(default_factory=list, max_length=100)


class RequestStatus(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    request_id: str
    subject_id: str
    status: str
    received_at: str | None
    ack_due: str | None
    complete_due: str | None
    completed_at: str | None
    overdue: bool
    batch_id: str | None


class RequestRejectIn(_In):
    """Why a right-to-be-forgotten request is refused (ADR 0047). The reason is kept in
    clear in the signed log and shown in the request register: say why without naming
    anyone."""

    code: Literal["identity-not-verified", "manifestly-unfounded", "excessive",
                  "legal-exemption", "withdrawn", "duplicate", "other"] = Field(
        default="other", description="Why, as a code (ledger.domain.REJECTION_CODES).")
    reason: str = Field(min_length=1, max_length=500,
                        description="In clear in the log and the register; no personal data.")


class RequestRegister(_Out):
    """The request register (ADR 0048, governance/register.py): one typed row per request
    (``columns`` in order), when it was made, for which period, and how many kept Evidence
    Packs were verified and cited or refused (None when no packs folder was read)."""

    generated_at: str
    date_from: str | None
    date_to: str | None
    columns: list[str]
    rows: list[dict[str, Any]]
    packs_verified: int | None = None
    packs_refused: dict[str, str] | None = None


class ErasurePlanOut(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    request_id: str
    subject_id: str
    plan_digest: str
    targets: dict[str, list[str]]
    flag_for_review: list[str]


class ExecuteIn(_In):
    plan_digest: str = Field(min_length=8, max_length=128,
                             description="The digest of the plan the operator approved: the "
                                         "execution refuses, writing nothing, if the plan "
                                         "changed since.")


class DeletionIn(_In):
    """Why an atom is deleted: in the request's body, not its URL, since a reason may name
    a person and URLs end up in proxies' logs (ADR 0043)."""

    reason: str = Field(min_length=1, max_length=1_000,
                        description="Recorded, encrypted, in the signed events.")


class ArtifactDeletionIn(DeletionIn):
    flag_unsourced: bool = Field(default=False, description="Flag the atoms left without "
                                 "sources for review instead of deleting them.")


class PackOut(_Out):
    batch_id: str
    filename: str
    content: bytes
    verification: dict[str, Any]


class CheckpointOut(_Out):
    origin: str
    size: int
    root_hash: str
    note: str = Field(description="The C2SP signed note, as text.")


class VerificationOut(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    ok: bool = Field(description="No failure was found (see `checked`: with no events "
                                 "to check, nothing was).")
    events: int = Field(description="Events verified: those after the latest checkpoint.")
    checked: bool = Field(default=True, description="False when there was nothing to check "
                                                    "yet (no event after the checkpoint).")
    detail: str | None = Field(default=None, description="The verdict in words.")
    checked_at: str
    failure: dict[str, Any] | None = None


class FlagOut(_Out):
    atom_id: str
    subject_id: str | None
    flag: str
    reason: str | None
    flagged_at: str


class RosterEntry(_Out):
    model_config = ConfigDict(frozen=True, extra="allow")
    kid: str
    name: str | None
    role: str
    valid_from: str | None
    revoked_from: str | None


class Problem(_Out):
    """RFC 9457 problem details, as every surface reports an error."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    hint: str | None = None


# ----------------------------------------------------------------------------- the CLI's reads
# (read models, sweeps and receipts: `ledger projections ...`, `sweep`, `policy check`,
# `receipt`, `import`/`export` of files)
class ReadModelStatus(_Out):
    """One read model against the log (`ledger projections status`)."""

    name: str
    version: str
    position: int
    head: int
    lag: int
    events: int
    compact_pending: bool
    updated_at: str | None
    state: str = Field(description="current, behind, or stale (its version changed: "
                                   "rebuild it).")


class ReachProbe(_Out):
    """Every route's reach of one item (`ledger projections probe`)."""

    item_id: str
    routes: list[dict[str, Any]] = Field(description="Per route: what it checked and the "
                                                     "hits that still reach the item.")
    reachable: list[str] = Field(description="The routes that still reach it.")


class ReadModelsRebuilt(_Out):
    """A rebuild of read models from the whole log (`ledger projections rebuild`)."""

    report: dict[str, Any] = Field(description="Per model: events applied and time taken.")
    head: int
    notifications: int
    seconds: float


class ExportWritten(_Out):
    """An export written to files (`ledger export`)."""

    format: ExportFormat
    subject: str
    written: list[str]
    counts: dict[str, Any]


class SweepReport(_Out):
    """What a sweep of the policy's retention and decay rules found due and did."""

    model_config = ConfigDict(frozen=True, extra="allow")
    status: Literal["no-policy", "nothing-due", "planned", "swept"]
    now: str
    dry_run: bool
    due: list[dict[str, Any]]
    archived: dict[str, Any]
    erased: dict[str, Any]
    tombstone_records_dropped: dict[str, Any]


class PolicyCheck(_Out):
    """Stored memories checked against the policy (Persona Schema §8)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    policy_in_force: bool
    warnings: list[dict[str, Any]]


class ErasureReceipt(_Out):
    """The signed erasure receipt of a completed request (ADR 0023), and its one-page
    HTML for the person when asked."""

    request_id: str
    content: bytes
    html: str | None = None


class CertificateOut(_Out):
    """A certificate of erasure (ADR 0046): its signed statement (the file an auditor
    verifies), the PDF and HTML renderings of it, the Evidence Pack it rests on as a zip
    when the certificate built that pack itself, and the check of all of it."""

    batch_id: str
    statement: bytes = Field(description="The signed statement: canonical JSON of a DSSE "
                                         "envelope, then a newline.")
    pdf: bytes
    html: str
    pack_zip: bytes | None = Field(default=None, description="The Evidence Pack it rests "
                                                             "on, when built for it.")
    pack_digest: str = Field(description="SHA-256 of the pack's signed statement (hex).")
    document: dict[str, Any] = Field(description="The signed document, without its roster.")
    verification: dict[str, Any]


class CertificateWritten(_Out):
    """A certificate written to files (`ledger certificate BATCH --out cert.pdf`)."""

    certificate: str = Field(description="The PDF.")
    statement: str = Field(description="The signed statement (JSON), beside the PDF.")
    html: str | None = None
    pack: str = Field(description="The Evidence Pack it rests on: the one given, or the zip "
                                  "written beside the PDF.")
    pack_digest: str
    document: dict[str, Any]
    verification: dict[str, Any]
