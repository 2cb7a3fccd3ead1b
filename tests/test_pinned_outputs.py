"""Pinned outputs: a refactor that changes any byte a user or an auditor reads fails here.

One fixed ledger (built with the CLI at pinned times, ``LEDGER_NOW`` moving forward from
the ``init`` on) gives ``ledger verify --json`` (whole log, against a kept checkpoint, and
``--since`` it), ``ledger audit`` in json, text and html (full and ``--verify since``) and
the Evidence Pack of its right-to-be-forgotten batch (the DSSE statement's predicate and
subject names, and the pack's HTML report). Each is compared byte for byte, after
normalisation, with ``tests/vectors/pinned/<name>``.

What is not deterministic, and why normalising it keeps the test sharp:

* ``init`` generates the ledger id (uuid4) and the root, writer, operator and log keys;
  requests and batches get random UUIDs; data keys and AEAD nonces are random, so every
  ciphertext, stored-state hash, event signature, Merkle leaf and root differs per run.
  ``LedgerApp.initialize`` takes no seed (tests/vectors/make_vectors.py fixes seeds only
  for the envelope format), and faking ``os.urandom`` would pin the fake, not the code.
* The ids are made deterministic: :func:`build` replaces ``uuid.uuid4`` (the one source
  of the ledger id, request and batch ids; atom, subject and artifact ids derive from
  them) by a seeded generator, so every UUID, and every order that sorts by one, is
  pinned as it is. Keys and AEAD randomness are not: :func:`normalise` replaces every
  other hex or base64 run of 16 characters or more (key ids, digests, roots, signatures,
  proofs) with ``<blob-N>``, and a shortened one (``3f2a9c…``) with ``<short-N>``, N
  counting first appearances in that one output. Equal values get equal names, so which
  key signed what is still pinned, and everything else (ids, counts, sizes, seqs,
  topics, timestamps, field names, order, wording, markup) must be byte-identical. The
  temporary folder and a PostgreSQL schema name become ``<tmp>`` and ``<schema>``.

The expectations are kept per backend (``pinned/sqlite``, ``pinned/postgres``): the raw-file
scans of an erasure's reach differ (PostgreSQL has no SQLite files to scan). Regenerate
(then review the diff; it changes only when an output is meant to):

    LEDGER_PINNED_REGENERATE=1 .venv/bin/python -m pytest -q tests/test_pinned_outputs.py
"""

from __future__ import annotations

import json
import os
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.application import LedgerApp

from .conftest import BACKENDS, PG_URL, drop_schema, run_cli

GOLDEN = Path(__file__).parent / "vectors" / "pinned"
REGENERATE = os.environ.get("LEDGER_PINNED_REGENERATE") == "1"
T = "2026-03-0{day}T{hour:02d}:00:00Z"

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# hex or (url-safe) base64, 16+ characters: key ids' hex part, digests, roots, signatures
SHORT_RE = re.compile(r"(?<![0-9a-f-])([0-9a-f]{6,15})\u2026")
BLOB_RE = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")


def normalise(text: str, tmp: Path, schema: str | None) -> str:
    text = text.replace(str(tmp), "<tmp>")
    if schema:
        text = text.replace(schema, "<schema>")
    uuids = UUID_RE.findall(text)  # seeded (see build): kept as they are
    text = UUID_RE.sub(lambda m: f"\x00{uuids.index(m.group(0))}\x00", text)
    names: dict[str, str] = {}

    def named(value: str, kind: str) -> str:
        if value not in names:
            n = sum(v.startswith(f"<{kind}-") for v in names.values()) + 1
            names[value] = f"<{kind}-{n}>"
        return names[value]

    def blob(m: re.Match[str]) -> str:
        value = m.group(0)
        if not re.search(r"[0-9]", value) and "_" not in value:
            return value  # a long word without a digit (prose, CSS): not an id, keep it
        return named(value, "blob")

    def short(m: re.Match[str]) -> str:  # "b3270d64…": a key id or digest shortened for people
        if any(u.startswith(m.group(1)) for u in uuids):
            return m.group(0)
        return named(m.group(1), "short") + "\u2026"

    text = SHORT_RE.sub(short, text)
    text = BLOB_RE.sub(blob, text)
    return re.sub("\x00([0-9]+)\x00", lambda m: uuids[int(m.group(1))], text)


