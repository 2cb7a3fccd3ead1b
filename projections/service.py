"""``Projections(app)``: the read side of one ledger, and the queries the CLI uses.

Read models: ``atoms`` (atom store), ``keyword``, ``vectors``, ``audit``, ``asof``.
Every content route is registered in :attr:`Projections.registry`. Query helpers
catch up first (``refresh=True``), so they answer for the log as it is now.

Recall (ADR 0007, ADR 0022, ADR 0051): the keyword and vector indexes each propose their
best ``POOL`` atoms for the query, whatever ``k`` is; every proposal is scored on both
signals (its exact cosine, its keyword score); candidates among them are active, not
superseded, archived, expired or erased, valid now, and said within ``since``/``until``
when asked; they are ranked by ``w_s * salience(now) + w_r * relevance + w_c *
recency`` (recency from when the memory was true or said), where relevance blends the
keyword and vector scores (a linear blend by default; reciprocal-rank fusion on
request). The first n of ``k = N`` are the same for every N >= n. What the indexes
matched but recall leaves out is reported with a reason each (never its text). With a
dense embedder the candidates and vectors come from :mod:`projections.recall`'s
in-process index (decoded once, salience vectorised); only the returned atoms' rows
are read.
Recall writes nothing: the caller records rehearsals for the returned atom ids.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, cast
from uuid import UUID

import sqlalchemy as sa
import structlog

from ledger import clock
from ledger.clock import format_instant, parse_instant
from ledger.domain import Atom
from ledger.errors import ClockError, InputError, NotFound
from ledger.inputs import PRIVACY_CLASSES
from projections import decay
from projections.asof import AsOfIndex
from projections.atoms import AtomStore, decay_state, is_candidate
from projections.audit import AuditView
from projections.cache import RecallCache
from projections.embedder import Embedder, configured
from projections.keyword import KeywordIndex
from projections.memory import DecayState, parse_time, profile_of
from projections.recall import NOT_VALID, OMISSIONS, OUTSIDE, RecallIndex, said_at, static_reason
from projections.routes import ProbeResult, RouteRegistry
from projections.runner import ModelStatus, Progress, ReadModel, Runner, RunReport
from projections.store import CompactionReport, FilesRoute, Store
from projections.vectors import SEGMENT_SIZE, VectorIndex

if TYPE_CHECKING:
    from ledger.progress import Steps
    from ledger.reader import LedgerReader

log = structlog.get_logger("projections")

__all__ = ["MIN_SIMILARITY", "OMITTED_SHOWN", "POOL", "Omission", "Projections", "RecallItem",
           "RecallResult", "RecallWeights", "StateView", "render_memories"]

MIN_SIMILARITY = 0.15
"""A cosine below this is no vector match: it neither brings an atom into the recall pool
nor counts in its relevance."""
POOL = 200
"""How many atoms each index proposes for a query, whatever ``k`` (at most 100) is, so
the ranking does not depend on ``k`` (ADR 0051)."""
MAX_PROPOSALS = 12_800
"""When fewer than ``POOL`` of the proposals can be recalled, the indexes are asked for
four times as many, up to this many each."""
OMITTED_SHOWN = 20
"""Omitted atoms listed (by id and reason) in a recall result; all are counted."""


@dataclass(frozen=True)
class RecallWeights:
    """Persona Schema §6 ranking weights (topical match is folded into relevance).

    ADR 0022 has the measurements behind the defaults."""

    salience: float = 0.35
    relevance: float = 0.5
    recency: float = 0.15
    recency_half_life_days: float = 7.0
    keyword_share: float = 0.3
    """Share of the keyword side in relevance (both fusions)."""
    fusion: str = "linear"
    """``rrf``: relevance = share-weighted ``1 / (rrf_k + rank)`` of each list, scaled so
    first in both is 1. ``linear``: share * keyword / max keyword + (1 - share) * cosine."""
    rrf_k: float = 60.0


DEFAULT_WEIGHTS = RecallWeights()


@dataclass(frozen=True)
class RecallItem:
    atom_id: str
    score: float
    salience: float
    relevance: float
    keyword: float
    vector: float
    recency: float
    markers: tuple[str, ...]
    text: str
    gist: str | None
    details: tuple[decay.Detail, ...]
    said_at: str = ""
    """When the memory was true or said (ADR 0051): what recency and since/until use."""

    def as_json(self) -> dict[str, Any]:
        return {"atom_id": self.atom_id, "score": round(self.score, 6),
                "salience": round(self.salience, 6), "relevance": round(self.relevance, 6),
                "keyword": round(self.keyword, 6), "vector": round(self.vector, 6),
                "recency": round(self.recency, 6), "said_at": self.said_at,
                "markers": list(self.markers), "text": self.text, "gist": self.gist,
                "details": [{"content": d.content, "brightness": round(d.brightness, 6)}
                            for d in self.details]}


@dataclass(frozen=True)
class Omission:
    """An atom the indexes matched that recall left out, and why (one of
    :data:`projections.recall.OMISSIONS`). Never its text."""

    atom_id: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"atom_id": self.atom_id, "reason": self.reason}


@dataclass(frozen=True)
class RecallResult:
    subject_id: str
    now: str
    k: int
    pool: int
    """Atoms the indexes proposed for the query."""
    eligible: int
    """Of those, the ones that passed candidate selection (status, validity, window)."""
    items: tuple[RecallItem, ...]
    prompt: str
    omitted: tuple[Omission, ...] = ()
    """The first :data:`OMITTED_SHOWN` proposals left out, in the indexes' order."""
    omitted_counts: dict[str, int] = field(default_factory=dict)
    """Every proposal left out, counted by reason."""
    since: str | None = None
    until: str | None = None

    @property
    def atom_ids(self) -> list[str]:
        return [i.atom_id for i in self.items]

    def as_json(self) -> dict[str, Any]:
        return {"subject_id": self.subject_id, "now": self.now, "k": self.k,
                "since": self.since, "until": self.until,
                "pool": self.pool, "eligible": self.eligible,
                "atom_ids": self.atom_ids, "items": [i.as_json() for i in self.items],
                "omitted": [o.as_json() for o in self.omitted],
                "omitted_counts": dict(self.omitted_counts), "prompt": self.prompt}


