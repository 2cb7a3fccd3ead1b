"""Issue 16, speed paths: they must give the answers of the plain paths.

A rebuild defers secondary indexes (and a rebuild cut short gets them back); the keyword
search bounded for a large subject returns what the unbounded one does, but for the
frequent terms it drops; the sign-bit shortlist of a large subject finds what the exact
search finds and forgets an erased atom at once."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import sqlalchemy as sa

from ledger.application import LedgerApp
from projections import keyword as keyword_module
from projections import recall as recall_module
from projections.embedder import WordLlamaEmbedder
from projections.runner import _indexes

from .test_projections_contract import projections

TEXTS = ["Works as a nurse at the Riverside clinic", "Has a cat named Mochi",
         "Allergic to peanuts since childhood", "Lives in a flat near the old town",
         "Enjoys sailing on weekends with friends", "Her sister Marta moved to Oslo"]


def _index_names(p: object) -> set[str]:
    store = p.store  # type: ignore[attr-defined]
    with store.engine.connect() as conn:
        insp = sa.inspect(conn)
        return {str(ix["name"]) for t in insp.get_table_names(schema=store.schema)
                for ix in insp.get_indexes(t, schema=store.schema)}


def test_rebuild_defers_secondary_indexes_and_setup_restores_missing_ones(
        app: LedgerApp) -> None:
    app.register_subject({"ref": "u1"})
    for text in TEXTS:
        app.add_atom({"subject": "u1", "text": text})
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        before = p.dump()
        wanted = {str(ix.name) for m in p.models for ix in _indexes(m)}
        assert wanted and wanted <= _index_names(p)
        report = p.rebuild()
        assert report.index_seconds > 0
        assert wanted <= _index_names(p)
        assert p.dump() == before  # same views as the incremental run
        # a rebuild cut short between its batches and the index build
        with p.store.engine.begin() as conn:
            for ix in _indexes(p.atoms):
                ix.drop(conn)
    assert not {str(ix.name) for ix in _indexes(p.atoms)} & _index_names(p)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        assert wanted <= _index_names(p)


def test_bounded_keyword_search_of_a_large_subject(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    app.register_subject({"ref": "u1"})
    app.register_subject({"ref": "u2"})
    ids = [str(app.add_atom({"subject": "u1", "text": f"{t} on a sunny day"}))
           for t in TEXTS]
    app.add_atom({"subject": "u2", "text": "A nurse on a rainy day"})
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        sid = str(app.reader.resolve_subject("u1"))
        with p.store.engine.connect() as conn:
            plain = p.keyword.search(conn, sid, "nurse sunny day", 10)
            # u1 holds most of the index: filtered in the join, same rows and scores
            same = p.keyword.search(conn, sid, "nurse sunny day", 10, subject_docs=len(ids))
            assert same == plain and plain[0][0] == ids[0]
            monkeypatch.setattr(keyword_module, "TERM_CAP", 3)
            bounded = p.keyword.search(conn, sid, "nurse sunny day", 10,
                                       subject_docs=len(ids))
            # "sunny" and "day" match six atoms of u1 (> 3): dropped; "nurse" stays
            assert [a for a, _ in bounded] == [ids[0]]
            # every term frequent: the rarest stays, so the search still answers
            assert len(p.keyword.search(conn, sid, "sunny day", 10,
                                        subject_docs=len(ids))) == len(ids)


def _random_memories(app: LedgerApp, count: int, seed: int) -> tuple[list[str], list[str]]:
    """``count`` memories of a new subject u1, four words drawn from a few each: (texts,
    atom ids)."""
    rng = np.random.default_rng(seed)
    app.register_subject({"ref": "u1"})
    words = ["nurse", "clinic", "cat", "peanuts", "sailing", "Oslo", "garden", "violin",
             "train", "coffee", "marathon", "chess", "kitchen", "umbrella", "printer"]
    texts = [" ".join(rng.choice(words, 4)) + f" {i}" for i in range(count)]
    ids = [str(a) for a in app.add_atoms([{"subject": "u1", "text": t} for t in texts])]
    return texts, ids


def test_sign_bit_shortlist_finds_the_exact_best_and_forgets_erased(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recall_module, "EXACT_LIMIT", 8)
    monkeypatch.setattr(recall_module, "SHORTLIST", 8)
    texts, ids = _random_memories(app, 60, seed=16)
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        sid = str(app.reader.resolve_subject("u1"))
        with p.store.engine.connect() as conn:
            entry = p.index.get(conn, sid, p._positions(conn))
        assert len(entry.live()) == 60
        for first_pass in (10**9, 16):  # with and without the first word's pass
            monkeypatch.setattr(recall_module, "FIRST_PASS", first_pass)
            for i in (0, 17, 42):  # a memory's own text: the shortlist must hold it
                q = np.asarray(p.vectors.embed_query(texts[i]), dtype=np.float32)
                got = entry.vector_top(q, 1)
                assert got[0][0] == ids[i] and got[0][1] == pytest.approx(1.0, abs=1e-4)
        assert entry._centered == 60 and np.any(entry.center != 0)
        app.destroy_data_key(uuid.UUID(ids[17]), "test")
        p.catch_up()
        q = np.asarray(p.vectors.embed_query(texts[17]), dtype=np.float32)
        assert ids[17] not in [a for a, _ in entry.vector_top(q, 60)]
        assert len(entry.live()) == 59


def test_several_queries_at_once_answer_as_each_alone(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """The similar-memory search of a group of adds asks the index once for all its texts
    (``vectors_top``: matrix products on one BLAS thread); each text gets what the exact
    search of that text alone gives, erased and redacted atoms left out, and above
    BATCH_EXACT_LIMIT the same answers come one query at a time."""
    texts, ids = _random_memories(app, 80, seed=30)
    app.destroy_data_key(uuid.UUID(ids[5]), "test")
    app.redact(ids[6], "soft", "test")
    monkeypatch.setattr(recall_module, "QUERY_BLOCK", 7)  # several blocks
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        sid = str(app.reader.resolve_subject("u1"))
        with p.store.engine.connect() as conn:
            entry = p.index.get(conn, sid, p._positions(conn))
        qs = np.asarray([p.vectors.embed_query(t) for t in texts[:40]], dtype=np.float32)
        batched = entry.vectors_top(qs, 10)
        assert len(batched) == 40
        for q, got in zip(qs, batched, strict=True):
            alone = entry.vector_top(q, 10)  # exact: 78 live vectors
            assert [a for a, _ in got] == [a for a, _ in alone]
            assert [s for _, s in got] == pytest.approx([s for _, s in alone], abs=1e-5)
        assert batched[0][0][0] == ids[0]
        for gone in (5, 6):
            assert all(ids[gone] not in [a for a, _ in top] for top in batched)
        monkeypatch.setattr(recall_module, "BATCH_EXACT_LIMIT", 10)
        assert entry.vectors_top(qs, 10) == [entry.vector_top(q, 10) for q in qs]


def test_the_best_of_many_scores_are_those_a_full_sort_puts_first() -> None:
    """``_best``'s floor from the blocks' largest scores keeps every one of the best n,
    with erased or redacted slots (-inf) among them and scores in any order."""
    rng = np.random.default_rng(64)
    for size in (50, 3000, 20_011, 100_000):
        for trial in range(12):
            scores = rng.standard_normal(size).astype(np.float32)
            if trial % 3 == 0:
                scores[rng.choice(size, size // 3, replace=False)] = -np.inf
            if trial % 3 == 1:
                scores = np.sort(scores)  # the best all in the last blocks
            n = min((1, 20, 160)[trial % 3], int(np.isfinite(scores).sum()) - 1)
            got = recall_module._best(scores, n)
            assert len(got) == n
            assert set(got.tolist()) == set(np.argsort(-scores, kind="stable")[:n].tolist())


def _exhaustive_similar(p: object, subject_id: str, atom_ids: list[str],
                        texts: list[str], k: int = 5) -> list[list[tuple[str, float]]]:
    """What :func:`projections.similar.find_similar` must answer, found the plain way:
    every recallable atom of the subject compared with each text (cosine of the two
    embeddings, then the keyword check)."""
    from ledger import clock
    from projections.atoms import is_candidate
    from projections.embedder import embed_matrix
    from projections.similar import _unit, keywords_agree, threshold_for

    embedder = p.vectors.embedder  # type: ignore[attr-defined]
    with p.store.engine.connect() as conn:  # type: ignore[attr-defined]
        rows = p.atoms.atoms_by_id(conn, atom_ids)  # type: ignore[attr-defined]
    at = clock.format_instant(clock.now())
    live = [r for r in rows if r["subject_id"] == subject_id and is_candidate(r, at)]
    qm = _unit(embed_matrix(embedder, texts))
    cm = _unit(embed_matrix(embedder, [r["text"] for r in live]))
    limit = threshold_for(embedder)
    out = []
    for text, q in zip(texts, qm, strict=True):
        found = [(r["atom_id"], min(1.0, float(c @ q))) for r, c in zip(live, cm, strict=True)
                 if float(c @ q) >= limit and keywords_agree(text, r["text"])]
        out.append(sorted(found, key=lambda f: (-f[1], f[0]))[:k])
    return out


def test_the_similar_search_reads_only_what_can_pass_and_answers_as_a_full_comparison(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """ADR 0077: proposals below the threshold in the recall index are not read, and a
    text's keyword search is skipped when the exact vector search shows every atom at or
    above the threshold among its nearest; the answers are those of comparing every
    memory of the subject. With the vector search not exact, every text is searched by
    keyword as before."""
    from projections.similar import POOL, find_similar

    rng = np.random.default_rng(77)
    words = ["nurse", "clinic", "cat", "peanuts", "sailing", "Oslo", "garden", "violin",
             "train", "coffee", "marathon", "chess", "kitchen", "umbrella", "printer"]
    crowd = ["nurse", "clinic", "garden", "violin"]
    # more near-copies of one memory than the search's pool holds, and varied others
    texts = [" ".join(rng.permutation(crowd)) for _ in range(POOL + 10)]
    texts += [" ".join(rng.choice(words, 4, replace=False)) for _ in range(40)]
    app.register_subject({"ref": "u1"})
    ids = [str(a) for a in app.add_atoms([{"subject": "u1", "text": t} for t in texts])]
    probes = ["violin garden clinic nurse", texts[POOL + 12], texts[POOL + 30],
              "Prefers aisle seats on long flights", "chess kitchen"]
    searched: list[str] = []
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        p.catch_up()
        sid = str(app.reader.resolve_subject("u1"))
        plain = p.keyword.search

        def counted(conn: object, subject_id: str, text: str, *a: object,
                    **kw: object) -> object:
            searched.append(text)
            return plain(conn, subject_id, text, *a, **kw)

        monkeypatch.setattr(p.keyword, "search", counted)
        read: list[int] = []
        by_id = p.atoms.atoms_by_id
        monkeypatch.setattr(p.atoms, "atoms_by_id",
                            lambda conn, wanted: read.append(len(wanted)) or by_id(conn, wanted))
        got = find_similar(p, sid, probes)
        want = _exhaustive_similar(p, sid, ids, probes)
        assert [[(s.atom_id, round(s.score, 5)) for s in found] for found in got] == \
            [[(a, round(c, 5)) for a, c in found] for found in want]
        assert len(got[0]) == 5 and got[3] == []  # the crowd found; the stranger alone
        assert searched == ["violin garden clinic nurse"]  # only the crowded text
        assert read[0] < len(ids)

        searched.clear()
        monkeypatch.setattr(recall_module, "EXACT_LIMIT", 8)
        monkeypatch.setattr(recall_module, "BATCH_EXACT_LIMIT", 8)
        assert find_similar(p, sid, probes) == got
        assert searched == probes
