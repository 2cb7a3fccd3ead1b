"""Memories of one subject that say the same thing as a new text (ADR 0052).

The named query behind ``on_similar`` (``atom add``, ``POST /v1/atoms``, MCP
``remember``): :func:`find_similar` reads one subject's vector index and keyword index
for candidates, keeps those that are recallable now (active, not superseded, expired or
erased, valid now: :func:`projections.atoms.is_candidate`) and answers the ones that
pass both tests of :func:`is_duplicate`:

1. the cosine of the two texts' embeddings is at least the embedder's threshold
   (:func:`threshold_for`; measured by ``benchmarks/dedup_quality.py``), and
2. a keyword check (:func:`keywords_agree`): the two texts name the same things. Their
   content words overlap (Jaccard at least :data:`MIN_JACCARD`, after a light stemming),
   and their names (capitalised words after the first), figures, negations and words
   that change a fact's time, mood or scope ("used to", "wants", "until", "only") are
   the same. Embeddings put "Prefers tea" next to "Prefers coffee" and "Works at Acme"
   next to "Worked at Acme until 2024"; the words tell them apart.

Only the given subject's atoms are read (the indexes are searched by subject, and every
row is checked to be of it): a memory of one person is never similar to another's.
Nothing is written and nothing is logged but ids and counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import structlog

from ledger import clock
from projections.atoms import is_candidate
from projections.embedder import Embedder, embed_matrix
from projections.vectors import ID_WIDTH, ON

if TYPE_CHECKING:
    from projections.service import Projections

log = structlog.get_logger("projections.similar")

__all__ = ["MIN_JACCARD", "THRESHOLDS", "Similar", "find_similar", "is_duplicate",
           "keywords_agree", "pair_cosines", "threshold_for"]

THRESHOLDS: dict[str, float] = {
    "HashingEmbedder": 0.5,
    "WordLlamaEmbedder": 0.55,
    "SentenceTransformerEmbedder": 0.75,
}
"""Cosine thresholds per embedder class, chosen from ``benchmarks/dedup_quality.py``'s
sweep (the note in docs/adr/0052 gives the figures)."""

DEFAULT_THRESHOLD = 0.75
"""For an embedder not measured here (``http``): a conservative cosine."""

MIN_JACCARD = 0.6
"""Least share of content words two texts must have in common."""

POOL = 20
"""Candidates each index proposes per text."""

MARGIN = 1e-3
"""How far below the threshold a cosine read from the recall index (float32 rows) may be
and its atom still be read and compared: the decision is taken on the two texts'
embeddings, which can differ from the index's in the last digits."""

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?", re.UNICODE)
_STOP = frozenset("""
a an the of to in on at by for from with and or but as is are be been being
am has have do does did this that these those it its they them their he him his
she her hers i me my we us our you your user person subject who which what when where
very really also just so than then there here some any one about into over
""".split())
_CHANGES = frozenset("""
was were had used wants want wanted wish wishes hope hopes plan plans planning would
might maybe once until anymore longer former formerly previously ex stopped quit gave
only except sometimes rarely
""".split())
"""Words that change a fact's time, mood or scope ("used to", "wants", "until", "only"):
two texts must have the same ones."""
_NEGATIONS = frozenset("no not never none nobody nothing neither nor n't without "
                       "cannot can't don't doesn't didn't isn't aren't wasn't weren't "
                       "won't".split())


@dataclass(frozen=True)
class Similar:
    """An atom of the subject that says the same thing as the proposed text."""

    atom_id: str
    score: float
    """The cosine of the two texts' embeddings."""

    def as_json(self) -> dict[str, Any]:
        return {"atom_id": self.atom_id, "score": round(self.score, 6)}


def threshold_for(embedder: Embedder) -> float:
    """The cosine at and above which ``embedder``'s texts may be duplicates: the
    embedder's own ``dedup_threshold`` if it has one, else the measured one of its
    class, else :data:`DEFAULT_THRESHOLD`."""
    own = getattr(embedder, "dedup_threshold", None)
    if own is not None:
        return float(own)
    return THRESHOLDS.get(type(embedder).__name__, DEFAULT_THRESHOLD)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[:-len(suffix)]
    return word