@dataclass(frozen=True)
class StateView:
    """What the ledger knew at ``as_of`` about one subject, facts valid at ``valid_at``."""

    subject_id: str
    as_of: str
    valid_at: str
    subject: dict[str, Any] | None
    valid: list[dict[str, Any]] = field(default_factory=list)
    not_valid: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"subject_id": self.subject_id, "as_of": self.as_of, "valid_at": self.valid_at,
                "subject": self.subject, "valid": self.valid, "not_valid": self.not_valid,
                "artifacts": self.artifacts}


@dataclass(frozen=True)
class PurgeReport:
    item_id: str
    rows: dict[str, int]
    compaction: CompactionReport

    def as_json(self) -> dict[str, Any]:
        return {"item_id": self.item_id, "rows": self.rows,
                "compaction": self.compaction.as_json()}


def render_memories(items: Sequence[RecallItem]) -> str:
    """The Persona Schema §6 "What you remember" block (empty when nothing was recalled)."""
    if not items:
        return ""
    lines = ["## What you remember (about this person)", "",
             "You may reference these memories naturally in conversation. Some are vivid;",
             "others are fragmentary. Where a memory is uncertain, hedge accordingly.", ""]
    for item in items:
        lines.append(f"[mem:{item.atom_id[:8]}] ({', '.join(item.markers)})")
        lines.append(item.gist or item.text)
        lines.extend(f"- {d.content}" for d in item.details)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


class Opened(Protocol):
    """An opened ledger (``LedgerApp`` is one): the read models take its reader and keep
    nothing else of it, so nothing here can write to the log."""

    @property
    def reader(self) -> LedgerReader: ...


