"""What a right-to-be-forgotten request erases, and what of others it flags (ADR 0012).

The plan is read from the atom store's named queries (projections/atoms.py,
``AtomReads``) and writes nothing: the dry run shows it, its digest binds the real run to
it, and the run (governance/erasure_steps.py) erases its targets and flags the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from governance import partial as part
from governance.erasure_content import (
    SAME_WORDS,
    Targets,
    content_of,
    held_by_others,
    plural_items,
)
from governance.identifiers import (
    BROAD_MATCHES,
    Identifier,
    Match,
    compile_identifiers,
    first_matches,
)
from ledger.errors import InputError
from ledger.tracing import traced
from projections.atoms import GONE, AtomReads
from projections.service import Projections
from projections.store import content_digest

if TYPE_CHECKING:
    from ledger.application import LedgerApp

Hits = list[tuple[str, str, Match]]
"""(item id, subject id, match) of every live memory an identifier matched."""


@dataclass
class ErasurePlan:
    """What a right-to-be-forgotten request erases, and what of others it flags.

    ``targets`` are the subject's own atoms, artifacts and subject record, nothing else.
    ``flags`` maps each memory of *another* subject that may refer to the person to why
    (``identifier``, ``tag``, ``session``, or ``same-words``: it holds a target's value word
    for word, ADR 0041); ``flag_reasons`` holds the sentence its review flag records (ids,
    identifier positions and field names only, never content). ``review_artifacts`` are
    other subjects' artifacts an identifier matched or that hold a target's value word for
    word: listed for review, never erased (an artifact carries no review flag). Values held
    inside a longer text of another memory are found only while erasing (ADR 0041), and
    their holders flagged then. ``identifiers`` reports, per
    identifier (by position), what it matched, by subject; ``sessions`` per session.
    """

    subject_id: str
    targets: Targets
    flags: dict[str, str] = field(default_factory=dict)
    flag_reasons: dict[str, str] = field(default_factory=dict)
    flag_owners: dict[str, str] = field(default_factory=dict)
    subject_refs: dict[str, str] = field(default_factory=dict)  # id -> ref, for people
    review_artifacts: list[str] = field(default_factory=list)
    identifiers: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    """The targets a legal hold of the enforced policy keeps (``legal-hold`` reasons, ADR
    0047): approved with the rest, kept while the hold lasts."""

    @property
    def referring(self) -> list[str]:
        return sorted(self.flags)

    def digest(self) -> str:
        """SHA-256 of what the run would erase and flag (ids only): a real run given the
        dry run's digest refuses to start if the ledger changed in between."""
        from ledger.canonical import dumps

        body: dict[str, Any] = {"subject_id": self.subject_id,
                                "targets": self.targets.as_json(),
                                "flags": dict(sorted(self.flags.items())),
                                "review_artifacts": sorted(self.review_artifacts)}
        if self.held:  # a plan without holds keeps the digest it always had
            body["held"] = [{k: v for k, v in h.items() if k != "reason"} for h in self.held]
        return "sha256:" + hashlib.sha256(dumps(body)).hexdigest()

    def as_json(self) -> dict[str, Any]:
        return {"subject_id": self.subject_id, "targets": self.targets.as_json(),
                "gathered_by": _count(self.targets.why.values()),
                "flag_for_review": self.referring,
                "flagged_by": _count(self.flags.values()),
                "flags": [{"atom_id": a, "subject_id": self.flag_owners.get(a),
                           "why": self.flags[a], "reason": self.flag_reasons.get(a)}
                          for a in self.referring],
                "review_artifacts": sorted(self.review_artifacts),
                "identifiers": self.identifiers, "sessions": self.sessions,
                "warnings": self.warnings, "subject_refs": self.subject_refs,
                **({"held": self.held} if self.held else {}),
                "plan_digest": self.digest()}


def _atom_fields(row: Any) -> list[tuple[str, str | None]]:
    """The free-text fields of an atom content row, for identifier matching."""
    out: list[tuple[str, str | None]] = [("text", row.text), ("gist", row.gist)]
    for name, raw in (("tags", row.tags), ("details", row.details)):
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            value = None
        items = value if isinstance(value, list) else []
        for item in items:
            text = item.get("content") if isinstance(item, dict) else item
            if isinstance(text, str):
                out.append((name, text))
    return out


