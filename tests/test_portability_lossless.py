"""Lossless ``.mem`` (issue 19 item 2, ADR 0017): portable-memory's own reference bundles
import with nothing refused, and every record of every kind comes back out with the same
content; records are sealed, erasable by tombstone or by the subject's erasure, and a stale
bundle never brings an erased record back. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from portable_memory import (
    BundleExporter,
    BundleImporter,
    BundleValidator,
    DerivedRefs,
    InMemoryStore,
    PortableEdge,
    PortableEntity,
    PortableEpisode,
    PortableVerifyingKey,
    Tombstone,
    TombstoneOp,
)
from portable_memory.signing import PortableSigningKey, sign_tombstone

from keys.keyring import read_public_key_file

from .conftest import files_under, run_cli
from .test_portability_support import logs_on_stderr, open_app  # noqa: F401

VECTORS = Path(__file__).parent / "vectors" / "portable-memory"
WIRE = "x-memory-ledger"


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text("utf-8").splitlines() if x.strip()]


def _streams(bundle: Path) -> dict[str, list[dict[str, Any]]]:
    out = {p.stem: _lines(p) for p in sorted((bundle / "items").glob("*.jsonl"))}
    out["tombstone"] = _lines(bundle / "audit" / "tombstones.jsonl")
    return out


def _key(line: dict[str, Any]) -> str:
    return str(line.get("id")) if "id" in line else json.dumps(line, sort_keys=True)


def _import(home: Path, bundle: Path, *extra: str) -> Any:
    return run_cli("--home", str(home), "import", str(bundle), "--format", "mem", "--json",
                   *extra)


def _export(home: Path, out: Path, *extra: str) -> Path:
    r = run_cli("--home", str(home), "export", "--format", "mem", "--out", str(out), *extra)
    assert r.code == 0, r.err
    return out


def _markers_in_home(home: Path, markers: list[str]) -> list[str]:
    found = []
    for p in files_under(home):
        data = p.read_bytes()
        for m in markers:
            forms = {m.encode(), m.encode("utf-16-le"), m.encode("utf-16-be"),
                     json.dumps(m).encode()[1:-1], m.lower().encode()}
            if any(f in data for f in forms):
                found.append(f"{m} in {p.relative_to(home)}")
    return found


@pytest.mark.parametrize("fixture", ["sample.mem", "sample-1.1.mem"])
def test_reference_bundle_imports_with_nothing_refused_and_exports_every_record(
        home: Path, tmp_path: Path, fixture: str) -> None:
    src = VECTORS / fixture
    r = _import(home, src, "--subject", "user_ref")
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["refused"] == {"artifacts": 0, "atoms": 0, "other": 0}, rep["refusals"]
    assert rep["refusals"] == []
    out = _export(home, tmp_path / "again.mem")
    want, got = _streams(src), _streams(out)
    for kind, lines in want.items():
        if not lines:
            continue
        assert kind in got, f"items/{kind}.jsonl is missing from the export"
        have = {_key(x): x for x in got[kind]}
        for line in lines:
            assert _key(line) in have, f"{kind} {_key(line)} was not exported"
            back = have[_key(line)]
            for k, v in line.items():  # key by key, after parsing
                assert back.get(k) == v, f"{kind} {_key(line)}: {k} {back.get(k)!r} != {v!r}"
            extra = set(back) - set(line)
            assert extra <= {WIRE}, f"{kind} {_key(line)} gained {sorted(extra)}"
    # the package's validator accepts the export, at every level it offers: integrity...
    assert BundleValidator().validate(out).issues == []
    # ...and authenticity, for a signed export checked against the writer's key
    signed = _export(home, tmp_path / "signed.mem", "--sign")
    writer = PortableVerifyingKey(raw_representation=read_public_key_file(
        home / "keys" / "writer.pub"))
    assert BundleValidator().validate(signed, trusted_keys=[writer]).issues == []
    # and its importer merges it (L1/L2: tombstones first), every kind kept
    store = InMemoryStore()
    BundleImporter().import_bundle(store, out)
    assert {e.id for e in store.export_episodes()} >= {x["id"] for x in want["episode"]}
    # a second import of the same bundle changes nothing
    again = json.loads(_import(home, src, "--subject", "user_ref").out)
    assert again["created"] == {"subjects": 0, "artifacts": 0, "atoms": 0}
    assert again["records"]["created"] == 0


def _graph_bundle(tmp_path: Path, name: str, tombstones: list[Tombstone] = (),  # type: ignore[assignment]
                  rows: bool | None = None) -> Path:
    t0 = datetime(2026, 1, 2, tzinfo=UTC)
    store = InMemoryStore()
    store.import_episode(PortableEpisode(
        id="ep_1", event_time=t0, mention_time=t0, ingestion_time=t0, source_type="note",
        actors=[], summary="Met the quokka team", details="Met the quokka team",
        sensitivity="low", metadata={}, categories=[], importance=0.5, confidence=0.9,
        lifecycle_state="HOT", extraction_state="done", access_count=0, pinned=False,
        vault_refs=[]), None)
    for t in tombstones:  # first: the reference store drops what a tombstone names
        store.apply_tombstone(t)
    if (not tombstones) if rows is None else rows:
        store.import_entity(PortableEntity(
            id="ent_q", entity_type="person", canonical_name="Zelda Quokkaworth",
            aliases=["ZQ marker alias"], summary="Marker entity summary 5e1d",
            sensitivity="low", updated_at=t0))
        store.import_edge(PortableEdge(
            id="edge_q", src_entity_id="ent_q", dst_entity_id="ent_q",
            edge_type="marker edge type 9b2c", t_valid_from=t0, ingestion_time=t0,
            confidence=0.8, evidence_episode_ids=["ep_1"]))
    out = tmp_path / name
    BundleExporter().export(store, out)
    return out


MARKERS = ["Zelda Quokkaworth", "Marker entity summary 5e1d", "marker edge type 9b2c",
           "ZQ marker alias"]


def test_tombstone_for_an_entity_and_edge_erases_them_and_a_stale_bundle_does_not_resurrect(
        home: Path, tmp_path: Path) -> None:
    stale = _graph_bundle(tmp_path, "graph.mem")
    r = _import(home, stale, "--subject", "u_graph")
    assert r.code == 0, r.err
    assert json.loads(r.out)["records"]["by_kind"] == {"edge": 1, "entity": 1}
    before = _streams(_export(home, tmp_path / "before.mem"))
    assert [e["id"] for e in before["entity"]] == ["ent_q"]
    assert [e["id"] for e in before["edge"]] == ["edge_q"]
    assert _markers_in_home(home, MARKERS) == []  # sealed from the start

    key = PortableSigningKey()
    tomb = sign_tombstone(Tombstone(
        id="tomb_ent_q", op=TombstoneOp.DELETE, target_kind="entity", target_id="ent_q",
        deleted_at=datetime(2026, 2, 1, tzinfo=UTC), actor="user",
        derived=DerivedRefs(edge_ids=["edge_q"])), key)
    deletion = _graph_bundle(tmp_path, "deletion.mem", [tomb])
    trust = tmp_path / "trusted.hex"
    trust.write_text(key.verifying_key.raw_representation.hex())
    r = _import(home, deletion, "--subject", "u_graph", "--trust", str(trust))
    assert r.code == 0, r.err
    assert json.loads(r.out)["records"]["erased_existing"] == 2

    app = open_app(home)
    try:
        from portability import records, view

        v = view.load(app, "u_graph")
        gone = [x for x in v.records if x.kind in ("entity", "edge")]
        assert len(gone) == 2 and all(x.content is None for x in gone)
        for x in gone:  # the data keys are destroyed: no ciphertext can be opened
            assert app.datakeys.destroyed_at(str(x.id)) is not None
        sid = str(app.reader.subject_id("u_graph"))
        assert {x.id for x in gone} <= set(records.of_subject(app, sid))
    finally:
        app.close()
    assert _markers_in_home(home, MARKERS) == []

    r = _import(home, stale, "--subject", "u_graph")  # the stale bundle again
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    assert rep["records"]["created"] == 0 and rep["records"]["skipped"] >= 2
    after = _streams(_export(home, tmp_path / "after.mem"))
    assert after.get("entity", []) == [] and after.get("edge", []) == []
    assert "tomb_ent_q" in {t["id"] for t in after["tombstone"]}  # deletions propagate
    assert _markers_in_home(home, MARKERS) == []


def test_redact_user_shreds_the_subjects_records(home: Path, tmp_path: Path) -> None:
    r = _import(home, _graph_bundle(tmp_path, "graph.mem"), "--subject", "u_graph")
    assert r.code == 0, r.err
    r = run_cli("--home", str(home), "redact-user", "u_graph", "--reason", "GDPR Art. 17",
                "--operator", "operator", "--json")
    assert r.code == 0, r.err
    done = json.loads(r.out)
    assert len(done["targets"]["records"]) == 2
    # the batch's Evidence Pack names the records and verifies offline
    pack = tmp_path / "pack"
    r = run_cli("--home", str(home), "evidence-pack", done["batch_id"], "--out", str(pack))
    assert r.code == 0, r.err
    r = run_cli("verify-pack", str(pack), "--root-key", str(home / "keys" / "root.pub"))
    assert r.code == 0, r.err
    app = open_app(home)
    try:
        from portability import records, view

        ids = records.of_subject(app, str(app.reader.subject_id("u_graph")))
        assert len(ids) == 2
        assert all(app.datakeys.destroyed_at(str(i)) is not None for i in ids)
        assert all(x.content is None for x in view.load(app, "u_graph").records)
        assert {a.status for a in app.reader.get_many(ids)} == {"hard-redacted"}
    finally:
        app.close()
    assert _markers_in_home(home, MARKERS) == []
    stale = _import(home, tmp_path / "graph.mem", "--subject", "u_graph")
    assert stale.code == 0, stale.err
    assert json.loads(stale.out)["records"]["created"] == 0


def test_bitemporal_edge_update_supersedes_and_keeps_both_rows(home: Path,
                                                               tmp_path: Path) -> None:
    first = _graph_bundle(tmp_path, "v1.mem")
    assert _import(home, first, "--subject", "u_graph").code == 0
    v2 = tmp_path / "v2.mem"
    shutil.copytree(first, v2)
    edge = _lines(v2 / "items" / "edge.jsonl")[0]
    t1 = "2026-03-01T00:00:00Z"
    store = InMemoryStore()
    BundleImporter().import_bundle(store, first)
    old = PortableEdge(**{**vars(store.export_edges()[0]),
                          "t_valid_to": datetime(2026, 3, 1, tzinfo=UTC),
                          "superseded_by": "edge_q2"})
    new = PortableEdge(**{**vars(store.export_edges()[0]), "id": "edge_q2",
                          "edge_type": "works with",
                          "t_valid_from": datetime(2026, 3, 1, tzinfo=UTC)})
    store.import_edge(old)
    store.import_edge(new)
    shutil.rmtree(v2)
    BundleExporter().export(store, v2)
    r = _import(home, v2, "--subject", "u_graph")
    assert r.code == 0, r.err
    rep = json.loads(r.out)["records"]
    assert rep["superseded"] == 1 and rep["by_kind"] == {"edge": 1}
    edges = {e["id"]: e for e in _streams(_export(home, tmp_path / "out.mem"))["edge"]}
    assert set(edges) == {"edge_q", "edge_q2"}  # both rows kept
    assert edges["edge_q"]["tValidTo"] == t1 and edges["edge_q"]["supersededBy"] == "edge_q2"
    assert edges["edge_q"]["edgeType"] == edge["edgeType"]
    app = open_app(home)
    try:
        from portability import view

        revised = [x for x in view.load(app, "u_graph").records if x.revisions]
        assert len(revised) == 1  # one Superseded event; the first statement stays in the log
    finally:
        app.close()


def test_tombstone_and_its_entity_in_one_bundle_creates_nothing_and_stays_erased(
        home: Path, tmp_path: Path) -> None:
    key = PortableSigningKey()
    tomb = sign_tombstone(Tombstone(
        id="tomb_ent_q", op=TombstoneOp.DELETE, target_kind="entity", target_id="ent_q",
        deleted_at=datetime(2026, 2, 1, tzinfo=UTC), actor="user",
        derived=DerivedRefs(edge_ids=["edge_q"])), key)
    both = _graph_bundle(tmp_path, "both.mem", [tomb], rows=True)
    trust = tmp_path / "trusted.hex"
    trust.write_text(key.verifying_key.raw_representation.hex())
    r = _import(home, both, "--subject", "u_graph", "--trust", str(trust))
    assert r.code == 0, r.err
    rep = json.loads(r.out)
    refused = {(x["kind"], x["id"]) for x in rep["refusals"]}
    assert {("entity", "ent_q"), ("edge", "edge_q")} <= refused  # tombstones first
    assert rep["records"]["by_kind"] == {"tombstone": 1}
    assert rep["records"]["placeholders"] == 1  # the ledger remembers the deletion
    stale = _graph_bundle(tmp_path, "stale.mem")  # the rows alone, no tombstone
    r = _import(home, stale, "--subject", "u_graph")
    assert r.code == 0, r.err
    assert json.loads(r.out)["records"]["by_kind"] == {"edge": 1}  # the entity stays gone
    out = _streams(_export(home, tmp_path / "out.mem"))
    assert out.get("entity", []) == []
    assert _markers_in_home(home, ["Zelda Quokkaworth", "Marker entity summary 5e1d"]) == []


def test_received_tombstone_reason_is_sealed_not_kept_in_the_clear(home: Path,
                                                                    tmp_path: Path) -> None:
    """A tombstone's free-text reason may name a person: kept only sealed (issue 20 item 6),
    and still exported verbatim, signature and all."""
    key = PortableSigningKey()
    reason = "Deleted at the request of Zelda Quokkaworth"
    tomb = sign_tombstone(Tombstone(
        id="tomb_ep_9", op=TombstoneOp.REDACT, target_kind="episode", target_id="ep_9",
        deleted_at=datetime(2026, 2, 1, tzinfo=UTC), actor="user", reason=reason), key)
    bundle = _graph_bundle(tmp_path, "t.mem", [tomb], rows=False)
    trust = tmp_path / "trusted.hex"
    trust.write_text(key.verifying_key.raw_representation.hex())
    r = _import(home, bundle, "--subject", "u_t", "--trust", str(trust))
    assert r.code == 0, r.err
    assert json.loads(r.out)["tombstones"]["placeholders"] == 1
    assert _markers_in_home(home, [reason]) == []
    out = _streams(_export(home, tmp_path / "out.mem"))
    kept = [t for t in out["tombstone"] if t["targetID"] == "ep_9"]
    assert len(kept) == 1 and kept[0]["reason"] == reason
    assert kept[0]["signature"] == tomb.signature
