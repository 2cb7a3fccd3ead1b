"""Helpers for the portability tests (this module holds no tests).

``ledger import`` / ``ledger export`` are mounted on the ``ledger`` command here until
``cli/main.py`` mounts them itself (the registration is skipped once it does).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import rfc8785
import structlog

from cli.main import cli, served
from cli.portability import register
from ledger.application import LedgerApp
from ledger.home import Config
from portability import konshus, mem, persona, service, view
from portability.membundle import verify_bundle

from .test_schemas import KONSHUS_EXAMPLE, PERSONA_ATOM

if not any(c.name == "import" for c in cli.registered_commands):
    register(cli, served)

__all__ = ["KONSHUS_EXAMPLE", "PERSONA_ATOM", "logs_on_stderr"]


@pytest.fixture(autouse=True)
def logs_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configure structlog as the CLI does (JSON on stderr) for every portability test.

    tests/test_logs.py ends with ``structlog.reset_defaults()`` while monkeypatch puts
    ``ledger.logs._configured`` back to True, so later tests would log to stdout, which
    these tests parse as data.
    """
    import ledger.logs

    structlog.reset_defaults()
    monkeypatch.setattr(ledger.logs, "_configured", False)
    ledger.logs.configure()


def canon(doc: Any, drop: tuple[str, ...] = ("exported_at",)) -> bytes:
    """RFC 8785 bytes of a document without its export time."""
    d = copy.deepcopy(doc)
    if isinstance(d, dict):
        for k in drop:
            d.pop(k, None)
        if isinstance(d.get("x-memory-ledger"), dict):
            d["x-memory-ledger"].pop("exported_at", None)
    return bytes(rfc8785.dumps(d))


def writer_pub(home: Path) -> Path:
    return home / "keys" / "writer.pub"


def open_app(home: Path) -> LedgerApp:
    return LedgerApp(Config.load(home))


def import_doc(app: LedgerApp, fmt: str, data: bytes | Path, *, subject: str | None = None,
               trusted: list[bytes] | None = None, apply_untrusted: bool = False,
               skip_unsupported: bool = False) -> dict[str, Any]:
    """Plan and apply an import through the same code path as the CLI."""
    def exists(ref: str) -> bool:
        return service._exists(app, "artifact", ref) is not None

    if fmt == "mem":
        assert isinstance(data, Path)
        bundle = verify_bundle(data, trusted or [])
        plan = mem.plan_import(bundle, subject=subject, artifact_exists=exists,
                               skip_unsupported=skip_unsupported)
    else:
        raw = data.read_bytes() if isinstance(data, Path) else data
        module = konshus if fmt == "konshus" else persona
        plan = module.plan_import(raw, subject=subject, artifact_exists=exists)
    return service.apply_plan(app, plan, apply_untrusted=apply_untrusted)


def export_doc(app: LedgerApp, fmt: str, subject: str | None, out: Path | None = None,
               include_private: bool = True) -> Any:
    """Export through the same code path as the CLI; ``mem`` writes ``out``."""
    from datetime import UTC, datetime

    v = view.load(app, subject)
    if fmt == "mem":
        assert out is not None
        signer = app.signer(None)
        return mem.export(v, out, include_private=include_private,
                          key=mem.signing_key(bytes(signer.signing_key)), sign_manifest=False)
    module = konshus if fmt == "konshus" else persona
    doc, _ = module.export(v, include_private=include_private, now=datetime.now(UTC))
    return doc


def bundle_files(root: Path) -> dict[str, bytes]:
    """Every record file of a bundle (the manifest differs only in createdAt)."""
    out = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*.jsonl")}
    manifest = json.loads((root / "manifest.json").read_bytes())
    manifest.pop("createdAt")
    out["manifest.json"] = bytes(rfc8785.dumps(manifest))
    return out


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()