def _parts(text: str) -> tuple[set[str], set[str], set[str], bool]:
    """(content stems, names, figures and change words, negated) of a text."""
    words = _WORD.findall(text)
    stems: set[str] = set()
    names: set[str] = set()
    figures: set[str] = set()
    negated = False
    for n, w in enumerate(words):
        low = w.lower().replace("\u2019", "'")
        if low in _NEGATIONS or low.endswith("n't"):
            negated = True
            continue
        if low in _CHANGES:
            figures.add(low)
            continue
        if any(ch.isdigit() for ch in low):
            figures.add(low)
            continue
        if low in _STOP:
            continue
        if n > 0 and w[0].isupper():
            names.add(low)
        stems.add(_stem(low))
    return stems, names, figures, negated


def keywords_agree(a: str, b: str,
                   parts: dict[str, tuple[set[str], set[str], set[str], bool]] | None = None
                   ) -> bool:
    """The keyword check: same names, figures and negation, and content words with a
    Jaccard overlap of at least :data:`MIN_JACCARD`. ``parts``: the texts' parts kept
    for one search (never beyond it: no copy of a memory outlives the call)."""
    if parts is None:
        parts = {}
    for t in (a, b):
        if t not in parts:
            parts[t] = _parts(t)
    sa_, na, fa, nega = parts[a]
    sb, nb, fb, negb = parts[b]
    if na != nb or fa != fb or nega != negb:
        return False
    if not sa_ or not sb:
        return " ".join(a.lower().split()) == " ".join(b.lower().split())
    return len(sa_ & sb) / len(sa_ | sb) >= MIN_JACCARD


def is_duplicate(cosine: float, a: str, b: str, threshold: float) -> bool:
    """Whether two texts say the same thing: cosine at least ``threshold`` and the
    keyword check passes."""
    return cosine >= threshold and keywords_agree(a, b)


def _unit(matrix: Any) -> Any:
    import numpy as np

    m = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return m / norms