def _identifier_matches(reads: AtomReads, idents: Sequence[Identifier]) -> tuple[Hits, Hits]:
    """(atom id, subject id, match) and (artifact id, subject id, match) for every live
    memory an identifier matches. Reads every content row (normalisation and word
    boundaries are not SQL), streamed."""
    atoms: list[tuple[str, str, Match]] = []
    for row in reads.live_atom_contents():
        for m in first_matches(idents, _atom_fields(row)):
            atoms.append((str(row.atom_id), str(row.subject_id), m))
    arts: list[tuple[str, str, Match]] = []
    for row in reads.live_artifact_contents():
        for m in first_matches(idents, [("title", row.title), ("body", row.body)]):
            arts.append((str(row.artifact_id), str(row.subject_id), m))
    return atoms, arts


@traced("erasure.plan", lambda plan, *a, **k: {
    "ledger.erasure.atoms": len(plan.targets.atoms),
    "ledger.erasure.artifacts": len(plan.targets.artifacts),
    "ledger.erasure.subjects": len(plan.targets.subjects),
    "ledger.erasure.flagged": len(plan.flags)})
def plan_user_erasure(app: LedgerApp, proj: Projections, subject: str,
                      identifiers: Sequence[str] = (), sessions: Sequence[str] = (),
                      broad: int = BROAD_MATCHES, catch_up: bool = True) -> ErasurePlan:
    """Gather what belongs to the subject, and what of others may refer to it (ADR 0012).

    Erase targets are the subject's own atoms and artifacts and its subject record, and
    nothing else: a ``--session`` must be one the subject has memories in, and the
    memories other subjects hold in it are flagged, not erased. Identifiers only flag
    (governance/identifiers.py). Memories of others that share a tag with a target are
    flagged too. Subject, session and tag lookups use the atom store's indexes; identifier
    matching reads every content row, only when identifiers are given. ``catch_up``
    False: the plan of the read models as they stand, writing nothing.
    """
    sid = str(app.reader.resolve_subject(subject))
    idents = compile_identifiers(identifiers)  # refused before anything is read
    if catch_up:
        proj.catch_up()
    plan = ErasurePlan(sid, Targets())
    with proj.atoms.reading() as reads:
        _check_sessions(plan, reads, subject, sessions)
        target_rows = _own(app, plan, reads)
        atom_hits, art_hits = _identifier_matches(reads, idents) if idents else ([], [])
        by_tag, by_session, by_words, same_artifacts = _nearby(plan, reads, target_rows,
                                                               sessions)
    _flag_identified(plan, atom_hits)
    _flag_nearby(plan, by_tag, by_session, by_words)
    plan.review_artifacts = sorted({*(aid for aid, owner, _ in art_hits if owner != sid),
                                    *same_artifacts})
    holds = part.holds_in_force(app.reader.policy())
    t = plan.targets
    plan.held = part.hold_reasons(t.as_json(), part.held_items(app, t.as_json(), holds), holds)
    for h in plan.held:
        n = sum(len(h[k]) for k in part.KINDS)
        plan.warnings.append(f"{plural_items(n)} under legal hold {h['hold']} will be kept: "
                             "the request will end partial until the hold is lifted")
    owners = {sid, *plan.flag_owners.values(), *(o for _, o, _ in atom_hits),
              *(o for _, o, _ in art_hits)}
    with proj.atoms.reading() as reads:
        for owner in sorted(owners):
            found = reads.subject(owner)
            if found is not None:
                plan.subject_refs[owner] = found["ref"]
    _report_identifiers(plan, idents, atom_hits, art_hits, broad)
    return plan


def _check_sessions(plan: ErasurePlan, reads: AtomReads, subject: str,
                    sessions: Sequence[str]) -> None:
    """Each named session must hold memories of the subject: refused otherwise; what it
    holds of the subject and of others, per session, into the plan."""
    sid = plan.subject_id
    in_session: dict[str, list[dict[str, Any]]] = {}
    if sessions:
        for row in reads.atoms_in_sessions(sessions):
            in_session.setdefault(row["session_id"], []).append(row)
    for s in dict.fromkeys(sessions):
        rows = in_session.get(s, [])
        mine = [r for r in rows if r["subject_id"] == sid]
        if not mine:
            raise InputError(
                f"session {s!r} holds no memory of subject {subject}; only the "
                "subject's own sessions can be named",
                hint="check the session id with `ledger memory list --json`; memories "
                     "of others are never erased by this command")
        others = [r for r in rows if r["subject_id"] != sid and r["status"] not in GONE]
        plan.sessions.append({"session_id": s, "atoms_of_subject": len(mine),
                              "flagged_atoms_of_others": len(others)})


