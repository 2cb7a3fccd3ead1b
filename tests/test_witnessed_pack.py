"""The ledger asks its witnesses; Evidence Packs carry the witnessed checkpoints, offline
proof files, and meet (or fail) a witness policy at a named step."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from governance.dsse import sign_envelope
from governance.erasure import redact_user
from governance.pack import build_pack
from governance.pack_layout import PackInvalid
from governance.pack_verify import verify_pack
from ledger import envelope
from ledger.application import LedgerApp
from ledger.checkpoint import parse_note
from ledger.home import Config
from ledger.witness.policy import parse_policy
from projections.service import Projections

from .conftest import run_cli, snapshot
from .witness_support import InProcessWitness, free_url


@pytest.fixture
def witnesses(tmp_path: Path) -> Iterator[list[InProcessWitness]]:
    ws = [InProcessWitness(tmp_path / f"w{i}", f"w{i}.example/witness") for i in range(3)]
    yield ws
    for w in ws:
        w.stop()


def _ledger(home: Path, ws: list[InProcessWitness], extra: list[tuple[str, str]] = ()
            ) -> LedgerApp:  # type: ignore[assignment]
    cfg = Config.load(home)
    app = LedgerApp(cfg)
    vkey, origin = app.log_vkey(), cfg.origin
    app.close()
    for w in ws:
        w.follow(origin, vkey)
    dataclasses.replace(cfg, witnesses=(*((w.url, w.vkey) for w in ws), *extra)).write()
    return LedgerApp(Config.load(home))


def test_checkpoint_cosigned_and_a_dead_witness_does_not_block(
        home: Path, witnesses: list[InProcessWitness], tmp_path: Path) -> None:
    late_home = tmp_path / "late"
    from witness.state import init_home

    init_home(late_home, "late.example/witness")
    late_url = free_url()
    late_vkey = (late_home / "witness.vkey").read_text().strip()
    app = _ledger(home, witnesses[:1], [(late_url, late_vkey)])
    try:
        app.register_subject({"ref": "u1"})
        done = app.checkpoint_witnessed()
        cp = done.checkpoint
        status = {r.url: r.status for r in done.results}
        assert status == {witnesses[0].url: "cosigned", late_url: "unreachable"}
        assert "\u2014 w0.example/witness " in cp.note
        assert app.tlog.recorded(cp.size).note == cp.note  # the cosigned note is stored
        app.add_atom({"subject": "u1", "text": "a fact"})
        done = app.checkpoint_witnessed()  # the write went through; w0 moves on
        cp2 = done.checkpoint
        assert [r.status for r in done.results] == ["cosigned", "unreachable"]
        assert app.tlog.witness_sizes()[witnesses[0].vkey] == cp2.size
    finally:
        app.close()
    # The late witness comes up (on the URL the ledger knows): the next checkpoint, with no
    # new event, retries only it, sending a proof from size 0.
    import socket

    import uvicorn

    from witness.server import make_app
    from witness.state import Witness

    w = Witness(late_home)
    w.add_log(Config.load(home).origin, LedgerApp(Config.load(home)).log_vkey())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(late_url.rsplit(":", 1)[1])))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(make_app(w), log_level="warning"))
    import threading
    import time

    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.01)
    try:
        app = LedgerApp(Config.load(home))
        done = app.checkpoint_witnessed()
        cp3 = done.checkpoint
        assert cp3.size == cp2.size
        assert [(r.url, r.status) for r in done.results] == [(late_url, "cosigned")]
        assert "late.example/witness" in cp3.note and "w0.example/witness" in cp3.note
        app.close()
    finally:
        server.should_exit = True
        t.join(10)
        sock.close()
        w.close()


def test_checkpoint_cli_with_witness_option_and_vkey(
        home: Path, witnesses: list[InProcessWitness]) -> None:
    r = run_cli("--home", str(home), "checkpoint", "--vkey")
    assert r.code == 0
    vkey = r.out.strip()
    witnesses[1].follow(vkey.split("+")[0], vkey)
    r = run_cli("--home", str(home), "checkpoint", "--witness", witnesses[1].url,
                "--witness-key", witnesses[1].vkey, "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["witnesses"][0]["status"] == "cosigned"
    assert "1 of 1 witnesses cosigned" in r.err
    r = run_cli("--home", str(home), "checkpoint", "--witness", "http://127.0.0.1:9")
    assert r.code == 2 and "no key for witness" in r.err


# ------------------------------------------------------------------ packs
@pytest.fixture
def erased(home: Path, witnesses: list[InProcessWitness], tmp_path: Path
           ) -> Iterator[dict[str, Any]]:
    app = _ledger(home, witnesses[:2])  # w0 and w1 cosign; w2 is never asked
    proj = Projections(app)
    marker = f"zq{uuid.uuid4().hex[:12]}"
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i} {marker}"} for i in range(3)])
    res = redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator")
    pack = build_pack(app, res["batch_id"], tmp_path / "pack")
    yield {"app": app, "pack": pack, "marker": marker, "ws": witnesses, "res": res}
    proj.close()
    app.close()


def _policy(tmp_path: Path, text: str, ws: list[InProcessWitness], app: LedgerApp) -> Path:
    path = tmp_path / f"p{uuid.uuid4().hex[:6]}.policy"
    lines = [f"log {app.log_vkey()}"] + [f"witness W{i} {w.vkey}" for i, w in enumerate(ws)]
    path.write_text("\n".join(lines) + "\n" + text, encoding="utf-8")
    return path


def _resign(pack: Path, app: LedgerApp) -> None:
    """What a dishonest operator can do: change files and sign the statement again."""
    dsse = json.loads((pack / "statement.dsse.json").read_text())
    import base64

    statement = json.loads(base64.b64decode(dsse["payload"]))
    for s in statement["subject"]:
        s["digest"]["sha256"] = hashlib.sha256((pack / s["name"]).read_bytes()).hexdigest()
    env = sign_envelope(envelope.canonical(statement), app.signer("operator"))
    (pack / "statement.dsse.json").write_text(json.dumps(env, indent=2) + "\n")


def test_pack_carries_witnessed_checkpoints_and_proof_files(erased: dict[str, Any]) -> None:
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    for name in ("before", "after"):
        note = (pack / "checkpoints" / f"{name}.checkpoint").read_text()
        _, sigs = parse_note(note)
        assert {s.key_name for s in sigs} == {app.config.origin, "w0.example/witness",
                                               "w1.example/witness"}
    proofs = sorted(p.name for p in (pack / "proofs").iterdir())
    assert len(proofs) == 7  # 3 tombstones, 3 atom key destructions, the subject's key
    text = (pack / "proofs" / proofs[0]).read_text()
    assert text.startswith("c2sp.org/tlog-proof@v1\nextra ")
    assert erased["marker"].encode() not in b"".join(
        p.read_bytes() for p in pack.rglob("*") if p.is_file())
    report = verify_pack(pack, app.root_public_key)
    assert report.witnesses["required"] is False
    assert [w["witness"] for w in report.witnesses["after"]] == sorted([ws[0].vkey, ws[1].vkey])
    r = run_cli("verify-pack", str(pack))
    assert r.code == 0 and "none were required" in r.err and "w0.example/witness" in r.err


def test_pack_quorum_met(erased: dict[str, Any], tmp_path: Path) -> None:
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    policy = _policy(tmp_path, "group G 2 W0 W1 W2\nquorum G\n", ws, app)
    report = verify_pack(pack, app.root_public_key, parse_policy(policy.read_bytes()))
    assert report.witnesses["required"] and report.witnesses["policy"].endswith("met")
    r = run_cli("verify-pack", str(pack), "--policy", str(policy))
    assert r.code == 0 and "needs 2 of W0, W1, W2: met" in r.err


def test_pack_quorum_not_met_fails_at_step_7_3(erased: dict[str, Any], tmp_path: Path) -> None:
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    policy = _policy(tmp_path, "group G all W0 W1 W2\nquorum G\n", ws, app)
    files = snapshot(pack)
    with pytest.raises(PackInvalid, match=r"step 7.3: witness quorum not met") as e:
        verify_pack(pack, app.root_public_key, parse_policy(policy.read_bytes()))
    assert e.value.step == "7.3"
    r = run_cli("verify-pack", str(pack), "--policy", str(policy))
    assert r.code == 1 and "FAIL: step 7.3" in r.err
    assert snapshot(pack) == files


def test_pack_cosignature_by_a_key_outside_the_policy_does_not_count(
        erased: dict[str, Any], tmp_path: Path) -> None:
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    # The policy trusts only w2, which never cosigned; w0's and w1's lines are ignored.
    policy = tmp_path / "only-w2.policy"
    policy.write_text(f"witness W2 {ws[2].vkey}\nquorum W2\n")
    with pytest.raises(PackInvalid, match=r"step 7.3.*outside the policy \(ignored\): "
                                          r"w0.example/witness"):
        verify_pack(pack, app.root_public_key, parse_policy(policy.read_bytes()))


def test_pack_cosignature_over_another_checkpoint_fails_at_step_7_2(
        erased: dict[str, Any], tmp_path: Path) -> None:
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    before = (pack / "checkpoints/before.checkpoint").read_text()
    after_path = pack / "checkpoints/after.checkpoint"
    after = after_path.read_text()
    w0_before = next(ln for ln in before.splitlines() if "w0.example" in ln)
    w0_after = next(ln for ln in after.splitlines() if "w0.example" in ln)
    after_path.write_text(after.replace(w0_after, w0_before))  # w0 "cosigned" after, really
    for p in (pack / "proofs").iterdir():  # the proof files carry the after checkpoint
        p.write_text(p.read_text().replace(w0_after, w0_before))
    _resign(pack, app)
    with pytest.raises(PackInvalid, match=r"step 7.2: after checkpoint .*w0.example/witness.* "
                                          r"does not verify over this checkpoint"):
        verify_pack(pack, app.root_public_key)
    policy = _policy(tmp_path, "quorum W1\n", ws, app)
    with pytest.raises(PackInvalid, match=r"step 7.2"):
        verify_pack(pack, app.root_public_key, parse_policy(policy.read_bytes()))


def test_pack_proof_file_swapped_fails_at_step_7_1(erased: dict[str, Any]) -> None:
    app, pack = erased["app"], erased["pack"]
    first, second = sorted((pack / "proofs").iterdir())[:2]
    first.write_bytes(second.read_bytes())
    _resign(pack, app)
    with pytest.raises(PackInvalid, match=r"step 7.1"):
        verify_pack(pack, app.root_public_key)


def test_misconfigured_witness_never_blocks_a_checkpoint(home: Path, tmp_path: Path) -> None:
    cfg = Config.load(home)
    dataclasses.replace(cfg, witnesses=(("http://127.0.0.1:9", "not+a+vkey"),
                                        ("ftp://x", "y"))).write()
    app = LedgerApp(Config.load(home))
    try:
        app.register_subject({"ref": "u1"})
        done = app.checkpoint_witnessed()
        assert done.checkpoint.size > 0 and done.results == []
    finally:
        app.close()
    r = run_cli("--home", str(home), "checkpoint", "--witness", "http://127.0.0.1:9",
                "--witness-key", "garbage+00000000+AAAA")
    assert r.code == 2 and "witness key for http://127.0.0.1:9" in r.err


# ------------------------------------------------------------------ the policy, the report
def test_witness_policy_command_writes_the_policy_the_pack_meets(erased: dict[str, Any],
                                                                  tmp_path: Path) -> None:
    """`ledger witness policy` writes a c2sp.org/tlog-policy from the witnesses in use (w0
    and w1, which cosigned the erasure's checkpoints), and verify-pack meets it."""
    app, pack, ws = erased["app"], erased["pack"], erased["ws"]
    home = str(app.config.home)
    path = tmp_path / "witnesses.policy"
    r = run_cli("--home", home, "witness", "policy", "--out", str(path), "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    text = path.read_text(encoding="utf-8")
    assert text == (
        f"# c2sp.org/tlog-policy for the checkpoints of {app.config.origin}: the witnesses "
        "it asks (ledger witness policy)\n"
        f"log {app.log_vkey()}\n\n"
        f"witness w0.example/witness {ws[0].vkey} {ws[0].url}\n"
        f"witness w1.example/witness {ws[1].vkey} {ws[1].url}\n"
        "group witnesses all w0.example/witness w1.example/witness\n"
        "quorum witnesses\n")
    assert doc == {"policy": text, "out": str(path), "log": app.log_vkey(),
                   "witnesses": [{"url": w.url, "vkey": w.vkey} for w in ws[:2]],
                   "quorum": "quorum: group witnesses needs 2 of w0.example/witness, "
                             "w1.example/witness"}
    assert r.err == (f"OK: policy of 2 witnesses written to {path}; quorum: group witnesses "
                     "needs 2 of w0.example/witness, w1.example/witness\n")
    assert path.stat().st_mode & 0o777 == 0o644
    v = run_cli("verify-pack", str(pack), "--policy", str(path))
    assert v.code == 0 and "needs 2 of w0.example/witness, w1.example/witness: met" in v.err
    # Without --out the policy is printed; --quorum any / a number / none.
    r = run_cli("--home", home, "witness", "policy", "--quorum", "any")
    assert r.code == 0 and r.out.endswith(
        "group witnesses any w0.example/witness w1.example/witness\nquorum witnesses\n")
    assert r.err == ("OK: policy of 2 witnesses; quorum: group witnesses needs 1 of "
                     "w0.example/witness, w1.example/witness\n")
    r = run_cli("--home", home, "witness", "policy", "--quorum", "none")
    assert r.code == 0 and r.out.endswith(f"{ws[1].url}\nquorum none\n")
    for quorum, problem in (
            ("3", "error: a quorum of 3 witnesses, but this ledger asks 2 witnesses\n"
                  "hint: `ledger witness use` more witnesses, or lower --quorum\n"),
            ("most", "error: quorum 'most' is not all, any, none or a number of witnesses\n")):
        r = run_cli("--home", home, "witness", "policy", "--quorum", quorum, "--out",
                    str(tmp_path / "not-written"))
        assert (r.code, r.out, r.err) == (2, "", problem)
        assert not (tmp_path / "not-written").exists()


def test_witness_policy_of_a_ledger_that_asks_no_witness(home: Path) -> None:
    r = run_cli("--home", str(home), "witness", "policy")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("error: this ledger asks no witness, so no quorum of witnesses can be "
                     "met\nhint: add one with `ledger witness use URL --key VKEY`, or write "
                     "`--quorum none` for a policy that requires no cosignature\n")
    r = run_cli("--home", str(home), "witness", "policy", "--quorum", "none")
    assert r.code == 0 and r.out.endswith("\nquorum none\n")
    assert r.err == "OK: policy of 0 witnesses; quorum none\n"


def _predicate(pack: Path) -> dict[str, Any]:
    import base64

    dsse = json.loads((pack / "statement.dsse.json").read_text())
    return dict(json.loads(base64.b64decode(dsse["payload"]))["predicate"])


def test_pack_report_counts_in_words_and_one_form_of_time(erased: dict[str, Any]) -> None:
    """The report for people: "1 witness asked", not "1 witnesses"; every time in one form
    (the request's times were stored with +00:00, its deadlines and the stores' checks with
    Z and microseconds)."""
    import re

    from governance.pack_render import render_report

    pack = erased["pack"]
    report = (pack / "report.html").read_text()
    assert ("<h2>Witnesses</h2><p>Checkpoint before the erasure cosigned by: "
            "w0.example/witness, w1.example/witness. Checkpoint after: w0.example/witness, "
            "w1.example/witness. 2 witnesses asked; 7 offline proof files "
            "(c2sp.org/tlog-proof).</p>") in report
    p = _predicate(pack)
    req = p["request"]
    assert req["received_at"].endswith("+00:00") and req["complete_due"].endswith("Z")
    times = re.findall(r"<td>(\d{4}-\d\d-\d\d[^<]*)</td>", report)
    assert len(times) == 5 + len(p["reach"]["routes"])
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", t) for t in times), times
    assert "+00:00" not in report and not re.search(r"\d\dZ", report)
    p["witnesses"]["asked"] = p["witnesses"]["asked"][:1]
    p["witnesses"]["proofs"] = p["witnesses"]["proofs"][:1]
    assert "1 witness asked; 1 offline proof file (c2sp.org/tlog-proof)." in render_report(p)
