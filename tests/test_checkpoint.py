"""C2SP signed-note checkpoints: vectors, round trips and attacks named after what they try.

Vectors live in ``tests/vectors/c2sp_signed_note.json``.  The ``notes`` section holds the
published golang.org/x/mod/sumdb/note vectors (and byte-level mutations of them); the
``checkpoints`` section is generated from a fixed test seed by :func:`build_checkpoint_vectors`
and can be rewritten with ``PYTHONPATH=. python tests/test_checkpoint.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import string
import sys
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.checkpoint import (
    MAX_NOTE_BYTES,
    Checkpoint,
    CheckpointError,
    format_body,
    key_id,
    parse_body,
    parse_note,
    parse_vkey,
    sign_checkpoint,
    sign_note,
    verify_checkpoint,
    verify_note,
    vkey_string,
)
from ledger.merkle import EMPTY_ROOT, leaf_hash, root_from_leaves

VECTORS = Path(__file__).parent / "vectors" / "c2sp_signed_note.json"

TEST_SEED = hashlib.sha256(b"memory-ledger test vector: checkpoint log key").digest()
TEST_KEY = nacl.signing.SigningKey(TEST_SEED)
TEST_PUB = bytes(TEST_KEY.verify_key)
TEST_NAME = "memory-ledger.test/log"
OTHER_KEY = nacl.signing.SigningKey(hashlib.sha256(b"memory-ledger test vector: other").digest())

ROOT5 = root_from_leaves([leaf_hash(b"event-%d" % i) for i in range(5)])


def load_vectors() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return data


def note_of(vector: dict[str, Any]) -> str | bytes:
    if "note_base64" in vector:
        return base64.b64decode(vector["note_base64"])
    text: str = vector["note"]
    return text


def key_of(vectors: dict[str, Any], name: str) -> tuple[str, bytes]:
    return parse_vkey(vectors["keys"][name]["vkey"])


def build_checkpoint_vectors() -> list[dict[str, Any]]:
    """Checkpoint vectors from the fixed test key: deterministic Ed25519, so byte-stable."""
    cp = Checkpoint(TEST_NAME, 5, ROOT5)
    good = sign_checkpoint(cp, TEST_NAME, TEST_KEY)
    root_b64 = base64.b64encode(ROOT5).decode()
    short_root = base64.b64encode(ROOT5[:31]).decode()
    # Same 32 bytes, but the unused low bits of the last base64 digit set: non-canonical.
    alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"
    last = alphabet[alphabet.index(root_b64[-2]) | 1]
    loose_root = root_b64[:-2] + last + "="

    def signed(body: str) -> str:
        return sign_note(body, TEST_NAME, TEST_KEY)

    def cp_fields(c: Checkpoint) -> dict[str, Any]:
        return {"origin": c.origin, "size": c.size,
                "root_base64": base64.b64encode(c.root).decode(),
                "extensions": list(c.extensions)}

    ext = Checkpoint(TEST_NAME, 5, ROOT5, ("ext-one", "ext two \u00e9"))
    empty = Checkpoint(TEST_NAME, 0, EMPTY_ROOT)
    out: list[dict[str, Any]] = [
        {"name": "valid", "note": good, "verdict": "valid", "checkpoint": cp_fields(cp)},
        {"name": "valid-with-extensions", "note": sign_checkpoint(ext, TEST_NAME, TEST_KEY),
         "verdict": "valid", "checkpoint": cp_fields(ext)},
        {"name": "valid-empty-tree", "note": sign_checkpoint(empty, TEST_NAME, TEST_KEY),
         "verdict": "valid", "checkpoint": cp_fields(empty)},
        {"name": "tampered-size", "note": good.replace("\n5\n", "\n6\n", 1),
         "verdict": "invalid", "step": 3},
        {"name": "tampered-root", "note": good.replace(root_b64, root_b64[::-1], 1),
         "verdict": "invalid", "step": 3},
        {"name": "tampered-origin", "note": good.replace(TEST_NAME, "evil.example/log", 1),
         "verdict": "invalid", "step": 3},
        {"name": "other-log-key", "note": sign_checkpoint(cp, TEST_NAME, OTHER_KEY),
         "verdict": "invalid", "step": 2},
        {"name": "unexpected-origin", "note": good, "expected_origin": "other.example/log",
         "verdict": "invalid", "step": 5},
        {"name": "non-canonical-size", "note": signed(f"{TEST_NAME}\n05\n{root_b64}\n"),
         "verdict": "invalid", "step": 4},
        {"name": "size-over-int64", "note": signed(f"{TEST_NAME}\n{1 << 63}\n{root_b64}\n"),
         "verdict": "invalid", "step": 4},
        {"name": "root-31-bytes", "note": signed(f"{TEST_NAME}\n5\n{short_root}\n"),
         "verdict": "invalid", "step": 4},
        {"name": "root-non-canonical-base64", "note": signed(f"{TEST_NAME}\n5\n{loose_root}\n"),
         "verdict": "invalid", "step": 4},
        {"name": "missing-root-line", "note": signed(f"{TEST_NAME}\n5\n"),
         "verdict": "invalid", "step": 4},
        {"name": "empty-extension-line", "note": signed(f"{TEST_NAME}\n5\n{root_b64}\n\next\n"),
         "verdict": "invalid", "step": 4},
        {"name": "empty-origin", "note": signed(f"\n5\n{root_b64}\n"),
         "verdict": "invalid", "step": 4},
    ]
    return out


# --- published and generated vectors -------------------------------------------------------

_DATA = load_vectors()


@pytest.mark.parametrize("vector", _DATA["notes"], ids=[v["name"] for v in _DATA["notes"]])
def test_signed_note_vectors(vector: dict[str, Any]) -> None:
    name, pub = key_of(_DATA, vector["key"])
    if vector["verdict"] == "valid":
        assert verify_note(note_of(vector), name, pub) == vector["text"]
    else:
        assert vector["verdict"] == "invalid"
        with pytest.raises(CheckpointError, match=f"^checkpoint step {vector['step']} ") as e:
            verify_note(note_of(vector), name, pub)
        assert e.value.step == vector["step"]


@pytest.mark.parametrize("vector", _DATA["checkpoints"],
                         ids=[v["name"] for v in _DATA["checkpoints"]])
def test_checkpoint_vectors(vector: dict[str, Any]) -> None:
    name, pub = key_of(_DATA, "ledger-test")
    expected_origin = vector.get("expected_origin", TEST_NAME)
    if vector["verdict"] == "valid":
        cp = verify_checkpoint(vector["note"], name, pub, expected_origin=expected_origin)
        want = vector["checkpoint"]
        assert cp == Checkpoint(want["origin"], want["size"],
                                base64.b64decode(want["root_base64"]), tuple(want["extensions"]))
    else:
        with pytest.raises(CheckpointError, match=f"^checkpoint step {vector['step']} ") as e:
            verify_checkpoint(vector["note"], name, pub, expected_origin=expected_origin)
        assert e.value.step == vector["step"]


def test_checkpoint_vectors_regenerate_byte_for_byte() -> None:
    assert _DATA["keys"]["ledger-test"]["vkey"] == vkey_string(TEST_NAME, TEST_PUB)
    assert _DATA["checkpoints"] == build_checkpoint_vectors()


def test_signer_reproduces_published_go_note() -> None:
    """Ed25519 is deterministic: our signer must emit Go's note byte for byte."""
    peter = _DATA["keys"]["peter"]
    _, _, name, _, material = peter["skey"].split("+", 4)  # PRIVATE+KEY+name+id+key
    raw = base64.b64decode(material)
    assert name == "PeterNeumann" and raw[0] == 1 and len(raw) == 33
    signer = nacl.signing.SigningKey(raw[1:])
    published = _DATA["notes"][0]
    assert published["name"] == "peterneumann-published"
    assert sign_note(published["text"], "PeterNeumann", signer) == published["note"]
    assert vkey_string("PeterNeumann", bytes(signer.verify_key)) == peter["vkey"]