class Projections:
    """The read models of one opened ledger, fed by its :class:`ledger.reader.LedgerReader`."""

    def __init__(self, app: Opened, embedder: Embedder | None = None,
                 batch_size: int = 1000, vector_segment_size: int = SEGMENT_SIZE) -> None:
        self.reader = reader = app.reader
        self.store = Store.open(reader.config.projections)
        self.atoms = AtomStore(self.store)
        self.keyword = KeywordIndex(self.store)
        home = reader.config.home
        self.vectors = VectorIndex(self.store, embedder or configured(home),
                                   vector_segment_size)
        self.audit = AuditView(self.store)
        self.asof = AsOfIndex(self.store)
        self.models: list[ReadModel] = [self.atoms, self.keyword, self.vectors, self.audit,
                                        self.asof]
        self.registry = RouteRegistry()
        for model in self.models:
            for route in model.routes():
                self.registry.register(route)
        self.cache = RecallCache()
        self.registry.register(self.cache)
        self.index = RecallIndex(self.atoms, self.vectors, folder=None if home is None
                                 else Path(home) / "recall-index")
        self.registry.register(self.index)
        if self.store.is_sqlite:
            self.registry.register(FilesRoute(self.store))
        self.runner = Runner(reader, self.store, self.models, self.registry, batch_size)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Projections:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ running
    def catch_up(self, progress: Progress | None = None) -> RunReport:
        return self.runner.catch_up(progress=progress)

    def catch_up_for_search(self) -> RunReport:
        """Catch up only the read models a search of memories reads (atoms, keywords,
        vectors): what the writer needs before it looks for similar memories (ADR 0052).
        The others (audit, as-of) follow at the next full catch-up."""
        return self.runner.catch_up([self.atoms.name, self.keyword.name, self.vectors.name])

    def catch_up_steps(self, progress: Steps | None,
                       stage: str = "Catching up read models") -> RunReport:
        """:meth:`catch_up`, telling ``progress`` (ledger/progress.py) the events applied
        of those the slowest read model is behind; nothing when none is behind."""
        if progress is None:
            return self.catch_up()
        start = min(self.runner.positions().values(), default=0)
        head = self.runner.head()
        if head <= start:
            return self.catch_up()
        progress(stage, 0, head - start)
        return self.catch_up(lambda done, top: progress(stage, max(0, done - start),
                                                        max(0, top - start)))

    def rebuild(self, name: str | None = None, progress: Progress | None = None) -> RunReport:
        return self.runner.rebuild(None if name is None else [name], progress)

    def status(self) -> list[ModelStatus]:
        return self.runner.status()

    def dump(self) -> dict[str, dict[str, list[tuple[Any, ...]]]]:
        """Every model's view as sorted rows (tests compare rebuild and incremental)."""
        with self.store.engine.connect() as conn:
            return {m.name: m.dump(conn) for m in self.models}

    # ------------------------------------------------------------------ erasure
    def purge(self, item_id: str) -> PurgeReport:
        """Purge one item from every content route and compact (governance uses this)."""
        with self.store.engine.begin() as conn:
            rows = self.registry.purge(conn, item_id)
        compaction = self.runner.compact([m.name for m in self.models])
        log.info("projections.item_purged", item_id=item_id, rows=sum(rows.values()))
        return PurgeReport(item_id, rows, compaction)

    def probe(self, item_id: str, content: str | None = None) -> list[ProbeResult]:
        return self.registry.probe(item_id, content)

    # ------------------------------------------------------------------ helpers
    def _subject(self, subject: str) -> str:
        return str(self.reader.resolve_subject(subject))

    def _atom_id(self, atom: str) -> str:
        return str(self.reader.resolve("atom", atom))

    # ------------------------------------------------------------------ memory list
    def memory_list(self, subject: str | None = None, privacy_class: str | None = None,
                    min_salience: float | None = None, now: datetime | None = None,
                    refresh: bool = True) -> list[dict[str, Any]]:
        """Atoms (all statuses) with current salience and markers; content None if erased."""
        check_listing(privacy_class, min_salience)
        if refresh:
            self.catch_up()
        at = now or clock.now()
        sid = self._subject(subject) if subject is not None else None
        with self.store.engine.connect() as conn:
            rows = self.atoms.list_atoms(conn, sid, privacy_class)
        out = []
        for row in rows:
            state = decay_state(row)
            sal = state.salience(at)
            if min_salience is not None and sal < min_salience:
                continue
            out.append({
                "atom_id": row["atom_id"], "subject_id": row["subject_id"], "ref": row["ref"],
                "kind": row["kind"], "status": row["status"],
                "redaction_mode": row["redaction_mode"], "flags": row["flags"],
                "privacy_class": row["privacy_class"], "sensitivity": row["sensitivity"],
                "salience_now": round(sal, 6),
                "markers": decay.marker(sal, decay.days_since(parse_time(row["created_at"]),
                                                              at)),
                "rehearsal_count": row["rehearsal_count"], "created_at": row["created_at"],
                "content_erased": row["content_erased"], "text": row["text"],
            })
        return out

    # ------------------------------------------------------------------ memory inspect
    def memory_inspect(self, atom: str, now: datetime | None = None,
                       refresh: bool = True) -> dict[str, Any]:
        """Full content, decay status and rehearsal history of one atom."""
        atom_id = self._atom_id(atom)
        if refresh:
            self.catch_up()
        at = now or clock.now()
        with self.store.engine.connect() as conn:
            row = self.atoms.atom(conn, atom_id)
            if row is None:
                raise NotFound(f"atom {atom_id} is not in the read models",
                               hint="run `ledger projections rebuild atoms`")
            rehearsals = self.audit.trail(conn, atom_id, [Atom.Rehearsed.TOPIC])
            events = self.audit.trail(conn, atom_id)
        state = decay_state(row)
        sal = state.salience(at)
        elapsed = state.elapsed(at)
        details = []
        for d, b in zip(row["details"] or [], row["detail_brightness"] or [], strict=False):
            now_b = decay.detail_brightness(b, elapsed, state.profile)
            details.append({"content": d["content"], "brightness_recorded": d["brightness"],
                            "brightness_now": round(now_b, 6),
                            "visible": now_b >= decay.DETAIL_VISIBILITY_THRESHOLD})
        out = {k: v for k, v in row.items() if k not in ("detail_brightness",)}
        out["decay"] = {
            "now": format_instant(at), "salience_now": round(sal, 6),
            "raw_salience_now": round(state.raw_salience(at), 6),
            "baseline": row["baseline"], "origin": row["decay_origin"],
            "elapsed_days": round(max(0.0, elapsed), 6),
            "markers": decay.marker(sal, decay.days_since(parse_time(row["created_at"]), at)),
            "archivable": decay.is_archivable(sal, state.profile),
            "below_retrieval_threshold_from": row["fades_at"],
            "profile": state.profile.to_json(),
        }
        out["details_now"] = details
        out["rehearsals"] = rehearsals
        out["events"] = events
        return out

    # ------------------------------------------------------------------ recall
    def recall(self, query: str, subject: str, k: int = 5, now: datetime | None = None,
               weights: RecallWeights = DEFAULT_WEIGHTS, refresh: bool = True,
               since: datetime | str | None = None,
               until: datetime | str | None = None) -> RecallResult:
        """Rank the subject's recallable atoms for ``query``; returns the top ``k``.

        Two stages: the indexes propose the best :data:`POOL` atoms each (keyword hits;
        vector matches with cosine >= the embedder's floor), each scored on both signals;
        those that pass candidate selection (:func:`projections.recall.static_reason`,
        valid at ``now``, said within ``since``/``until``: a date or an instant, both
        ends included, a date ``until`` meaning its whole day) are ranked. If fewer than
        :data:`POOL` pass, the indexes are asked for more. The rest are reported in
        ``omitted``/``omitted_counts``. Nothing depends on ``k`` but the cut.
        """
        (lo, hi), (since_s, until_s) = check_recall(query, k, since, until)
        if refresh:
            self.catch_up()
        sid = self._subject(subject)
        at = now or clock.now()
        position = self.reader.head_position()
        key = (sid, query, k, weights, since_s, until_s,
               format_instant(at) if now else format_instant(at)[:16])  # same clock minute
        cached = self.cache.get(key, position)
        if cached is not None:
            log.info("projections.recall_cached", subject_id=sid, returned=len(cached.items))
            return cast(RecallResult, cached)
        result = self._recall(query, sid, k, at, weights, (lo, hi), (since_s, until_s))
        self.cache.put(key, position, result)
        return result

    def _min_similarity(self) -> float:
        """The cosine below which a vector match does not enter the pool: the embedder's
        own (``min_similarity``: 0.15 for hashing's noise floor, ADR 0006; 0.05 for
        wordllama, ADR 0022), else 0.15."""
        return float(getattr(self.vectors.embedder, "min_similarity", MIN_SIMILARITY))

    def _positions(self, conn: Any) -> tuple[int, int]:
        t = self.runner.tracking
        got = dict(conn.execute(sa.select(t.c.name, t.c.position).where(
            t.c.name.in_([self.atoms.name, self.vectors.name]))).all())
        return int(got.get(self.atoms.name, 0)), int(got.get(self.vectors.name, 0))

    def _recall(self, query: str, sid: str, k: int, at: datetime, weights: RecallWeights,
                window: tuple[float, float], shown: tuple[str | None, str | None]
                ) -> RecallResult:
        at_s = format_instant(at)
        at_e = at.timestamp()
        lo, hi = window
        qvec = self.vectors.embed_query(query)
        n = POOL
        fast = self.index.usable()
        floor = self._min_similarity()
        rows: dict[str, dict[str, Any]] = {}
        # per eligible atom: (salience, raw salience, said epoch)
        eligible: dict[str, tuple[float, float, float]] = {}
        left: dict[str, str] = {}  # per omitted atom: its reason
        with self.store.engine.connect() as conn:
            entry = self.index.get(conn, sid, self._positions(conn)) if fast else None
            docs = None if entry is None else len(entry.ids)
            allowed = None
            if entry is not None:
                import numpy as np

                q = np.asarray(qvec, dtype=np.float32)
                if lo > -math.inf or hi < math.inf:
                    allowed = entry.recallable(at_e, lo, hi)
            while True:
                # proposals of either index, retrievable or not (what is not is reported)
                plan = self.keyword.plan(conn, sid, query, docs)  # one for both queries
                kw = self.keyword.search(conn, sid, query, n, retrievable_only=False,
                                         plan=plan)
                kw_ids = [a for a, _ in kw]
                if entry is not None:
                    # with a window, only the slots recallable in it: their search ends
                    # when they are all proposed (ADR 0051)
                    top = entry.vector_top(q, n, present=True, allowed=allowed)
                    vec = [(a, s) for a, s in top if s >= floor]
                    found = {a for a, _ in vec}
                    cos = entry.cosines(q, [a for a in kw_ids if a not in found])
                else:
                    top, cos = self.vectors.search_scored(conn, sid, qvec, n, kw_ids,
                                                          retrievable_only=False)
                    vec = [(a, s) for a, s in top if s >= floor]
                cos.update(vec)
                kw_score = dict(kw)
                kw_score.update(self.keyword.scores(
                    conn, sid, query, [a for a, _ in vec if a not in kw_score],
                    retrievable_only=False, plan=plan))
                pool = list(dict.fromkeys(kw_ids + [a for a, _ in vec]))
                eligible, left = {}, {}
                if entry is not None:
                    at_pos = entry.pos.lookup(pool)
                    known = [a for a, i in zip(pool, at_pos.tolist(), strict=True) if i >= 0]
                    idx = at_pos[at_pos >= 0]
                    why = entry.reasons(at_e, idx, lo, hi)
                    sal, raw = entry.salience(at_e, idx)
                    said = entry.arrays["said"][idx]
                    for i, r in enumerate(why.tolist()):
                        if r:
                            left[known[i]] = OMISSIONS[r - 1]
                        else:
                            eligible[known[i]] = (float(sal[i]), float(raw[i]), float(said[i]))
                else:
                    missing = [a for a in pool if a not in rows]
                    rows.update((r["atom_id"], r)
                                for r in self.atoms.atoms_by_id(conn, missing))
                    for a in pool:
                        if a not in rows:
                            continue
                        r = _reason(rows[a], at_s, lo, hi)
                        if r:
                            left[a] = OMISSIONS[r - 1]
                        else:
                            st = decay_state(rows[a])
                            eligible[a] = (st.salience(at), st.raw_salience(at),
                                           _said(rows[a]).timestamp())
                exhausted = len(top) < n and (len(kw) < n or allowed is not None)
                if len(eligible) >= min(POOL, len(pool)) or exhausted or n >= MAX_PROPOSALS:
                    break
                n *= 4
            ranked = _rank(kw_score, cos, eligible, at_e, weights, floor)
            top_k = ranked[:k]
            missing = [a for _, a, _, _ in top_k if a not in rows]
            rows.update((r["atom_id"], r) for r in self.atoms.atoms_by_id(conn, missing))
        items = []
        for score, atom_id, parts, _tie in top_k:
            row = rows[atom_id]
            state = decay_state(row)
            sal, rel, k_rel, v_rel, recency = parts
            said_t = _said(row)
            items.append(RecallItem(
                atom_id=atom_id, score=score, salience=sal, relevance=rel, keyword=k_rel,
                vector=v_rel, recency=recency,
                markers=tuple(decay.marker(sal, decay.days_since(said_t, at))),
                text=row["text"], gist=row["gist"],
                details=tuple(_visible(row, state, at)), said_at=format_instant(said_t)))
        counts: dict[str, int] = {}
        for reason in left.values():
            counts[reason] = counts.get(reason, 0) + 1
        omitted = tuple(Omission(a, left[a]) for a in pool if a in left)[:OMITTED_SHOWN]
        log.info("projections.recalled", subject_id=sid, pool=len(pool),
                 eligible=len(eligible), omitted=len(left), returned=len(items))
        return RecallResult(subject_id=sid, now=at_s, k=k, pool=len(pool),
                            eligible=len(eligible), items=tuple(items),
                            prompt=render_memories(items), omitted=omitted,
                            omitted_counts={r: counts[r] for r in OMISSIONS if r in counts},
                            since=shown[0], until=shown[1])

    # ------------------------------------------------------------------ state as of
    def state_as_of(self, subject: str, as_of: datetime, valid_at: datetime | None = None,
                    refresh: bool = True) -> StateView:
        """Transaction time ``as_of``, valid time ``valid_at`` (default: ``as_of``).

        Replays only this subject's events up to ``as_of`` (found through the as-of
        index) with the domain's own event handlers. A fact is valid at V when
        ``valid_from <= V < valid_to`` (``valid_from`` absent: its creation time;
        ``valid_to`` absent: open); a correction ends the old fact at the new one's
        ``valid_from``, so superseded facts drop out for later V. Content whose data
        key is destroyed reads as None in every view, whatever ``as_of`` says.
        """
        if refresh:
            self.catch_up()
        sid = self._subject(subject)
        return self._state(sid, as_of, valid_at or as_of)

    def state_all(self, as_of: datetime, valid_at: datetime | None = None,
                  refresh: bool = True) -> list[StateView]:
        """:meth:`state_as_of` for every subject registered by ``as_of``."""
        if refresh:
            self.catch_up()
        with self.store.engine.connect() as conn:
            sids = self.asof.subjects_at(conn, format_instant(as_of))
        return [self._state(s, as_of, valid_at or as_of) for s in sids]

    def _state(self, sid: str, as_of: datetime, valid_at: datetime) -> StateView:
        as_of_s, valid_s = format_instant(as_of), format_instant(valid_at)
        with self.store.engine.connect() as conn:
            known = self.asof.known_at(conn, sid, as_of_s)
        self.reader.prefetch_data_keys([oid for oid, _, _ in known])
        subject: dict[str, Any] | None = None
        valid: list[dict[str, Any]] = []
        not_valid: list[dict[str, Any]] = []
        artifacts: list[dict[str, Any]] = []
        for oid, kind, version in known:
            events = self.reader.open_events(self.reader.stored_events(UUID(oid), lte=version))
            agg: Any = None
            for ev in events:
                agg = ev.mutate(agg)
            if agg is None:
                continue
            if kind == "subject":
                subject = {"subject_id": oid, "ref": agg.ref, "display_name": agg.display_name,
                           "locale": agg.locale, "content_erased": agg.content_erased,
                           "version": agg.version}
            elif kind == "artifact":
                artifacts.append({
                    "artifact_id": oid, "ref": agg.ref, "kind": agg.kind,
                    "captured_at": agg.captured_at, "source": agg.source,
                    "private": agg.private, "title": agg.title, "body": agg.body,
                    "media_url": agg.media_url, "content_erased": agg.content_erased,
                    "version": agg.version})
            elif kind == "atom":
                fact = _fact_as_of(agg, events, as_of)
                start = fact["valid_from"] or fact["created_at"]
                end = fact["valid_to"]
                if parse_time(start) <= valid_at and (end is None or valid_at < parse_time(end)):
                    valid.append(fact)
                else:
                    fact["not_valid_because"] = (
                        "not yet valid" if valid_at < parse_time(start) else fact["status"]
                        if fact["status"] != "active" else "valid_to passed")
                    not_valid.append(fact)
        log.info("projections.state_as_of", subject_id=sid, items=len(known))
        return StateView(sid, as_of_s, valid_s, subject, valid, not_valid, artifacts)


