"""A witness: its home, its key, the logs it follows and its durable per-origin state.

The home (``ledger witness init --home DIR --name NAME``) holds

    witness.toml   name, created_at
    witness.key    the Ed25519 seed, base64 (mode 0600)
    witness.vkey   the cosigner verifier key (type 0x04), to hand to the logs
    witness.db     SQLite: logs (origin -> log vkeys), latest (the checkpoint last cosigned
                   per origin), cosigned (every cosignature given), evidence (forks and
                   failed proofs, kept verbatim)

:meth:`Witness.add_checkpoint` implements tlog-witness ``add-checkpoint``
(docs/spec/witness.md, steps W1-W10) and :meth:`Witness.checkpoint` its monitoring
``GET <origin hash>/checkpoint``. Checking the old size against the stored one and
storing the new checkpoint happen in one ``BEGIN IMMEDIATE`` transaction, committed with
``synchronous=FULL`` before the answer is formed, so no crash or concurrent request can
make the witness cosign a smaller tree or a second root for one size.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import signal
import sqlite3
import threading
import time
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing
import structlog

from keys.files import write_file
from keys.keyring import read_seed_file, write_seed_file
from ledger.checkpoint import (
    SIGNATURE_PREFIX,
    Checkpoint,
    CheckpointError,
    NoteSignature,
    key_id,
    parse_body,
    parse_note,
    parse_vkey,
    verify_note,
)
from ledger.errors import ConflictError, EnvironmentProblem, InputError, VerificationFailed
from ledger.merkle import EMPTY_ROOT, verify_consistency
from ledger.text import plural
from ledger.witness.cosign import cosign, witness_vkey
from ledger.witness.wire import SIZE_CONTENT_TYPE, WireError, format_size, parse_add_checkpoint

log = structlog.get_logger("witness")

CONFIG = "witness.toml"
KEY = "witness.key"
VKEY = "witness.vkey"
DB = "witness.db"
NOTE_CONTENT_TYPE = "text/plain; charset=utf-8"
FAULT_ENV = "LEDGER_WITNESS_FAULT"
"""Fault injection for the crash tests only: ``kill-after-store`` SIGKILLs the process
right after the new state is committed and before the answer is sent."""
_ORIGIN_HASH = re.compile(r"[0-9a-f]{64}", re.ASCII)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (origin TEXT NOT NULL, vkey TEXT NOT NULL,
                                 added_at TEXT NOT NULL, PRIMARY KEY (origin, vkey));
CREATE TABLE IF NOT EXISTS latest (origin TEXT PRIMARY KEY, size INTEGER NOT NULL,
                                   root BLOB NOT NULL, note TEXT NOT NULL,
                                   cosigned_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cosigned (id INTEGER PRIMARY KEY, origin TEXT NOT NULL,
                                     size INTEGER NOT NULL, root BLOB NOT NULL,
                                     timestamp INTEGER NOT NULL, line TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evidence (id INTEGER PRIMARY KEY, origin TEXT NOT NULL,
                                     kind TEXT NOT NULL, received_at TEXT NOT NULL,
                                     stored_size INTEGER, stored_note TEXT,
                                     size INTEGER NOT NULL, note TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes

    @classmethod
    def text(cls, status: int, message: str) -> Answer:
        return cls(status, "text/plain; charset=utf-8", (message + "\n").encode())


def origin_hash(origin: str) -> str:
    """The name of a log in the monitoring URL: SHA-256 of its origin, lowercase hex."""
    return hashlib.sha256(origin.encode("utf-8")).hexdigest()


def _line(sig: NoteSignature) -> str:
    return f"{SIGNATURE_PREFIX}{sig.key_name} " \
           f"{base64.b64encode(sig.key_id + sig.signature).decode()}\n"


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def init_home(home: Path, name: str) -> str:
    """Create a witness home with a new key; returns the witness vkey."""
    try:
        witness_vkey(name, bytes(32))  # validates the name before anything is written
    except ValueError as e:
        raise InputError(f"--name: {e}", hint="use a schema-less URL such as "
                                              "dpo.example/witness") from e
    if (home / CONFIG).exists():
        raise ConflictError(f"{home} is already a witness home",
                            hint="use it, or choose another --home")
    home.mkdir(parents=True, exist_ok=True)
    key = nacl.signing.SigningKey.generate()
    write_seed_file(home / KEY, bytes(key))
    vkey = witness_vkey(name, bytes(key.verify_key))
    write_file(home / VKEY, vkey + "\n")  # 0644 whatever the umask (issue 20, item 8)
    conn = _connect(home / DB)
    conn.executescript(_SCHEMA)
    conn.close()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    (home / CONFIG).write_text(f'name = "{name}"\ncreated_at = "{created}"\n', encoding="utf-8")
    return vkey


class Witness:
    """One witness home, opened. Thread-safe; several processes may share the home."""

    def __init__(self, home: Path) -> None:
        try:
            doc = tomllib.loads((home / CONFIG).read_text(encoding="utf-8"))
            self.name = str(doc["name"])
            self.key = nacl.signing.SigningKey(read_seed_file(home / KEY))
        except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
            raise EnvironmentProblem(f"{home} is not a usable witness home: {e}",
                                     hint="create one with `ledger witness init --home DIR "
                                          "--name NAME`") from e
        self.home = home
        self.vkey = witness_vkey(self.name, bytes(self.key.verify_key))
        self._lock = threading.Lock()
        self._db = _connect(home / DB)
        self._db.executescript(_SCHEMA)
        self._keys: dict[str, list[tuple[str, bytes]]] = {}
        self._load_logs()

    def close(self) -> None:
        self._db.close()

    def _load_logs(self) -> None:
        keys: dict[str, list[tuple[str, bytes]]] = {}
        for origin, vkey in self._db.execute("SELECT origin, vkey FROM logs ORDER BY rowid"):
            keys.setdefault(origin, []).append(parse_vkey(vkey))
        self._keys = keys

    # ------------------------------------------------------------------ configuration
    def add_log(self, origin: str | None, vkey: str) -> str:
        """Follow the log whose checkpoints ``vkey`` (type 0x01) signs; returns its origin.

        The vkey's key name is the log's origin (tlog-policy: it MUST correspond to the
        origin line); an ``origin`` given that differs from it is refused, nothing written.
        """
        try:
            name, _pub = parse_vkey(vkey)
        except ValueError as e:
            raise InputError(f"--key: {e}", hint="give the log's verifier key as printed by "
                                                 "`ledger checkpoint --vkey`") from e
        if origin is not None and origin != name:
            raise InputError(
                f"origin {origin[:80]!r} is not the origin the key names ({name!r})",
                hint="leave the origin out: the log's vkey names it (`ledger witness add-log "
                     "--key VKEY`); or ask the log for its vkey again")
        origin = name
        if "\n" in origin or any(ord(c) < 0x20 for c in origin):
            raise InputError("the origin must be one non-empty line")
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO logs VALUES (?, ?, ?)",
                             (origin, vkey, datetime.now(UTC).isoformat(timespec="seconds")))
            self._load_logs()
        return origin

    def logs(self) -> list[dict[str, object]]:
        rows = self._db.execute(
            "SELECT l.origin, l.vkey, s.size FROM logs l LEFT JOIN latest s "
            "ON s.origin = l.origin ORDER BY l.origin").fetchall()
        return [{"origin": o, "vkey": v, "size": s} for o, v, s in rows]

    def latest(self, origin: str) -> tuple[int, bytes] | None:
        row = self._db.execute("SELECT size, root FROM latest WHERE origin = ?",
                               (origin,)).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def evidence(self) -> list[dict[str, object]]:
        rows = self._db.execute("SELECT origin, kind, received_at, stored_size, stored_note, "
                                "size, note FROM evidence ORDER BY id").fetchall()
        keys = ("origin", "kind", "received_at", "stored_size", "stored_note", "size", "note")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def cosigned(self) -> list[tuple[str, int, bytes, int]]:
        return [(o, int(s), bytes(r), int(t)) for o, s, r, t in self._db.execute(
            "SELECT origin, size, root, timestamp FROM cosigned ORDER BY id")]

    # ------------------------------------------------------------------ add-checkpoint
    def _log_keys(self, origin: str) -> list[tuple[str, bytes]]:
        keys = self._keys.get(origin)
        if keys is None:  # a log added (`ledger witness add-log`) while this one serves
            with self._lock:
                self._load_logs()
            keys = self._keys.get(origin)
        return keys or []

    def add_checkpoint(self, body: bytes) -> Answer:
        """Steps W1-W10 of docs/spec/witness.md; the answer to send."""
        # W1. Parse the request and the checkpoint it carries.
        try:
            req = parse_add_checkpoint(body)
            text, _sigs = parse_note(req.note)
            cp = parse_body(text)
        except (WireError, CheckpointError) as e:
            return Answer.text(400, f"malformed request: {e}")
        # W2. The origin must be one this witness follows.
        keys = self._log_keys(cp.origin)
        if not keys:
            return Answer.text(404, "unknown log origin")
        # W3. A trusted key of that log signed it, and no line of a trusted key fails.
        problem = self._signature_problem(req.note, keys)
        if problem is not None:
            return Answer.text(403, problem)
        # W4. The old size may not exceed the checkpoint's.
        if req.old_size > cp.size:
            return Answer.text(400, f"old size {req.old_size} is larger than the checkpoint "
                                    f"size {cp.size}")
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                answer = self._check_and_store(req.old_size, req.proof, req.note, text, cp)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if answer.status == 200 and os.environ.get(FAULT_ENV) == "kill-after-store":
            os.kill(os.getpid(), signal.SIGKILL)
        return answer

    @staticmethod
    def _signature_problem(note: str, keys: list[tuple[str, bytes]]) -> str | None:
        """None when a trusted key signed ``note`` and every line of a trusted key verifies
        (lines of other keys are ignored); otherwise why not."""
        signed = False
        for name, pub in keys:
            try:
                verify_note(note, name, pub)
                signed = True
            except CheckpointError as e:
                if e.step != 2:  # step 2: no line of this key; step 3: a line that fails
                    return f"a signature line of a trusted key does not verify: {e.detail}"
        return None if signed else "no signature by a trusted key of this log"

    def _evidence(self, kind: str, origin: str, stored: tuple[int, str] | None, size: int,
                  note: str) -> None:
        self._db.execute(
            "INSERT INTO evidence (origin, kind, received_at, stored_size, stored_note, size, "
            "note) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (origin, kind, datetime.now(UTC).isoformat(timespec="seconds"),
             stored[0] if stored else None, stored[1] if stored else None, size, note))

    def _refuse(self, status: int, message: str, evidence: tuple[str, Checkpoint, str,
                tuple[int, str] | None] | None = None) -> Answer:
        """Commit the transaction (with the evidence to keep, if any) and answer ``status``."""
        if evidence is not None:
            kind, cp, note, stored = evidence
            self._evidence(kind, cp.origin, stored, cp.size, note)
        self._db.execute("COMMIT")
        return Answer.text(status, message)

    def _check_and_store(self, old: int, proof: tuple[bytes, ...], note: str, text: str,
                         cp: Checkpoint) -> Answer:
        row = self._db.execute("SELECT size, root, note FROM latest WHERE origin = ?",
                               (cp.origin,)).fetchone()
        size, root, stored_note = (int(row[0]), bytes(row[1]), str(row[2])) if row else \
            (0, EMPTY_ROOT, "")
        stored = (size, stored_note) if row else None
        fork = row is not None and cp.size == size and cp.root != root
        if fork:  # a second checkpoint of a size already cosigned, with another root
            log.warning("witness.fork_detected", size=cp.size)
        # W5. The old size must be the size last cosigned (0 if never): 409 with that size.
        if old != size:
            if fork:  # kept whatever old size the client claimed
                self._evidence("fork", cp.origin, stored, cp.size, note)
            self._db.execute("COMMIT")
            return Answer(409, SIZE_CONTENT_TYPE, format_size(size))
        # W6. A checkpoint of size 0 has the root of the empty tree.
        if cp.size == 0 and cp.root != EMPTY_ROOT:
            return self._refuse(422, "a checkpoint of size 0 must have the root of the empty "
                                     "tree (SHA-256 of the empty string)",
                                ("empty-tree-root", cp, note, stored))
        # W7. From size 0 no proof is needed, and none may be sent.
        if old == 0 and proof:
            return self._refuse(422, f"the consistency proof must be empty when the old size "
                                     f"is 0 ({plural(len(proof), 'lines')} sent)")
        # W8. The size already cosigned, with another root: a fork.
        if fork:
            return self._refuse(422, f"fork: a checkpoint of size {size} with another root was "
                                     "cosigned before; both are kept as evidence",
                                ("fork", cp, note, stored))
        # W9. The consistency proof from the stored tree to the new one.
        try:
            verify_consistency(size, cp.size, root, cp.root, list(proof))
        except (VerificationFailed, ValueError) as e:
            log.warning("witness.consistency_failed", old_size=size, size=cp.size)
            return self._refuse(422, f"the consistency proof from size {size} does not "
                                     f"verify: {e}",
                                ("bad-consistency-proof", cp, note, stored))
        # W10. Cosign, store durably, then answer.
        cosig = cosign(text, self.name, self.key, int(time.time()))
        line = cosig.line()
        self._db.execute(
            "INSERT INTO latest VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO UPDATE SET "
            "size = excluded.size, root = excluded.root, note = excluded.note, "
            "cosigned_at = excluded.cosigned_at",
            (cp.origin, cp.size, cp.root, note, cosig.timestamp))
        self._db.execute("INSERT INTO cosigned (origin, size, root, timestamp, line) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (cp.origin, cp.size, cp.root, cosig.timestamp, line))
        self._db.execute("COMMIT")
        log.info("witness.cosigned", old_size=size, size=cp.size)
        return Answer(200, "text/plain; charset=utf-8", line.encode())

    # ------------------------------------------------------------------ monitoring
    def checkpoint(self, hashed_origin: str) -> Answer:
        """``GET <origin hash>/checkpoint``: the latest checkpoint cosigned for that log,
        with the signatures of the log's trusted keys that verify and this witness's
        cosignature returned for it; 404 if none was cosigned (or the log is unknown)."""
        if not _ORIGIN_HASH.fullmatch(hashed_origin):
            return Answer.text(404, "not the lowercase hex SHA-256 of a log origin")
        with self._lock:
            self._load_logs()
            logs = [(o, k) for o, k in self._keys.items() if origin_hash(o) == hashed_origin]
            row = None if not logs else self._db.execute(
                "SELECT l.note, c.line FROM latest l JOIN cosigned c ON c.origin = l.origin "
                "AND c.size = l.size AND c.root = l.root AND c.timestamp = l.cosigned_at "
                "WHERE l.origin = ? ORDER BY c.id DESC LIMIT 1", (logs[0][0],)).fetchone()
        if row is None:
            return Answer.text(404, "this witness has cosigned no checkpoint of that log")
        keys = logs[0][1]
        body, sigs = parse_note(str(row[0]))
        trusted = {(name, key_id(name, pub)): pub for name, pub in keys}
        lines = []
        for sig in sigs:
            pub = trusted.get((sig.key_name, sig.key_id))
            if pub is not None and self._signature_problem(
                    body + "\n" + _line(sig), [(sig.key_name, pub)]) is None:
                lines.append(_line(sig))
        note = body + "\n" + "".join(lines) + str(row[1])
        return Answer(200, NOTE_CONTENT_TYPE, note.encode())
