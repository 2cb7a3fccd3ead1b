"""Interop with an implementation not written here: Go's golang.org/x/mod/sumdb/note
(Debian's golang-golang-x-mod-dev, built offline) verifies our checkpoints from the vkey
the CLI prints, and our witnesses' cosignature/v1 lines (tests/go/notecheck)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ledger.checkpoint import parse_note
from ledger.witness.cosign import cosign

from .conftest import run_cli
from .witness_support import MemoryLog, WitnessProcess

SOURCE = Path(__file__).parent / "go" / "notecheck"


@pytest.fixture(scope="module")
def notecheck(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("go") is None or not Path("/usr/share/gocode/src/golang.org/x/mod").is_dir():
        if os.environ.get("CI"):
            pytest.fail("Go and golang-golang-x-mod-dev are required in CI (.ci/run installs "
                        "them)")
        pytest.skip("Go or Debian's golang-golang-x-mod-dev is not installed here")
    work = tmp_path_factory.mktemp("go")
    binary = work / "notecheck"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off",
           "GOCACHE": str(work / "cache"), "GOPATH": str(work / "gopath"), "CGO_ENABLED": "0"}
    build = work / "src"
    shutil.copytree(SOURCE, build)  # go may write go.sum: never into the repository
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=build, env=env, check=True,
                   timeout=300)
    return binary


def _check(binary: Path, note: str, vkey: str, cosigners: list[str], tmp: Path
           ) -> subprocess.CompletedProcess[str]:
    path = tmp / "note.txt"
    path.write_text(note, encoding="utf-8")
    args = [str(binary), "-vkey", vkey]
    for c in cosigners:
        args += ["-cosigner", c]
    return subprocess.run([*args, str(path)], capture_output=True, text=True, timeout=60)


def test_go_note_verifies_checkpoint_with_the_printed_vkey(notecheck: Path, home: Path,
                                                           tmp_path: Path) -> None:
    """Issue 19 item 10: `ledger checkpoint --vkey` is a vkey Go accepts as it is."""
    assert run_cli("--home", str(home), "subject", "add", "u1").code == 0
    r = run_cli("--home", str(home), "checkpoint", "--out", str(tmp_path / "cp"))
    assert r.code == 0
    vkey = run_cli("--home", str(home), "checkpoint", "--vkey").out.strip()
    listed = json.loads(run_cli("--home", str(home), "keys", "list", "--json").out)
    assert [k["vkey"] for k in listed if k["role"] == "log"] == [vkey]
    note = (tmp_path / "cp").read_text()
    done = _check(notecheck, note, vkey, [], tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == parse_note(note)[0]
    assert out["sigs"] == [{"name": vkey.split("+")[0], "hash": vkey.split("+")[1]}]
    # And a changed root is refused by Go too.
    lines = note.split("\n")
    lines[2] = lines[2][:-2] + ("A=" if lines[2][-2] != "A" else "B=")
    bad = _check(notecheck, "\n".join(lines), vkey, [], tmp_path)
    assert bad.returncode == 1 and "invalid signature" in bad.stderr


def test_go_note_verifies_witness_cosignatures(notecheck: Path, tmp_path: Path) -> None:
    from witness.state import Witness, init_home

    log = MemoryLog()
    log.grow(11)
    vkey = init_home(tmp_path / "w", "witness.example/w1")
    w = Witness(tmp_path / "w")
    w.add_log(log.origin, log.vkey)
    w.close()
    proc = WitnessProcess(tmp_path / "w")
    try:
        resp = proc.post(log.request(0))
        assert resp.status_code == 200
    finally:
        proc.stop()
    cosigned = log.note() + resp.text
    done = _check(notecheck, cosigned, log.vkey, [vkey], tmp_path)
    assert done.returncode == 0, done.stderr
    names = [s["name"] for s in json.loads(done.stdout)["sigs"]]
    assert names == [log.origin, "witness.example/w1"]
    # A cosignature made for another checkpoint (size 10) does not pass Go's note.Open.
    import nacl.signing

    key = nacl.signing.SigningKey(b"W" * 32)
    from ledger.witness.cosign import witness_vkey

    other = parse_note(log.note(10))[0]
    stale = cosign(other, "w2.example", key, 5).line()
    done = _check(notecheck, log.note() + stale, log.vkey,
                  [witness_vkey("w2.example", bytes(key.verify_key))], tmp_path)
    assert done.returncode == 1 and "invalid signature" in done.stderr


def test_audit_tools_accept_a_vkey_whose_name_differs_from_the_origin(
        home: Path, tmp_path: Path) -> None:
    """Issue 19 item 10: a standard vkey for --key; a key name other than the origin;
    extension lines kept in the JSON report."""
    import nacl.signing

    from ledger.checkpoint import Checkpoint, sign_checkpoint, vkey_string

    key = nacl.signing.SigningKey(b"K" * 32)
    cp = Checkpoint("example.test/log", 3, b"\x07" * 32, ("ext line one", "ext two"))
    note = sign_checkpoint(cp, "auditor-pinned-name", key)
    path = tmp_path / "cp"
    path.write_text(note)
    vkey = vkey_string("auditor-pinned-name", bytes(key.verify_key))
    r = run_cli("audit-tools", "verify-checkpoint", str(path), "--key", vkey, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["origin"] == "example.test/log" and doc["extensions"] == ["ext line one",
                                                                          "ext two"]
    (tmp_path / "log.vkey").write_text(vkey + "\n")
    r = run_cli("audit-tools", "verify-checkpoint", str(path), "--key",
                str(tmp_path / "log.vkey"), "--origin", "example.test/log")
    assert r.code == 0, r.err
    r = run_cli("audit-tools", "verify-checkpoint", str(path), "--key", vkey, "--origin",
                "other.test/log")
    assert r.code == 1 and "step 5" in r.err
    r = run_cli("audit-tools", "verify-checkpoint", str(path), "--key",
                vkey.replace("+", "+0", 1)[:-1])
    assert r.code == 2 and "--key" in r.err
