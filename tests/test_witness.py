"""The witness: cosignature bytes (checked against the spec text and C2SP examples), the
tlog-witness wire format, policies, and attacks against a running witness on loopback."""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import struct
import threading
from pathlib import Path

import nacl.signing
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.checkpoint import parse_body, parse_note
from ledger.witness.cosign import (
    CosignatureError,
    WitnessKey,
    check_cosignatures,
    cosign,
    parse_witness_vkey,
    split_cosignature,
    witness_vkey,
)
from ledger.witness.policy import PolicyError, parse_policy
from ledger.witness.wire import (
    AddCheckpoint,
    TlogProof,
    WireError,
    parse_add_checkpoint,
    parse_cosignature_lines,
    parse_tlog_proof,
)
from tests.conftest import snapshot
from tests.witness_support import MemoryLog, WitnessProcess
from witness.state import Witness, init_home

# ------------------------------------------------------------------ examples from the specs
# c2sp.org/tlog-witness, "add-checkpoint": the example request and response bodies (CC BY 4.0).
SPEC_REQUEST = (
    "old 20852014\n"
    "PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n"
    "jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n"
    "5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n"
    "/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n"
    "\n"
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/"
    "Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "\u2014 example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+"
    "49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n").encode()
SPEC_RESPONSE = (
    "\u2014 witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSv"
    "VjyQLrdk3DXDqI5G2HgLatVs0pWh6Up69HVOw==\n"
    "\u2014 witness.example/w1 I7rEps0pvK2UqkS2gSpVUDhrhVtQV9lgF6pRrWAvjJHjyWpW7VcE3SiOlVlbQNt64v"
    "WhO+DlkL0+UfzuOBMh9ChdMkP1vi/lCAsmlw==\n"
    "\u2014 witness.example/w2 AWui8Sk55XjYLOijihBjhqEH6nS1ndDymE0a+6idX7pLcnoB+dhnz0854aLZgrrKbY"
    "KA7nC3HNJhm/kWl7oJlqU3rXXvpysAdyP3wQ==\n").encode()
# c2sp.org/tlog-cosignature: the example cosigned checkpoint and the message it signs.
SPEC_COSIGNED = (
    "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
    "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/"
    "Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "\u2014 witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrD"
    "JsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n")
