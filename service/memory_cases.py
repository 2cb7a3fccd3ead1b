"""The memory use cases of the facade: subjects, artifacts, atoms, recall, the memory
listing and inspection, state as of a date, import and export (documents, files and
`.mem` bundles). Joined into :class:`service.facade.MemoryService`."""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from ledger import clock
from ledger.errors import ConflictError, InputError, LedgerError, NotFound
from ledger.inputs import ArtifactInput, AtomCorrection, AtomInput, parse
from service.caller import Caller
from service.core import (
    ATOM_CONTENT,
    FacadeCore,
    Forbidden,
    _erased_marker,
    named_subject,
)
from service.models import (
    ArtifactIn,
    ArtifactOut,
    AtomAdded,
    AtomCorrectionIn,
    AtomExpired,
    AtomIn,
    AtomOut,
    AtomsAdded,
    Corrected,
    EventIds,
    ExportFormat,
    ExportOut,
    ExportWritten,
    HistoryEntry,
    ImportIn,
    ImportReport,
    MemoryRow,
    OnSimilar,
    RecallIn,
    RecallItemOut,
    RecallOut,
    Rehearsed,
    SimilarOut,
    SourcedAtomAdded,
    SubjectIn,
    SubjectOut,
)

if TYPE_CHECKING:
    pass

def check_on_similar(value: str) -> None:
    """:class:`InputError` unless ``value`` is one of :data:`OnSimilar` (ADR 0052)."""
    if value not in get_args(OnSimilar):
        raise InputError(f"on_similar must be one of {', '.join(get_args(OnSimilar))}"
                         f", got {value!r}")


class SimilarMemoryExists(ConflictError):
    """``on_similar: refuse`` found memories that say the same thing (ADR 0052): nothing
    was written. ``similar``: per refused proposal (its index), the similar memories."""

    def __init__(self, refused: Sequence[tuple[int, list[SimilarOut]]], proposals: int
                 ) -> None:
        self.similar = [(n, list(f)) for n, f in refused]
        ids = ", ".join(dict.fromkeys(s.atom_id for _, f in refused for s in f))
        which = "" if proposals == 1 else \
            f" (proposals {', '.join(str(n) for n, _ in refused)})"
        super().__init__(
            f"the subject already has memories that say the same{which}: {ids}; "
            "nothing was written",
            hint="rehearse or correct one of them, or send it again with on_similar "
                 "(--on-similar on the command line) add, rehearse or supersede")

    def as_json(self) -> list[dict[str, Any]]:
        """The similar memories, as the add would have answered them."""
        return [s.model_dump() for _, f in self.similar for s in f]