def _own(app: LedgerApp, plan: ErasurePlan, reads: AtomReads) -> list[dict[str, Any]]:
    """The subject's own atoms, artifacts, subject record and portable records, into the
    plan's targets; returns the target atoms' rows."""
    sid, t = plan.subject_id, plan.targets
    target_rows = []
    for row in reads.atoms_of_subject(sid):
        if row["status"] in GONE and row["content_erased"]:
            continue  # already erased and tombstoned; a half-done erasure is picked up
        t.atoms.append(row["atom_id"])
        t.why[row["atom_id"]] = "subject"
        target_rows.append(row)
    for art in reads.artifacts_of(sid):
        if not art.get("content_erased"):
            t.artifacts.append(str(art["artifact_id"]))
    subj = reads.subject(sid)
    if subj is not None and not subj.get("content_erased"):
        t.subjects.append(sid)
    t.records = _records_of(app, sid)
    return target_rows


def _nearby(plan: ErasurePlan, reads: AtomReads, target_rows: list[dict[str, Any]],
            sessions: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                              list[dict[str, Any]], list[str]]:
    """Memories of others that may refer to the erased ones: sharing a tag or a session,
    or holding a target's value word for word (ADR 0041: theirs, so the erasure keeps
    them and flags their holders; listed here, so the plan approved names them). Returns
    the atoms by tag, by session and by words, and the artifacts by words."""
    sid = plan.subject_id
    tags = {tag for row in target_rows for tag in (row.get("tags") or [])}
    sess = sorted({row["session_id"] for row in target_rows if row.get("session_id")}
                  | set(sessions))
    holders = reads.items_with_digests("tag", [content_digest(x) for x in tags])
    candidates = {i for ids in holders.values() for i in ids} - set(plan.targets.atoms)
    by_tag = reads.atoms_by_id(sorted(candidates))
    by_session = reads.atoms_in_sessions(sess, not_of=sid) if sess else []
    _, _, shared = content_of(reads, plan.targets)
    _, same_atoms, same_artifacts = held_by_others(reads, shared)
    return by_tag, by_session, reads.atoms_by_id(same_atoms), same_artifacts


def _flag_identified(plan: ErasurePlan, atom_hits: Hits) -> None:
    for atom_id, owner, m in atom_hits:
        if owner != plan.subject_id and atom_id not in plan.flags:
            plan.flags[atom_id] = "identifier"
            plan.flag_owners[atom_id] = owner
            plan.flag_reasons[atom_id] = (f"identifier #{m.position} of the erasure request "
                                          f"matched its {m.field}")


def _flag_nearby(plan: ErasurePlan, by_tag: list[dict[str, Any]],
                 by_session: list[dict[str, Any]], by_words: list[dict[str, Any]]) -> None:
    for why, rows in (("tag", by_tag), ("session", by_session)):
        for row in rows:
            if (row["subject_id"] != plan.subject_id and row["status"] not in GONE
                    and row["atom_id"] not in plan.flags):
                plan.flags[row["atom_id"]] = why
                plan.flag_owners[row["atom_id"]] = row["subject_id"]
                plan.flag_reasons[row["atom_id"]] = (
                    "shares a tag with an erased memory" if why == "tag"
                    else f"same session ({row['session_id']}) as an erased memory")
    for row in by_words:
        if row["atom_id"] not in plan.flags:
            plan.flags[row["atom_id"]] = "same-words"
            plan.flag_owners[row["atom_id"]] = row["subject_id"]
            plan.flag_reasons[row["atom_id"]] = SAME_WORDS


def _report_identifiers(plan: ErasurePlan, idents: Sequence[Identifier], atom_hits: Hits,
                        art_hits: Hits, broad: int) -> None:
    """Per identifier (by position), what it matched, by subject; a warning when it
    matches more than ``broad`` memories of others."""
    sid = plan.subject_id
    for ident in idents:
        per: dict[str, dict[str, int]] = {}
        for kind, hits in (("atoms", atom_hits), ("artifacts", art_hits)):
            for _item, owner, m in hits:
                if m.position == ident.position:
                    counts = per.setdefault(owner, {"atoms": 0, "artifacts": 0})
                    counts[kind] += 1
        of_others = sum(c["atoms"] + c["artifacts"] for o, c in per.items() if o != sid)
        plan.identifiers.append({
            "identifier": ident.position,
            "matched": {o: per[o] for o in sorted(per, key=lambda o: (o != sid, o))},
            "of_subject": sum(per.get(sid, {}).values()), "of_others": of_others})
        if of_others > broad:
            plan.warnings.append(
                f"identifier #{ident.position} matches {of_others} memories of other subjects "
                f"(more than {broad}): it may name someone else too; check the dry run's "
                "list before flagging them all for review")


def _records_of(app: LedgerApp, sid: str) -> list[str]:
    from portability.records import live_of

    return [str(r.id) for r in live_of(app, sid)]


def _count(values: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


