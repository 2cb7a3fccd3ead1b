"""Round-trips as properties: ledger -> format -> ledger -> format is identical after
canonicalisation (RFC 8785) for Konshus, .mem and Persona; provenance and sensitivity
survive every path, a chain through all three formats included. Both backends.

Each example writes a fresh subject into the first of two ledgers (separate homes,
keys and databases, same backend) and imports it into the second, so examples stay
independent without paying for two new ledgers each time.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keys.keyring import read_public_key_file
from ledger.application import LedgerApp
from ledger.home import Config
from ledger.inputs import ARTIFACT_KINDS, ATOM_KINDS, PRIVACY_CLASSES, SENSITIVITIES

from .test_portability_support import (
    bundle_files,
    canon,
    dumps,
    export_doc,
    import_doc,
    logs_on_stderr,  # noqa: F401  (autouse fixture)
    writer_pub,
)

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])

words = st.text(alphabet=st.sampled_from("abcdefghij klmnoé€漢 "), min_size=1, max_size=40) \
    .map(str.strip).filter(bool)
unit = st.floats(min_value=0, max_value=1, allow_nan=False, allow_subnormal=False)
instants = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1),
                        timezones=st.just(UTC))
json_leaf = st.one_of(st.integers(-1000, 1000), st.booleans(), words, st.none())
extensions = st.dictionaries(st.sampled_from(["x-acme", "x-vendor-rank", "x-note"]),
                             st.one_of(json_leaf, st.dictionaries(words, json_leaf,
                                                                  max_size=2)), max_size=2)


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    """Artifacts and atoms as a user of the ledger writes them (any ids, any fields)."""
    uid = uuid.uuid4().hex[:8]
    arts = []
    for i in range(draw(st.integers(0, 3))):
        arts.append({"ref": f"r{uid}-{i}", "kind": draw(st.sampled_from(ARTIFACT_KINDS)),
                     "title": draw(st.none() | words), "body": draw(st.none() | words),
                     "source": draw(st.none() | st.just("chatgpt-export")),
                     "private": draw(st.booleans()),
                     "captured_at": draw(instants).isoformat()})
    atoms = []
    for i in range(draw(st.integers(1, 4))):
        derivation = draw(st.sampled_from(["stated", "inferred", "observed"]) if arts
                          else st.just("stated"))
        cites = draw(st.lists(st.sampled_from([a["ref"] for a in arts]), min_size=1,
                              max_size=2, unique=True)) if derivation != "stated" else []
        sensitivity = draw(st.sampled_from(SENSITIVITIES))
        pclass = draw(st.none() | st.sampled_from(PRIVACY_CLASSES))
        regulated = pclass == "sensitive-pii" or (pclass is None and sensitivity in
                                                  ("medical", "financial", "legal"))
        start = draw(st.none() | instants)
        atoms.append({
            "ref": draw(st.sampled_from([f"a{uid}-{i}", None])),
            "kind": draw(st.sampled_from(ATOM_KINDS)), "text": draw(words),
            "gist": draw(st.none() | words),
            "details": draw(st.lists(st.fixed_dictionaries(
                {"content": words, "brightness": unit}), max_size=2)),
            "tags": draw(st.lists(st.sampled_from(["t1", "t2", "tea"]), max_size=3,
                                  unique=True)),
            "confidence": draw(st.none() | unit), "sensitivity": sensitivity,
            "valid_from": start.isoformat() if start else None,
            "valid_to": (start + timedelta(days=draw(st.integers(0, 900)))).isoformat()
            if start and draw(st.booleans()) else None,
            "derivation": derivation, "artifact_ids": cites,
            "extractor": "claude-opus-4" if derivation == "inferred" else
            draw(st.none() | st.just("human")),
            "human_reviewed": draw(st.booleans()), "salience": draw(unit),
            "emotional_valence": draw(st.floats(-1, 1, allow_nan=False)),
            "decay_profile": draw(st.none() | st.fixed_dictionaries(
                {"halfLifeDays": st.floats(1, 60)}, optional={"rehearsalBoost": st.floats(1, 2)})),
            "privacy_class": pclass,
            "consent_basis": "explicit-consent" if regulated else draw(
                st.none() | st.just("service-delivery")),
            "session_id": draw(st.none() | st.just(f"sess:{uid}")),
            "min_sources": draw(st.integers(1, 2)), "extensions": draw(extensions) or None,
        })
    erase = draw(st.lists(st.integers(0, len(atoms) - 1), unique=True, max_size=1))
    return {"subject": f"s-{uid}", "artifacts": arts, "atoms": atoms, "erase": erase}


def write(app: LedgerApp, sc: dict[str, Any]) -> None:
    s = sc["subject"]
    result = app.import_records([{"ref": s, "display_name": "Ann Example", "locale": "pt-PT"}],
                                [{**a, "subject": s} for a in sc["artifacts"]],
                                [{**m, "subject": s} for m in sc["atoms"]])
    assert result["created"]["atoms"] == len(sc["atoms"])
    for i in sc["erase"]:
        ref = sc["atoms"][i]["ref"]
        if ref is not None:
            app.destroy_data_key(app.reader.get_atom(ref).id, "erasure")
    for m in sc["atoms"][:1]:
        if m["ref"] is not None and m["ref"] not in {sc["atoms"][i]["ref"] for i in sc["erase"]}:
            app.rehearse_atom(m["ref"], session_id="sess:r")


def labels(app: LedgerApp, subject: str) -> dict[str, tuple[Any, ...]]:
    """Per exported atom: what must survive every path (provenance class, sources,
    sensitivity, privacy labels)."""
    from portability import view

    v = view.load(app, subject)
    return {a.local_id: (a.fields["derivation"], sorted(a.cited), a.fields["sensitivity"],
                         a.fields["privacy_class"], a.fields["consent_basis"],
                         a.fields["extractor"])
            for a in v.atoms if not a.erased}


class Pair:
    def __init__(self, home: Path, other: Path) -> None:
        self.a = LedgerApp(Config.load(home))
        self.b = LedgerApp(Config.load(other))
        self.trust = [read_public_key_file(writer_pub(home))]

    def close(self) -> None:
        self.a.close()
        self.b.close()


def _roundtrip(home: Path, other: Path, tmp_path: Path, fmt: str) -> None:
    pair = Pair(home, other)

    @SETTINGS
    @given(sc=scenarios())
    def check(sc: dict[str, Any]) -> None:
        write(pair.a, sc)
        s, s2 = sc["subject"], sc["subject"] + "-copy"
        if fmt == "mem":
            first = export_doc(pair.a, "mem", s, tmp_path / f"{s}-1.mem")
            import_doc(pair.b, "mem", tmp_path / f"{s}-1.mem", subject=s2, trusted=pair.trust)
            export_doc(pair.b, "mem", s2, tmp_path / f"{s}-2.mem")
            one, two = bundle_files(tmp_path / f"{s}-1.mem"), bundle_files(
                tmp_path / f"{s}-2.mem")
            subj = "items/memoryLedgerSubject.jsonl"
            assert two.pop(subj).replace(s2.encode(), s.encode()) == one.pop(subj)
            episodes = "items/episode.jsonl"  # absent from both when every atom was erased
            assert two.get(episodes, b"").replace(f'"{s2}"'.encode(), f'"{s}"'.encode()) == \
                one.get(episodes, b"")
            assert (episodes in two) == (episodes in one)
            assert two.get("audit/tombstones.jsonl") == one.get("audit/tombstones.jsonl")
            assert first["tombstones"] == len(sc["erase"]) * (sc["atoms"][sc["erase"][0]]["ref"]
                                                              is not None if sc["erase"] else 0)
        else:
            one = export_doc(pair.a, fmt, s)
            import_doc(pair.b, fmt, dumps(one), subject=s2, apply_untrusted=True)
            two = export_doc(pair.b, fmt, s2)
            key = "subject" if fmt == "konshus" else "x-memory-ledger"
            sub = two[key] if fmt == "konshus" else two[key]["subject"]
            assert sub["subject_id"] == s2
            sub["subject_id"] = s
            assert canon(two) == canon(one)
        assert labels(pair.b, s2) == labels(pair.a, s)

    try:
        check()
    finally:
        pair.close()


def test_konshus_roundtrip_is_identical(home: Path, other_home: Path, tmp_path: Path) -> None:
    _roundtrip(home, other_home, tmp_path, "konshus")


def test_mem_roundtrip_is_identical(home: Path, other_home: Path, tmp_path: Path) -> None:
    _roundtrip(home, other_home, tmp_path, "mem")


def test_persona_roundtrip_is_identical(home: Path, other_home: Path, tmp_path: Path) -> None:
    _roundtrip(home, other_home, tmp_path, "persona")


def test_provenance_and_sensitivity_survive_a_chain_through_every_format(
        home: Path, other_home: Path, tmp_path: Path) -> None:
    pair = Pair(home, other_home)

    @settings(SETTINGS, max_examples=5)
    @given(sc=scenarios())
    def check(sc: dict[str, Any]) -> None:
        write(pair.a, sc)
        s = sc["subject"]
        expected = labels(pair.a, s)
        k = export_doc(pair.a, "konshus", s)
        import_doc(pair.b, "konshus", dumps(k), subject=f"{s}-k")
        export_doc(pair.b, "mem", f"{s}-k", tmp_path / f"{s}.mem")
        import_doc(pair.b, "mem", tmp_path / f"{s}.mem", subject=f"{s}-m", trusted=pair.trust)
        p = export_doc(pair.b, "persona", f"{s}-m")
        import_doc(pair.b, "persona", dumps(p), subject=f"{s}-p")
        k2 = export_doc(pair.b, "konshus", f"{s}-p")
        import_doc(pair.b, "konshus", dumps(k2), subject=f"{s}-k2")
        for final in (f"{s}-k", f"{s}-m", f"{s}-p", f"{s}-k2"):
            assert labels(pair.b, final) == expected, final
        k2["subject"]["subject_id"] = s
        assert canon(k2) == canon(k)

    try:
        check()
    finally:
        pair.close()