def _ok(*args: str) -> tuple[str, str]:
    r = run_cli(*args)
    assert r.code == 0, (args, r.err)
    verdicts = [line for line in r.err.splitlines() if line.startswith(("OK:", "FAIL:", "WARN:"))]
    return r.out, "\n".join(verdicts) + "\n"


def build(tmp: Path, db: str | None, mp: pytest.MonkeyPatch) -> dict[str, str]:
    """The fixed ledger, and every pinned output taken from it (name -> text)."""
    home = tmp / "home"

    def at(day: int, hour: int = 10) -> None:
        mp.setenv("LEDGER_NOW", T.format(day=day, hour=hour))

    rng = random.Random(14)  # ids from uuid.uuid4(): the ledger's, requests', batches'
    mp.setattr(uuid, "uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4))
    at(1, 9)
    LedgerApp.initialize(home, db=db)
    h = ("--home", str(home))
    at(1)
    _ok(*h, "subject", "add", "alice", "--name", "Alice Example")
    _ok(*h, "subject", "add", "bob")
    _ok(*h, "artifact", "add", "--subject", "alice", "--kind", "chat", "--ref", "art1",
        "--title", "A chat", "--body", "we talked about tea")
    _ok(*h, "atom", "add", "--subject", "alice", "--ref", "a1", "--session", "s1",
        "--text", "alice drinks green tea every morning")
    _ok(*h, "atom", "add", "--subject", "alice", "--ref", "a2", "--derivation", "inferred",
        "--artifact", "art1", "--extractor", "test-model", "--text", "alice prefers tea",
        "--gist", "tea person", "--detail", "morning ritual=0.8")
    _ok(*h, "atom", "add", "--subject", "bob", "--ref", "b1", "--text", "bob plays chess")
    at(2)
    policy = tmp / "policy.json"
    policy.write_text(json.dumps({"memoryPolicy": {
        "enabled": True, "maxAtoms": 200,
        "rightToBeForgottenSla": {"acknowledgmentHours": 24, "completionHours": 48},
        "auditPolicy": {"logCreation": True, "logRetrieval": True, "logRedaction": True,
                        "logRehearsal": True}}}))
    _ok(*h, "policy", "set", str(policy))
    _ok(*h, "atom", "correct", "a1", "--text", "alice drinks green tea on weekdays")
    _ok(*h, "atom", "rehearse", "b1")
    at(3)
    kept = tmp / "kept.checkpoint"
    _ok(*h, "checkpoint", "--out", str(kept))
    _ok(*h, "atom", "add", "--subject", "bob", "--ref", "b2", "--text", "bob owns a bike")
    at(4)
    erased = json.loads(_ok(*h, "redact-user", "alice", "--reason", "GDPR Art. 17",
                            "--operator", "operator", "--json")[0])
    at(5)
    _ok(*h, "checkpoint")
    outputs: dict[str, str] = {}
    for name, args in {
        "verify.json": ("verify", "--json"),
        "verify-checkpoint.json": ("verify", "--json", "--checkpoint", str(kept)),
        "verify-since.json": ("verify", "--json", "--since", str(kept)),
        "audit.json": ("audit", "--format", "json"),
        "audit.txt": ("audit", "--format", "text"),
        "audit.html": ("audit", "--format", "html"),
        "audit-since.json": ("audit", "--format", "json", "--verify", "since",
                             "--from", "2026-03-04"),
    }.items():
        out, verdict = _ok(*h, *args)
        outputs[name] = out
        outputs[f"{name}.verdict"] = verdict
    pack = tmp / "pack"
    outputs["evidence-pack.json"] = _ok(*h, "evidence-pack", erased["batch_id"],
                                        "--out", str(pack), "--json")[0]
    statement = json.loads(_payload(pack))
    outputs["pack-predicate.json"] = json.dumps(statement["predicate"], indent=2,
                                                sort_keys=True) + "\n"
    outputs["pack-subjects.txt"] = "".join(f"{s['name']}\n" for s in statement["subject"])
    outputs["pack-report.html"] = (pack / "report.html").read_text(encoding="utf-8")
    if db is not None:
        outputs["pack-predicate.json"] = _as_on_the_reference_server(
            outputs["pack-predicate.json"], home)
    return outputs


REFERENCE_PG = "postgresql://postgres@127.0.0.1:5432/test"
"""The server the PostgreSQL outputs were pinned against (the default LEDGER_TEST_PG)."""


def _as_on_the_reference_server(predicate: str, home: Path) -> str:
    """The erasure's raw file scan counts the bytes of the home's files, and its config
    names the server (LEDGER_TEST_PG, or a throwaway one on another port): the scanned
    size as it is with :data:`REFERENCE_PG`, so that only the server's address is taken
    out and any other change of size still fails."""
    named = sum(p.read_bytes().count(PG_URL.encode()) for p in home.rglob("*") if p.is_file())
    delta = named * (len(PG_URL.encode()) - len(REFERENCE_PG.encode()))
    return re.sub(r'("raw_scan": \{[^{}]*?"bytes": )(\d+)',
                  lambda m: f"{m.group(1)}{int(m.group(2)) - delta}", predicate, count=1)


def _payload(pack: Path) -> str:
    import base64

    dsse = json.loads((pack / "statement.dsse.json").read_text(encoding="utf-8"))
    return base64.b64decode(dsse["payload"]).decode("utf-8")


@pytest.fixture(scope="module", params=BACKENDS)
def pinned(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("pinned")
    schema = f"t_{uuid.uuid4().hex[:12]}" if request.param == "postgres" else None
    db = f"{PG_URL}?schema={schema}" if schema else None
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LEDGER_HOME", raising=False)
        try:
            raw = build(tmp, db, mp)
        finally:
            if schema is not None:
                drop_schema(schema)
    yield str(request.param), {name: normalise(text, tmp, schema) for name, text in raw.items()}


NAMES = [f"{n}{v}" for n in ("verify.json", "verify-checkpoint.json", "verify-since.json",
                              "audit.json", "audit.txt", "audit.html", "audit-since.json")
         for v in ("", ".verdict")] + ["evidence-pack.json", "pack-predicate.json",
                                       "pack-subjects.txt", "pack-report.html"]


@pytest.mark.parametrize("name", NAMES)
def test_output_is_byte_identical_to_the_pinned_one(pinned: tuple[str, dict[str, str]],
                                                    name: str) -> None:
    backend, outputs = pinned
    assert set(outputs) == set(NAMES)
    path = GOLDEN / backend / name
    if REGENERATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(outputs[name], encoding="utf-8")
    assert outputs[name] == path.read_text(encoding="utf-8"), (
        f"{name} changed; if that is intended, regenerate (see this module's docstring) "
        "and review the diff")


def test_normalise_keeps_equal_values_equal_and_fails_on_a_changed_byte(tmp_path: Path) -> None:
    a = '{"kid": "ed25519:00112233445566778899aabbccddeeff", "again": ' \
        '"ed25519:00112233445566778899aabbccddeeff", "size": 12}'
    assert normalise(a, tmp_path, None) == '{"kid": "ed25519:<blob-1>", "again": ' \
                                            '"ed25519:<blob-1>", "size": 12}'
    assert normalise(a.replace("12}", "13}"), tmp_path, None) != normalise(a, tmp_path, None)
    b = a.replace('"again": "ed25519:0011', '"again": "ed25519:ff11')
    assert normalise(b, tmp_path, None) != normalise(a, tmp_path, None)
    ids = "6c1b6d1e-5f0e-4a57-9f43-2f0d8a7c3b10/2 6c1b6d1e… 00112233445566778899aabbccddeeff"
    assert normalise(ids, tmp_path, None) == ids.replace("001122", "<blob-1>").replace(
        "33445566778899aabbccddeeff", "")