def pair_cosines(embedder: Embedder, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """The cosine of each pair of texts, embedded in one batch."""
    if not pairs:
        return []
    texts = list(dict.fromkeys(t for p in pairs for t in p))
    where = {t: i for i, t in enumerate(texts)}
    m = _unit(embed_matrix(embedder, texts))
    return [max(-1.0, min(1.0, float(m[where[a]] @ m[where[b]]))) for a, b in pairs]


def find_similar(proj: Projections, subject_id: str, texts: Sequence[str], *,
                 k: int = 5, threshold: float | None = None,
                 now: datetime | None = None) -> list[list[Similar]]:
    """Per text, up to ``k`` recallable atoms of ``subject_id`` that say the same thing,
    most similar first. The read models are read as they are: the caller catches up
    first if it needs the newest writes.

    The subject's vectors are read once for all the texts (a dense embedder's from the
    in-process recall index). With that index, a proposal whose cosine there is below
    the threshold (less :data:`MARGIN`) is dropped before its row is read, and a text's
    keyword search is skipped when the exact vector search shows that every atom at or
    above the threshold is among its nearest (ADR 0077). The candidates left pass the
    keyword check before their texts are embedded beside the proposal, and the cosine
    of those two embeddings decides."""
    if not texts:
        return []
    at = clock.format_instant(now or clock.now())
    embedder = proj.vectors.embedder
    limit = threshold_for(embedder) if threshold is None else threshold
    qm = _unit(embed_matrix(embedder, list(texts)))
    with proj.store.engine.connect() as conn:
        search = _nearest(proj, conn, subject_id, len(texts))
        pools = [_pool(proj, conn, subject_id, search, text, q, near, limit - MARGIN)
                 for text, q, near in zip(texts, qm, search.top(qm), strict=True)]
        wanted = list(dict.fromkeys(a for p in pools for a in p))
        rows = {r["atom_id"]: r for r in proj.atoms.atoms_by_id(conn, wanted)}
    live = {a: r for a, r in rows.items()
            if r["subject_id"] == subject_id and is_candidate(r, at)}
    parts: dict[str, tuple[set[str], set[str], set[str], bool]] = {}
    agreeing = [[a for a in pool
                 if a in live and keywords_agree(text, live[a]["text"], parts)]
                for text, pool in zip(texts, pools, strict=True)]
    ids = list(dict.fromkeys(a for p in agreeing for a in p))
    cm = _unit(embed_matrix(embedder, [live[a]["text"] for a in ids])) if ids else None
    slot = {a: i for i, a in enumerate(ids)}
    out: list[list[Similar]] = []
    for q, pool in zip(qm, agreeing, strict=True):
        found = []
        for a in pool:
            cos = float(cm[slot[a]] @ q) if cm is not None else 0.0
            if not math.isnan(cos) and cos >= limit:
                found.append(Similar(a, min(1.0, cos)))
        found.sort(key=lambda s: (-s.score, s.atom_id))
        out.append(found[:k])
    log.info("projections.similar_found", subject_id=subject_id, texts=len(texts),
             candidates=len(live), similar=sum(len(f) for f in out))
    return out


@dataclass(frozen=True)
class _Search:
    """The vector side of one subject's search (:func:`_nearest`)."""

    top: Callable[[Any], list[list[tuple[str, float]]]]
    """Each unit query's :data:`POOL` nearest atoms, best first, with their cosines."""
    docs: int
    """How many vectors the subject has (bounds the keyword search)."""
    cosines: Callable[[Any, Sequence[str]], dict[str, float]] | None = None
    """The cosine of atoms' vectors to a query; None: not known before the texts are
    embedded (sparse vectors), so no proposal is dropped on its cosine."""
    exact: bool = False
    """:attr:`top` scores every vector: an atom it leaves out is no nearer than its last."""


def _pool(proj: Projections, conn: sa.Connection, subject_id: str, search: _Search,
          text: str, q: Any, near: list[tuple[str, float]], floor: float) -> list[str]:
    """The atoms worth reading for one text: its nearest, and its keyword index matches
    (bounded as recall's is, KeywordIndex.plan: for a subject of many atoms the terms
    most of them hold are dropped, so the cost follows the rare terms). With cosines
    known, only those at ``floor`` or above; and no keyword search when every atom at
    ``floor`` or above is among the nearest."""
    if search.cosines is None:
        return list(dict.fromkeys([*(a for a, _ in near), *_keyword(proj, conn, subject_id,
                                                                      text, search.docs)]))
    pool = [a for a, score in near if score >= floor]
    if search.exact and (len(near) < POOL or near[-1][1] < floor):
        return pool
    seen = set(pool)
    matched = [a for a in _keyword(proj, conn, subject_id, text, search.docs)
               if a not in seen]
    cos = search.cosines(q, matched)
    # an atom without a vector here is kept: its texts' embeddings decide
    return pool + [a for a in matched if cos.get(a, floor) >= floor]


def _keyword(proj: Projections, conn: sa.Connection, subject_id: str, text: str,
             docs: int) -> list[str]:
    return [a for a, _ in proj.keyword.search(conn, subject_id, text, POOL,
                                              subject_docs=docs)]


def _nearest(proj: Projections, conn: sa.Connection, subject_id: str,
             queries: int) -> _Search:
    """The vector side of a search for ``queries`` texts, the subject's vectors read
    once: a dense embedder's from the recall index (all the queries in one matrix
    product, ``vectors_top``), cosines and exactness known; else the sparse vectors'
    rows, scanned per query."""
    if proj.index.usable():
        t = proj.runner.tracking
        got = dict(conn.execute(sa.select(t.c.name, t.c.position).where(
            t.c.name.in_([proj.atoms.name, proj.vectors.name]))).all())
        entry = proj.index.get(conn, subject_id, (int(got.get(proj.atoms.name, 0)),
                                                  int(got.get(proj.vectors.name, 0))))
        return _Search(lambda qs: entry.vectors_top(qs, POOL), len(entry.ids),
                       lambda q, ids: entry.cosines(q.astype("float32"), ids),
                       entry.exact(queries))
    vectors = proj.vectors
    rows = vectors._rows(conn, subject_id)  # once for every text (sparse vectors)
    count = sum(len(r.ids) for r in rows) // ID_WIDTH
    return _Search(lambda qs: [vectors._top(rows, [float(x) for x in q], POOL, {ON}, None)
                               for q in qs], count)