# --- verifier keys -------------------------------------------------------------------------


def test_vkey_round_trip_and_key_id() -> None:
    name, pub = parse_vkey("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    assert name == "PeterNeumann"
    assert key_id(name, pub).hex() == "c74f20a3"
    assert parse_vkey(vkey_string(TEST_NAME, TEST_PUB)) == (TEST_NAME, TEST_PUB)


def test_mangled_vkeys_rejected() -> None:
    """Port of Go's TestNewVerifier: every proper substring and every byte+1 is refused."""
    vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    b = vkey.encode()
    bad = [b[i:j] for i in range(len(b) + 1) for j in range(i + 1, len(b) + 1)
           if (i, j) != (0, len(b))]
    bad += [b[:i] + bytes([b[i] + 1]) + b[i + 1:] for i in range(len(b))]
    bad += [b"PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
            b"PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"]
    for candidate in bad:
        with pytest.raises(ValueError):
            parse_vkey(candidate.decode("latin-1"))


# --- round trips ---------------------------------------------------------------------------


def test_sign_then_verify_round_trip() -> None:
    for cp in (Checkpoint(TEST_NAME, 5, ROOT5), Checkpoint(TEST_NAME, 0, EMPTY_ROOT),
               Checkpoint(TEST_NAME, (1 << 63) - 1, ROOT5, ("a", "b c"))):
        note = sign_checkpoint(cp, TEST_NAME, TEST_KEY)
        assert verify_checkpoint(note, TEST_NAME, TEST_PUB, expected_origin=TEST_NAME) == cp
        assert verify_checkpoint(note.encode(), TEST_NAME, TEST_PUB) == cp


def test_exact_note_bytes() -> None:
    note = sign_checkpoint(Checkpoint(TEST_NAME, 5, ROOT5), TEST_NAME, TEST_KEY)
    body, sigs = parse_note(note)
    assert body == f"{TEST_NAME}\n5\n{base64.b64encode(ROOT5).decode()}\n"
    assert note.startswith(body + "\n\u2014 " + TEST_NAME + " ")
    assert note.endswith("\n")
    assert len(sigs) == 1
    assert sigs[0].key_id == key_id(TEST_NAME, TEST_PUB)
    assert len(sigs[0].signature) == 64
    TEST_KEY.verify_key.verify(body.encode(), sigs[0].signature)


_LINE = st.text(st.characters(min_codepoint=0x20, blacklist_categories=["Cs"]), min_size=1,
                max_size=40)


@given(origin=_LINE, size=st.integers(0, (1 << 63) - 1), root=st.binary(min_size=32, max_size=32),
       extensions=st.lists(_LINE, max_size=3))
def test_body_format_parse_round_trip(
    origin: str, size: int, root: bytes, extensions: list[str]
) -> None:
    cp = Checkpoint(origin, size, root, tuple(extensions))
    body = format_body(cp)
    assert parse_body(body) == cp
    assert format_body(parse_body(body)) == body


# --- attacks -------------------------------------------------------------------------------


def good_note() -> str:
    return sign_checkpoint(Checkpoint(TEST_NAME, 5, ROOT5), TEST_NAME, TEST_KEY)


def test_tampered_size_rejected_at_signature_step() -> None:
    with pytest.raises(CheckpointError, match=r"step 3 .*does not verify") as e:
        verify_checkpoint(good_note().replace("\n5\n", "\n50\n"), TEST_NAME, TEST_PUB)
    assert e.value.step == 3


def test_tampered_root_rejected_at_signature_step() -> None:
    other = base64.b64encode(EMPTY_ROOT).decode()
    note = good_note().replace(base64.b64encode(ROOT5).decode(), other)
    with pytest.raises(CheckpointError, match="step 3"):
        verify_checkpoint(note, TEST_NAME, TEST_PUB)


def test_checkpoint_from_other_log_rejected_at_origin_step() -> None:
    """A genuine checkpoint of another log signed with the same key is not this log's."""
    note = sign_checkpoint(Checkpoint("other.example/log", 5, ROOT5), TEST_NAME, TEST_KEY)
    with pytest.raises(CheckpointError, match=r"step 5 .*'other.example/log'"):
        verify_checkpoint(note, TEST_NAME, TEST_PUB, expected_origin=TEST_NAME)


def test_untrusted_key_only_note_rejected() -> None:
    note = sign_checkpoint(Checkpoint(TEST_NAME, 5, ROOT5), "attacker.example", OTHER_KEY)
    with pytest.raises(CheckpointError, match=r"step 2 .*signed by attacker\.example\+"):
        verify_checkpoint(note, TEST_NAME, TEST_PUB)


def test_same_name_different_key_ignored_then_rejected() -> None:
    """A forger reusing the log's key name has a different key ID: the line is ignored."""
    forged = sign_checkpoint(Checkpoint(TEST_NAME, 6, ROOT5), TEST_NAME, OTHER_KEY)
    with pytest.raises(CheckpointError, match="step 2"):
        verify_checkpoint(forged, TEST_NAME, TEST_PUB)


def test_unknown_cosignature_is_ignored() -> None:
    note = good_note()
    body, _ = parse_note(note)
    witness = sign_note(body, "witness.example", OTHER_KEY).split("\n\n")[-1]
    cp = verify_checkpoint(note + witness, TEST_NAME, TEST_PUB)
    assert cp.size == 5
    assert [s.key_name for s in parse_note(note + witness)[1]] == [TEST_NAME, "witness.example"]


def test_second_bad_signature_from_trusted_key_rejected() -> None:
    note = good_note()
    line = note.split("\n\n")[-1]
    raw = bytearray(base64.b64decode(line.split(" ")[2]))
    raw[-1] ^= 0x80
    bad_line = f"\u2014 {TEST_NAME} {base64.b64encode(bytes(raw)).decode()}\n"
    with pytest.raises(CheckpointError, match="step 3"):
        verify_checkpoint(note + bad_line, TEST_NAME, TEST_PUB)


def test_oversized_note_rejected() -> None:
    huge = good_note().replace("\n\n", "\n" + "x" * MAX_NOTE_BYTES + "\n\n")
    wide = good_note().replace("\n\n", "\n" + "\u00e9" * (MAX_NOTE_BYTES // 2) + "\n\n")
    assert len(wide) < MAX_NOTE_BYTES < len(wide.encode())
    for form in (huge, huge.encode(), wide):
        with pytest.raises(CheckpointError, match=r"step 1 .*limit"):
            verify_checkpoint(form, TEST_NAME, TEST_PUB)


def test_non_utf8_body_rejected() -> None:
    note = good_note().encode().replace(b"\n5\n", b"\n5\xc3\n")
    with pytest.raises(CheckpointError, match=r"step 1 .*UTF-8"):
        verify_checkpoint(note, TEST_NAME, TEST_PUB)
    with pytest.raises(CheckpointError, match=r"step 1 .*UTF-8"):
        verify_checkpoint(good_note().replace("\n5\n", "\n5\udc80\n"), TEST_NAME, TEST_PUB)


def test_every_bit_flip_anywhere_in_note_rejected() -> None:
    """Canonical everything: no single bit flip in the note bytes leaves it valid."""
    note = good_note().encode()
    for position in range(len(note)):
        for bit in range(8):
            mutated = bytearray(note)
            mutated[position] ^= 1 << bit
            with pytest.raises(CheckpointError):
                verify_checkpoint(bytes(mutated), TEST_NAME, TEST_PUB, expected_origin=TEST_NAME)


def test_invalid_checkpoints_cannot_be_constructed_or_signed() -> None:
    bad: list[tuple[str, int, bytes, tuple[str, ...]]] = [
        ("", 1, ROOT5, ()), ("a\nb", 1, ROOT5, ()), (TEST_NAME, -1, ROOT5, ()),
        (TEST_NAME, 1 << 63, ROOT5, ()), (TEST_NAME, 1, ROOT5[:31], ()),
        (TEST_NAME, 1, ROOT5, ("",)), (TEST_NAME, 1, ROOT5, ("a\x07",)),
    ]
    for origin, size, root, extensions in bad:
        with pytest.raises(CheckpointError, match="step 4"):
            Checkpoint(origin, size, root, extensions)
    with pytest.raises(CheckpointError, match="step 4"):
        Checkpoint(TEST_NAME, True, ROOT5)
    with pytest.raises(ValueError, match="end with a newline"):
        sign_note("no newline", TEST_NAME, TEST_KEY)
    with pytest.raises(ValueError, match="key name"):
        sign_checkpoint(Checkpoint(TEST_NAME, 1, ROOT5), "bad name", TEST_KEY)


if __name__ == "__main__":
    # Rewrite the generated "checkpoints" section; the published "notes" stay as they are.
    data = load_vectors()
    data["keys"]["ledger-test"] = {"vkey": vkey_string(TEST_NAME, TEST_PUB),
                                   "seed_hex": TEST_SEED.hex()}
    data["checkpoints"] = build_checkpoint_vectors()
    VECTORS.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    sys.exit(0)