def check_recall(query: str, k: int, since: datetime | str | None,
                 until: datetime | str | None
                 ) -> tuple[tuple[float, float], tuple[str | None, str | None]]:
    """A recall's query, ``k`` and window checked, before anything is looked up: the
    window as epochs and as shown (:func:`_window`)."""
    if not query.strip():
        raise InputError("the recall query is empty", hint="give the words to recall by")
    if not 1 <= k <= 100:
        raise InputError(f"k must be between 1 and 100, got {k}")
    lo, since_s = _window(since, "since", end=False)
    hi, until_s = _window(until, "until", end=True)
    if lo >= hi:
        raise InputError(f"since ({since_s}) is after until ({until_s})",
                         hint="give a since that comes before the until")
    return (lo, hi), (since_s, until_s)


def check_listing(privacy_class: str | None, min_salience: float | None) -> None:
    """A memory listing's filters checked, before anything is looked up."""
    if privacy_class is not None and privacy_class not in PRIVACY_CLASSES:
        raise InputError(f"unknown privacy class {privacy_class!r}",
                         hint=f"privacy classes: {', '.join(PRIVACY_CLASSES)}")
    if min_salience is not None and not 0.0 <= min_salience <= 1.0:
        raise InputError(f"--min-salience must be between 0 and 1, got {min_salience}")