class MemoryCases(FacadeCore):
    """Subjects, artifacts, atoms, recall, memory lists and state, import and export."""

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
        s = self.app.reader.get_subject(sid)
        return SubjectOut(subject_id=str(s.id), ref=caller.visible_ref(s.ref) or s.ref,
                          display_name=_erased_marker() if s.content_erased else s.display_name,
                          locale=s.locale, content_erased=s.content_erased)

    def list_subjects(self, caller: Caller) -> list[SubjectOut]:
        from ledger.domain import Subject

        out = []
        for n in self.app.reader.notifications(1, 10**9, topics=[Subject.Created.TOPIC]):
            sid = str(n.originator_id)
            if self._visible(caller, sid) is not None:
                out.append(self.get_subject(caller, sid))
        return out

    def capture_artifact(self, caller: Caller, data: ArtifactIn) -> ArtifactOut:
        aid = self.app.capture_artifact(self._artifact_command(caller, data), caller.writer_key)
        return self.get_artifact(caller, str(aid))

    def _artifact_command(self, caller: Caller, data: ArtifactIn) -> dict[str, Any]:
        """The application's command for ``data``: its input checked first, in the
        application's words (ADR 0070), then its subject looked up in the caller's scope
        and its ref namespaced by the caller's tenant."""
        self._require(caller, "assistant", "operator")
        subject = named_subject(caller, data.subject)
        cmd = data.model_dump()
        if data.captured_at is not None:
            cmd["captured_at"] = clock.parse_instant(data.captured_at,
                                                     "captured_at").isoformat()
        inp = parse(ArtifactInput, {**cmd, "subject": subject})
        cmd["subject"] = self.subject_id(caller, inp.subject)
        if inp.ref is not None:
            self._ref_free(caller, "artifact", inp.ref)
        cmd["ref"] = caller.stored_ref(inp.ref) if inp.ref is not None else None
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

    def _ref_free(self, caller: Caller, kind: str, ref: str) -> None:
        """A scoped caller whose new ref is taken learns that, and nothing more: not the
        existing item's id, nor whose it is (the application's message names the id)."""
        if caller.unrestricted:
            return
        from ledger.errors import ConflictError

        try:
            self.app.reader.resolve(kind, caller.stored_ref(ref))
        except NotFound:
            return
        raise ConflictError(f"the {kind} ref {ref!r} is already in use; nothing was written",
                            hint="choose another ref, or leave it out for a random id")

    def _atom_command(self, caller: Caller, data: AtomIn,
                      sids: dict[tuple[Caller, str | None], str] | None = None,
                      cites_source: bool = False) -> AtomInput:
        """The atom command of a proposal: validated as the application validates it
        (with the source captured with it, if any), then its subject, ref and artifacts
        looked up in the caller's scope. ``sids``: subjects resolved earlier in the same
        command, by caller and name (a batch names one subject hundreds of times; each
        resolution is a query)."""
        subject = named_subject(caller, data.subject)
        cmd = data.as_command()
        for field in ("valid_from", "valid_to"):
            if cmd[field] is not None:
                cmd[field] = clock.parse_instant(cmd[field], field).isoformat()
        # the application's checks first, in its words (ADR 0070); then the lookups
        inp = _checked({**cmd, "subject": subject}, cites_source)
        sid = self._subject_once(caller, inp.subject, sids)
        # without a tenant the caller's name for the subject is the stored one: the
        # command keeps it, so the application's messages (a policy refusal) name the
        # subject as the caller did; a tenant's caller gets its id
        looked_up: dict[str, Any] = {"subject": inp.subject if caller.tenant is None else sid}
        if inp.ref is not None:
            self._ref_free(caller, "atom", inp.ref)
            looked_up["ref"] = caller.stored_ref(inp.ref)
        named = inp.artifact_ids[:len(cmd["artifact_ids"])]  # less the source, if any
        looked_up["artifact_ids"] = [str(self._artifact(caller, a).id) for a in named]
        return inp.model_copy(update=looked_up)

    def _subject_once(self, caller: Caller, subject: str | None,
                      sids: dict[tuple[Caller, str | None], str] | None) -> str:
        if sids is None:
            return self.subject_id(caller, subject)
        sid = sids.get((caller, subject))
        if sid is None:
            sid = sids[(caller, subject)] = self.subject_id(caller, subject)
        return sid

    def add_atom(self, caller: Caller, data: AtomIn) -> AtomAdded:
        """One atom, update or add (ADR 0052): see :meth:`remember_atoms`."""
        return self.remember_atoms(caller, [data])[0]

    def add_atom_with_source(self, caller: Caller, data: AtomIn, source: ArtifactIn
                             ) -> SourcedAtomAdded:
        """An atom and the artifact it was drawn from, captured and cited in one signed
        command: both are written, or neither. With ``on_similar`` (ADR 0052) deciding to
        rehearse an existing memory, no atom cites the source and it is not captured."""
        if source.subject != data.subject:
            raise InputError("the source artifact must be of the memory's subject",
                             hint="leave the source's subject out: it is the memory's")
        added, sources = self._remember(caller, [data], source)
        return SourcedAtomAdded(**added[0].model_dump(),
                                artifact_id=sources[0] if sources else None)

    # ------------------------------------------------------------------ update or add
    def similar_memories(self, caller: Caller, subject: str, texts: Sequence[str]
                         ) -> list[list[SimilarOut]]:
        """Per text, the subject's recallable memories that say the same thing, most
        similar first (ADR 0052; ``projections/similar.py``). Writes nothing."""
        self._require(caller, "assistant", "operator")
        sid = self.subject_id(caller, subject)
        self.proj.catch_up_for_search()
        return self._similar(sid, texts)

    def _similar(self, sid: str, texts: Sequence[str]) -> list[list[SimilarOut]]:
        from projections.similar import find_similar

        return [[SimilarOut(**s.as_json()) for s in found]
                for found in find_similar(self.proj, sid, texts)]

    def _similar_of(self, caller: Caller, items: Sequence[AtomIn]
                    ) -> list[list[SimilarOut]]:
        """The similar memories of each proposal that looks for them (``on_similar`` not
        None), searched by subject (the caller's scope was checked by ``_atom_command``
        before); the read models are not opened when none does."""
        found: list[list[SimilarOut]] = [[] for _ in items]
        looking = [n for n, d in enumerate(items) if d.on_similar is not None]
        if not looking:
            return found
        sids = {n: self.subject_id(caller, items[n].subject) for n in looking}
        self.proj.catch_up_for_search()
        by_subject: dict[str, list[int]] = {}
        for n, sid in sids.items():
            by_subject.setdefault(sid, []).append(n)
        for sid, ns in by_subject.items():
            for n, f in zip(ns, self._similar(sid, [items[n].text for n in ns]),
                            strict=True):
                found[n] = f
        return found

    def _checked_first(self, commands: Sequence[AtomInput], cites_source: bool
                       ) -> None:
        """Proposals checked, in the application's words, before the read models are
        opened for the search: input the memory policy refuses, or a key-encryption key
        out of reach, is refused touching nothing (the application checks them again
        under the write lock; the input and its lookups were checked by
        :meth:`_atom_command`)."""
        from ledger import policy_rules

        policy_rules.check_new_atoms(self.app.reader, [
            cmd.model_copy(update={"artifact_ids": [*cmd.artifact_ids, _SOURCE]})
            if cites_source else cmd for cmd in commands])
        self.app.reader.check_kek()  # a KEK out of reach refuses now, not after

    def remember_atoms(self, caller: Caller, items: Sequence[AtomIn],
                       source: ArtifactIn | None = None) -> list[AtomAdded]:
        """Update or add (ADR 0052): each proposed atom is compared with its subject's
        memories (``projections/similar.py``) and its ``on_similar`` decides: ``add``
        (add it, answer the similar ones), ``rehearse`` (no new atom: the most similar
        one is rehearsed), ``supersede`` (add it, superseding the most similar one) or
        ``refuse`` (:class:`SimilarMemoryExists`, nothing written). Every decision and
        its effect is one signed command: all proposals are written, or none (one
        refusal refuses them all). A proposal with no similar memory is added. Never
        across subjects; nothing is erased. ``source``: an artifact captured with them,
        cited by every atom written."""
        return self._remember(caller, items, source)[0]

    def _remember(self, caller: Caller, items: Sequence[AtomIn], source: ArtifactIn | None
                  ) -> tuple[list[AtomAdded], list[str]]:
        """:meth:`remember_atoms`, and the id of the source artifact if it was captured."""
        self._require(caller, "assistant", "operator")
        if not items:
            raise InputError("no atoms to remember")
        for d in items:
            if d.on_similar is not None:
                check_on_similar(d.on_similar)
        cites = source is not None  # every atom written cites the source captured with it
        commands = [self._atom_command(caller, d, cites_source=cites) for d in items]
        if any(d.on_similar is not None for d in items):
            self._checked_first(commands, cites)
        found = self._similar_of(caller, items)
        refused = [(n, f) for n, (d, f) in enumerate(zip(items, found, strict=True))
                   if d.on_similar == "refuse" and f]
        if refused:
            raise SimilarMemoryExists(refused, len(items))
        actions: list[tuple[str, str | None]] = [
            (d.on_similar, f[0].atom_id) if f and d.on_similar in ("rehearse", "supersede")
            else ("add", None) for d, f in zip(items, found, strict=True)]
        sources = [self._artifact_command(caller, source)] if source is not None else []
        written = self.app.remember_atoms(commands, actions, caller.writer_key,
                                          sources=sources)
        outcome = {"add": "added", "rehearse": "rehearsed", "supersede": "superseded"}
        return [AtomAdded(atom_id=str(i), archived=written.archived, outcome=outcome[act],
                          supersedes=target if act == "supersede" else None, similar=f)
                for i, (act, target), f in zip(written.ids, actions, found, strict=True)], \
            [str(i) for i in written.sources]

    def add_atoms(self, caller: Caller, items: Sequence[AtomIn]) -> AtomsAdded:
        """Record atoms in one signed command: all of them, or none."""
        self._require(caller, "assistant", "operator")
        if not items:
            raise InputError("no atoms to add")
        if any(d.on_similar not in ("add", None) for d in items):
            raise InputError("on_similar other than add is for one atom at a time",
                             hint="send those one by one (POST /v1/atoms, `ledger atom "
                                  "add`); a batch adds every item")
        sids: dict[tuple[Caller, str | None], str] = {}
        commands = [self._atom_command(caller, d, sids) for d in items]
        written = self.app.write_atoms(commands, caller.writer_key)
        return AtomsAdded(atom_ids=[str(i) for i in written.ids], archived=written.archived)

    def add_atoms_grouped(self, items: Sequence[tuple[Caller, AtomIn]]
                          ) -> list[AtomAdded | LedgerError]:
        """Group commit (server): atoms of several callers in one signed command.

        Each item is resolved under its own caller's scope first; one refused there fails
        alone. The rest are written as one command; if that command fails as a whole (two
        items with the same ref, say) each is written on its own, so an item's result is
        exactly what it would have been alone."""
        results: list[AtomAdded | LedgerError] = []
        commands: list[tuple[int, AtomInput]] = []
        sids: dict[tuple[Caller, str | None], str] = {}  # for this group only
        for n, (caller, data) in enumerate(items):
            try:
                self._require(caller, "assistant", "operator")
                if data.on_similar not in ("add", None):  # a decision of its own (ADR 0052)
                    results.append(self.remember_atoms(caller, [data])[0])
                    continue
                commands.append((n, self._atom_command(caller, data, sids)))
                results.append(InputError("not written"))  # replaced below
            except LedgerError as e:
                results.append(e)
        if not commands:
            return results
        similar: dict[int, list[SimilarOut]] = {}
        try:  # the similar memories each add answers with, found by subject
            by_subject: dict[str, list[int]] = {}
            for n, _ in commands:
                caller, data = items[n]
                if data.on_similar is not None:  # None: added without looking
                    by_subject.setdefault(self._subject_once(caller, data.subject, sids),
                                          []).append(n)
            if by_subject:
                self.proj.catch_up_for_search()
            for sid, ns in by_subject.items():
                found = self._similar(sid, [items[n][1].text for n in ns])
                similar.update(zip(ns, found, strict=True))
        except LedgerError:  # checked again, in its words, by the command below
            similar = {}
        except Exception as e:  # the read models or the embedder: these adds fail, told so
            from ledger.errors import EnvironmentProblem

            failed = EnvironmentProblem(
                f"the search for similar memories failed ({type(e).__name__}); nothing "
                "was written", hint="retry; or send on_similar null to add without looking")
            for n, _ in commands:
                results[n] = failed
            return results
        try:
            written = self.app.write_atoms([c for _, c in commands])
            for (n, _), aid in zip(commands, written.ids, strict=True):
                results[n] = AtomAdded(atom_id=str(aid), archived=written.archived,
                                       similar=similar.get(n, []))
            return results
        except LedgerError as e:
            if len(commands) == 1:
                results[commands[0][0]] = e
                return results
        for n, cmd in commands:
            try:
                one = self.app.write_atoms([cmd])
                results[n] = AtomAdded(atom_id=str(one.ids[0]), archived=one.archived,
                                       similar=similar.get(n, []))
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
        return [HistoryEntry(**row) for row in self.app.reader.history(str(found.id))]

    def correct_atom(self, caller: Caller, atom: str, data: AtomCorrectionIn, *,
                     valid_from: str | None = None) -> Corrected:
        """Supersede an atom with a corrected one; ``valid_from``: when the corrected fact
        became true (default: now; the CLI's ``--valid-from``)."""
        self._require(caller, "assistant", "operator")
        change = {k: v for k, v in data.model_dump().items() if v is not None}
        if valid_from is not None:
            change["valid_from"] = valid_from
        if not set(change) - {"reason"}:
            raise InputError("nothing to correct", hint="give text, gist or confidence")
        parse(AtomCorrection, change)  # the application's checks before the lookup
        target = str(self._atom(caller, atom).id)
        new = self.app.correct_atom(target, change, caller.writer_key)
        return Corrected(atom_id=target, new_atom_id=str(new))

    def rehearse_atom(self, caller: Caller, atom: str, session_id: str | None = None,
                      reason: str | None = None) -> Rehearsed:
        """Record that one atom was recalled (`ledger atom rehearse`): refused when the
        atom is not active; unlike :meth:`rehearse`, a repeat in a session counts."""
        self._require(caller, "assistant", "operator")
        target = str(self._atom(caller, atom).id)
        count = self.app.rehearse_atom(target, session_id, reason, caller.writer_key)
        return Rehearsed(atom_id=target, rehearsal_count=count)

    def expire_atom(self, caller: Caller, atom: str, reason: str | None = None
                    ) -> AtomExpired:
        """Mark an atom no longer valid from now (`ledger atom expire`)."""
        self._require(caller, "assistant", "operator")
        target = str(self._atom(caller, atom).id)
        self.app.expire_atom(target, reason, caller.writer_key)
        return AtomExpired(atom_id=target)

    def rehearse(self, caller: Caller, atoms: Sequence[str],
                 session_id: str | None = None) -> EventIds:
        self._require(caller, "assistant", "operator")
        ids = [str(self._atom(caller, a).id) for a in atoms]
        return EventIds(event_ids=list(self.app.rehearse_atoms(ids, session_id) or []))

    def recall(self, caller: Caller, data: RecallIn) -> RecallOut:
        """Memories relevant to the query for one subject, as a prompt block and items;
        each recalled memory is rehearsed (a signed event) unless ``data.rehearse`` is
        off. The query is checked before the subject is looked up, for every caller."""
        from projections.service import check_recall

        check_recall(data.query, data.k, data.since, data.until)
        sid = self.subject_id(caller, data.subject)
        result = self.proj.recall(data.query, sid, data.k, since=data.since,
                                  until=data.until)
        rehearsed = bool(result.atom_ids) and data.rehearse and caller.may_write_memory
        if rehearsed:
            self.app.rehearse_atoms(result.atom_ids, data.session_id)
        items = [RecallItemOut(**{**item.as_json(), "marker": ", ".join(item.markers),
                                  "rehearsed": rehearsed}) for item in result.items]
        return RecallOut(prompt=result.prompt, items=items, eligible=result.eligible,
                         pool=result.pool, omitted=[o.as_json() for o in result.omitted],
                         omitted_counts=result.omitted_counts)

    def list_memories(self, caller: Caller, subject: str | None = None,
                      privacy_class: str | None = None,
                      min_salience: float | None = None, *, limit: int | None = None,
                      after: str | None = None) -> list[MemoryRow]:
        """The memories of the listing (``ledger memory list``); a page of at most
        ``limit`` rows when asked, starting after the atom id ``after`` (the last row of
        the previous page). The filters are checked before the subject is looked up, for
        every caller."""
        from projections.service import check_listing

        if subject is None and caller.subjects is not None and len(caller.subjects) == 1:
            subject = named_subject(caller, None)  # the credential's only subject
        if subject is None and not caller.unrestricted:
            raise InputError("name a subject", hint="this credential is scoped to subjects")
        if limit is not None and limit < 1:
            raise InputError(f"limit must be at least 1, got {limit}")
        check_listing(privacy_class, min_salience)
        sid = None if subject is None else self.subject_id(caller, subject)
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
        content reads ``ERASED``."""
        aid = str(self._atom(caller, atom).id)
        return self._masked(self.proj.memory_inspect(aid), (*ATOM_CONTENT, "details_now"))

    def state(self, caller: Caller, subject: str, as_of: str | None = None,
              valid_at: str | None = None) -> dict[str, Any]:
        """What the ledger knew at ``as_of`` (default now), facts valid at ``valid_at``."""
        t = clock.parse_instant(as_of, "as_of") if as_of else clock.now()
        v = clock.parse_instant(valid_at, "valid_at") if valid_at else None
        return self.state_views(caller, subject, t, v)[0]

    def state_views(self, caller: Caller, subject: str | None, as_of: datetime,
                    valid_at: datetime | None = None) -> list[dict[str, Any]]:
        """What the ledger knew at ``as_of`` and which facts it held valid at ``valid_at``
        (default ``as_of``): of one subject, or of every subject registered by then (in
        the caller's scope); erased content reads ``ERASED`` in every view."""
        if subject is None:
            views = [v for v in self.proj.state_all(as_of, valid_at)
                     if caller.unrestricted or self._visible(caller, v.subject_id) is not None]
        else:
            sid = self.subject_id(caller, subject)
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

    def export(self, caller: Caller, subject: str, fmt: ExportFormat,
               include_private: bool = False) -> ExportOut:
        """One subject's memory as Konshus or Persona JSON, or a `.mem` bundle (zipped)."""
        from portability import formats, mem, view
        from portability.record import tally

        form = formats.get(fmt, "write")
        sid = self.subject_id(caller, subject)
        v = view.load(self.app, sid)
        visible = self._visible(caller, sid) or sid
        if form.shape == "bundle":
            signer = self.app.signer(None)
            with tempfile.TemporaryDirectory(prefix="ledger-export-") as tmp:
                out = Path(tmp) / "bundle.mem"
                stats = mem.export(v, out, include_private=include_private,
                                   key=mem.signing_key(bytes(signer.signing_key)),
                                   sign_manifest=False)
                content = _zip_folder(out)
        else:
            import json

            doc, stats = form.export_document(v, include_private=include_private,
                                              now=clock.now())
            content = (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)
                       + "\n").encode()
        counts = {**stats, **tally(v.atoms)}
        return ExportOut(format=fmt, subject=visible, media_type=form.media_type,
                         filename=f"{visible}.{fmt}.json" if form.shape == "document"
                         else f"{visible}.mem.zip",
                         content=content, counts={k: int(n) for k, n in counts.items()
                                                  if isinstance(n, int)})

    def import_document(self, caller: Caller, content: bytes, options: ImportIn
                        ) -> ImportReport:
        """Import a document (JSON, or a `.mem` bundle as a zip): all or nothing, as the
        CLI's `ledger import`."""
        self._require(caller, "assistant", "operator")
        from portability import service

        subject = options.subject
        if subject is None and not caller.unrestricted:
            raise InputError("name the subject to import under",
                             hint="this credential is scoped to subjects")
        if subject is not None:
            sid = self.subject_id(caller, subject)
            subject = self._stored_ref_of(sid)
        with tempfile.TemporaryDirectory(prefix="ledger-import-") as tmp:
            path = Path(tmp) / "input"
            from portability import formats

            if formats.get(options.format, "read").shape == "bundle":
                _unzip_bundle(content, path)
            else:
                path.write_bytes(content)
            plan = service.plan_file(self.app, path, options.format, subject=subject,
                                     trusted=[], max_bytes=None,
                                     skip_unsupported=options.skip_unsupported)
            report = service.apply_plan(self.app, plan, dry_run=options.dry_run)
        report["subject"] = caller.visible_ref(report["subject"]) or report["subject"]
        return ImportReport(**report)

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
        from portability import formats, mem, service, view
        from portability.record import tally

        form = formats.get(fmt, "write")
        v = view.load(self.app, subject, progress=progress)
        bundle = form.shape == "bundle"
        signer = self.app.signer(caller.writer_key) if sign or bundle else None
        if bundle:
            assert signer is not None
            stats = mem.export(v, out, include_private=include_private,
                               key=mem.signing_key(bytes(signer.signing_key)),
                               sign_manifest=sign, progress=progress)
            written = [str(out)]
        else:
            from ledger.progress import report

            doc, stats = form.export_document(v, include_private=include_private,
                                              now=clock.now(), progress=progress)
            report(progress, f"Writing {out.name}", 0, 1)
            payload_type = f"application/vnd.memory-ledger.{fmt}-export.v1+json"
            written = service.write_document(out, doc, signer if sign else None, payload_type)
            report(progress, f"Writing {out.name}", 1, 1)
        stats = {**stats, **tally(v.atoms)}
        if not bundle:  # only a .mem bundle has a place for portable records (ADR 0017)
            stats["records_not_carried"] = sum(r.content is not None for r in v.records)
        return ExportWritten(format=fmt, subject=v.ref, written=written, counts=stats)

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
        from ledger.progress import report
        from portability import service

        reading = f"Reading and checking {path.name}"
        report(progress, reading, 0, 1)
        plan = service.plan_file(self.app, path, fmt, subject=subject, trusted=trusted,
                                 max_bytes=max_bytes, skip_unsupported=skip_unsupported)
        report(progress, reading, 1, 1)
        return ImportReport(**service.apply_plan(
            self.app, plan, dry_run=dry_run, actor=caller.writer_key,
            apply_untrusted=apply_untrusted, progress=progress))


_SOURCE = "00000000-0000-0000-0000-000000000000"  # a source captured with the atoms


def _checked(cmd: dict[str, Any], cites_source: bool) -> AtomInput:
    """``cmd`` checked as the application will check it: citing the source artifact
    captured in the same command, if there is one (its id is known only then)."""
    if cites_source:
        cmd = {**cmd, "artifact_ids": [*(cmd.get("artifact_ids") or ()), _SOURCE]}
    return parse(AtomInput, cmd)


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