SPEC_MESSAGE = (b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\n"
                b"CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
# transparency-dev/formats note/note_cosigv1_test.go (Apache-2.0): a native cosignature/v1
# vkey, and a cosignature whose timestamp is 1727964367.
TD_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
TD_SIG = ("ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOwo"
          "rDcFiEBYJXORmnFBOBA==")


# ------------------------------------------------------------------ independent re-implementation
def spec_key_id(name: str, public_key: bytes) -> bytes:
    """tlog-cosignature: SHA-256(<name> || "\\n" || 0x04 || 32-byte key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + b"\x04" + public_key).digest()[:4]


def spec_verify(note: str, name: str, public_key: bytes) -> int:
    """Verify a cosignature line from the spec text alone (pyca/cryptography, not PyNaCl):
    the line is '— <name> base64(keyid || u64 BE timestamp || sig)', the message two
    newline-terminated lines then the note body. Returns the timestamp."""
    body, _, sigs = note.rpartition("\n\n")
    body += "\n"
    for line in sigs.splitlines():
        prefix = "\u2014 " + name + " "
        if not line.startswith(prefix):
            continue
        raw = base64.b64decode(line[len(prefix):])
        if raw[:4] != spec_key_id(name, public_key):
            continue
        assert len(raw) == 4 + 8 + 64
        (ts,) = struct.unpack(">Q", raw[4:12])
        message = b"cosignature/v1\n" + b"time " + str(ts).encode() + b"\n" + body.encode()
        Ed25519PublicKey.from_public_bytes(public_key).verify(raw[12:], message)
        return int(ts)
    raise AssertionError("no cosignature line of that key")


def test_cosignature_bytes_match_the_spec_construction() -> None:
    log = MemoryLog()
    log.grow(5)
    note = log.note()
    wkey = nacl.signing.SigningKey(b"W" * 32)
    body, _ = parse_note(note)
    cos = cosign(body, "witness.example/w1", wkey, 1679315147)
    cosigned = note + cos.line()
    pub = bytes(wkey.verify_key)
    assert spec_verify(cosigned, "witness.example/w1", pub) == 1679315147
    # The exact bytes: key id, big-endian timestamp, Ed25519 over the spec's message.
    raw = base64.b64decode(cos.line().split(" ")[2])
    message = b"cosignature/v1\ntime 1679315147\n" + body.encode()
    assert raw == spec_key_id("witness.example/w1", pub) + struct.pack(">Q", 1679315147) + \
        bytes(wkey.sign(message).signature)
    # A cosignature is not a log signature: a type-0x01 key id never matches it.
    with pytest.raises(InvalidSignature):
        Ed25519PublicKey.from_public_bytes(pub).verify(raw[12:], body.encode())


def test_extension_lines_are_cosigned() -> None:
    wkey = nacl.signing.SigningKey(b"W" * 32)
    body = "example.test/log\n3\n" + base64.b64encode(b"\x01" * 32).decode() + "\nExtendo\n"
    cos = cosign(body, "w", wkey, 7)
    key = WitnessKey("w", bytes(wkey.verify_key))
    fake_note = body + "\n" + cos.line()
    assert check_cosignatures(fake_note, [key]).valid[key.vkey].timestamp == 7
    with pytest.raises(CosignatureError, match="does not verify"):
        check_cosignatures(fake_note.replace("Extendo", "Extendx"), [key])


def test_spec_example_cosignature_line_parses_to_its_message() -> None:
    """The example in tlog-cosignature: its timestamp is the one of the example message."""
    body, sigs = parse_note(SPEC_COSIGNED)
    assert parse_body(body).size == 20852163
    witness_line = sigs[1]
    assert witness_line.key_name == "witness.example.com/w1"
    ts, raw = split_cosignature(witness_line)
    assert ts == 1679315147 and len(raw) == 64
    from ledger.witness.cosign import signed_message

    assert signed_message(body, ts) == SPEC_MESSAGE


def test_transparency_dev_vectors() -> None:
    key = parse_witness_vkey(TD_VKEY)
    assert key.name == "remora.n621.de" and key.key_id.hex() == "da77ade7"
    assert witness_vkey(key.name, key.public_key) == TD_VKEY
    from ledger.checkpoint import NoteSignature

    raw = base64.b64decode(TD_SIG)
    ts, sig = split_cosignature(NoteSignature("x", raw[:4], raw[4:]))
    assert ts == 1727964367 and len(sig) == 64


@pytest.mark.parametrize("vkey, problem", [
    ("remora.n621.de+da77ade8+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2", "does not match"),
    ("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW", "log key"),
    ("a+b", "not <name>"),
])
def test_witness_vkey_rejected(vkey: str, problem: str) -> None:
    with pytest.raises(CosignatureError, match=problem):
        parse_witness_vkey(vkey)


def test_wire_format_matches_spec_examples_byte_for_byte() -> None:
    req = parse_add_checkpoint(SPEC_REQUEST)
    assert req.old_size == 20852014 and len(req.proof) == 4
    assert req.note.startswith("example.com/behind-the-sofa\n20852163\n")
    assert AddCheckpoint(req.old_size, req.proof, req.note).body() == SPEC_REQUEST
    lines = parse_cosignature_lines(SPEC_RESPONSE)
    assert len(lines) == 3 and "".join(lines).encode() == SPEC_RESPONSE
    # The witness answers in that form: one signature line, ending in LF.
    log = MemoryLog()
    log.grow(3)
    body, _ = parse_note(log.note())
    line = cosign(body, "witness.example/w1", nacl.signing.SigningKey(b"W" * 32), 1).line()
    assert parse_cosignature_lines(line.encode()) == [line]


@pytest.mark.parametrize("body, problem", [
    (b"old 01\n\nx", "leading zeros"),
    (b"old 5\nnot-base64\n\nx", "proof line 1"),
    (b"new 5\n\nx", "first line"),
    (b"old 5\n", "no empty line"),
    (b"old 1\n" + b"".join(base64.b64encode(bytes([i]) * 32) + b"\n" for i in range(64)) +
     b"\nx", "limit 63"),
])
def test_malformed_requests_rejected(body: bytes, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        parse_add_checkpoint(body)


def test_a_proof_with_old_size_0_is_well_formed() -> None:
    """tlog-witness answers it with 422 (after the origin, signature and size checks), so
    the parser accepts it and the witness decides."""
    req = parse_add_checkpoint(b"old 0\n" + base64.b64encode(b"a" * 32) + b"\n\nx")
    assert req.old_size == 0 and req.proof == (b"a" * 32,)


def test_tlog_proof_round_trip() -> None:
    log = MemoryLog()
    log.grow(9)
    proof = TlogProof(4, tuple(log.tree.inclusion_proof(4, 9)), log.note(), extra=b"e1")
    text = proof.text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ZTE=\nindex 4\n")
    assert parse_tlog_proof(text) == proof


def _keys(n: int) -> list[nacl.signing.SigningKey]:
    return [nacl.signing.SigningKey(bytes([65 + i]) * 32) for i in range(n)]


def test_policy_groups_and_quorum() -> None:
    log = MemoryLog()
    ks = _keys(6)
    v = [witness_vkey(f"w{i}.example", bytes(k.verify_key)) for i, k in enumerate(ks)]
    text = (f"log {log.vkey}\n\n# X\nwitness X1 {v[0]}\nwitness X2 {v[1]}\nwitness X3 {v[2]}\n"
            f"group X-witnesses 2 X1 X2 X3\n\twitness Y1 {v[3]} https://y1.example/\n"
            f"witness Y2 {v[4]}\nwitness Y3 {v[5]}\ngroup Y-witnesses any Y1 Y2 Y3\n"
            "group X-and-Y all X-witnesses Y-witnesses\nquorum X-and-Y\n")
    p = parse_policy(text.encode())
    assert p.logs[0][0] == log.origin
    assert p.satisfied({"X1", "X3", "Y2"})
    assert not p.satisfied({"X1", "Y1", "Y2"})
    assert not p.satisfied({"X1", "X2"})
    assert parse_policy(b"quorum none\n").satisfied(set())


@pytest.mark.parametrize("text, problem", [
    ("witness A {v}\nquorum B\n", "not defined"),
    ("witness A {v}\nwitness B {v}\nquorum A\n", "duplicate"),
    ("witness A {v}\ngroup G 2 A\nquorum G\n", "threshold"),
    ("witness A {v}\ngroup G any A\ngroup H any A\nquorum H\n", "already a member"),
    ("witness A {v}\n", "no quorum"),
    ("quorum none\nquorum none\n", "second quorum"),
    ("witness A {v}\x01\nquorum A\n", "control character"),
])
def test_policy_rejected(text: str, problem: str) -> None:
    v = witness_vkey("a.example", bytes(_keys(1)[0].verify_key))
    with pytest.raises(PolicyError, match=problem):
        parse_policy(text.format(v=v).encode())


# ------------------------------------------------------------------ the witness, in process
@pytest.fixture
def witness_home(tmp_path: Path) -> Path:
    home = tmp_path / "witness"
    init_home(home, "witness.test/w1")
    return home


def _cosig_of(witness: Witness, note: str, answer_body: bytes) -> int:
    key = parse_witness_vkey(witness.vkey)
    return check_cosignatures(note + answer_body.decode(), [key]).valid[key.vkey].timestamp


def test_concurrent_requests_never_roll_back(witness_home: Path) -> None:
    """The race in tlog-witness: N and N+K checked at once must not end at N."""
    log = MemoryLog()
    log.grow(10)
    w = Witness(witness_home)
    w.add_log(log.origin, log.vkey)
    assert w.add_checkpoint(log.request(0, 4)).status == 200
    answers: list[int] = []

    def submit(size: int) -> None:
        answers.append(w.add_checkpoint(log.request(4, size)).status)

    threads = [threading.Thread(target=submit, args=(s,)) for s in (6, 10, 8, 10, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latest = w.latest(log.origin)
    assert latest is not None and latest[0] in (6, 8, 10)
    assert answers.count(200) >= 1
    sizes = [s for _, s, _, _ in w.cosigned()]
    assert sizes == sorted(sizes)  # every cosignature extends the previous one
    w.close()


# ------------------------------------------------------------------ attacks, over loopback
@pytest.fixture
def running(witness_home: Path):  # type: ignore[no-untyped-def]
    log = MemoryLog()
    w = Witness(witness_home)
    w.add_log(log.origin, log.vkey)
    w.close()
    proc = WitnessProcess(witness_home)
    yield proc, log
    proc.stop()


SHM = "witness.db-shm"


def _state(home: Path) -> tuple[object, object]:
    w = Witness(home)
    try:
        return w.latest("example.test/log"), w.cosigned()
    finally:
        w.close()


def _start(proc: WitnessProcess, log: MemoryLog, size: int) -> str:
    log.grow(size - log.size)
    resp = proc.post(log.request(0))
    assert resp.status_code == 200, resp.text
    return log.note()


def test_rollback_refused(running) -> None:  # type: ignore[no-untyped-def]
    proc, log = running
    _start(proc, log, 8)
    before = _state(proc.home)
    resp = proc.post(log.request(8, 5))  # old size 8, a checkpoint of size 5
    assert resp.status_code == 400 and "larger than the checkpoint" in resp.text
    resp = proc.post(log.request(3, 5))  # pretending the witness was at 3
    assert resp.status_code == 409 and resp.headers["content-type"] == "text/x.tlog.size"
    assert resp.content == b"8\n"
    assert _state(proc.home) == before


def test_replayed_old_checkpoint_refused(running) -> None:  # type: ignore[no-untyped-def]
    proc, log = running
    old_note = _start(proc, log, 4)
    log.grow(4)
    assert proc.post(log.request(4)).status_code == 200
    before = _state(proc.home)
    for old in (0, 4, 8):
        body = AddCheckpoint(old, (), old_note).body()
        assert proc.post(body).status_code in (400, 409)
    assert _state(proc.home) == before


def test_fork_same_size_other_root_refused_and_kept(running) -> None:  # type: ignore[no-untyped-def]
    proc, log = running
    _start(proc, log, 6)
    fork = MemoryLog()
    fork.grow(6, tag=b"fork")
    before = _state(proc.home)
    resp = proc.post(fork.request(6, 6))
    assert resp.status_code == 422 and resp.text == (
        "fork: a checkpoint of size 6 with another root was cosigned before; both are kept "
        "as evidence\n")
    resp = proc.post(fork.request(0, 6))  # from 0: the size answer, but kept as evidence too
    assert resp.status_code == 409 and resp.content == b"6\n"
    assert _state(proc.home) == before
    w = Witness(proc.home)
    kinds = [(e["kind"], e["size"], e["stored_size"]) for e in w.evidence()]
    forks = [e for e in w.evidence() if e["kind"] == "fork"]
    w.close()
    assert kinds == [("fork", 6, 6), ("fork", 6, 6)]
    assert forks[0]["note"] == fork.note() and forks[0]["stored_note"] == log.note()
    # The genuine checkpoint of that size is still cosigned (idempotent), the fork never.
    assert proc.post(log.request(6, 6)).status_code == 200


def test_bad_consistency_proof_refused(running) -> None:  # type: ignore[no-untyped-def]
    proc, log = running
    _start(proc, log, 5)
    fork = MemoryLog()
    fork.grow(9, tag=b"other")  # a tree of 9 that does not extend the cosigned 5
    before = _state(proc.home)
    bad = AddCheckpoint(5, tuple(fork.tree.consistency_proof(5, 9)), fork.note()).body()
    resp = proc.post(bad)
    assert resp.status_code == 422, resp.text
    log.grow(4)
    tampered = list(log.tree.consistency_proof(5, 9))
    tampered[0] = bytes(32)
    resp = proc.post(AddCheckpoint(5, tuple(tampered), log.note()).body())
    assert resp.status_code == 422
    assert _state(proc.home) == before
    assert proc.post(log.request(5)).status_code == 200


def test_unknown_origin_and_bad_signature_refused(running) -> None:  # type: ignore[no-untyped-def]
    proc, log = running
    _start(proc, log, 3)
    files = snapshot(proc.home)
    stranger = MemoryLog(origin="other.test/log")
    stranger.grow(3)
    assert proc.post(stranger.request(0)).status_code == 404
    forged = log.note(key=nacl.signing.SigningKey(b"F" * 32))  # same name, another key
    assert proc.post(AddCheckpoint(3, (), forged).body()).status_code == 403
    assert proc.post(b"old 3\n\nnot a checkpoint").status_code == 400
    assert proc.post(b"x" * (2 << 20)).status_code == 413
    # Nothing written. (witness.db-shm is SQLite's shared index of the WAL, not data: the
    # unknown origin makes the witness re-read its logs, for one added while it serves.)
    assert {k: v for k, v in snapshot(proc.home).items() if k not in ("port", SHM)} == \
        {k: v for k, v in files.items() if k not in ("port", SHM)}


# ------------------------------------------------------------------ tlog-witness to the letter
def _signature_line(note: str) -> str:
    """The first signature line of a signed note."""
    return note.split("\n\n", 1)[1].splitlines(keepends=True)[0]


def test_every_answer_of_tlog_witness_over_http(witness_home: Path) -> None:
    """Each status code c2sp.org/tlog-witness defines for add-checkpoint and for the
    monitoring GET, with the body and Content-Type it prescribes, from ``ledger witness
    serve`` on loopback under a prefix (the submission and the monitoring prefix)."""
    from ledger.checkpoint import Checkpoint, key_id, sign_checkpoint
    from ledger.merkle import EMPTY_ROOT

    log = MemoryLog()
    fresh = MemoryLog(origin="example.test/fresh", seed=b"N" * 32)  # never cosigned
    w = Witness(witness_home)
    assert w.add_log(None, log.vkey) == log.origin  # the vkey names the origin
    w.close()
    wkey = parse_witness_vkey((witness_home / "witness.vkey").read_text())
    proc = WitnessProcess(witness_home, prefix="/w")
    try:
        # GET: 404 while the witness has cosigned nothing of that log.
        r = proc.get_checkpoint(log.origin)
        assert (r.status_code, r.text) == (404, "this witness has cosigned no checkpoint of "
                                                "that log\n")
        # 200: one or more note signature lines ("— ", LF), cosignatures by the
        # witness key over this checkpoint, with a timestamp that is not zero. A signature
        # by a key the witness does not know is ignored, not refused.
        log.grow(5)
        stranger = sign_checkpoint(Checkpoint(log.origin, 5, log.tree.root(5)),
                                   "someone.else/log", nacl.signing.SigningKey(b"S" * 32))
        resp = proc.post(AddCheckpoint(0, (), log.note() + _signature_line(stranger)).body())
        assert resp.status_code == 200, resp.text
        lines = parse_cosignature_lines(resp.content)
        assert len(lines) == 1 and lines[0].startswith("— witness.test/w1 ")
        cosig = check_cosignatures(log.note() + resp.text, [wkey]).valid[wkey.vkey]
        assert cosig.timestamp > 0 and cosig.line() == resp.text
        # GET <prefix>/<lowercase hex SHA-256 of the origin>/checkpoint: the checkpoint with
        # the log's signature the witness verified and the cosignature it returned.
        r = proc.get_checkpoint(log.origin)
        assert r.status_code == 200 and r.text == log.note() + resp.text
        assert "someone.else" not in r.text
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        import httpx

        for path in ("0" * 64, hashlib.sha256(log.origin.encode()).hexdigest().upper(),
                     "example.test%2Flog"):
            r = httpx.get(f"{proc.url}/{path}/checkpoint", timeout=10)
            assert r.status_code == 404, path
        before = _state(proc.home)
        # 400: the old size is larger than the checkpoint's.
        r = proc.post(log.request(6, 5))
        assert (r.status_code, r.text) == (400, "old size 6 is larger than the checkpoint "
                                                "size 5\n")
        # 403: no signature by a trusted key (the log's name with another key, or another
        # name), or a line of the trusted key that does not verify over this checkpoint.
        for note in (log.note(key=nacl.signing.SigningKey(b"F" * 32)), stranger):
            r = proc.post(AddCheckpoint(5, (), note).body())
            assert (r.status_code, r.text) == (403, "no signature by a trusted key of this "
                                                    "log\n")
        r = proc.post(AddCheckpoint(5, (), log.note().split("\n\n")[0] + "\n\n"
                                    + _signature_line(log.note(size=3))).body())
        label = f"{log.origin}+{key_id(log.origin, bytes(log.key.verify_key)).hex()}"
        assert (r.status_code, r.text) == (403, (
            f"a signature line of a trusted key does not verify: Ed25519 signature by {label} "
            f"does not verify over the {len(log.note().split(chr(10) * 2)[0]) + 1}-byte "
            "text\n"))
        # 404: an origin the witness does not follow.
        stray = MemoryLog(origin="other.test/log")
        stray.grow(3)
        r = proc.post(stray.request(0))
        assert (r.status_code, r.text) == (404, "unknown log origin\n")
        # 409: the old size is not the size last cosigned, whichever side it errs on; the
        # body is that size in decimal and LF, with Content-Type text/x.tlog.size exactly.
        log.grow(3)
        for old in (0, 3, 6):
            r = proc.post(log.request(old))
            assert r.status_code == 409, (old, r.text)
            assert r.headers["content-type"] == "text/x.tlog.size"
            assert r.content == b"5\n"
        # 422: a consistency proof that does not verify ...
        bad = list(log.tree.consistency_proof(5, 8))
        bad[0] = bytes(32)
        r = proc.post(AddCheckpoint(5, tuple(bad), log.note()).body())
        assert r.status_code == 422 and r.text.startswith(
            "the consistency proof from size 5 does not verify: ")
        # ... a checkpoint of the size already cosigned with another root (a fork) ...
        fork = MemoryLog()
        fork.grow(5, tag=b"fork")
        r = proc.post(fork.request(5, 5))
        assert (r.status_code, r.text) == (422, "fork: a checkpoint of size 5 with another "
                                                "root was cosigned before; both are kept as "
                                                "evidence\n")
        assert _state(proc.home) == before
        # (a log added while the witness serves is followed without a restart)
        w = Witness(witness_home)
        w.add_log(fresh.origin, fresh.vkey)
        w.close()
        # ... a proof sent with old size 0 ...
        fresh.grow(4)
        r = proc.post(AddCheckpoint(0, tuple(fresh.tree.consistency_proof(2, 4)),
                                    fresh.note()).body())
        assert (r.status_code, r.text) == (422, "the consistency proof must be empty when "
                                                "the old size is 0 (1 line sent)\n")
        # ... and a checkpoint of size 0 whose root is not the empty tree's.
        empty = sign_checkpoint(Checkpoint(fresh.origin, 0, b"\x01" * 32), fresh.origin,
                                fresh.key)
        r = proc.post(AddCheckpoint(0, (), empty).body())
        assert (r.status_code, r.text) == (422, "a checkpoint of size 0 must have the root "
                                                "of the empty tree (SHA-256 of the empty "
                                                "string)\n")
        assert proc.get_checkpoint(fresh.origin).status_code == 404
        good = sign_checkpoint(Checkpoint(fresh.origin, 0, EMPTY_ROOT), fresh.origin,
                               fresh.key)
        assert proc.post(AddCheckpoint(0, (), good).body()).status_code == 200
        # After the refusals the witness goes on from 5: 200, and the GET follows it.
        resp = proc.post(log.request(5))
        assert resp.status_code == 200
        assert proc.get_checkpoint(log.origin).text == log.note() + resp.text
    finally:
        proc.stop()
    w = Witness(witness_home)
    kinds = [(e["origin"], e["kind"], e["size"]) for e in w.evidence()]
    w.close()
    assert kinds == [(log.origin, "bad-consistency-proof", 8), (log.origin, "fork", 5),
                     (fresh.origin, "empty-tree-root", 0)]


def test_a_bad_line_of_a_trusted_key_is_refused_beside_a_good_one(witness_home: Path) -> None:
    """tlog-witness: 403 when a line's key name and ID match a trusted key but its signature
    fails, even when another trusted key's line verifies (a log with two keys)."""
    from ledger.checkpoint import vkey_string

    log = MemoryLog()
    log.grow(4)
    second = nacl.signing.SigningKey(b"M" * 32)
    w = Witness(witness_home)
    w.add_log(log.origin, log.vkey)
    w.add_log(log.origin, vkey_string(log.origin, bytes(second.verify_key)))
    other_size = log.note(size=3, key=second)  # a line of the second key, over another text
    answer = w.add_checkpoint(AddCheckpoint(0, (), log.note() + _signature_line(other_size)
                                            ).body())
    assert answer.status == 403 and answer.body.decode().startswith(
        "a signature line of a trusted key does not verify: Ed25519 signature by "
        f"{log.origin}+")
    assert w.latest(log.origin) is None
    both = log.note() + _signature_line(log.note(key=second))
    assert w.add_checkpoint(AddCheckpoint(0, (), both).body()).status == 200
    assert w.add_checkpoint(log.request(4)).status == 200  # either key's line alone does
    w.close()


def test_add_log_takes_the_origin_from_the_vkey(witness_home: Path) -> None:
    from ledger.errors import InputError
    from tests.conftest import run_cli

    log = MemoryLog()
    files = snapshot(witness_home)
    for origin in ("ORIGIN", "example.test/log2"):
        r = run_cli("witness", "add-log", origin, "--key", log.vkey, "--home",
                    str(witness_home))
        assert r.code == 2, r.err
        assert r.err == (f"error: origin '{origin}' is not the origin the key names "
                         "('example.test/log')\nhint: leave the origin out: the log's vkey "
                         "names it (`ledger witness add-log --key VKEY`); or ask the log for "
                         "its vkey again\n")
        assert snapshot(witness_home) == files
    w = Witness(witness_home)
    with pytest.raises(InputError, match="not the origin the key names"):
        w.add_log("ORIGIN", log.vkey)
    assert w.logs() == []
    w.close()
    r = run_cli("witness", "add-log", "--key", log.vkey, "--home", str(witness_home))
    assert (r.code, r.out, r.err) == (0, "example.test/log\n",
                                      "OK: witness follows example.test/log\n")
    r = run_cli("witness", "add-log", log.origin, "--key", log.vkey, "--home",
                str(witness_home), "--json")  # the same origin, said again: accepted
    assert r.code == 0 and json.loads(r.out) == {"origin": log.origin, "vkey": log.vkey}


def test_witness_killed_between_storing_and_answering_recovers(witness_home: Path) -> None:
    log = MemoryLog()
    w = Witness(witness_home)
    w.add_log(log.origin, log.vkey)
    w.close()
    wkey = parse_witness_vkey((witness_home / "witness.vkey").read_text())
    given: list[tuple[int, bytes]] = []  # every (size, root) the witness cosigned for us

    def collect(note: str, body: bytes) -> None:
        found = check_cosignatures(note + body.decode(), [wkey])
        assert wkey.vkey in found.valid
        cp = parse_body(found.body)
        given.append((cp.size, cp.root))

    proc = WitnessProcess(witness_home)
    log.grow(4)
    assert proc.post(log.request(0)).status_code == 200
    proc.stop()
    crashing = WitnessProcess(witness_home, env={"LEDGER_WITNESS_FAULT": "kill-after-store"})
    log.grow(3)
    import httpx

    with pytest.raises(httpx.HTTPError):
        crashing.post(log.request(4))
    assert crashing.proc.wait(10) == -signal.SIGKILL
    crashing.stop()
    proc = WitnessProcess(witness_home)
    try:
        # The stored state survived the kill: the witness is at 7, not 4.
        resp = proc.post(log.request(4))
        assert resp.status_code == 409 and resp.content == b"7\n"
        resp = proc.post(log.request(7))  # the client learns 7 and asks again: same tree
        assert resp.status_code == 200
        collect(log.note(), resp.content)
        fork = MemoryLog()
        fork.grow(7, tag=b"fork")
        assert proc.post(fork.request(7, 7)).status_code == 422
        assert proc.post(log.request(7, 5)).status_code == 400
        log.grow(2)
        resp = proc.post(log.request(7))
        assert resp.status_code == 200
        collect(log.note(), resp.content)
    finally:
        proc.stop()
    w = Witness(witness_home)
    history = w.cosigned()
    w.close()
    by_size: dict[int, set[bytes]] = {}
    for _, size, root, _ in history:
        by_size.setdefault(size, set()).add(root)
    assert all(len(roots) == 1 for roots in by_size.values())  # never two roots for a size
    assert [s for _, s, _, _ in history] == sorted(s for _, s, _, _ in history)
    assert [s for s, _ in given] == [7, 9] and (5, fork.tree.root(5)) not in given


def test_slow_body_times_out_and_logs_hold_no_content(witness_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A request body that never finishes gets 408; log lines carry no checkpoint text."""
    import socket
    import time

    from structlog.testing import capture_logs

    from tests.witness_support import InProcessWitness
    from witness import server

    monkeypatch.setattr(server, "BODY_TIMEOUT", 0.5)
    log = MemoryLog()
    log.grow(3)
    w = InProcessWitness(witness_home)
    w.follow(log.origin, log.vkey)
    try:
        port = int(w.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
                      b"old 0\n")
            start = time.monotonic()
            answer = s.recv(4096)
            assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 5
        body = log.request(0)
        with capture_logs() as logs:
            assert w.witness.add_checkpoint(body).status == 200
            fork = MemoryLog()
            fork.grow(3, tag=b"f")
            assert w.witness.add_checkpoint(fork.request(3, 3)).status == 422
        text = json.dumps(logs)
        root = log.note().split("\n")[2]
        assert logs and root not in text and log.origin not in text
        assert {e["event"] for e in logs} >= {"witness.cosigned", "witness.fork_detected"}
    finally:
        w.stop()


def test_witness_cli_init_add_log_logs(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    home = tmp_path / "w"
    r = run_cli("witness", "init", "--home", str(home), "--name", "dpo.example/witness",
                "--json")
    assert r.code == 0, r.err
    vkey = json.loads(r.out)["vkey"]
    assert parse_witness_vkey(vkey).name == "dpo.example/witness"
    assert (home / "witness.key").stat().st_mode & 0o777 == 0o600
    again = run_cli("witness", "init", "--home", str(home), "--name", "x")
    assert again.code == 2 and "already a witness home" in again.err
    bad = run_cli("witness", "init", "--home", str(tmp_path / "b"), "--name", "has space")
    assert bad.code == 2 and "--name" in bad.err and not (tmp_path / "b").exists()
    log = MemoryLog()
    files = snapshot(home)
    r = run_cli("witness", "add-log", log.origin, "--key", vkey, "--home", str(home))
    assert r.code == 2 and "--key" in r.err  # a witness key is not a log key
    assert snapshot(home) == files
    assert run_cli("witness", "add-log", log.origin, "--key", log.vkey, "--home",
                   str(home)).code == 0
    r = run_cli("witness", "logs", "--home", str(home), "--json")
    assert json.loads(r.out)["logs"] == [{"origin": log.origin, "vkey": log.vkey, "size": None}]
    r = run_cli("witness", "serve", "--home", str(home), "--listen", "nowhere")
    assert r.code == 2 and "HOST:PORT" in r.err
    r = run_cli("witness", "logs", "--home", str(tmp_path / "none"))
    assert r.code == 3 and "ledger witness init" in r.err