def _window(value: datetime | str | None, what: str, end: bool
            ) -> tuple[float, str | None]:
    """One end of a recall's since/until window: (epoch, as shown). ``until`` includes
    its instant, and the whole day of a date given alone; a time without a zone is UTC."""
    if value is None:
        return (math.inf if end else -math.inf), None
    if isinstance(value, datetime):
        t = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        day = False
    else:
        try:
            t = parse_instant(value, what)
        except ClockError as e:
            raise InputError(str(e), hint="a date (2025-07-01) or an instant "
                                          "(2025-07-01T12:00:00Z)") from e
        day = len(value.strip()) == 10
    shown = format_instant(t)
    if end:
        t += timedelta(days=1) if day else timedelta(microseconds=1)
    return t.timestamp(), shown


def _said(row: dict[str, Any]) -> datetime:
    return parse_time(said_at(row["valid_from"], row["extensions"], row["created_at"]))


def _reason(row: dict[str, Any], at: str, lo: float, hi: float) -> int:
    """:meth:`projections.recall.SubjectIndex.reasons` for one atom row."""
    r = static_reason(row["status"], row["content_erased"], row["superseded_by"],
                      row["text"] is not None)
    if r:
        return r
    if not is_candidate(row, at):
        return NOT_VALID
    said = _said(row).timestamp()
    return OUTSIDE if said < lo or said >= hi else 0


