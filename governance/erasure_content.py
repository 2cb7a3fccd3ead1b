"""What an erasure erases and what it looks for (ADR 0012, 0019, 0041).

The targets (ids only), and the plaintext of each, read once from the atom store's named
queries before the first key is destroyed, for the probes and the raw scan: never logged,
never stored except sealed under the batch's key. What other live memories hold word for
word, or inside a longer text of their own, and what a correction copied into its live
successor, is theirs: not looked for, and counted in the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

from projections.atoms import GONE, AtomReads
from projections.memory import index_text
from projections.service import Projections
from projections.store import content_digest

if TYPE_CHECKING:
    from ledger.application import LedgerApp

MIN_PROBE_CHARS = 8


@dataclass
class Targets:
    atoms: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)
    records: list[str] = field(default_factory=list)  # portable records (ADR 0017)

    def as_json(self) -> dict[str, list[str]]:
        out = {"atoms": sorted(self.atoms), "artifacts": sorted(self.artifacts),
               "subjects": sorted(self.subjects)}
        if self.records:
            out["records"] = sorted(self.records)
        return out

    @property
    def count(self) -> int:
        return len(self.atoms) + len(self.artifacts) + len(self.subjects) + len(self.records)

    def without(self, ids: Iterable[str]) -> Targets:
        """These targets less ``ids`` (the items a legal hold keeps, ADR 0047)."""
        drop = set(ids)
        return Targets(atoms=[i for i in self.atoms if i not in drop],
                       artifacts=[i for i in self.artifacts if i not in drop],
                       subjects=[i for i in self.subjects if i not in drop],
                       records=[i for i in self.records if i not in drop])


def plural_items(n: int) -> str:
    return f"{n} item{'s' if n != 1 else ''}"


def content_of(reads: AtomReads, t: Targets
                ) -> tuple[dict[str, list[str]], dict[str, str], dict[str, set[str]]]:
    """Plaintext of every target, for probes only. Never logged, never stored.

    Free text only (text, gist, details, title, body, display name): tags are short
    labels other memories legitimately share, so they are probed by id, not by value.
    Texts shorter than :data:`MIN_PROBE_CHARS` say nothing about where a memory went
    (a one-word text matches everywhere); they too are probed by id only. So is a
    subject's display name: it is a name, which other people's memories legitimately
    hold (they are flagged for review, not erased), so its bytes elsewhere are not a copy.
    """
    out: dict[str, list[str]] = {}
    indexed: dict[str, str] = {}
    kept = _successor_texts(reads, t.atoms)
    for row in reads.atoms_by_id(t.atoms):
        texts = [row.get("text"), row.get("gist"),
                 *(d.get("content") for d in (row.get("details") or []))]
        # what a correction copied into the live successor is the successor's own
        # content (ADR 0019): not looked for, so its survival does not fail the erasure
        out[row["atom_id"]] = [x for x in texts if isinstance(x, str) and
                               not any(x.lower() in k for k in kept)]
        if row.get("text") is not None:
            indexed[row["atom_id"]] = index_text(row.get("text"), row.get("gist"),
                                                 row.get("tags"), row.get("details"))
    if t.artifacts:
        for r in reads.artifact_texts(t.artifacts):
            out[str(r.artifact_id)] = [x for x in (r.title, r.body, r.media_url) if x]
    out = {k: [x for x in v if x and len(x) >= MIN_PROBE_CHARS] for k, v in out.items()}
    # a value another live memory holds too, word for word (a duplicate memory, the same
    # chat captured twice), is that memory's own content: it stays, and is not looked
    # for; the record counts such values (``reach.held_by_others``), never names them
    targets = {*t.atoms, *t.artifacts, *t.subjects, *t.records}
    digest_of = {x: content_digest(x) for v in out.values() for x in v}
    holders = reads.items_with_digests("text", sorted(set(digest_of.values())))
    shared = {d: held - targets for d, held in holders.items() if held - targets}
    return ({k: [x for x in v if digest_of[x] not in shared] for k, v in out.items()},
            indexed, shared)


SAME_WORDS = "holds an erased memory's words word for word"
"""The reason of the review flag on a memory that :func:`held_by_others` found."""


def held_inside_others(proj: Projections, targets: set[str],
                       content: Mapping[str, Sequence[str]]
                       ) -> tuple[set[str], list[str], list[str]]:
    """The targets' values that live memories outside the erasure hold inside a longer
    text of their own (erased "Prefers tea", kept "Prefers tea over coffee"): asked only
    when the probes or the raw scan found something, so the common erasure pays nothing.
    Atoms are found through the keyword index (a phrase lookup), then the words checked
    in their rows; artifacts by a search of their titles and bodies. Returns the values
    and the atoms and artifacts that hold them (ADR 0041)."""
    values: set[str] = set()
    atoms: set[str] = set()
    artifacts: set[str] = set()
    phrases = proj.keyword.phrase_holders([v for texts in content.values() for v in texts])
    with proj.atoms.reading() as reads:
        for texts in content.values():
            for v in texts:
                low = v.lower()
                cands = sorted(set(phrases[v]) - targets)
                held = {str(r["atom_id"]) for r in reads.atoms_by_id(cands)
                        if any(isinstance(w, str) and low in w.lower() for w in (
                            r.get("text"), r.get("gist"),
                            *(d.get("content") for d in (r.get("details") or []))))}
                arts = reads.artifacts_containing(low) - targets
                if held or arts:
                    values.add(v)
                    atoms |= held
                    artifacts |= arts
    return values, sorted(atoms), sorted(artifacts)


def held_by_others(reads: AtomReads, shared: Mapping[str, set[str]]
                   ) -> tuple[dict[str, int], list[str], list[str]]:
    """What :func:`content_of` found other live memories hold word for word (``shared``:
    a value's digest -> the memories outside the erasure holding it): the counts for the
    record (how many values, how many memories), and the atoms and the artifacts among
    them, to be flagged for review (never erased: they are other memories, ADR 0041)."""
    if not shared:
        return {}, [], []
    others = sorted({h for held in shared.values() for h in held})
    atoms = sorted(str(r["atom_id"]) for r in reads.atoms_by_id(others))
    artifacts = sorted(reads.artifacts_among(others))
    return {"values": len(shared), "items": len(others)}, atoms, artifacts


def successors(reads: AtomReads, atom_ids: Sequence[str]) -> dict[str, list[str]]:
    """Target atom -> the atoms that supersede it, directly or down the chain, that are
    not targets and not erased: the corrections that live on. Follows ``superseded_by``
    (primary-key reads, only for atoms that were corrected)."""
    targets = set(atom_ids)
    out: dict[str, list[str]] = {}
    origin = {r["atom_id"]: r["atom_id"] for r in reads.atoms_by_id(list(atom_ids))
              if r.get("superseded_by")}
    nxt = {r["atom_id"]: str(r["superseded_by"]) for r in reads.atoms_by_id(sorted(origin))}
    seen = set(origin)
    while nxt:
        ids = sorted({v for v in nxt.values() if v not in seen})
        seen.update(ids)
        by_id = {r["atom_id"]: r for r in reads.atoms_by_id(ids)}
        following: dict[str, str] = {}
        for prev, sid in nxt.items():
            row = by_id.get(sid)
            if row is None:
                continue
            start = origin[prev]
            origin[sid] = start
            if sid not in targets and row["status"] not in GONE and not row["content_erased"]:
                out.setdefault(start, []).append(sid)
            if row.get("superseded_by") and str(row["superseded_by"]) not in seen:
                following[sid] = str(row["superseded_by"])
        nxt = following
    return out


def _successor_texts(reads: AtomReads, atom_ids: Sequence[str]) -> list[str]:
    """The free text (lower case) of the live successors of these atoms."""
    ids = sorted({s for v in successors(reads, atom_ids).values() for s in v})
    texts = []
    for row in reads.atoms_by_id(ids):
        texts += [x.lower() for x in (row.get("text"), row.get("gist"),
                                      *(d.get("content") for d in (row.get("details") or [])))
                  if isinstance(x, str)]
    return texts


def record_texts(app: LedgerApp, ids: Sequence[str]) -> list[str]:
    """Free text of portable records, for the raw scan only (no read model holds them)."""
    from portability.records import needles_of

    return [t for r in app.reader.get_many([UUID(i) for i in ids]) if r.content is not None
            for t in needles_of(r.content, MIN_PROBE_CHARS)] if ids else []

