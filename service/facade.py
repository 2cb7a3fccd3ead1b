"""The typed facade every surface calls (ADR 0027).

One :class:`MemoryService` per open ledger: it holds the write side
(:class:`ledger.application.LedgerApp`) and the read models
(:class:`projections.service.Projections`), and offers every use case as a method that
takes the :class:`service.caller.Caller` first and returns a value of
:mod:`service.models`. Surfaces (the CLI, the HTTP API, the MCP server, the console)
parse, authenticate, call these methods and render; they hold no domain logic.

Scope is enforced here, once for every surface:
* the caller's role decides the use case (assistants read and write memory of their
  subjects; auditors read and verify; operators also erase, build packs and sweep);
* a subject, atom, artifact, request or batch outside the caller's subjects or tenant
  answers :class:`~ledger.errors.NotFound` with the same wording as an unknown id;
* operator acts are signed with the caller's ``signing_key`` exactly as the CLI's
  ``--operator`` signs them.

Threads: a ``MemoryService`` is not thread-safe (the write side signs under a
per-command mapper state, the read models keep connections). A server gives each worker
thread its own service, or serialises calls (``server/``).
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import clock
from ledger.errors import InputError, LedgerError, NotFound
from ledger.inputs import is_uuid
from service.caller import LOCAL, Caller
from service.models import (
    ArtifactIn,
    ArtifactOut,
    AtomAdded,
    AtomCorrectionIn,
    AtomExpired,
    AtomIn,
    AtomOut,
    AtomsAdded,
    CheckpointOut,
    CheckpointSigned,
    Corrected,
    ErasureOutcome,
    ErasurePlanOut,
    ErasureReceipt,
    ErasureReport,
    ErasureRequestIn,
    EventIds,
    ExportFormat,
    ExportOut,
    ExportWritten,
    FlagOut,
    HistoryEntry,
    ImportIn,
    ImportReport,
    KeyAuthorized,
    KeyRevoked,
    KeyRotated,
    LogVkey,
    MemoryRow,
    PackCountersigned,
    PackOut,
    PackWritten,
    PolicyCheck,
    PolicyRecorded,
    ReachProbe,
    ReadModelsRebuilt,
    ReadModelStatus,
    RecallIn,
    RecallItemOut,
    RecallOut,
    RedactIn,
    Rehearsed,
    RepairReport,
    RequestStatus,
    RosterEntry,
    SourcedAtomAdded,
    SubjectIn,
    SubjectOut,
    SweepReport,
    VerificationOut,
    WitnessForgotten,
    WitnessUsed,
)

if TYPE_CHECKING:
    from keys.signing import Signer
    from ledger.application import LedgerApp
    from ledger.domain import Artifact, Atom
    from ledger.verification import LedgerVerdict
    from projections.service import Projections

ATOM_CONTENT = ("text", "gist", "details", "tags")
EXPORT_MEDIA = {"konshus": "application/json", "persona": "application/json",
                "mem": "application/zip"}


class Forbidden(NotFound):
    """The caller's role may not run this use case. A subclass of NotFound so that a
    surface which does not distinguish them leaks nothing; the HTTP API answers 403 for a
    role that is refused outright (the use case exists, the caller may not run it) and
    404 for an id outside the caller's scope."""


def _erased_marker() -> str:
    from ledger.domain import ERASED

    return str(ERASED)


