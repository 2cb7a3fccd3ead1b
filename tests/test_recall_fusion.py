"""Issue 28 (ADR 0051): recall's ranking does not depend on k, every proposal is scored on
both signals, and recall says why it left out what the indexes matched."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.application import LedgerApp
from projections import service as service_module
from projections.embedder import HashingEmbedder, WordLlamaEmbedder
from projections.service import Projections

from .conftest import run_cli
from .test_projections_contract import T0, Clock, projections

WORDS = ["tea", "garden", "piano", "sister", "Berlin", "cycling", "books", "coffee",
         "sailing", "dog", "mountain", "bakery", "violin", "river", "museum", "chess"]
EMBEDDERS = {"hashing": HashingEmbedder, "wordllama": WordLlamaEmbedder}


def _seed(app: LedgerApp, clock: Clock, n: int = 90) -> dict[str, str]:
    """``n`` atoms over a small vocabulary (many share words, so scores tie), of varied
    salience and age; some archived, soft-redacted, superseded, expired or not yet valid.
    Returns the id of each atom left out on purpose, by its reason."""
    rng = random.Random(28)
    app.register_subject({"ref": "u1"})
    ids = []
    for day in range(3):
        batch = []
        for _ in range(n // 3):
            words = rng.sample(WORDS, 3)
            batch.append({"subject": "u1", "text": f"Likes {words[0]}, {words[1]} and "
                          f"{words[2]}", "salience": rng.choice([0.1, 0.3, 0.5, 0.5, 0.9])})
        ids += [str(a) for a in app.add_atoms(batch)]
        clock.set(T0 + timedelta(days=day + 1))
    app.redact(ids[0], "archive", "test")
    app.redact(ids[1], "soft", "test")
    app.correct_atom(ids[2], {"text": "Likes tea and chess, not coffee"})
    app.expire_atom(ids[3])
    future = app.add_atom({"subject": "u1", "text": "Likes tea and the violin",
                           "valid_from": (T0 + timedelta(days=400)).isoformat()})
    return {"archived": ids[0], "redacted": ids[1], "superseded": ids[2],
            "expired": ids[3], "not-valid-at-time": str(future)}


@pytest.fixture(params=sorted(EMBEDDERS))
def seeded(request: pytest.FixtureRequest, app: LedgerApp, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[Projections, dict[str, str]]]:
    clock = Clock(monkeypatch)
    left = _seed(app, clock)
    with projections(app, embedder=EMBEDDERS[request.param]()) as p:
        p.catch_up()
        yield p, left


AT = T0 + timedelta(days=5)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from([*WORDS, "the", "likes", "zebra"]), min_size=1,
                      max_size=4),
       n=st.integers(1, 40), extra=st.integers(0, 60),
       fusion=st.sampled_from(["linear", "rrf"]),
       window=st.sampled_from([(None, None), ("2030-01-02", "2030-01-02"),
                               ("2030-01-01T12:00:00Z", None), (None, "2030-01-01")]))
def test_first_n_of_k_are_the_same_for_every_larger_k(
        seeded: tuple[Projections, dict[str, str]], words: list[str], n: int, extra: int,
        fusion: str, window: tuple[str | None, str | None]) -> None:
    """The first n of ``recall -k N`` are the first n of ``recall -k n``, items and
    scores, for any N >= n: the pool and every score are independent of k (with or
    without a since/until window)."""
    p, _left = seeded
    weights = service_module.RecallWeights(fusion=fusion)
    query = " ".join(words)
    since, until = window
    small = p.recall(query, "u1", k=n, now=AT, weights=weights, refresh=False,
                     since=since, until=until)
    large = p.recall(query, "u1", k=min(100, n + extra), now=AT, weights=weights,
                     refresh=False, since=since, until=until)
    assert [i.as_json() for i in large.items[:n]] == [i.as_json() for i in small.items]
    assert (small.pool, small.eligible, small.omitted, small.omitted_counts) == \
        (large.pool, large.eligible, large.omitted, large.omitted_counts)
    for item in large.items:  # the atoms were recorded on 1, 2 and 3 January 2030
        day = item.said_at[:10]
        assert (since is None or day >= since[:10]) and (until is None or day <= until)


def test_every_proposal_is_scored_on_both_signals(
        seeded: tuple[Projections, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """With each index proposing only 3 atoms, an atom found by keywords alone still gets
    its exact cosine, and one found by vector alone its keyword score: the relevance of
    every item is what both signals say, not 0 for the index that did not propose it."""
    p, _left = seeded
    monkeypatch.setattr(service_module, "POOL", 3)
    floor = p._min_similarity()
    pools = []
    for query in ("tea garden", "piano sister", "coffee river museum", "chess and books"):
        result = p.recall(query, "u1", k=6, now=AT, refresh=False)
        pools.append(result.pool)
        assert len(result.items) == min(6, result.eligible) >= 3
        sid = result.subject_id
        q = np.asarray(p.vectors.embed_query(query), dtype=np.float64)
        texts = {i.atom_id: i.text for i in result.items}
        with p.store.engine.connect() as conn:
            kw = p.keyword.scores(conn, sid, query, list(texts), retrievable_only=False)
        kw_max = max(kw.values())
        assert max(i.keyword for i in result.items) == 1.0
        for item in result.items:
            v = np.asarray(p.vectors.embedder.embed([item.text])[0], dtype=np.float64)
            cos = float(v @ q)
            want = min(1.0, cos) if cos >= floor else 0.0
            assert item.vector == pytest.approx(want, abs=1e-5), item.text
            assert item.keyword == pytest.approx(kw.get(item.atom_id, 0.0) / kw_max,
                                                 abs=1e-9)
        assert any(i.vector > 0 and i.keyword > 0 for i in result.items)
    # the indexes proposed different atoms (a pool over 3) for some query: those found by
    # one index only were still scored on the other signal, as checked above
    assert max(pools) > 3, pools


def test_keyword_scores_equal_the_search_scores(
        seeded: tuple[Projections, dict[str, str]]) -> None:
    p, _left = seeded
    sid = str(p.reader.subject_id("u1"))
    with p.store.engine.connect() as conn:
        found = p.keyword.search(conn, sid, "tea and piano", 1000, retrievable_only=False)
        scored = p.keyword.scores(conn, sid, "tea and piano",
                                  [a for a, _ in found] + ["not-an-atom"],
                                  retrievable_only=False)
    assert found and scored == pytest.approx(dict(found), abs=1e-12)


def test_recall_reports_what_it_left_out_and_why(
        seeded: tuple[Projections, dict[str, str]]) -> None:
    p, left = seeded
    result = p.recall("tea violin chess coffee", "u1", k=5, now=AT, refresh=False)
    reasons = {o.atom_id: o.reason for o in result.omitted}
    assert reasons[left["not-valid-at-time"]] == "not-valid-at-time"  # "tea and the violin"
    assert set(reasons.items()) <= {(v, k) for k, v in left.items()}
    assert result.pool == result.eligible + sum(result.omitted_counts.values())
    assert not set(reasons) & set(result.atom_ids)
    # asked for every word, every atom is proposed: each one left out is counted
    every = p.recall(" ".join(WORDS), "u1", k=5, now=AT, refresh=False)
    assert every.omitted_counts == {"archived": 1, "redacted": 1, "superseded": 1,
                                    "expired": 1, "not-valid-at-time": 1}
    assert {o.atom_id: o.reason for o in every.omitted} == {v: k for k, v in left.items()}


def _cli(home: Path, *args: str, code: int = 0) -> Any:
    r = run_cli("--home", str(home), *args)
    assert r.code == code, r.err
    return r


def test_recall_json_explains_what_it_left_out(home: Path, app: LedgerApp,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`ledger recall --json` is the HTTP API's answer: the items, and the matched
    memories left out, each with its reason; never an omitted memory's text."""
    app.register_subject({"ref": "u1"})
    kept, archived, soft, old, gone = (str(a) for a in app.add_atoms([
        {"subject": "u1", "text": "Drinks green tea every morning"},
        {"subject": "u1", "text": "Drank oolong tea in Taipei"},
        {"subject": "u1", "text": "Hides matcha tea in the desk"},
        {"subject": "u1", "text": "Liked rooibos tea once"},
        {"subject": "u1", "text": "Brews pu-erh tea on Sundays"}]))
    app.redact(archived, "archive", "test")
    app.redact(soft, "soft", "test")
    new = str(app.correct_atom(old, {"text": "Likes chamomile tea now"}))
    app.destroy_data_key(UUID(gone), "erasure")  # purged from the indexes: nothing to report
    r = _cli(home, "recall", "tea", "--subject", "u1", "--json", "--no-rehearse")
    data = json.loads(r.out)
    assert sorted(i["atom_id"] for i in data["items"]) == sorted([kept, new])
    assert sorted(data["omitted"], key=lambda o: o["atom_id"]) == sorted(
        [{"atom_id": archived, "reason": "archived"}, {"atom_id": soft, "reason": "redacted"},
         {"atom_id": old, "reason": "superseded"}], key=lambda o: o["atom_id"])
    assert data["omitted_counts"] == {"archived": 1, "redacted": 1, "superseded": 1}
    assert data["pool"] == 5 and data["eligible"] == 2
    for secret in ("oolong", "matcha", "rooibos", "pu-erh"):
        assert secret not in r.out and secret not in r.err
    # nothing recallable: the note says what was left out, by reason
    app.redact(kept, "archive", "test")
    app.redact(new, "soft", "test")
    r = _cli(home, "recall", "tea", "--subject", "u1")
    assert r.out == ""
    assert r.err.strip().endswith("(5 memories matched the query, 0 of them recallable now; "
                                  "left out: 2 archived, 2 redacted, 1 superseded)")