def _rank(kw: dict[str, float], cos: dict[str, float],
          eligible: dict[str, tuple[float, float, float]], at: float,
          weights: RecallWeights, floor: float
          ) -> list[tuple[float, str, tuple[float, ...], Any]]:
    """Score the eligible atoms (ADR 0022, ADR 0051); best first, ties by raw salience,
    newer, id. ``kw`` and ``cos`` hold both signals of every proposal (a keyword match's
    score; a cosine, which counts from ``floor`` up).

    Ranks and the keyword maximum are taken among eligible atoms only, so an atom that
    cannot be recalled does not push the others down."""
    kw_in = sorted(((a, s) for a, s in kw.items() if a in eligible),
                   key=lambda p: (-round(p[1], 9), p[0]))
    vec_in = sorted(((a, s) for a, s in cos.items() if a in eligible and s >= floor),
                    key=lambda p: (-round(p[1], 9), p[0]))
    share = weights.keyword_share
    if weights.fusion == "rrf":
        kk = weights.rrf_k
        best = 1.0 / (kk + 1.0)
        kw_rel = {a: (1.0 / (kk + r)) / best for r, (a, _) in enumerate(kw_in, 1)}
        vec_rel = {a: (1.0 / (kk + r)) / best for r, (a, _) in enumerate(vec_in, 1)}
    elif weights.fusion == "linear":
        kw_max = max((s for _, s in kw_in), default=0.0)
        kw_rel = {a: (s / kw_max if kw_max > 0 else 0.0) for a, s in kw_in}
        vec_rel = {a: min(1.0, max(0.0, s)) for a, s in vec_in}
    else:
        raise InputError(f"unknown fusion {weights.fusion!r}", hint="rrf or linear")
    half_life = weights.recency_half_life_days * 86_400.0
    out: list[tuple[float, str, tuple[float, ...], Any]] = []
    for atom_id, (sal, raw, said) in eligible.items():
        recency = math.pow(2.0, -max(0.0, at - said) / half_life)
        k_rel, v_rel = kw_rel.get(atom_id, 0.0), vec_rel.get(atom_id, 0.0)
        rel = share * k_rel + (1.0 - share) * v_rel
        score = weights.salience * sal + weights.relevance * rel + weights.recency * recency
        out.append((score, atom_id, (sal, rel, k_rel, v_rel, recency),
                    (-round(score, 12), -raw, -said, atom_id)))
    out.sort(key=lambda p: p[3])
    return out