class MemoryService:
    """Every use case of one ledger, scoped by the caller (module docstring)."""

    def __init__(self, app: LedgerApp,
                 projections: Projections | Callable[[], Projections]) -> None:
        """``projections``: the read models, or how to open them when a use case first
        needs them (the CLI's commands that read only the log never open them)."""
        self.app = app
        self._proj: Projections | None = None
        self._open_proj: Callable[[], Projections] | None = None
        if callable(projections):
            self._open_proj = projections
        else:
            self._proj = projections
        self._refs: dict[str, str] = {}  # subject id -> stored ref (refs never change)

    @property
    def proj(self) -> Projections:
        if self._proj is None:
            assert self._open_proj is not None
            self._proj = self._open_proj()
        return self._proj

    @property
    def proj_opened(self) -> bool:
        return self._proj is not None

    # ------------------------------------------------------------------ scope
    def _require(self, caller: Caller, *roles: str) -> None:
        if caller.role not in roles:
            article = "an" if caller.role[0] in "aeiou" else "a"
            raise Forbidden(f"{article} {caller.role} credential may not do this",
                            hint=f"use a credential with the {' or '.join(roles)} role")

    def _stored_ref_of(self, subject_id: str) -> str:
        ref = self._refs.get(subject_id)
        if ref is None:
            ref = self.app.get_subject(subject_id).ref
            self._refs[subject_id] = ref
        return ref

    def _visible(self, caller: Caller, subject_id: str) -> str | None:
        """The subject's ref as the caller names it, or None when out of its scope."""
        return caller.visible_ref(self._stored_ref_of(subject_id))

    def subject_id(self, caller: Caller, subject: str) -> str:
        """Resolve a subject ref (as the caller names it) or id inside the caller's scope."""
        if caller.is_local:
            return str(self.app.resolve_subject(subject))  # the application's words
        missing = NotFound(f"no subject {subject!r} in this ledger",
                           hint="register it first (`ledger subject add`, POST /v1/subjects)")
        try:
            if caller.tenant is not None and not is_uuid(subject):
                sid = str(self.app.resolve_subject(caller.stored_ref(subject)))
            else:
                sid = str(self.app.resolve_subject(subject))
        except NotFound:
            raise missing from None
        if self._visible(caller, sid) is None:
            raise missing
        return sid

    def _item_id(self, caller: Caller, kind: str, ref_or_id: str) -> UUID:
        missing = NotFound(f"no {kind} {ref_or_id!r} in this ledger")
        try:
            if caller.tenant is not None and not is_uuid(ref_or_id):
                return self.app.resolve(kind, caller.stored_ref(ref_or_id))
            return self.app.resolve(kind, ref_or_id)
        except NotFound:
            raise missing from None

    def _atom(self, caller: Caller, atom: str) -> Atom:
        if caller.is_local:
            return self.app.get_atom(atom)  # the application's words
        aid = self._item_id(caller, "atom", atom)
        try:
            found = self.app.get_atom(aid)
        except NotFound:
            raise NotFound(f"no atom {atom!r} in this ledger") from None
        if self._visible(caller, found.subject_id) is None:
            raise NotFound(f"no atom {atom!r} in this ledger")
        return found

    def _artifact(self, caller: Caller, artifact: str) -> Artifact:
        if caller.is_local:
            return self.app.get_artifact(artifact)  # the application's words
        aid = self._item_id(caller, "artifact", artifact)
        a = self.app.get_artifact(str(aid))
        if self._visible(caller, a.subject_id) is None:
            raise NotFound(f"no artifact {artifact!r} in this ledger")
        return a

    def _artifact_subject(self, caller: Caller, artifact: str) -> tuple[UUID, str]:
        a = self._artifact(caller, artifact)
        return a.id, a.subject_id

    def _signing_key(self, caller: Caller) -> str:
        """The key that signs the caller's operator acts, as given (the CLI's --operator;
        a token's signing key); the home's ``operator`` key when none is given."""
        return "operator" if caller.signing_key is None else caller.signing_key

    def _acting(self, caller: Caller) -> AbstractContextManager[None]:
        """Operator events signed inside record which credential acted (by id)."""
        return self.app.acting_for(None if caller.credential_id == LOCAL
                                   else caller.credential_id)

    # ------------------------------------------------------------------ subjects
    def register_subject(self, caller: Caller, data: SubjectIn) -> SubjectOut:
        self._require(caller, "assistant", "operator")
        ref = caller.stored_ref(data.ref)
        if caller.subjects is not None and data.ref not in caller.subjects:
            raise Forbidden(f"this credential may not register subject {data.ref!r}",
                            hint="its subjects are fixed when the token is created")
        sid = self.app.register_subject(
            {"ref": ref, "display_name": data.display_name, "locale": data.locale},
            caller.writer_key)
        return self.get_subject(caller, str(sid))

    def get_subject(self, caller: Caller, subject: str) -> SubjectOut:
        sid = self.subject_id(caller, subject)
        s = self.app.get_subject(sid)
        return SubjectOut(subject_id=str(s.id), ref=caller.visible_ref(s.ref) or s.ref,
                          display_name=_erased_marker() if s.content_erased else s.display_name,
                          locale=s.locale, content_erased=s.content_erased)

    def list_subjects(self, caller: Caller) -> list[SubjectOut]:
        from ledger.domain import Subject

        out = []
        for n in self.app.notifications(1, 10**9, topics=[Subject.Created.TOPIC]):
            sid = str(n.originator_id)
            if self._visible(caller, sid) is not None:
                out.append(self.get_subject(caller, sid))
        return out

    # ------------------------------------------------------------------ artifacts
    def capture_artifact(self, caller: Caller, data: ArtifactIn) -> ArtifactOut:
        aid = self.app.capture_artifact(self._artifact_command(caller, data), caller.writer_key)
        return self.get_artifact(caller, str(aid))

    def _artifact_command(self, caller: Caller, data: ArtifactIn) -> dict[str, Any]:
        self._require(caller, "assistant", "operator")
        cmd = data.model_dump()
        if caller.is_local:  # the application resolves and checks, in its words
            return cmd
        sid = self.subject_id(caller, data.subject)
        cmd["subject"] = sid
        if data.ref is not None:
            self._ref_free(caller, "artifact", data.ref)
        cmd["ref"] = caller.stored_ref(data.ref) if data.ref is not None else None
        if data.captured_at is not None:
            cmd["captured_at"] = clock.parse_instant(data.captured_at,
                                                     "captured_at").isoformat()
        return cmd

    def get_artifact(self, caller: Caller, artifact: str) -> ArtifactOut:
        a = self._artifact(caller, artifact)
        sid = a.subject_id
        erased = _erased_marker()
        return ArtifactOut(
            artifact_id=str(a.id), ref=caller.item_ref(a.ref) if a.ref else None,
            subject_id=sid, subject=self._visible(caller, sid) or sid, kind=a.kind,
            captured_at=a.captured_at, source=erased if a.content_erased else a.source,
            private=a.private, content_erased=a.content_erased,
            title=erased if a.content_erased else a.title,
            body=erased if a.content_erased else a.body)

    def delete_artifact(self, caller: Caller, artifact: str, reason: str,
                        flag_unsourced: bool = False) -> ErasureOutcome:
        """Delete an artifact (the subject's own removal: same mechanics as hard
        erasure); atoms citing it are re-evaluated (Konshus cascade). A reason is
        required; the outcome carries the tombstones' event ids (:meth:`erase_artifact`
        is the same act as `ledger artifact delete` reports it)."""
        return _outcome(self.erase_artifact(caller, artifact, _reason(reason),
                                            flag_unsourced).report, self.app)

    # ------------------------------------------------------------------ atoms
    def _ref_free(self, caller: Caller, kind: str, ref: str) -> None:
        """A scoped caller whose new ref is taken learns that, and nothing more: not the
        existing item's id, nor whose it is (the application's message names the id)."""
        if caller.unrestricted:
            return
        from ledger.errors import ConflictError

        try:
            self.app.resolve(kind, caller.stored_ref(ref))
        except NotFound:
            return
        raise ConflictError(f"the {kind} ref {ref!r} is already in use; nothing was written",
                            hint="choose another ref, or leave it out for a random id")

    def _atom_command(self, caller: Caller, data: AtomIn) -> dict[str, Any]:
        cmd = data.as_command()
        if caller.is_local:  # the application resolves and checks, in its words
            return cmd
        cmd["subject"] = self.subject_id(caller, data.subject)
        if data.ref is not None:
            self._ref_free(caller, "atom", data.ref)
            cmd["ref"] = caller.stored_ref(data.ref)
        cmd["artifact_ids"] = [str(self._artifact_subject(caller, a)[0])
                               for a in data.artifact_ids]
        for field in ("valid_from", "valid_to"):
            if cmd[field] is not None:
                cmd[field] = clock.parse_instant(cmd[field], field).isoformat()
        return cmd

    def add_atom(self, caller: Caller, data: AtomIn) -> AtomAdded:
        added = self.add_atoms(caller, [data])
        return AtomAdded(atom_id=added.atom_ids[0], archived=added.archived)

    def add_atom_with_source(self, caller: Caller, data: AtomIn, source: ArtifactIn
                             ) -> SourcedAtomAdded:
        """An atom and the artifact it was drawn from, captured and cited in one signed
        command: both are written, or neither."""
        if source.subject != data.subject:
            raise InputError("the source artifact must be of the memory's subject",
                             hint="leave the source's subject out: it is the memory's")
        source_cmd = self._artifact_command(caller, source)
        ids = self.app.add_atoms([self._atom_command(caller, data)], caller.writer_key,
                                 sources=[source_cmd])
        return SourcedAtomAdded(atom_id=str(ids[0]),
                                archived=list(getattr(self.app, "last_archived", [])),
                                artifact_id=str(self.app.last_sources[0]))

    def add_atoms(self, caller: Caller, items: Sequence[AtomIn]) -> AtomsAdded:
        """Record atoms in one signed command: all of them, or none."""
        self._require(caller, "assistant", "operator")
        if not items:
            raise InputError("no atoms to add")
        commands = [self._atom_command(caller, d) for d in items]
        ids = self.app.add_atoms(commands, caller.writer_key)
        return AtomsAdded(atom_ids=[str(i) for i in ids],
                          archived=list(getattr(self.app, "last_archived", [])))

    def add_atoms_grouped(self, items: Sequence[tuple[Caller, AtomIn]]
                          ) -> list[AtomAdded | LedgerError]:
        """Group commit (server): atoms of several callers in one signed command.

        Each item is resolved under its own caller's scope first; one refused there fails
        alone. The rest are written as one command; if that command fails as a whole (two
        items with the same ref, say) each is written on its own, so an item's result is
        exactly what it would have been alone."""
        results: list[AtomAdded | LedgerError] = []
        commands: list[tuple[int, dict[str, Any]]] = []
        for n, (caller, data) in enumerate(items):
            try:
                self._require(caller, "assistant", "operator")
                commands.append((n, self._atom_command(caller, data)))
                results.append(InputError("not written"))  # replaced below
            except LedgerError as e:
                results.append(e)
        if not commands:
            return results
        try:
            ids = self.app.add_atoms([c for _, c in commands])
            archived = list(getattr(self.app, "last_archived", []))
            for (n, _), aid in zip(commands, ids, strict=True):
                results[n] = AtomAdded(atom_id=str(aid), archived=archived)
            return results
        except LedgerError as e:
            if len(commands) == 1:
                results[commands[0][0]] = e
                return results
        for n, cmd in commands:
            try:
                aid = self.app.add_atoms([cmd])[0]
                results[n] = AtomAdded(atom_id=str(aid),
                                       archived=list(getattr(self.app, "last_archived", [])))
            except LedgerError as e:
                results[n] = e
        return results

    def get_atom(self, caller: Caller, atom: str) -> AtomOut:
        found = self._atom(caller, atom)
        data = found.as_dict()
        if data["content_erased"]:
            for k in ATOM_CONTENT:
                data[k] = _erased_marker()
        sid = data["subject_id"]
        data["subject"] = self._visible(caller, sid) or sid
        if data.get("ref") is not None:
            data["ref"] = caller.item_ref(data["ref"])
        return AtomOut(**data)

    def history(self, caller: Caller, atom: str) -> list[HistoryEntry]:
        found = self._atom(caller, atom)
        return [HistoryEntry(**row) for row in self.app.history(str(found.id))]

    def correct_atom(self, caller: Caller, atom: str, data: AtomCorrectionIn, *,
                     valid_from: str | None = None) -> Corrected:
        """Supersede an atom with a corrected one; ``valid_from``: when the corrected fact
        became true (default: now; the CLI's ``--valid-from``)."""
        self._require(caller, "assistant", "operator")
        # the local caller's atom is looked up by the command, under the write lock
        target = atom if caller.is_local else str(self._atom(caller, atom).id)
        change = {k: v for k, v in data.model_dump().items() if v is not None}
        if valid_from is not None:
            change["valid_from"] = valid_from
        if not set(change) - {"reason"}:
            raise InputError("nothing to correct", hint="give text, gist or confidence")
        new = self.app.correct_atom(target, change, caller.writer_key)
        return Corrected(atom_id=str(self.app.resolve("atom", target)), new_atom_id=str(new))

    def rehearse_atom(self, caller: Caller, atom: str, session_id: str | None = None,
                      reason: str | None = None) -> Rehearsed:
        """Record that one atom was recalled (`ledger atom rehearse`): refused when the
        atom is not active; unlike :meth:`rehearse`, a repeat in a session counts."""
        self._require(caller, "assistant", "operator")
        target = atom if caller.is_local else str(self._atom(caller, atom).id)
        count = self.app.rehearse_atom(target, session_id, reason, caller.writer_key)
        return Rehearsed(atom_id=str(self.app.resolve("atom", target)), rehearsal_count=count)

    def expire_atom(self, caller: Caller, atom: str, reason: str | None = None
                    ) -> AtomExpired:
        """Mark an atom no longer valid from now (`ledger atom expire`)."""
        self._require(caller, "assistant", "operator")
        target = atom if caller.is_local else str(self._atom(caller, atom).id)
        self.app.expire_atom(target, reason, caller.writer_key)
        return AtomExpired(atom_id=str(self.app.resolve("atom", target)))

    def rehearse(self, caller: Caller, atoms: Sequence[str],
                 session_id: str | None = None) -> EventIds:
        self._require(caller, "assistant", "operator")
        ids = [str(self._atom(caller, a).id) for a in atoms]
        return EventIds(event_ids=list(self.app.rehearse_atoms(ids, session_id) or []))

    def redact_atom(self, caller: Caller, atom: str, data: RedactIn) -> ErasureOutcome:
        """Soft, archive or hard redaction of one atom: an operator's act (:meth:`redact`
        with a reason required and the tombstones' event ids)."""
        report = self.redact(caller, atom, data.mode, _reason(data.reason)).report
        if data.mode in ("soft", "archive"):
            return ErasureOutcome(event_ids=report["event_ids"],
                                  tombstone_ids=report["event_ids"],
                                  atom_id=report["atom_id"], mode=data.mode)
        return _outcome(report, self.app)

    def delete_atom(self, caller: Caller, atom: str, reason: str) -> ErasureOutcome:
        """Delete one atom for good (`ledger delete`): key destroyed, every route purged and
        probed, a signed tombstone left. Assistants may delete their subjects' atoms. A
        reason is required; the outcome carries the tombstone's event id."""
        return _outcome(self.erase_atom(caller, atom, _reason(reason)).report, self.app)

    # ------------------------------------------------------------------ recall and reads
    def recall(self, caller: Caller, data: RecallIn) -> RecallOut:
        """Memories relevant to the query for one subject, as a prompt block and items;
        each recalled memory is rehearsed (a signed event) unless ``data.rehearse`` is
        off. The local caller (`ledger recall`) gets the read models' checks of the query
        and lookup of the subject, in their words and order (ADR 0040)."""
        sid = data.subject if caller.is_local else self.subject_id(caller, data.subject)
        result = self.proj.recall(data.query, sid, data.k)
        rehearsed = bool(result.atom_ids) and data.rehearse and caller.may_write_memory
        if rehearsed:
            self.app.rehearse_atoms(result.atom_ids, data.session_id)
        items = [RecallItemOut(**{**item.as_json(), "marker": ", ".join(item.markers),
                                  "rehearsed": rehearsed}) for item in result.items]
        return RecallOut(prompt=result.prompt, items=items, eligible=result.eligible,
                         pool=result.pool)

    def list_memories(self, caller: Caller, subject: str | None = None,
                      privacy_class: str | None = None,
                      min_salience: float | None = None, *, limit: int | None = None,
                      after: str | None = None) -> list[MemoryRow]:
        """The memories of the listing (``ledger memory list``); a page of at most
        ``limit`` rows when asked, starting after the atom id ``after`` (the last row of
        the previous page). The local caller gets the read models' checks of the filters
        before the subject's lookup (ADR 0040)."""
        if subject is None and not caller.unrestricted:
            raise InputError("name a subject", hint="this credential is scoped to subjects")
        if limit is not None and limit < 1:
            raise InputError(f"limit must be at least 1, got {limit}")
        sid = subject if subject is None or caller.is_local else self.subject_id(caller,
                                                                                   subject)
        rows = self.proj.memory_list(sid, privacy_class, min_salience)
        start = 0
        if after is not None:
            start = next((i + 1 for i, r in enumerate(rows) if r["atom_id"] == after), -1)
            if start < 0:
                raise InputError("after: no memory of this listing has that id",
                                 hint="pass the atom_id of the last row of the previous "
                                      "page (the Link header's next URL carries it)")
        if start or limit is not None:
            rows = rows[start:None if limit is None else start + limit]
        erased = _erased_marker()
        return [MemoryRow(**{**r, "text": erased if r["content_erased"] else r["text"]})
                for r in rows]

    def inspect_memory(self, caller: Caller, atom: str) -> dict[str, Any]:
        """One memory with its scores, decay and history (`ledger memory inspect`); erased
        content reads ``ERASED``. The local caller gets the read models' lookup."""
        aid = atom if caller.is_local else str(self._atom(caller, atom).id)
        return self._masked(self.proj.memory_inspect(aid), (*ATOM_CONTENT, "details_now"))

    def state(self, caller: Caller, subject: str, as_of: str | None = None,
              valid_at: str | None = None) -> dict[str, Any]:
        """What the ledger knew at ``as_of`` (default now), facts valid at ``valid_at``."""
        t = clock.parse_instant(as_of, "as_of") if as_of else clock.now()
        v = clock.parse_instant(valid_at, "valid_at") if valid_at else None
        return self.state_views(caller, subject, t, v)[0]

    # ------------------------------------------------------------------ portability
    def export(self, caller: Caller, subject: str, fmt: ExportFormat,
               include_private: bool = False) -> ExportOut:
        """One subject's memory as Konshus or Persona JSON, or a `.mem` bundle (zipped)."""
        from ledger.portability import konshus, mem, persona, view
        from ledger.portability.record import tally

        sid = self.subject_id(caller, subject)
        v = view.load(self.app, sid)
        visible = self._visible(caller, sid) or sid
        if fmt == "mem":
            signer = self.app.signer(None)
            with tempfile.TemporaryDirectory(prefix="ledger-export-") as tmp:
                out = Path(tmp) / "bundle.mem"
                stats = mem.export(v, out, include_private=include_private,
                                   key=mem.signing_key(bytes(signer.signing_key)),
                                   sign_manifest=False)
                content = _zip_folder(out)
        else:
            import json

            module = konshus if fmt == "konshus" else persona
            doc, stats = module.export(v, include_private=include_private, now=clock.now())
            content = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)
                       + "\n").encode()
        counts = {**stats, **tally(v.atoms)}
        ext = "mem.zip" if fmt == "mem" else "json"
        return ExportOut(format=fmt, subject=visible, media_type=EXPORT_MEDIA[fmt],
                         filename=f"{visible}.{fmt}.{ext}" if fmt != "mem"
                         else f"{visible}.{ext}",
                         content=content, counts={k: int(n) for k, n in counts.items()
                                                  if isinstance(n, int)})

    def import_document(self, caller: Caller, content: bytes, options: ImportIn
                        ) -> ImportReport:
        """Import a document (JSON, or a `.mem` bundle as a zip): all or nothing, as the
        CLI's `ledger import`."""
        self._require(caller, "assistant", "operator")
        from ledger.portability import service

        subject = options.subject
        if subject is None and not caller.unrestricted:
            raise InputError("name the subject to import under",
                             hint="this credential is scoped to subjects")
        if subject is not None:
            sid = self.subject_id(caller, subject)
            subject = self._stored_ref_of(sid)
        with tempfile.TemporaryDirectory(prefix="ledger-import-") as tmp:
            path = Path(tmp) / "input"
            if options.format == "mem":
                _unzip_bundle(content, path)
            else:
                path.write_bytes(content)
            plan = service.plan_file(self.app, path, options.format, subject=subject,
                                     trusted=[], max_bytes=None,
                                     skip_unsupported=options.skip_unsupported)
            report = service.apply_plan(self.app, plan, dry_run=options.dry_run)
        report["subject"] = caller.visible_ref(report["subject"]) or report["subject"]
        return ImportReport(**report)

    # ------------------------------------------------------------------ erasure requests
    def _request(self, caller: Caller, request: str) -> Any:
        from ledger.domain import ErasureRequest

        missing = NotFound(f"no erasure request {request!r}",
                           hint="see `ledger requests list` or GET /v1/requests")
        if not is_uuid(request):
            raise missing
        try:
            req: Any = self.app.aggregate(UUID(request))
        except Exception:
            raise missing from None
        if not isinstance(req, ErasureRequest) or self._visible(caller, req.subject_id) is None:
            raise missing
        return req

    def file_request(self, caller: Caller, data: ErasureRequestIn) -> RequestStatus:
        """File a right-to-be-forgotten request: receipt logged with its deadlines. Its
        execution is an operator's act (:meth:`execute_request`)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import open_request
        from governance.requests import sla_hours
        from ledger.errors import ConflictError

        sid = self.subject_id(caller, data.subject)
        pending = open_request(self.app, sid)
        if pending is not None:
            raise ConflictError(f"subject already has an open erasure request {pending.id}",
                                hint="see its status; one request per subject at a time")
        ack, complete = sla_hours(self.app.policy())
        with self._acting(caller):
            rid = self.app.receive_request(sid, data.reason, self._signing_key(caller), ack,
                                           complete, legal_basis=data.legal_basis,
                                           identifiers=data.identifiers,
                                           sessions=data.sessions)
        return self.request_status(caller, str(rid))

    def list_requests(self, caller: Caller, status: str | None = None,
                      now: datetime | None = None) -> list[RequestStatus]:
        from governance.requests import list_requests

        rows = [r for r in list_requests(self.app, now)
                if self._visible(caller, r["subject_id"]) is not None]
        if status is not None:
            rows = [r for r in rows if r["status"] == status]
        return [RequestStatus(**r) for r in rows]

    def request_status(self, caller: Caller, request: str,
                       now: datetime | None = None) -> RequestStatus:
        from governance.requests import request_status

        req = self._request(caller, request)
        return RequestStatus(**request_status(req, now or clock.now()))

    def plan_request(self, caller: Caller, request: str) -> ErasurePlanOut:
        """The dry run of a filed request: what its execution would erase and flag."""
        self._require(caller, "operator", "auditor")
        from governance.erasure import plan_user_erasure

        req = self._request(caller, request)
        plan = plan_user_erasure(self.app, self.proj, req.subject_id, req.identifiers or (),
                                 req.sessions or ()).as_json()
        return ErasurePlanOut(request_id=str(req.id), **plan)

    def execute_request(self, caller: Caller, request: str, plan_digest: str
                        ) -> ErasureOutcome:
        """Approve and execute a filed request, as `ledger redact-user` does: the batch is
        signed with the caller's operator key. Refused, writing nothing, when the plan
        changed since the operator saw ``plan_digest``."""
        self._require(caller, "operator")
        from governance.erasure import check_operator, resume_request
        from ledger.errors import ConflictError

        req = self._request(caller, request)
        check_operator(self.app, self._signing_key(caller))
        if req.completed_at is None and req.batch_id is None:
            current = self.plan_request(caller, request).plan_digest
            if current != plan_digest:
                raise ConflictError(
                    f"the ledger changed since the plan was shown: it was {plan_digest}, it "
                    f"is {current} now; nothing was written",
                    hint="review the plan again and approve its new digest")
        with self._acting(caller):
            return _outcome(resume_request(self.app, self.proj, str(req.id),
                                           self._signing_key(caller)), self.app)

    # ---------------------------------------------------------- the CLI's erasure commands
    # (redact, unredact, delete, artifact delete, redact-user, review resolve, evidence-pack
    # sign, requests resume, repair)
    # They take the CLI's inputs as given and return what governance reported, whole
    # (ErasureReport): for the local caller the application's lookups, checks and words,
    # in its order (ADR 0040). The API's redact_atom, delete_atom, delete_artifact and
    # build_pack are these acts with a reason required, tombstone ids, a pack as a zip.
    def _atom_id(self, caller: Caller, atom: str) -> UUID:
        if caller.is_local:
            return self.app.resolve("atom", atom)  # the application's words
        return self._atom(caller, atom).id

    def redact(self, caller: Caller, atom: str, mode: str, reason: str) -> ErasureReport:
        """`ledger redact`: soft (hidden, reversible), archive (kept for audit) or hard
        (destroyed everywhere: a batch, its events and reach record)."""
        self._require(caller, "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        key = self._signing_key(caller)
        with self._acting(caller):
            if mode in ("soft", "archive"):
                event = self.app.redact(aid, mode, reason, actor=key)
                data: dict[str, Any] = {"atom_id": str(aid), "mode": mode, "event_ids": [event]}
            elif mode == "hard":
                data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason=reason, operator=key)
            else:
                raise InputError(f"unknown mode {mode!r}", hint="use soft, archive or hard")
        return ErasureReport(report=data, atom_id=str(aid))

    def unredact(self, caller: Caller, atom: str, reason: str) -> ErasureReport:
        """`ledger unredact`: undo a soft redaction (the report names the atom as given)."""
        self._require(caller, "operator")
        aid = self._atom_id(caller, atom)
        with self._acting(caller):
            event = self.app.unredact(aid, reason, actor=self._signing_key(caller))
        return ErasureReport(report={"atom_id": atom, "event_ids": [event]}, atom_id=str(aid))

    def erase_atom(self, caller: Caller, atom: str, reason: str) -> ErasureReport:
        """`ledger delete`: the atom deleted for good (the mechanics of hard redaction)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        with self._acting(caller):
            data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="delete",
                              reason=reason, operator=self._signing_key(caller))
        return ErasureReport(report=data, atom_id=str(aid))

    def erase_artifact(self, caller: Caller, artifact: str, reason: str,
                       flag_unsourced: bool = False) -> ErasureReport:
        """`ledger artifact delete`: the artifact deleted, the atoms citing it re-evaluated
        (deleted, kept with other sources, or flagged unsourced: the report's cascade)."""
        self._require(caller, "assistant", "operator")
        from governance.erasure import delete_artifact

        target = artifact if caller.is_local else str(self._artifact_subject(caller,
                                                                             artifact)[0])
        with self._acting(caller):
            data = delete_artifact(self.app, self.proj, target, reason=reason,
                                   operator=self._signing_key(caller),
                                   flag_unsourced=flag_unsourced)
        return ErasureReport(report=data)

    def redact_user(self, caller: Caller, subject: str, *, reason: str,
                    identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                    legal_basis: str | None = None, dry_run: bool = False,
                    expect_plan: str | None = None, resume: bool = False,
                    progress: Callable[[str, int, int], None] | None = None) -> ErasureReport:
        """`ledger redact-user`: the right to be forgotten in one run, under the policy's
        SLA (governance/erasure.py redact_user: a dry run's plan, a request finished or
        found completed). Its report names other subjects: unrestricted operators only."""
        self._require_ledger_operator(caller)
        from governance.erasure import redact_user
        from governance.requests import sla_hours

        ack_hours, completion_hours = sla_hours(self.app.policy())  # Persona §7 SLA in force
        with self._acting(caller):
            data = redact_user(self.app, self.proj, subject, reason=reason,
                               operator=self._signing_key(caller),
                               identifiers=list(identifiers), sessions=list(sessions),
                               legal_basis=legal_basis, ack_hours=ack_hours,
                               completion_hours=completion_hours, dry_run=dry_run,
                               expect_plan=expect_plan, resume=resume, progress=progress)
        return ErasureReport(report=data)

    def resume_request(self, caller: Caller, request: str) -> ErasureReport:
        """`ledger requests resume`: finish an interrupted erasure request, from the step
        where it stopped (ADR 0019)."""
        self._require_ledger_operator(caller)
        from governance.erasure import resume_request

        with self._acting(caller):
            data = resume_request(self.app, self.proj, request, self._signing_key(caller))
        return ErasureReport(report=data)

    def resolve_review(self, caller: Caller, atom: str, action: str,
                       flag: str = "refers-to-erased", text: str | None = None
                       ) -> ErasureReport:
        """`ledger review resolve`: re-anonymise (a correction with ``text``), redact (hard)
        or dismiss, and resolve the atom's ``flag``."""
        self._require(caller, "operator")
        from governance.erasure import Targets, hard_erase

        aid = self._atom_id(caller, atom)
        key = self._signing_key(caller)
        with self._acting(caller):
            if action == "reanonymise":
                if not text:
                    raise InputError("--action reanonymise needs --text with the new wording")
                # A correction is a memory event (writer role, ADR 0012): signed by the
                # caller's writer key; the operator signs the flag's resolution.
                new = self.app.correct_atom(str(aid), {"text": text, "reason": "re-anonymised"},
                                            caller.writer_key)
                ids = [self.app.resolve_flag(aid, flag, "re-anonymised", actor=key)]
                data: dict[str, Any] = {"atom_id": str(aid), "new_atom_id": str(new),
                                        "event_ids": ids}
            elif action == "redact":
                data = hard_erase(self.app, self.proj, Targets(atoms=[str(aid)]), mode="hard",
                                  reason="review: redacted", operator=key)
                data["event_ids"].append(self.app.resolve_flag(aid, flag, "redacted",
                                                               actor=key))
            elif action == "dismiss":
                data = {"atom_id": str(aid),
                        "event_ids": [self.app.resolve_flag(aid, flag, "dismissed", actor=key)]}
            else:
                raise InputError(f"unknown action {action!r}",
                                 hint="use reanonymise, redact or dismiss")
        return ErasureReport(report=data, atom_id=str(aid))

    def repair(self, caller: Caller, dry_run: bool = False) -> RepairReport:
        """`ledger repair`: discard (or, ``dry_run``, list) every data key stored for an
        event that was never committed."""
        self._require_ledger_operator(caller)
        return RepairReport(**self.app.repair(dry_run=dry_run))

    def pack_signer(self, caller: Caller) -> Signer:
        """The key that signs the caller's Evidence Packs, refused before anything is
        written when verify-pack would not accept it as a pack's signer: one holding
        neither the operator nor the auditor role now."""
        self._require(caller, "operator", "auditor")
        from keys.errors import KeyNotAuthorized

        name = self._signing_key(caller)
        key = self.app.signer(name)
        state, at = self.app.roster().state, clock.now()
        for role in ("operator", "auditor"):
            try:
                state.check(key.kid, role, at)
                return key
            except KeyNotAuthorized:
                continue
        raise InputError(f"{name} ({key.kid}) holds neither the operator nor the auditor role; "
                         "an Evidence Pack signed by it would not verify",
                         hint="sign with an operator or auditor key: --as operator")

    def countersign_pack(self, caller: Caller, folder: Path) -> PackCountersigned:
        """`ledger evidence-pack sign DIR`: add the caller's key's signature to a pack,
        which must still verify with it (governance/pack.py countersign)."""
        from governance.pack import countersign

        countersign(folder, self.pack_signer(caller))
        return PackCountersigned(pack=str(folder), signed_by=self._signing_key(caller))

    def write_pack(self, caller: Caller, batch_id: str, out: Path, *, make_zip: bool = False,
                   progress: Callable[[str, int, int], None] | None = None) -> PackWritten:
        """`ledger evidence-pack BATCH --out DIR`: the Evidence Pack of a closed batch,
        signed with the caller's key, written to a new folder (and DIR.zip)."""
        from governance.pack import build_pack

        self.pack_signer(caller)
        if not caller.is_local:
            self._batch_in_scope(caller, batch_id)
        path = build_pack(self.app, batch_id, out, make_zip=make_zip,
                          operator=self._signing_key(caller), progress=progress)
        return PackWritten(
            pack=str(path), files=sorted(str(p.relative_to(path)) for p in path.rglob("*")
                                         if p.is_file()),
            zip=str(path.with_suffix(".zip")) if make_zip else None)

    # ------------------------------------------------------------------ review queue
    def list_flags(self, caller: Caller) -> list[FlagOut]:
        self._require(caller, "operator", "auditor")
        from governance.review import open_flags

        out = []
        for row in open_flags(self.app):
            try:
                atom = self.app.get_atom(row["atom_id"])
            except NotFound:
                continue
            if self._visible(caller, atom.subject_id) is not None:
                out.append(FlagOut(subject_id=atom.subject_id, **row))
        return out

    # ------------------------------------------------------------------ evidence
    def build_pack(self, caller: Caller, batch_id: str) -> PackOut:
        """Build the Evidence Pack of a closed batch, signed with the caller's key, verify
        it, and hand it back as a zip."""
        self._require(caller, "operator")
        from governance.pack import read_pack_zip, verify_pack_bytes

        if not is_uuid(batch_id):
            raise NotFound(f"no batch {batch_id!r}")
        with tempfile.TemporaryDirectory(prefix="ledger-pack-") as tmp:
            written = self.write_pack(caller, batch_id, Path(tmp) / "pack", make_zip=True)
            content = Path(str(written.zip)).read_bytes()
        # what is verified is the bytes handed out
        report = verify_pack_bytes(read_pack_zip(content), self.app.root_public_key, None)
        return PackOut(batch_id=batch_id, filename=f"evidence-pack-{batch_id}.zip",
                       content=content, verification=report.as_json())

    def _batch_in_scope(self, caller: Caller, batch_id: str) -> None:
        from ledger.domain import RedactionBatch

        try:
            batch: Any = self.app.aggregate(UUID(batch_id))
        except Exception:
            raise NotFound(f"no batch {batch_id!r}") from None
        if not isinstance(batch, RedactionBatch):
            raise NotFound(f"no batch {batch_id!r}")
        if caller.unrestricted:
            return
        targets: dict[str, list[str]] = getattr(batch, "targets", {})
        subjects = {self.app.get_atom(a).subject_id for a in targets.get("atoms", [])}
        subjects |= set(targets.get("subjects", []))
        if not subjects or any(self._visible(caller, s) is None for s in subjects):
            raise NotFound(f"no batch {batch_id!r}")

    def checkpoint(self, caller: Caller) -> CheckpointOut:
        """The latest recorded signed checkpoint (C2SP note)."""
        from ledger.transparency import b64

        cp = self.app.latest_checkpoint()
        return CheckpointOut(origin=cp.checkpoint.origin, size=cp.size, root_hash=b64(cp.root),
                             note=cp.note)

    def verification(self, caller: Caller) -> VerificationOut:
        """`ledger verify --since` from the latest recorded checkpoint: the events after it
        are verified (signatures, roles, sequence, tree), at a cost that follows them."""
        self._require(caller, "operator", "auditor")
        from ledger.verification import verify_since

        root = self.app.root_public_key
        if root is None:
            from ledger.errors import EnvironmentProblem

            raise EnvironmentProblem("no trusted root key: keys/root.pub is missing")
        cp = self.app.latest_checkpoint()
        report, extra = verify_since(self.app, cp.note, root)
        data = {**report.as_json(), **extra}
        return VerificationOut(ok=bool(data.get("ok")), events=int(data.get("events", 0)),
                               checked_at=clock.format_instant(clock.now()),
                               **{k: v for k, v in data.items()
                                  if k not in ("ok", "events", "checked_at")})

    def verify_log(self, caller: Caller, root_public_key: bytes | None = None, *,
                   since: str | None = None, checkpoints: Sequence[tuple[str, str]] = (),
                   progress: Callable[[str, int, int], None] | None = None
                   ) -> LedgerVerdict:
        """`ledger verify`: every event and the checkpoints the log must extend (the latest
        recorded one and ``checkpoints``, ``(label, note)``), or with ``since`` (a trusted
        checkpoint note) only the events after it (ledger/verification.py). The trusted
        root key defaults to the home's ``keys/root.pub``."""
        self._require(caller, "operator", "auditor")
        from ledger.errors import EnvironmentProblem
        from ledger.verification import verify_ledger

        root = root_public_key or self.app.root_public_key
        if root is None:
            raise EnvironmentProblem("no trusted root key: keys/root.pub is missing",
                                     hint="pass --root-key FILE")
        return verify_ledger(self.app, root, since=since, checkpoints=checkpoints,
                             progress=progress)

    def prove_inclusion(self, caller: Caller, event_id: str) -> dict[str, Any]:
        """`ledger prove EVENT_ID`: the event's leaf and its inclusion proof in the tree of
        the latest checkpoint, checked before it is returned (ledger/proofs.py)."""
        self._require_whole_log(caller)
        from ledger.proofs import prove_inclusion

        return prove_inclusion(self.app, event_id)

    def prove_consistency(self, caller: Caller, old_note: str) -> dict[str, Any]:
        """`ledger prove --consistency OLD`: the latest checkpoint extends a kept one."""
        self._require_whole_log(caller)
        from ledger.proofs import prove_consistency

        return prove_consistency(self.app, old_note)

    def _require_whole_log(self, caller: Caller) -> None:
        """Proofs name any event of the log: operators and auditors of the whole ledger."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not ask for "
                            "proofs of the whole log",
                            hint="use an unrestricted operator or auditor credential")

    def roster(self, caller: Caller) -> list[RosterEntry]:
        """The key roster as `ledger keys list --json` gives it: one row per key and role,
        with its validity (and the C2SP vkey of log keys)."""
        self._require(caller, "operator", "auditor")
        rows = self.app.roster().state.rows()
        vkeys = self.app.log_vkeys()
        for r in rows:
            if r["role"] == "log" and r["kid"] in vkeys:
                r["vkey"] = vkeys[r["kid"]]
        return [RosterEntry(**{k: _jsonable(v) for k, v in r.items()}) for r in rows]

    def _require_ledger_operator(self, caller: Caller) -> None:
        """Acts on the whole ledger (its roster, policy, checkpoints): operators of the
        whole ledger only."""
        self._require(caller, "operator")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not do this",
                            hint="use an unrestricted operator credential")

    def authorize_key(self, caller: Caller, name: str, role: str,
                      public_key: bytes | None = None, valid_from: datetime | None = None
                      ) -> KeyAuthorized:
        """Authorize a key for a role, signed by the root key (`ledger keys authorize`);
        without ``public_key`` a new key is made in the home."""
        self._require_ledger_operator(caller)
        kid = self.app.authorize_key(name, role, public_key, valid_from)
        return KeyAuthorized(kid=kid, name=name, role=role)

    def revoke_key(self, caller: Caller, kid: str, role: str | None = None,
                   revoked_from: datetime | None = None, reason: str | None = None
                   ) -> KeyRevoked:
        """Revoke a key (one role or all) from a time (default now)."""
        self._require_ledger_operator(caller)
        self.app.revoke_key(kid, role, revoked_from, reason)
        return KeyRevoked(kid=kid)

    def rotate_key(self, caller: Caller, name: str, reason: str | None = None) -> KeyRotated:
        """Replace a key of the home with a new one holding its roles; the old is revoked."""
        self._require_ledger_operator(caller)
        old, new = self.app.rotate_key(name, reason)
        return KeyRotated(name=name, old_kid=old, new_kid=new)

    def set_policy(self, caller: Caller, document: dict[str, Any]) -> PolicyRecorded:
        """Record a memoryPolicy, signed with the caller's operator key."""
        self._require_ledger_operator(caller)
        key = self._signing_key(caller)
        return PolicyRecorded(event_id=self.app.set_policy(document, key))

    def sign_checkpoint(self, caller: Caller, witness_urls: Sequence[str] = (),
                        witness_keys: Sequence[str] = ()) -> CheckpointSigned:
        """Sign the current tree head with the log key, have the witnesses cosign it
        (``witness_urls``, with a vkey each in ``witness_keys`` unless config.toml has
        it; default: the configured witnesses) and record it (`ledger checkpoint`)."""
        self._require_ledger_operator(caller)
        from ledger.transparency import b64
        from ledger.witness.client import checkpoint_witnesses

        cp = self.app.checkpoint(checkpoint_witnesses(list(witness_urls), list(witness_keys),
                                                      self.app.config.witnesses))
        return CheckpointSigned(
            origin=cp.checkpoint.origin, size=cp.size, root_hash=b64(cp.root), note=cp.note,
            witnesses=[r.as_json() for r in getattr(self.app, "last_witnessing", [])])

    def use_witness(self, caller: Caller, url: str, vkey: str) -> WitnessUsed:
        """Have this ledger's checkpoints cosigned by the witness at ``url`` (its verifier
        key ``vkey``), written to config.toml; a witness of the same key is replaced."""
        self._require_ledger_operator(caller)
        import dataclasses

        from ledger.home import Config
        from ledger.witness.client import WitnessTarget

        target = WitnessTarget.of(url, vkey)
        config = Config.load(self.app.config.home)
        pairs = [p for p in config.witnesses if p[1] != target.key.vkey]
        dataclasses.replace(config, witnesses=(*pairs, (target.url, target.key.vkey))).write()
        return WitnessUsed(url=target.url, vkey=target.key.vkey)

    def forget_witness(self, caller: Caller, key: str) -> WitnessForgotten:
        """Stop asking the witness named by its vkey or URL (config.toml)."""
        self._require_ledger_operator(caller)
        import dataclasses

        from ledger.home import Config

        config = Config.load(self.app.config.home)
        pairs = [p for p in config.witnesses if key not in (p[0], p[1], p[0].rstrip("/"))]
        if len(pairs) == len(config.witnesses):
            raise NotFound(f"no witness {key!r} in config.toml")
        dataclasses.replace(config, witnesses=tuple(pairs)).write()
        return WitnessForgotten(removed=key)

    def log_vkey(self, caller: Caller) -> LogVkey:
        """The C2SP verifier key of this ledger's checkpoints (origin as its name)."""
        self._require(caller, "operator", "auditor")
        return LogVkey(origin=self.app.config.origin, vkey=self.app.log_vkey())

    def held_keys(self, caller: Caller) -> list[str]:
        """Names of the keys whose private key this ledger home holds (which of the
        roster's keys can sign here)."""
        self._require(caller, "operator", "auditor")
        return sorted(self.app.keyring.names())

    def policy(self, caller: Caller) -> dict[str, Any] | None:
        self._require(caller, "operator", "auditor")
        return self.app.policy()

    def audit_report(self, caller: Caller, from_: str | None = None, to: str | None = None,
                     *, subject: str | None = None, verify: str = "full",
                     now: datetime | None = None,
                     progress: Callable[[str, int, int], None] | None = None
                     ) -> dict[str, Any]:
        """The memory audit report of a period (`ledger audit`; docs/adr/0013). ``subject``
        limits the per-subject sections; ``verify``: full, since or none; ``progress(stage,
        done, total)`` counts the events read and verified (ADR 0036)."""
        self._require(caller, "operator", "auditor")
        from governance.audit import build_report, parse_period

        at = now or clock.now()
        period = parse_period(from_, to, at)
        if subject is not None and not caller.unrestricted:
            subject = self.subject_id(caller, subject)
        report: dict[str, Any] = build_report(self.app, period, subject=subject, verify=verify,
                                              now=now, progress=progress)
        return report

    # ---------------------------------------------------------- the CLI's read models, sweeps
    # and receipts (projections status/probe/rebuild, memory list/inspect, state, import/export
    # as files, sweep, requests list, policy check, receipt)
    def read_models_status(self, caller: Caller) -> list[ReadModelStatus]:
        """Position, head and lag of every read model (`ledger projections status`)."""
        self._require(caller, "operator", "auditor")
        return [ReadModelStatus(**s.as_json()) for s in self.proj.status()]

    def probe_reach(self, caller: Caller, item: str, text: str | None = None) -> ReachProbe:
        """Every route's reach of one item id, caught up first: rows keyed by the id and,
        with ``text``, stored values holding it and near-duplicate vectors."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not probe items "
                            "by id", hint="use an unrestricted operator or auditor credential")
        self.proj.catch_up()
        routes = [r.as_json() for r in self.proj.probe(item, text)]
        return ReachProbe(item_id=item, routes=routes,
                          reachable=[r["route"] for r in routes if r["reach"] == "reachable"])

    def rebuild_read_models(self, caller: Caller, name: str | None = None,
                            progress: Callable[[int, int], None] | None = None
                            ) -> ReadModelsRebuilt:
        """Drop read models (``name``, default all) and replay the whole log into them;
        ``progress(done, total)`` hears the events applied."""
        self._require_ledger_operator(caller)
        report = self.proj.rebuild(name, progress)
        return ReadModelsRebuilt(report=report.as_json(), head=report.head,
                                 notifications=report.notifications, seconds=report.seconds)

    def read_models_behind(self, caller: Caller) -> int:
        """Events the slowest read model is behind the log (0: all current)."""
        runner = self.proj.runner
        return runner.head() - min(runner.positions().values(), default=0)

    def catch_up_read_models(self, caller: Caller,
                             progress: Callable[[str, int, int], None] | None = None) -> None:
        """Apply the events the read models are behind (a recall does it too; this one
        tells ``progress`` the events applied)."""
        self.proj.catch_up_steps(progress)

    def state_views(self, caller: Caller, subject: str | None, as_of: datetime,
                    valid_at: datetime | None = None) -> list[dict[str, Any]]:
        """What the ledger knew at ``as_of`` and which facts it held valid at ``valid_at``
        (default ``as_of``): of one subject, or of every subject registered by then (in
        the caller's scope); erased content reads ``ERASED`` in every view."""
        if subject is None:
            views = [v for v in self.proj.state_all(as_of, valid_at)
                     if caller.unrestricted or self._visible(caller, v.subject_id) is not None]
        else:
            sid = subject if caller.is_local else self.subject_id(caller, subject)
            views = [self.proj.state_as_of(sid, as_of, valid_at)]
        out = []
        for view in views:
            d = view.as_json()
            d["valid"] = [self._masked(a, ATOM_CONTENT) for a in d["valid"]]
            d["not_valid"] = [self._masked(a, ATOM_CONTENT) for a in d["not_valid"]]
            d["artifacts"] = [self._masked(a, ("title", "body", "media_url"))
                              for a in d["artifacts"]]
            if d["subject"] is not None:
                d["subject"] = self._masked(d["subject"], ("display_name",))
            out.append(d)
        return out

    @staticmethod
    def _masked(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        """``row`` with ``fields`` reading ``ERASED`` when its content was erased."""
        if not row.get("content_erased"):
            return row
        erased = _erased_marker()
        return {k: (erased if k in fields else v) for k, v in row.items()}

    def _local_files(self, caller: Caller) -> None:
        if not caller.is_local:
            raise Forbidden("only the local operator reads and writes files of this machine",
                            hint="send or fetch the document itself (/v1/import, /v1/export)")

    def import_file(self, caller: Caller, path: Path, fmt: str, *, subject: str | None = None,
                    trusted: Sequence[bytes] = (), max_bytes: int | None = None,
                    skip_unsupported: bool = False, dry_run: bool = False,
                    apply_untrusted: bool = False,
                    progress: Callable[[str, int, int], None] | None = None) -> ImportReport:
        """`ledger import`: a file or `.mem` bundle of this machine checked completely,
        then written all or nothing, signed with the caller's writer key; ``trusted``:
        keys whose tombstone and manifest signatures are trusted."""
        self._require(caller, "assistant", "operator")
        self._local_files(caller)
        from ledger.portability import service
        from ledger.progress import report

        reading = f"Reading and checking {path.name}"
        report(progress, reading, 0, 1)
        plan = service.plan_file(self.app, path, fmt, subject=subject, trusted=trusted,
                                 max_bytes=max_bytes, skip_unsupported=skip_unsupported)
        report(progress, reading, 1, 1)
        return ImportReport(**service.apply_plan(
            self.app, plan, dry_run=dry_run, actor=caller.writer_key,
            apply_untrusted=apply_untrusted, progress=progress))

    def export_file(self, caller: Caller, fmt: ExportFormat, out: Path,
                    subject: str | None = None, *, sign: bool = False,
                    include_private: bool = False,
                    progress: Callable[[str, int, int], None] | None = None
                    ) -> ExportWritten:
        """`ledger export`: one subject's memory (default: the ledger's only subject)
        written to ``out``, a new file or `.mem` bundle directory; ``sign``: signed with
        the caller's writer key (manifest.sig, or a DSSE envelope beside the file)."""
        self._require(caller, "assistant", "operator", "auditor")
        self._local_files(caller)
        from ledger.portability import konshus, mem, persona, service, view
        from ledger.portability.record import tally

        v = view.load(self.app, subject, progress=progress)
        signer = self.app.signer(caller.writer_key) if sign or fmt == "mem" else None
        if fmt == "mem":
            assert signer is not None
            stats = mem.export(v, out, include_private=include_private,
                               key=mem.signing_key(bytes(signer.signing_key)),
                               sign_manifest=sign, progress=progress)
            written = [str(out)]
        else:
            from ledger.progress import report

            module = konshus if fmt == "konshus" else persona
            doc, stats = module.export(v, include_private=include_private, now=clock.now(),
                                       progress=progress)
            report(progress, f"Writing {out.name}", 0, 1)
            payload_type = f"application/vnd.memory-ledger.{fmt}-export.v1+json"
            written = service.write_document(out, doc, signer if sign else None, payload_type)
            report(progress, f"Writing {out.name}", 1, 1)
        stats = {**stats, **tally(v.atoms)}
        if fmt != "mem":  # only a .mem bundle has a place for portable records (ADR 0017)
            stats["records_not_carried"] = sum(r.content is not None for r in v.records)
        return ExportWritten(format=fmt, subject=v.ref, written=written, counts=stats)

    def sweep(self, caller: Caller, dry_run: bool = False,
              progress: Callable[[str, int, int], None] | None = None) -> SweepReport:
        """Apply the policy's retention and decay rules: archive or erase what is due,
        signed with the caller's operator key (``dry_run``: only say what is due)."""
        self._require_ledger_operator(caller)
        from governance.sweep import sweep

        key = self._signing_key(caller)
        with self._acting(caller):
            return SweepReport(**sweep(self.app, self.proj, operator=key, dry_run=dry_run,
                                       progress=progress))

    def check_policy(self, caller: Caller) -> PolicyCheck:
        """Stored memories against the policy in force (Persona Schema §8): warnings with
        the ids to fix; reference integrity only when no policy is in force."""
        self._require(caller, "operator", "auditor")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not check the "
                            "whole ledger", hint="use an unrestricted credential")
        from governance.policy_check import check_policy

        return PolicyCheck(**check_policy(self.app, self.proj))

    def erasure_receipt(self, caller: Caller, request: str, html: bool = False
                        ) -> ErasureReceipt:
        """The signed receipt of a completed erasure request for the data subject, signed
        with the caller's operator key (no memory content), and its HTML page if asked."""
        self._require(caller, "operator")
        from governance.receipt import build_receipt, render_html

        if not caller.is_local:  # the local caller gets the receipt's own words
            request = str(self._request(caller, request).id)
        key = self._signing_key(caller)
        with self._acting(caller):
            data = build_receipt(self.app, request, operator=key)
        return ErasureReceipt(request_id=request, content=data,
                              html=render_html(data) if html else None)


# ---------------------------------------------------------------------- helpers
def _reason(reason: str) -> str:
    if not reason.strip():
        raise InputError("a reason is required", hint='e.g. "asked by the user"')
    return reason


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return clock.format_instant(value)
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return value


def _outcome(data: dict[str, Any], app: LedgerApp | None = None) -> ErasureOutcome:
    """An erasure's report with the ids of its items' own tombstone events (the
    ``atom.redacted``/``deleted`` and ``artifact.deleted`` events left in the log)."""
    tombstones: list[str] = []
    targets = data.get("targets") or {}
    ids = [*targets.get("atoms", []), *targets.get("artifacts", [])]
    if app is not None and ids:
        for item in app.get_many([UUID(i) for i in ids]):
            event = getattr(item, "tombstone_event", None)
            if event:
                tombstones.append(str(event))
    return ErasureOutcome(**{**data, "tombstone_ids": tombstones})


def _zip_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(folder).as_posix())
    return buf.getvalue()


MAX_BUNDLE_FILES = 100_000
MAX_BUNDLE_BYTES = 256 * 1024 * 1024


def _unzip_bundle(content: bytes, dest: Path) -> None:
    """A `.mem` bundle sent as a zip: unpacked into ``dest``, refusing absolute paths,
    ``..`` and links, and bounded in files and bytes (a zip bomb is refused whole)."""
    try:
        z = zipfile.ZipFile(io.BytesIO(content))
    except zipfile.BadZipFile as e:
        raise InputError(f"the .mem bundle is not a zip file: {e}",
                         hint="send the bundle's folder zipped") from None
    infos = z.infolist()
    if len(infos) > MAX_BUNDLE_FILES or sum(i.file_size for i in infos) > MAX_BUNDLE_BYTES:
        raise InputError("the .mem bundle is too large",
                         hint=f"at most {MAX_BUNDLE_FILES} files and {MAX_BUNDLE_BYTES} bytes")
    dest.mkdir()
    root = dest.resolve()
    for info in infos:
        target = (dest / info.filename).resolve()
        if info.filename.startswith("/") or not target.is_relative_to(root) or \
                (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise InputError(f"the .mem bundle has an unsafe path {info.filename!r}")
    z.extractall(dest)
