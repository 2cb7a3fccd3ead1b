"""Keyword index: SQLite FTS5 or PostgreSQL full text, one query API.

Indexed text per atom: text, gist, tags and detail contents (``memory.index_text``),
stemmed (FTS5 ``porter unicode61``; PostgreSQL ``english``). ``search(subject_id,
query, k)`` returns atom ids with a relevance score (higher is better: ``-bm25`` on
SQLite, ``ts_rank`` on PostgreSQL; scores are comparable within one result list only).

SQLite layout: ``proj_kw_docs`` maps FTS rowids to atoms (subject, retrievable flag);
``proj_kw_fts`` holds the index. The subject is a column token (``s<hex>0``) so a
subject's search touches only its own postings. Which FTS5 table depends on the SQLite
library (ADR 0012; the projections use sqlean's SQLite 3.50 where installed):

* 3.44 or newer: a normal FTS5 table (it keeps the indexed text in
  ``proj_kw_fts_content``) with the ``secure-delete`` option on. Deleting a row then
  removes its terms from the index leaves at once, so a purge needs no ``optimize``
  (which merges every segment: a cost that follows the whole index). FTS5 can only do
  that for a table that can read a deleted row's text back; a contentless table cannot.
  The option is stored in the table (``proj_kw_fts_config``) and checked on every
  open; a ``2/fts5`` table made by an older SQLite is migrated in place (option set,
  one ``optimize``, no rebuild). More segments stay than after an ``optimize``, so
  phrase queries (the erasure's keyword probes) cost more: ADR 0012 has the figures.
* 3.43: contentless with ``contentless_delete=1`` (no second copy of the text);
  compaction runs ``optimize`` to drop deleted postings.
* older: a normal FTS5 table; compaction runs ``optimize``.

PostgreSQL layout: ``proj_kw`` (atom id, subject, retrievable, ``tsvector`` with a GIN
index); no raw text is stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from ledger.domain import Atom
from projections._rows import dump_table, insert_rows
from projections.embedder import STOPWORDS
from projections.entries import LogEntry, content_gone, retrieval
from projections.memory import index_text, query_terms
from projections.routes import ProbeHit, ProbeResult
from projections.runner import Applied
from projections.store import Store

__all__ = ["TERM_CAP", "KeywordIndex", "KeywordRoute"]

TERM_CAP = 2000
"""In a subject of more atoms than this, a query term matching more than this many of
them is dropped from the keyword query (the rarest term always stays): bounds the
FTS5 work per query (issue 16, ADR 0035)."""

_Plan = tuple[str, str, tuple[Any, ...], list[str]]
"""A keyword query: FTS5 MATCH text, join filter, its parameters, terms."""
_TOKENIZE = "porter unicode61 remove_diacritics 2"
_PG_CONFIG = "english"

# SQL templates. Only identifiers ({fts}, {docs}, {kw}: schema-qualified table names and
# the fixed text-search configuration) are substituted, by KeywordIndex.sql; every value
# is a bound parameter.
_FTS_INSERT = "INSERT INTO {fts}(rowid, skey, body) VALUES (?, ?, ?)"
_FTS_SEARCH = ("SELECT d.atom_id, bm25({fts}, 0.0, 1.0) AS s FROM {fts} "
               "JOIN {docs} d ON d.doc = {fts}.rowid "
               "WHERE {fts} MATCH ? {flag} ORDER BY s, d.atom_id LIMIT ?")
_FTS_SCORES = ("SELECT d.atom_id, bm25({fts}, 0.0, 1.0) AS s FROM {fts} "
               "JOIN {docs} d ON d.doc = {fts}.rowid WHERE {fts} MATCH ? {flag}")
_FTS_COUNT = "SELECT count(*) FROM (SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT ?)"
_FTS_DOCS = "SELECT max(doc) FROM {docs}"
_FTS_DELETE = "DELETE FROM {fts} WHERE rowid = ?"
_FTS_OPTIMIZE = "INSERT INTO {fts}({fts}) VALUES ('optimize')"
_FTS_SECURE_DELETE = "INSERT INTO {fts}({fts}, rank) VALUES ('secure-delete', 1)"
_FTS_CONFIG = "SELECT v FROM {fts_config} WHERE k = 'secure-delete'"
_FTS_PROBE = ("SELECT {fts}.rowid, d.atom_id FROM {fts} LEFT JOIN {docs} d "
              "ON d.doc = {fts}.rowid WHERE {fts} MATCH ?")
_PG_INSERT = ("INSERT INTO {kw} (atom_id, subject_id, retrievable, tsv) "
              "VALUES (:a, :s, :r, to_tsvector('{config}', :b))")
_PG_SEARCH = ("SELECT atom_id, ts_rank(tsv, q) AS s FROM {kw}, to_tsquery('{config}', :q) q "
              "WHERE subject_id = :s AND tsv @@ q {flag} ORDER BY s DESC, atom_id LIMIT :k")
_PG_SCORES = ("SELECT atom_id, ts_rank(tsv, q) AS s FROM {kw}, to_tsquery('{config}', :q) q "
              "WHERE subject_id = :s AND tsv @@ q {flag} AND atom_id IN :ids")
_PG_COUNT = ("SELECT count(*) FROM (SELECT 1 FROM {kw} WHERE subject_id = :s "
             "AND tsv @@ to_tsquery('{config}', :t) LIMIT :n) m")
_PG_DUMP = "SELECT atom_id, subject_id, retrievable, tsv::text FROM {kw} ORDER BY atom_id"
_PG_PROBE = "SELECT atom_id FROM {kw} WHERE tsv @@ phraseto_tsquery('{config}', :c)"


def subject_token(subject_id: str) -> str:
    """The FTS token that stands for a subject; ends in a digit so no stemmer alters it."""
    return f"s{uuid.UUID(subject_id).hex}0"


def _phrase(terms: Sequence[str]) -> str:
    return '"' + " ".join(terms) + '"'


class KeywordIndex:
    """Read model ``keyword``."""

    name = "keyword"
    holds_content: ClassVar[bool] = True

    def __init__(self, store: Store) -> None:
        self.store = store
        self.sqlite = store.is_sqlite
        version = store.sqlite_version() if self.sqlite else (0, 0, 0)
        self.secure_delete = self.sqlite and version >= (3, 44, 0)
        self.contentless = self.sqlite and not self.secure_delete and version >= (3, 43, 0)
        self.version = "2/" + ("fts5-secure-delete" if self.secure_delete else
                               "fts5-contentless" if self.contentless else
                               "fts5" if self.sqlite else "tsvector-english")
        md = store.metadata()
        if self.sqlite:
            self.docs = sa.Table(
                "proj_kw_docs", md,
                sa.Column("doc", sa.Integer, primary_key=True, autoincrement=False),
                sa.Column("atom_id", sa.String(36), nullable=False, unique=True),
                sa.Column("subject_id", sa.String(36), nullable=False),
                sa.Column("retrievable", sa.Boolean, nullable=False),
            )
        else:
            self.docs = sa.Table(
                "proj_kw", md,
                sa.Column("atom_id", sa.String(36), primary_key=True),
                sa.Column("subject_id", sa.String(36), nullable=False, index=True),
                sa.Column("retrievable", sa.Boolean, nullable=False),
                sa.Column("tsv", postgresql.TSVECTOR, nullable=False),
                sa.Index("proj_kw_tsv", "tsv", postgresql_using="gin"),
            )
        self.fts = store.q("proj_kw_fts")
        self.route = KeywordRoute(self)
        self._counts: dict[tuple[str, str, str], tuple[int, int]] = {}

    def sql(self, template: str, flag: str = "") -> str:
        """Fill a module SQL template with this store's table names (never with values)."""
        return template.format(fts=self.fts, docs=self.store.q("proj_kw_docs"),
                               fts_config=self.store.q("proj_kw_fts_config"),
                               kw=self.store.q("proj_kw"), config=_PG_CONFIG, flag=flag)

    # ------------------------------------------------------------------ lifecycle
    def create(self, conn: Connection) -> None:
        self.docs.create(conn, checkfirst=True)
        if self.sqlite:
            options = ", content='', contentless_delete=1" if self.contentless else ""
            conn.exec_driver_sql(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.fts} USING fts5("
                f"skey, body, tokenize='{_TOKENIZE}'{options})")
            if self.secure_delete:
                self._secure_delete_on(conn)

    def _secure_delete_on(self, conn: Connection) -> None:
        """Turn FTS5 ``secure-delete`` on unless the table already has it (one row read)."""
        on = conn.exec_driver_sql(self.sql(_FTS_CONFIG)).scalar()
        if on is None or int(on) != 1:
            conn.exec_driver_sql(self.sql(_FTS_SECURE_DELETE))

    def migrate(self, conn: Connection, old_version: str) -> bool:
        """Bring a stored index of an older layout to this one without a rebuild, when
        the tables are the same: a ``2/fts5`` table (normal FTS5, made by SQLite before
        3.43) only needs ``secure-delete`` turned on, and one ``optimize`` so that no
        posting deleted before (under the old regime) waits for a merge. Returns False
        when a rebuild is needed (e.g. a contentless table, which cannot secure-delete)."""
        if not (self.secure_delete and old_version == "2/fts5"
                and self.store.table_exists(conn, "proj_kw_fts")):
            return False
        self.docs.create(conn, checkfirst=True)
        self._secure_delete_on(conn)
        conn.exec_driver_sql(self.sql(_FTS_OPTIMIZE))
        return True

    def reset(self, conn: Connection) -> None:
        if self.sqlite:
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.fts}")
        self.docs.drop(conn, checkfirst=True)

    def routes(self) -> Sequence[KeywordRoute]:
        return [self.route]

    # ------------------------------------------------------------------ applying
    def apply(self, conn: Connection, entries: Sequence[LogEntry]) -> Applied:
        new: dict[str, tuple[str, str]] = {}
        flags: dict[str, bool] = {}
        purge: list[str] = []
        for e in entries:
            ev = e.event
            if isinstance(ev, Atom.Created):
                if not getattr(ev, "content_erased", False) and ev.text is not None:
                    new[e.originator_id] = (ev.subject_id, index_text(
                        ev.text, ev.gist, ev.tags, ev.details))
            elif isinstance(ev, Atom.Event) and content_gone(ev):
                if new.pop(e.originator_id, None) is None:
                    purge.append(e.originator_id)
                flags.pop(e.originator_id, None)
            elif isinstance(ev, Atom.Event) and retrieval(ev) is not None:
                flags[e.originator_id] = bool(retrieval(ev))
        self._insert(conn, new, flags)
        for atom_id, on in flags.items():
            if atom_id not in new:
                conn.execute(self.docs.update().where(self.docs.c.atom_id == atom_id)
                             .values(retrievable=on))
        return Applied(purged=purge if purge and self.route.purge_many(conn, purge) else [])

    def _insert(self, conn: Connection, new: dict[str, tuple[str, str]],
                flags: dict[str, bool]) -> None:
        if not new:
            return
        ids = list(new)  # log order
        if self.sqlite:
            start = int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(self.docs.c.doc),
                                                                0))).scalar_one()) + 1
            docs = [(start + i, a, new[a][0]) for i, a in enumerate(ids)]
            insert_rows(conn, self.docs, [
                {"doc": doc, "atom_id": a, "subject_id": sid, "retrievable": flags.get(a, True)}
                for doc, a, sid in docs])
            conn.exec_driver_sql(self.sql(_FTS_INSERT), [
                (doc, subject_token(sid), new[a][1]) for doc, a, sid in docs])
            return
        conn.execute(
            sa.text(self.sql(_PG_INSERT)),
            [{"a": a, "s": new[a][0], "r": flags.get(a, True), "b": new[a][1]} for a in ids])

    # ------------------------------------------------------------------ queries
    def search(self, conn: Connection, subject_id: str, query: str, k: int = 10,
               retrievable_only: bool = True, subject_docs: int | None = None,
               plan: _Plan | bool | None = True) -> list[tuple[str, float]]:
        """Up to ``k`` (atom_id, score) pairs of the subject, best first (ties by atom
        id). ``subject_docs``: see :meth:`plan`, whose answer may be given as ``plan``."""
        if plan is True:
            plan = self.plan(conn, subject_id, query, subject_docs)
        if plan is None or isinstance(plan, bool) or k <= 0:
            return []
        match, join_filter, params, terms = plan
        if self.sqlite:
            flag = join_filter + ("AND d.retrievable = 1" if retrievable_only else "")
            rows = conn.exec_driver_sql(self.sql(_FTS_SEARCH, flag=flag),
                                        (match, *params, k)).all()
            return [(str(a), -float(s)) for a, s in rows]
        rows = conn.execute(sa.text(
            self.sql(_PG_SEARCH, flag="AND retrievable" if retrievable_only else "")),
            {"q": " | ".join(terms), "s": subject_id, "k": k}).all()
        return [(str(a), float(s)) for a, s in rows]

    def scores(self, conn: Connection, subject_id: str, query: str, atom_ids: Sequence[str],
               retrievable_only: bool = True, subject_docs: int | None = None,
               plan: _Plan | bool | None = True) -> dict[str, float]:
        """The score :meth:`search` gives each of ``atom_ids`` that matches ``query`` (the
        same terms, so the same number), whether or not it is among the best ``k``:
        recall scores the vector index's proposals on the keyword signal too (ADR 0051).
        Atoms that do not match are left out (their keyword score is 0)."""
        wanted = list(dict.fromkeys(atom_ids))
        if plan is True and wanted:
            plan = self.plan(conn, subject_id, query, subject_docs)
        if not wanted or plan is None or isinstance(plan, bool):
            return {}
        match, join_filter, params, terms = plan
        out: dict[str, float] = {}
        for start in range(0, len(wanted), 5000):
            chunk = wanted[start:start + 5000]
            if self.sqlite:
                marks = ", ".join("?" * len(chunk))
                # "+d.atom_id": no index on it, so the query runs from the MATCH (one
                # bm25 set-up), not from each id (FTS5 would set it up per row)
                flag = (join_filter + ("AND d.retrievable = 1 " if retrievable_only else "")
                        + f"AND +d.atom_id IN ({marks})")
                rows = conn.exec_driver_sql(self.sql(_FTS_SCORES, flag=flag),
                                            (match, *params, *chunk)).all()
                out.update((str(a), -float(s)) for a, s in rows)
                continue
            stmt = sa.text(self.sql(_PG_SCORES, flag="AND retrievable" if retrievable_only
                                    else "")).bindparams(sa.bindparam("ids", expanding=True))
            rows = conn.execute(stmt, {"q": " | ".join(terms), "s": subject_id,
                                       "ids": chunk}).all()
            out.update((str(a), float(s)) for a, s in rows)
        return out

    def plan(self, conn: Connection, subject_id: str, query: str, subject_docs: int | None
             ) -> _Plan | None:
        """The query of :meth:`search` and :meth:`scores`: (FTS5 MATCH text, join filter,
        its parameters, terms); None when the query has no terms.

        ``subject_docs`` (how many atoms the subject has, when the caller knows) bounds
        the work on SQLite (issue 16), where FTS5 scores every match before the ``LIMIT``:

        * a subject holding at least half of the index is filtered in the join rather
          than by its subject token: intersecting a posting list of most of the index
          cost more than the whole ranked query (the same rows and scores either way:
          the token's column has weight 0);
        * a subject of more than :data:`TERM_CAP` atoms drops from the query the terms
          that match more than :data:`TERM_CAP` of its atoms (counted with a ``LIMIT``,
          so the count is bounded too), keeping the rarest if all do. Such terms carry
          little weight (bm25's IDF) and were most of the cost: the query's cost now
          follows the rare terms, not the subject's size.
        """
        terms = query_terms(query)
        # Function words match most documents and add nothing to the ranking (PostgreSQL's
        # 'english' configuration drops them too); keep them only if nothing else is left.
        terms = [t for t in terms if t not in STOPWORDS] or terms
        if not terms:
            return None
        if not self.sqlite:
            # the same bound as FTS5's: ts_rank reads the tsvector of every match
            if subject_docs is not None and subject_docs > TERM_CAP and len(terms) > 1:
                counts = {t: self._pg_count(conn, subject_id, t, subject_docs)
                          for t in terms}
                terms = ([t for t in terms if counts[t] <= TERM_CAP]
                         or [min(terms, key=lambda t: counts[t])])
            return "", "", (), terms
        scope = f'skey : "{subject_token(subject_id)}" AND '
        join_filter = ""
        params: tuple[Any, ...] = ()
        if subject_docs is not None:
            total = int(conn.exec_driver_sql(self.sql(_FTS_DOCS)).scalar() or 0)
            if 2 * subject_docs >= total:
                scope, join_filter, params = "", "AND d.subject_id = ? ", (subject_id,)
            if subject_docs > TERM_CAP and len(terms) > 1:
                counts = {t: self._count(conn, subject_id, scope, t, total) for t in terms}
                terms = ([t for t in terms if counts[t] <= TERM_CAP]
                         or [min(terms, key=lambda t: counts[t])])
        match = scope + "body : (" + " OR ".join(f'"{t}"' for t in terms) + ")"
        return match, join_filter, params, terms

    def _count(self, conn: Connection, subject_id: str, scope: str, term: str,
               total: int) -> int:
        """How many of the subject's documents match ``term``, up to ``TERM_CAP + 1``;
        remembered while the index has the same last document (``total``) and this
        process purged nothing from it. (Another process's purge can leave a count too
        high by the atoms it erased until the next document is indexed: the cap bounds
        cost, and a term kept or dropped by it is still a term of the query.)"""
        key = (subject_id, scope, term)
        got = self._counts.get(key)
        if got is not None and got[0] == total:
            return got[1]
        n = int(conn.exec_driver_sql(self.sql(_FTS_COUNT),
                                     (f'{scope}body : "{term}"', TERM_CAP + 1)).scalar() or 0)
        if len(self._counts) >= 4096:
            self._counts.clear()
        self._counts[key] = (total, n)
        return n

    def _pg_count(self, conn: Connection, subject_id: str, term: str, docs: int) -> int:
        """:meth:`_count` on PostgreSQL: the subject's atoms matching ``term``, up to
        ``TERM_CAP + 1`` (the GIN index answers, no ``ts_rank``); remembered while the
        subject has the same number of atoms (``docs``), with the same caveat."""
        key = (subject_id, "", term)
        got = self._counts.get(key)
        if got is not None and got[0] == docs:
            return got[1]
        n = int(conn.execute(sa.text(self.sql(_PG_COUNT)),
                             {"s": subject_id, "t": term, "n": TERM_CAP + 1}).scalar() or 0)
        if len(self._counts) >= 4096:
            self._counts.clear()
        self._counts[key] = (docs, n)
        return n

    def phrase_holders(self, values: Sequence[str]) -> dict[str, list[str]]:
        """Value -> the atoms whose indexed text holds its words as a phrase (index
        lookups on one connection; the caller checks the words against the atoms' rows)."""
        with self.store.engine.connect() as conn:
            return {v: self.route.phrase_holders(conn, v) for v in values}

    def dump(self, conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
        if not self.sqlite:
            rows = conn.execute(sa.text(self.sql(_PG_DUMP))).all()
            return {"proj_kw": [tuple(r) for r in rows]}
        docs = {int(r[0]): r for r in dump_table(conn, self.docs)}
        conn.exec_driver_sql(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.proj_kw_vocab "
            "USING fts5vocab('main', 'proj_kw_fts', 'instance')")
        terms = sorted((str(docs[int(doc)][1]), str(term), str(col), int(off))
                       for term, doc, col, off in conn.exec_driver_sql(
                           "SELECT term, doc, col, offset FROM temp.proj_kw_vocab"))
        conn.exec_driver_sql("DROP TABLE temp.proj_kw_vocab")
        return {"proj_kw_docs": sorted(tuple(r[1:]) for r in docs.values()),
                "proj_kw_fts": terms}


class KeywordRoute:
    """FTS postings (and, for a normal FTS5 table, its content copy) or tsvectors."""

    name = "keyword-index"
    model = "keyword"

    def __init__(self, model: KeywordIndex) -> None:
        self.m = model

    def purge(self, conn: Connection, item_id: str) -> int:
        m = self.m
        m._counts.clear()
        if not m.sqlite:
            return int(conn.execute(m.docs.delete().where(m.docs.c.atom_id == item_id))
                       .rowcount or 0)
        doc = conn.execute(sa.select(m.docs.c.doc).where(m.docs.c.atom_id == item_id)).scalar()
        if doc is None:
            return 0
        conn.exec_driver_sql(m.sql(_FTS_DELETE), (int(doc),))
        conn.execute(m.docs.delete().where(m.docs.c.doc == doc))
        return 1

    def compact(self, conn: Connection) -> None:
        """``optimize`` (merge every segment, dropping deleted postings) unless the table
        has ``secure-delete``, which already removed them on delete."""
        if self.m.sqlite and not self.m.secure_delete \
                and self.m.store.table_exists(conn, "proj_kw_fts"):
            conn.exec_driver_sql(self.m.sql(_FTS_OPTIMIZE))

    def content_tables(self) -> Sequence[str]:
        return [] if self.m.sqlite else ["proj_kw"]

    def purge_many(self, conn: Connection, item_ids: Sequence[str]) -> int:
        m = self.m
        m._counts.clear()
        wanted = list(dict.fromkeys(item_ids))
        n = 0
        for start in range(0, len(wanted), 500):
            chunk = wanted[start:start + 500]
            if not m.sqlite:
                n += int(conn.execute(m.docs.delete().where(m.docs.c.atom_id.in_(chunk)))
                         .rowcount or 0)
                continue
            docs = [int(d) for d, in conn.execute(
                sa.select(m.docs.c.doc).where(m.docs.c.atom_id.in_(chunk)))]
            if docs:
                conn.exec_driver_sql(m.sql(_FTS_DELETE), [(d,) for d in docs])
                conn.execute(m.docs.delete().where(m.docs.c.doc.in_(docs)))
            n += len(docs)
        return n

    def probe_many(self, items: Mapping[str, Sequence[str]]) -> list[ProbeResult]:
        """Probe many items in one connection: documents keyed by each id (one IN query),
        and a phrase query per text through the full-text index."""
        m = self.m
        ids = list(items)
        found: dict[str, list[ProbeHit]] = {i: [] for i in ids}
        with m.store.engine.connect() as conn:
            if not m.store.table_exists(conn, m.docs.name):
                return [ProbeResult(self.name, i, ()) for i in ids]
            checked = (m.docs.name, *(["proj_kw_fts"] if m.sqlite else []))
            for start in range(0, len(ids), 500):
                for a, n in conn.execute(
                        sa.select(m.docs.c.atom_id, sa.func.count()).where(
                            m.docs.c.atom_id.in_(ids[start:start + 500]))
                        .group_by(m.docs.c.atom_id)):
                    found[str(a)].append(ProbeHit(m.docs.name, "id", int(n)))
            seen: dict[Any, list[str]] = {}  # query -> ids: each one asked once
            for item, texts in items.items():
                other: set[str] = set()
                for text in texts:  # an atom's text and its indexed text: often one query
                    key = tuple(query_terms(text or "", limit=64)) if m.sqlite else text
                    if key not in seen:
                        seen[key] = self._content_ids(conn, text)
                    other |= set(seen[key])
                if other:
                    found[item].append(ProbeHit(
                        m.docs.name if not m.sqlite else "proj_kw_fts", "content",
                        len(other), tuple(sorted(other - {item}))))
        return [ProbeResult(self.name, i, checked, tuple(found[i])) for i in ids]

    def phrase_holders(self, conn: Connection, content: str) -> list[str]:
        """Ids of the atoms whose indexed text holds ``content``'s words as a phrase (an
        index lookup; the caller checks the words themselves against the atoms' rows)."""
        return [i for i in self._content_ids(conn, content)
                if not i.startswith("orphan-fts-row:")]

    def _content_ids(self, conn: Connection, content: str) -> list[str]:
        m = self.m
        terms = query_terms(content or "", limit=64)
        if not terms:
            return []
        if m.sqlite:
            return [str(a) if a is not None else f"orphan-fts-row:{rowid}"
                    for rowid, a in conn.exec_driver_sql(
                        m.sql(_FTS_PROBE), ("body : " + _phrase(terms),))]
        return [str(r[0]) for r in conn.execute(sa.text(m.sql(_PG_PROBE)), {"c": content})]

    def probe(self, item_id: str, content: str | None) -> ProbeResult:
        m = self.m
        hits: list[ProbeHit] = []
        with m.store.engine.connect() as conn:
            if not m.store.table_exists(conn, m.docs.name):
                return ProbeResult(self.name, item_id, ())
            checked = [m.docs.name] + (["proj_kw_fts"] if m.sqlite else [])
            n = conn.execute(sa.select(sa.func.count()).select_from(m.docs)
                             .where(m.docs.c.atom_id == item_id)).scalar_one()
            if n:
                hits.append(ProbeHit(m.docs.name, "id", int(n)))
            terms = query_terms(content or "", limit=64)
            if terms:
                if m.sqlite:
                    ids = [str(a) if a is not None else f"orphan-fts-row:{rowid}"
                           for rowid, a in conn.exec_driver_sql(
                               m.sql(_FTS_PROBE), ("body : " + _phrase(terms),))]
                else:
                    ids = [str(r[0]) for r in conn.execute(sa.text(m.sql(_PG_PROBE)),
                                                           {"c": content})]
                if ids:
                    hits.append(ProbeHit(m.docs.name if not m.sqlite else "proj_kw_fts",
                                         "content", len(ids),
                                         tuple(i for i in ids if i != item_id)))
        return ProbeResult(self.name, item_id, tuple(checked), tuple(hits))