def _fact_as_of(agg: Any, events: Sequence[Any], as_of: datetime) -> dict[str, Any]:
    fact = agg.as_dict()
    fact["created_at"] = format_instant(agg.created_on)
    fact["version"] = agg.version
    state = DecayState(float(fact["salience"] if fact["salience"] is not None else 0.5), 0,
                       float(fact["emotional_valence"] or 0.0), fact["created_at"],
                       profile_of(fact["decay_profile"]))
    for ev in events:
        if isinstance(ev, Atom.Rehearsed):
            state = state.rehearsed(format_instant(ev.timestamp))
    fact["salience_as_of"] = round(state.salience(as_of), 6)
    fact["last_rehearsed_at"] = (format_instant(parse_time(fact["last_rehearsed_at"]))
                                 if fact["last_rehearsed_at"] else None)
    plain: dict[str, Any] = json.loads(json.dumps(fact, default=str))
    return plain


def _visible(row: dict[str, Any], state: DecayState, at: datetime) -> list[decay.Detail]:
    contents = [d["content"] for d in row["details"] or []]
    brightness = row["detail_brightness"] or []
    if not contents or len(contents) != len(brightness):
        return []
    return decay.visible_details([decay.Detail(c, b) for c, b in zip(contents, brightness,
                                                                     strict=True)],
                                 state.elapsed(at), state.profile)

