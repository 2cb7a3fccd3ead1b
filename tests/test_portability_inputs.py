"""Imports never crash on a value a source format allows (issue 19 items 6 and 8): a
2^64-1 in a ``.mem`` episode or a Konshus ``x-`` field is kept losslessly, importance 3
imports, a number a signed event cannot hold is refused with exit 2 naming the field, and
a fuzz test over the three formats finds no traceback and no change after a refusal.
SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import run_cli, snapshot
from .test_portability_mem import reseal
from .test_portability_support import KONSHUS_EXAMPLE, dumps, logs_on_stderr  # noqa: F401
from .test_schemas import PERSONA_ATOM

VECTORS = Path(__file__).parent / "vectors" / "portable-memory"
BIG = 2**64 - 1


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text("utf-8").splitlines() if x.strip()]


def _import(home: Path, path: Path, fmt: str, *extra: str) -> Any:
    return run_cli("--home", str(home), "import", str(path), "--format", fmt, "--json",
                   *extra)


def test_big_integer_in_a_mem_episode_and_importance_3_are_kept(home: Path,
                                                                tmp_path: Path) -> None:
    """portable-memory's own vectors/signed.mem: ``vendorId`` 2^64-1, ``importance`` 3."""
    src = VECTORS / "signed.mem"
    ep = next(e for e in _lines(src / "items" / "episode.jsonl") if e["id"] == "ep_0001")
    assert ep["vendorId"] == BIG and ep["importance"] == 3
    r = _import(home, src, "mem", "--subject", "u_big")
    assert r.code == 0, r.err
    assert json.loads(r.out)["refused"] == {"artifacts": 0, "atoms": 0, "other": 0}
    out = tmp_path / "out.mem"
    r = run_cli("--home", str(home), "export", "--format", "mem", "--subject", "u_big",
                "--out", str(out))
    assert r.code == 0, r.err
    back = next(e for e in _lines(out / "items" / "episode.jsonl") if e["id"] == "ep_0001")
    assert back["vendorId"] == BIG and isinstance(back["vendorId"], int)
    assert back["importance"] == 3
    assert "18446744073709551615" in (out / "items" / "episode.jsonl").read_text()


def test_big_integer_in_a_konshus_x_field_round_trips(home: Path, tmp_path: Path) -> None:
    doc = copy.deepcopy(KONSHUS_EXAMPLE)
    doc["atoms"][0]["x-vendor-id"] = BIG
    doc["atoms"][0]["x-vendor-nested"] = {"ids": [BIG, -BIG]}
    src = tmp_path / "k.json"
    src.write_bytes(dumps(doc))
    r = _import(home, src, "konshus")
    assert r.code == 0, r.err
    out = tmp_path / "k-out.json"
    r = run_cli("--home", str(home), "export", "--format", "konshus", "--out", str(out))
    assert r.code == 0, r.err
    atom = json.loads(out.read_text())["atoms"][0]
    assert atom["x-vendor-id"] == BIG and atom["x-vendor-nested"] == {"ids": [BIG, -BIG]}


def test_access_count_too_large_to_sign_is_refused_naming_the_field(home: Path,
                                                                    tmp_path: Path) -> None:
    bundle = tmp_path / "b.mem"
    shutil.copytree(VECTORS / "sample.mem", bundle)
    path = bundle / "items" / "episode.jsonl"
    eps = _lines(path)
    eps[0]["accessCount"] = BIG
    path.write_text("".join(json.dumps(e, sort_keys=True, separators=(",", ":")) + "\n"
                            for e in eps))
    reseal(bundle)
    before = snapshot(home)
    r = _import(home, bundle, "mem", "--subject", "u_big")
    assert r.code == 2, r.err
    assert "accessCount" in r.err and str(BIG) in r.err and "Traceback" not in r.err
    assert snapshot(home) == before


# ------------------------------------------------------------------ fuzz
_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
            | st.sampled_from([BIG, -BIG, 2**53, 3, -1, 0, 1.5, 1e308])
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=12) | st.sampled_from(["", "2026-01-01", "x-evil"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: Any, data: st.DataObject) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return doc
        path = data.draw(st.sampled_from(paths), label="path")
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = data.draw(st.sampled_from(["set", "delete", "add"]), label="op")
        if op == "set":
            parent[path[-1]] = data.draw(_VALUES, label="value")
        elif op == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            key = data.draw(st.sampled_from(["x-fuzz", "fuzz", "vendorId", "importance"]))
            parent[key] = data.draw(_VALUES, label="added")
    return doc


def _mem_source(tmp_path: Path, data: st.DataObject, n: int) -> Path:
    bundle = tmp_path / f"fuzz-{n}.mem"
    shutil.copytree(VECTORS / data.draw(st.sampled_from(["sample.mem", "sample-1.1.mem"])),
                    bundle)
    files = sorted(p for p in (bundle / "items").glob("*.jsonl"))
    target = data.draw(st.sampled_from(files), label="file")
    lines = _lines(target)
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    lines[i] = _mutate(lines[i], data)
    target.write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in lines))
    reseal(bundle)
    return bundle


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzzed_imports_never_crash_and_a_refusal_changes_nothing(
        home: Path, tmp_path: Path, data: st.DataObject) -> None:
    fmt = data.draw(st.sampled_from(["konshus", "persona", "mem"]), label="format")
    n = len(list(tmp_path.glob("fuzz-*")))
    if fmt == "mem":
        src = _mem_source(tmp_path, data, n)
    else:
        seed = KONSHUS_EXAMPLE if fmt == "konshus" else {"memory": [PERSONA_ATOM]}
        src = tmp_path / f"fuzz-{n}.json"
        src.write_bytes(json.dumps(_mutate(seed, data)).encode())
    before = snapshot(home)
    r = _import(home, src, fmt, "--subject", f"fz{n}")
    assert "Traceback" not in r.err
    assert r.code in (0, 2), r.err  # never 1 (verification failed) or a crash
    if r.code == 2:
        assert r.err.startswith("error: ") or "\nerror: " in r.err, r.err
        assert snapshot(home) == before


@pytest.mark.parametrize("fmt", ["konshus", "persona"])
def test_a_document_of_the_wrong_shape_is_a_clear_error(home: Path, tmp_path: Path,
                                                        fmt: str) -> None:
    before = snapshot(home)
    for body in ([1, 2, 3], {"atoms": {"a": 1}}, {"memory": [None]}, "x", {"memory": 7}):
        src = tmp_path / "bad.json"
        src.write_text(json.dumps(body))
        r = _import(home, src, fmt, "--subject", "u1")
        assert r.code == 2 and "Traceback" not in r.err, (body, r.err)
    assert snapshot(home) == before
