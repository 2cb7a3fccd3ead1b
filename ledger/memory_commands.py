"""The memory commands: subjects, artifacts and atoms registered, captured, added,
imported, corrected, rehearsed, expired and archived; the memoryPolicy set.

Each runs in the write context of :class:`ledger.write_side.WriteSide` and reads through
its reader (ADR 0071).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import structlog
from pydantic import TypeAdapter, ValidationError

from ledger import clock, gc_pause, policy_rules
from ledger.domain import ATOM_FIELDS, OPERATOR, Artifact, Atom, Policy, Subject
from ledger.errors import ConflictError, InputError
from ledger.inputs import ArtifactInput, AtomCorrection, AtomInput, SubjectInput, parse
from ledger.write_side import WriteSide

if TYPE_CHECKING:
    from ledger.progress import Steps


log = structlog.get_logger("ledger")


@dataclass(frozen=True)
class AtomsWritten:
    """What one atom command wrote: the atoms' ids (per proposal, for an update-or-add),
    the atoms its maxAtoms step archived, and the artifacts captured with them."""

    ids: list[UUID]
    archived: list[str] = field(default_factory=list)
    sources: list[UUID] = field(default_factory=list)


class MemoryCommands(WriteSide):
    """The commands on subjects, artifacts, atoms and the policy."""

    # ------------------------------------------------------------------ subjects
    def register_subject(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        inp = parse(SubjectInput, data)
        sid = self.reader.subject_id(inp.ref)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            if self.reader.exists(sid):
                raise ConflictError(f"subject {inp.ref} is already registered ({sid})")
            subject = Subject._create(Subject.Created, id=sid, timestamp=at,
                                      ref=inp.ref, display_name=inp.display_name,
                                      locale=inp.locale)
            self.commit(subject)
        log.info("subject.registered", subject_id=str(sid))
        return sid

    # ------------------------------------------------------------------ artifacts
    def capture_artifact(self, data: dict[str, Any], actor: str | None = None) -> UUID:
        inp = parse(ArtifactInput, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            subject_id = self.reader.resolve_subject(inp.subject)
            aid = self.reader.ref_id("artifact", inp.ref)
            if inp.ref is not None and self.reader.exists(aid):
                raise ConflictError(f"artifact {inp.ref} already exists ({aid})")
            self.commit(self._new_artifact(inp, aid, subject_id, at))
        log.info("artifact.captured", artifact_id=str(aid), subject_id=str(subject_id))
        return aid

    @staticmethod
    def _new_artifact(inp: ArtifactInput, aid: UUID, subject_id: UUID, at: datetime) -> Artifact:
        artifact = Artifact._create(
            Artifact.Created, id=aid, timestamp=at, subject_id=str(subject_id), ref=inp.ref,
            kind=inp.kind, captured_at=clock.format_instant(inp.captured_at or at),
            source=inp.source, private=inp.private, title=inp.title, body=inp.body,
            media_url=inp.media_url)
        assert isinstance(artifact, Artifact)
        return artifact

    def import_records(self, subjects: Sequence[dict[str, Any]],
                       artifacts: Sequence[dict[str, Any]], atoms: Sequence[dict[str, Any]],
                       actor: str | None = None,
                       records: Callable[[UUID, datetime], Sequence[Any]] | None = None,
                       progress: Steps | None = None) -> dict[str, Any]:
        """Record subjects, artifacts and atoms in one command: all or nothing.

        Items whose ref already exists are skipped (so a repeated import is a no-op);
        atoms may cite artifacts created in the same call. ``records(subject id, at)``
        gives more aggregates (portable records, ADR 0017) for the same command.
        Returns counts and ids, and the policy's archiving (``archived``). ``progress``
        hears the items recorded, then the events signed and written (ledger/progress.py).
        """
        sub_in = [parse(SubjectInput, d) for d in subjects]
        art_in = [parse(ArtifactInput, d) for d in artifacts]
        atom_in = [parse(AtomInput, d) for d in atoms]
        total, tick = len(sub_in) + len(art_in) + len(atom_in), 0

        def recorded(n: int = 1) -> None:
            nonlocal tick
            tick += n
            if progress is not None and (tick % 500 == 0 or tick == total):
                progress("Recording items", tick, total)
        signer = self.signer(actor)
        created = {"subjects": 0, "artifacts": 0, "atoms": 0}
        skipped = {"subjects": 0, "artifacts": 0, "atoms": 0}
        ids: dict[str, dict[str, str]] = {"subjects": {}, "artifacts": {}, "atoms": {}}
        with self.writing(signer) as at:
            policy = policy_rules.check_new_atoms(self.reader, atom_in, imported=True)
            seen: dict[tuple[str, str], UUID] = {}
            new: list[Any] = []
            for s_inp in sub_in:
                recorded()
                sid = self.reader.subject_id(s_inp.ref)
                seen[("subject", s_inp.ref)] = sid
                ids["subjects"][s_inp.ref] = str(sid)
                if sid in {a.id for a in new} or self.reader.exists(sid):
                    skipped["subjects"] += 1
                    continue
                new.append(Subject._create(Subject.Created, id=sid, timestamp=at, ref=s_inp.ref,
                                           display_name=s_inp.display_name,
                                           locale=s_inp.locale))
                created["subjects"] += 1
            for a_inp in art_in:
                recorded()
                aid = self.reader.ref_id("artifact", a_inp.ref)
                if a_inp.ref is not None:
                    seen[("artifact", a_inp.ref)] = aid
                    ids["artifacts"][a_inp.ref] = str(aid)
                    if self.reader.exists(aid):
                        skipped["artifacts"] += 1
                        continue
                subject_id = seen.get(("subject", a_inp.subject)) or \
                    self.reader.resolve_subject(a_inp.subject)
                new.append(self._new_artifact(a_inp, aid, subject_id, at))
                created["artifacts"] += 1
            for m_inp in atom_in:
                recorded()
                if m_inp.ref is not None:
                    mid = self.reader.ref_id("atom", m_inp.ref)
                    ids["atoms"][m_inp.ref] = str(mid)
                    if self.reader.exists(mid):
                        skipped["atoms"] += 1
                        continue
                atom = self._new_atom(m_inp, at, seen=seen, check_ref=False)
                new.append(atom)
                created["atoms"] += 1
            if len({a.id for a in new}) != len(new):
                raise InputError("the import names one item twice (duplicate refs)")
            if records is not None and sub_in:
                new.extend(records(seen[("subject", sub_in[0].ref)], at))
            loaded = policy_rules.over_limit(self.reader, policy, new, at)
            archived = archived_by_policy([*new, *loaded])
            if new:
                events = len(new) + len(loaded)
                if progress is not None:
                    progress("Signing and writing events", 0, events)
                self.commit(*new, *loaded)
                if progress is not None:
                    progress("Signing and writing events", events, events)
        log.info("import.recorded", **{f"created_{k}": v for k, v in created.items()},
                 **{f"skipped_{k}": v for k, v in skipped.items()})
        return {"created": created, "skipped": skipped, "ids": ids,
                "archived": archived}

    # ------------------------------------------------------------------ atoms
    def _new_atom(self, inp: AtomInput, at: datetime, supersedes: str | None = None,
                  seen: dict[tuple[str, str], UUID] | None = None,
                  check_ref: bool = True) -> Atom:
        """Build a new atom; ``seen`` caches id resolutions within one command."""
        atom = _aggregate_of(self._atom_created(inp, at, supersedes, seen, check_ref))
        assert isinstance(atom, Atom)
        return atom

    def _atom_created(self, inp: AtomInput, at: datetime, supersedes: str | None = None,
                      seen: dict[tuple[str, str], UUID] | None = None,
                      check_ref: bool = True) -> Atom.Created:
        """The ``Atom.Created`` event of a new atom, as ``Atom._create`` builds it, without
        the aggregate (ADR 0008); ``seen`` caches id resolutions within one command."""
        cache = {} if seen is None else seen
        subject_id = cache.get(("subject", inp.subject))
        if subject_id is None:
            subject_id = cache[("subject", inp.subject)] = self.reader.resolve_subject(inp.subject)
        artifact_ids = []
        for ref in inp.artifact_ids:
            if ("artifact", ref) not in cache:
                cache[("artifact", ref)] = self.reader.resolve("artifact", ref)
            artifact_ids.append(str(cache[("artifact", ref)]))
        atom_id = self.reader.ref_id("atom", inp.ref)
        if check_ref and inp.ref is not None and self.reader.exists(atom_id):
            raise ConflictError(f"atom {inp.ref} already exists ({atom_id})")
        # the input's fields as they are, in ATOM_FIELDS' order (the event's __dict__ keeps
        # the order it always had), then those the ledger converts or resolves, in place
        state: dict[str, Any] = {
            "originator_id": atom_id, "originator_version": Atom.INITIAL_VERSION,
            "timestamp": at, "originator_topic": Atom.TOPIC}
        state.update(zip(ATOM_FIELDS, map(inp.__dict__.get, ATOM_FIELDS), strict=False))
        state["subject_id"] = str(subject_id)
        state["details"] = [d.model_dump() for d in inp.details] or None
        state["tags"] = list(inp.tags) or None
        state["valid_from"] = clock.format_instant(inp.valid_from) if inp.valid_from else None
        state["valid_to"] = clock.format_instant(inp.valid_to) if inp.valid_to else None
        state["artifact_ids"] = artifact_ids
        state["decay_profile"] = inp.decay_profile.model_dump() if inp.decay_profile else None
        state["supersedes"] = supersedes
        state["source_data"] = inp.source_data
        # The frozen dataclass's __init__ only sets these attributes one by one; build the
        # event the way eventsourcing's Mapper.to_domain_event does (test_bulk_append.py
        # pins it equal to Atom._create's event).
        created: Atom.Created = object.__new__(Atom.Created)
        object.__setattr__(created, "__dict__", state)
        return created

    def add_atom(self, data: AtomItem, actor: str | None = None) -> UUID:
        return self.add_atoms([data], actor)[0]

    def add_atoms(self, items: Sequence[AtomItem], actor: str | None = None,
                  sources: Sequence[dict[str, Any]] = ()) -> list[UUID]:
        """Record atoms in one command: all are written, or none; their ids. See
        :meth:`write_atoms` for the rest of what the command did."""
        return self.write_atoms(items, actor, sources).ids

    def write_atoms(self, items: Sequence[AtomItem], actor: str | None = None,
                    sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        """Record atoms in one command: all are written, or none. ``sources`` are
        artifacts captured in the same command, which every atom of it cites (the MCP
        ``remember`` tool's source)."""
        with gc_pause.paused(len(items) >= gc_pause.MIN_ITEMS):
            return self._add_atoms(items, actor, sources)

    def _add_atoms(self, items: Sequence[AtomItem], actor: str | None,
                   sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        source_inputs = [parse(ArtifactInput, d) for d in sources]
        source_ids = [self.reader.ref_id("artifact", a.ref) for a in source_inputs]
        inputs = _parse_atoms(items, source_ids)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            artifacts, seen = self._sources(source_inputs, source_ids, at)
            policy = policy_rules.check_new_atoms(self.reader, inputs)
            created = [self._atom_created(inp, at, seen=seen) for inp in inputs]
            if len({e.originator_id.int for e in created}) != len(created):  # int: C hash
                raise InputError("two atoms in this command have the same ref")
            # Bulk path (ADR 0008): with no policy in force nothing acts on the new
            # aggregates, so their Created events are committed as they are; with one,
            # the aggregates are built for the policy's max-atoms step.
            atoms: list[Any] = (created if policy is None
                                else [_aggregate_of(e) for e in created])
            loaded = policy_rules.over_limit(self.reader, policy, atoms, at)
            archived = archived_by_policy([*atoms, *loaded])
            self.commit(*artifacts, *atoms, *loaded, event_ids=False)
        command_log = log.bind()  # bound once: the lazy module logger binds on every call
        if command_log.is_enabled_for(logging.INFO):  # else skip the per-atom id strings
            for e in created:
                command_log.info("atom.created", atom_id=str(e.originator_id),
                                 subject_id=e.subject_id)
        return AtomsWritten([e.originator_id for e in created], archived,
                            [a.id for a in artifacts])

    def _sources(self, inputs: Sequence[ArtifactInput], ids: Sequence[UUID], at: datetime
                 ) -> tuple[list[Artifact], dict[tuple[str, str], UUID]]:
        """Under the write lock: the artifacts captured with an atom command, and their
        ids as the atoms cite them before they are committed."""
        seen: dict[tuple[str, str], UUID] = {}
        artifacts = []
        for a, aid in zip(inputs, ids, strict=True):
            if a.ref is not None and self.reader.exists(aid):
                raise ConflictError(f"artifact {a.ref} already exists ({aid})")
            artifacts.append(self._new_artifact(a, aid, self.reader.resolve_subject(a.subject),
                                                at))
            seen[("artifact", str(aid))] = aid
        return artifacts, seen

    def remember_atoms(self, items: Sequence[AtomItem],
                       actions: Sequence[tuple[str, str | None]], actor: str | None = None,
                       sources: Sequence[dict[str, Any]] = ()) -> AtomsWritten:
        """Update or add (ADR 0052): each proposed atom with its decision, all in one
        signed command, all or nothing. ``actions[i]`` is ``("add", None)``,
        ``("supersede", atom_id)``: the proposal is added and supersedes that atom (it
        gets ``valid_to``, as a correction), or ``("rehearse", atom_id)``: no new atom,
        that atom gets a rehearsal. An atom to supersede or rehearse must still be active
        and of the proposal's subject when the write lock is held, or nothing is written.
        Its ``ids`` are per proposal the new atom's id, or the rehearsed atom's.
        ``sources``: artifacts captured with the proposals that create atoms (cited by each
        of them), not captured when none does."""
        if len(items) != len(actions):
            raise InputError("one decision per proposed atom")
        creating = [n for n, (act, _) in enumerate(actions) if act != "rehearse"]
        source_inputs = [parse(ArtifactInput, d) for d in sources] if creating else []
        source_ids = [self.reader.ref_id("artifact", a.ref) for a in source_inputs]
        inputs = _parse_atoms(items, source_ids, creating)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            artifacts, seen = self._sources(source_inputs, source_ids, at)
            policy = policy_rules.check_new_atoms(self.reader, [inputs[n] for n in creating])
            existing: dict[UUID, Atom] = {}
            out: list[UUID] = []
            new: list[Atom] = []
            for inp, (act, target) in zip(inputs, actions, strict=True):
                if act == "add":
                    atom = self._new_atom(inp, at, seen=seen)
                    new.append(atom)
                    out.append(atom.id)
                    continue
                if act not in ("rehearse", "supersede") or target is None:
                    raise InputError(f"unknown decision {act!r} for a proposed atom")
                tid = self.reader.resolve("atom", target)
                old = existing.get(tid) or self.reader.get_atom(tid)
                existing[tid] = old
                sid = seen.get(("subject", inp.subject)) or self.reader.resolve_subject(inp.subject)
                if old.subject_id != str(sid):  # never across subjects
                    raise ConflictError(f"atom {old.id} is not of the proposal's subject; "
                                        "nothing was written")
                if old.status != "active" or old.content_erased:
                    raise ConflictError(
                        f"atom {old.id} is {old.status} (it changed since it was found "
                        "similar); nothing was written", hint="send the memory again")
                if act == "rehearse":
                    old.trigger_event(Atom.Rehearsed, timestamp=at, session_id=inp.session_id,
                                      reason="remembered again (on_similar: rehearse)")
                    out.append(old.id)
                    continue
                atom = self._new_atom(inp, at, supersedes=str(old.id), seen=seen)
                old.trigger_event(Atom.Superseded, timestamp=at, superseded_by=str(atom.id),
                                  valid_to=clock.format_instant(at),
                                  reason="superseded by a similar memory "
                                         "(on_similar: supersede)")
                new.append(atom)
                out.append(atom.id)
            if len({a.id for a in new}) != len(new):
                raise InputError("two atoms in this command have the same ref")
            loaded = [a for a in policy_rules.over_limit(self.reader, policy, new, at)
                      if a.id not in existing]
            archived = archived_by_policy([*new, *loaded])
            self.commit(*artifacts, *existing.values(), *new, *loaded, event_ids=False)
        for atom in new:
            log.info("atom.created", atom_id=str(atom.id), subject_id=atom.subject_id)
        for act, target in actions:
            if act != "add":
                log.info("atom.rehearsed" if act == "rehearse" else "atom.superseded",
                         atom_id=target)
        log.info("atoms.remembered", added=sum(a == "add" for a, _ in actions),
                 superseded=sum(a == "supersede" for a, _ in actions),
                 rehearsed=sum(a == "rehearse" for a, _ in actions))
        return AtomsWritten(out, archived, [a.id for a in artifacts])

    def correct_atom(self, atom_id: str, data: dict[str, Any],
                     actor: str | None = None) -> UUID:
        """Supersede an atom: the old one gets ``valid_to``; a new atom replaces it."""
        corr = parse(AtomCorrection, data)
        signer = self.signer(actor)
        with self.writing(signer) as at:
            old = self.reader.get_atom(atom_id)
            if old.status != "active":
                hint = f"correct {old.superseded_by} instead" if old.superseded_by else None
                raise ConflictError(f"atom {old.id} is {old.status} and cannot be corrected",
                                    hint=hint)
            if old.content_erased:
                raise ConflictError(f"atom {old.id} was erased and cannot be corrected")
            base = {k: v for k, v in old.as_dict().items()
                    if k in AtomInput.model_fields and v is not None}
            base.update({"subject": old.subject_id, "ref": None})
            base.update(corr.model_dump(exclude_unset=True, exclude={"reason"}))
            if "artifact_ids" not in corr.model_fields_set:
                base["artifact_ids"] = old.artifact_ids
            base["valid_from"] = corr.valid_from or at
            new_input = parse(AtomInput, base)
            new = self._new_atom(new_input, at, supersedes=str(old.id))
            old.trigger_event(Atom.Superseded, timestamp=at, superseded_by=str(new.id),
                              valid_to=clock.format_instant(corr.valid_from or at),
                              reason=corr.reason)
            self.commit(old, new)
        log.info("atom.corrected", atom_id=str(old.id), new_atom_id=str(new.id))
        return new.id

    def restore_statuses(self, items: Sequence[tuple[UUID, str, UUID | None, str | None]],
                         actor: str | None = None) -> int:
        """Give imported atoms the status their source recorded, in one command:
        (atom, ``superseded`` or ``expired``, successor, valid_to). Atoms no longer
        active are left alone, so a re-run changes nothing. Returns how many changed."""
        todo: list[Atom] = []
        with self.writing(self.signer(actor)) as at:
            atoms = self.reader.get_many([i for i, *_ in items])
            for atom, (_, status, successor, valid_to) in zip(atoms, items, strict=True):
                if atom.status != "active" or atom.content_erased:
                    continue
                until = valid_to or clock.format_instant(at)
                if status == "superseded" and successor is not None:
                    atom.trigger_event(Atom.Superseded, timestamp=at,
                                       superseded_by=str(successor), valid_to=until,
                                       reason="status restored on import")
                else:
                    atom.trigger_event(Atom.Expired, timestamp=at, valid_to=until,
                                       reason="status restored on import")
                todo.append(atom)
            if todo:
                self.commit(*todo)
        log.info("import.statuses_restored", count=len(todo))
        return len(todo)

    def rehearse_atom(self, atom_id: str, session_id: str | None = None,
                      reason: str | None = None, actor: str | None = None) -> int:
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atom = self.reader.get_atom(atom_id)
            if atom.status != "active" or atom.content_erased:
                raise ConflictError(f"atom {atom.id} is {atom.status}; only active atoms "
                                    "are rehearsed")
            atom.trigger_event(Atom.Rehearsed, timestamp=at, session_id=session_id,
                               reason=reason)
            self.commit(atom)
        log.info("atom.rehearsed", atom_id=str(atom.id), count=atom.rehearsal_count)
        return int(atom.rehearsal_count)

    def rehearse_atoms(self, atom_ids: Sequence[str], session_id: str | None = None,
                       reason: str | None = "recalled", actor: str | None = None) -> list[str]:
        """Rehearse recalled atoms in one command. Within a session an atom is rehearsed
        once (the Persona rehearsal cooldown): repeats in the same session are skipped."""
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atoms = []
            for aid in dict.fromkeys(atom_ids):
                atom = self.reader.get_atom(aid)
                if atom.status != "active" or atom.content_erased:
                    continue
                if session_id is not None and atom.last_rehearsal_session == session_id:
                    continue
                atom.trigger_event(Atom.Rehearsed, timestamp=at, session_id=session_id,
                                   reason=reason)
                atoms.append(atom)
            ids = self.commit(*atoms) if atoms else []
        log.info("atoms.rehearsed", count=len(ids))
        return ids

    def expire_atom(self, atom_id: str, reason: str | None = None,
                    actor: str | None = None) -> None:
        signer = self.signer(actor)
        with self.writing(signer) as at:
            atom = self.reader.get_atom(atom_id)
            if atom.status != "active":
                raise ConflictError(f"atom {atom.id} is already {atom.status}")
            atom.trigger_event(Atom.Expired, timestamp=at, valid_to=clock.format_instant(at),
                               reason=reason)
            self.commit(atom)
        log.info("atom.expired", atom_id=str(atom.id))

    # ------------------------------------------------------------------ policy
    def set_policy(self, document: dict[str, Any], actor: str = "operator") -> str:
        """Validate a memoryPolicy against schemas/memory-policy.json and record it, signed."""
        from ledger.json_schemas import validator

        doc = document.get("memoryPolicy", document) if isinstance(document, dict) else None
        if not isinstance(doc, dict):
            raise InputError("a memoryPolicy document is a JSON object",
                             hint='give {"memoryPolicy": {...}} or the block itself')
        errors = list(validator("memory-policy.json").iter_errors(doc))
        if errors:
            from ledger.schema_errors import summarize

            raise InputError(f"invalid memoryPolicy:\n{summarize(errors, 'memoryPolicy')}",
                             hint="examples in docs/examples/; every field in "
                                  "schemas/memory-policy.json (Persona Schema §7)")
        with self.writing(self.signer(actor), OPERATOR) as at:
            pid = self.reader.policy_id()
            if self.reader.exists(pid):
                policy: Any = self.repository.get(pid)
            else:
                policy = Policy._create(Policy.Created, id=pid, timestamp=at)
            policy.trigger_event(Policy.PolicySet, timestamp=at, document=doc)
            ids = self.commit(policy)
        log.info("policy.set", version=policy.version)
        return ids[-1]


_ATOM_INPUTS: TypeAdapter[list[AtomInput]] = TypeAdapter(list[AtomInput])


def archived_by_policy(items: Sequence[Any]) -> list[str]:
    """Ids of the atoms among ``items`` that this command archives (maxAtoms), before
    their pending events are committed."""
    return sorted(str(a.id) for a in items if isinstance(a, Atom) and any(
        isinstance(e, Atom.Redacted) and getattr(e, "rule", None) == "maxAtoms"
        for e in a.pending_events))


AtomItem = AtomInput | Mapping[str, Any]
"""An atom to write: the command's model, validated (what the facade hands over), or its
fields as a mapping (validated here, in the application's words)."""


def _parse_atoms(items: Sequence[AtomItem], source_ids: Sequence[UUID] = (),
                 creating: Sequence[int] | None = None) -> list[AtomInput]:
    """The items as :class:`AtomInput`, those at ``creating`` (or all) citing the
    artifacts ``source_ids`` captured with them. A mapping is validated with its sources,
    all in one call (ADR 0008); on any error, item by item again so the message names the
    bad fields exactly as ``parse``. An :class:`AtomInput` was validated when it was made
    (the facade checks it with its sources)."""
    cited = [*map(str, source_ids)]

    def cite(n: int, d: AtomItem) -> AtomItem:
        if not cited or (creating is not None and n not in creating):
            return d
        if isinstance(d, AtomInput):
            return d.model_copy(update={"artifact_ids": [*d.artifact_ids, *cited]})
        return {**d, "artifact_ids": [*(d.get("artifact_ids") or ()), *cited]}

    batch = [cite(n, d) for n, d in enumerate(items)]
    if all(isinstance(d, AtomInput) for d in batch):
        return cast("list[AtomInput]", batch)
    try:
        return _ATOM_INPUTS.validate_python(batch)
    except ValidationError:
        return [d if isinstance(d, AtomInput) else parse(AtomInput, dict(d)) for d in batch]


def _aggregate_of(created: Any) -> Any:
    """The new aggregate of a created event, with the event pending: what the aggregate's
    ``_create`` does after building the event."""
    aggregate = created.mutate(None)
    aggregate.pending_events.append(created)
    return aggregate
