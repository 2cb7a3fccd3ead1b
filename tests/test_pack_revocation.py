"""Issue 19 item 3: an Evidence Pack's signers must *hold* their role at the pack's time.

Step 4 of docs/spec/evidence-pack.md: every signature on the statement (the first and
every countersignature) is by a key holding ``operator`` or ``auditor`` at the pack's
time, in the pack's roster; a key revoked before then is refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from governance.dsse import add_signature
from governance.erasure import redact_user
from governance.pack import build_pack, countersign
from governance.pack_layout import PackInvalid
from governance.pack_verify import verify_pack
from ledger.application import LedgerApp
from ledger.errors import InputError
from projections.service import Projections

from .conftest import run_cli, snapshot


@pytest.fixture
def proj(app: LedgerApp):  # type: ignore[no-untyped-def]
    p = Projections(app)
    yield p
    p.close()


def _batch(app: LedgerApp, proj: Projections) -> str:
    app.register_subject({"ref": "u1"})
    app.add_atoms([{"subject": "u1", "text": f"fact {i}"} for i in range(2)])
    return str(redact_user(app, proj, "u1", reason="GDPR Art. 17", operator="operator")
               ["batch_id"])


def test_pack_signed_by_key_revoked_before_the_pack_time_fails_at_step_4(
        app: LedgerApp, proj: Projections, tmp_path: Path) -> None:
    batch = _batch(app, proj)
    op = app.signer("operator")
    app.revoke_key(op.kid, reason="stolen laptop")
    pack = build_pack(app, batch, tmp_path / "pack", make_zip=True, operator="operator")
    with pytest.raises(PackInvalid, match="was revoked as operator") as err:
        verify_pack(pack, app.root_public_key)
    assert err.value.step == "4" and op.kid in str(err.value)
    with pytest.raises(PackInvalid, match="step 4"):
        verify_pack(pack.with_suffix(".zip"), app.root_public_key)
    r = run_cli("verify-pack", str(pack), "--json")
    assert r.code == 1 and json.loads(r.out)["step"] == "4"


def test_countersignature_by_revoked_key_fails_at_step_4(
        app: LedgerApp, proj: Projections, tmp_path: Path) -> None:
    batch = _batch(app, proj)
    app.authorize_key("dpo", "auditor")
    dpo = app.signer("dpo")
    app.revoke_key(dpo.kid, reason="left the company")
    pack = build_pack(app, batch, tmp_path / "pack")  # signed by a valid operator
    assert verify_pack(pack, app.root_public_key).ok
    # Added by hand, the revoked key's countersignature fails verification at step 4.
    forged = tmp_path / "forged"
    shutil.copytree(pack, forged)
    path = forged / "statement.dsse.json"
    path.write_text(json.dumps(add_signature(json.loads(path.read_text()), dpo)))
    with pytest.raises(PackInvalid, match="was revoked as auditor") as err:
        verify_pack(forged, app.root_public_key)
    assert err.value.step == "4"
    # `ledger evidence-pack sign` refuses it, and leaves the pack as it was.
    before = snapshot(pack)
    with pytest.raises(InputError, match="dpo may not countersign"):
        countersign(pack, dpo)
    assert snapshot(pack) == before


def test_pack_signed_before_the_revocation_still_verifies(
        app: LedgerApp, proj: Projections, tmp_path: Path) -> None:
    batch = _batch(app, proj)
    app.authorize_key("dpo", "auditor")
    pack = build_pack(app, batch, tmp_path / "pack")
    countersign(pack, app.signer("dpo"))
    report = verify_pack(pack, app.root_public_key)
    assert sorted(report.signers) == sorted([app.signer("operator").kid,
                                             app.signer("dpo").kid])
    # Both keys revoked afterwards: the pack was signed while they held their roles.
    app.revoke_key(app.signer("dpo").kid, reason="rotated")
    app.revoke_key(app.signer("operator").kid, reason="rotated")
    again = verify_pack(pack, app.root_public_key)
    assert again.ok and len(again.signers) == 2
