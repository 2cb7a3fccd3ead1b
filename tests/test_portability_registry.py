"""The one registry of portability formats (issue 32, ADR 0063): a new format is one module
and one registry line, and then every surface takes it: the CLI's import and export, the
HTTP API (its query parameter and its OpenAPI enum) and the MCP export tool.

This module is the toy format's one module: ``plan_import`` and ``export`` below, and the
``register`` line in the fixture. Nothing else in the tree names it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from ledger.errors import InputError
from portability import formats
from portability.common import Plan, check_subject_ref, loads_strict
from portability.record import to_inputs
from portability.view import SubjectView
from server.mcp_server import build_mcp, fixed_caller
from service.caller import Caller

from .conftest import run_cli
from .console_support import serve
from .serving import issue


# ------------------------------------------------------------------ the toy format's module
def plan_import(data: bytes, *, subject: str | None, artifact_exists: Any) -> Plan:
    """A toy document: ``{"toy": 1, "subject": REF, "facts": [{"id", "text", "at"}]}``."""
    doc = loads_strict(data, "toy file")
    if not isinstance(doc, dict) or doc.get("toy") != 1 or not isinstance(doc.get("facts"), list):
        raise InputError("not a toy document")
    ref = check_subject_ref(subject or doc.get("subject"), "subject")
    plan = Plan(format="toy", subject={"ref": ref})
    for i, fact in enumerate(doc["facts"]):
        atom, _ = to_inputs({"id": fact["id"], "kind": "fact", "text": fact["text"],
                             "sensitivity": "public", "derivation": "stated",
                             "created_at": fact["at"]}, ref, lambda c: None, f"facts[{i}]")
        plan.atoms.append(atom)
    return plan


def export(view: SubjectView, *, include_private: bool, now: datetime,
           progress: Any = None) -> tuple[dict[str, Any], dict[str, int]]:
    facts = [{"id": a.local_id, "text": a.get("text"), "at": a.created_at}
             for a in view.atoms if not a.erased and a.status == "active"]
    return {"toy": 1, "subject": view.ref, "facts": facts}, {"atoms": len(facts)}


TOY = {"toy": 1, "subject": "sam", "facts": [
    {"id": "f1", "text": "Keeps bees on the roof", "at": "2026-03-01T09:00:00Z"},
    {"id": "f2", "text": "Allergic to walnuts", "at": "2026-03-02T09:00:00Z"}]}


@pytest.fixture
def toy() -> Iterator[formats.Format]:
    yield formats.register(formats.Format("toy", "Toy facts", "document", __name__,
                                          writes=True))
    formats.unregister("toy")


def _texts(doc: dict[str, Any]) -> list[str]:
    return sorted(f["text"] for f in doc["facts"])


# ------------------------------------------------------------------ the surfaces take it
def test_a_format_no_surface_names_is_refused_with_the_registered_ones(home: Path,
                                                                       tmp_path: Path) -> None:
    src = tmp_path / "toy.json"
    src.write_text(json.dumps(TOY))
    r = run_cli("--home", str(home), "import", str(src), "--format", "toy")
    assert r.code == 2 and "unknown format 'toy'" in r.err
    assert "konshus, mem, persona, chatgpt, claude, mem0, text" in r.err
    r = run_cli("--home", str(home), "export", "--format", "chatgpt", "--out",
                str(tmp_path / "x"))
    assert r.code == 2 and "use one of konshus, mem, persona" in r.err  # ingest: read only


def test_the_cli_imports_and_exports_a_registered_toy_format(home: Path, tmp_path: Path,
                                                             toy: formats.Format) -> None:
    src = tmp_path / "toy.json"
    src.write_text(json.dumps(TOY))
    r = run_cli("--home", str(home), "import", str(src), "--format", "toy", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["created"]["atoms"] == 2
    out = tmp_path / "back.json"
    r = run_cli("--home", str(home), "export", "--format", "toy", "--subject", "sam",
                "--out", str(out))
    assert r.code == 0, r.err
    assert _texts(json.loads(out.read_text())) == _texts(TOY)


def test_the_http_api_and_the_mcp_tool_take_a_registered_toy_format(
        home: Path, toy: formats.Format) -> None:
    _, op = issue(home, "operator-1", "operator")
    with serve(home) as served:
        with httpx.Client(base_url=served.origin, timeout=60,
                          headers={"Authorization": f"Bearer {op}"}) as http:
            enum = _export_enum(http.get("/v1/openapi.json").json())
            assert enum == ["konshus", "mem", "persona", "toy"]
            r = http.post("/v1/imports", params={"format": "toy"},
                          content=json.dumps(TOY), headers={"Content-Type": "application/json"})
            assert r.status_code == 200, r.text
            assert r.json()["created"]["atoms"] == 2
            r = http.get("/v1/subjects/sam/export", params={"format": "toy"})
            assert r.status_code == 200, r.text
            assert r.headers["content-type"].startswith("application/json")
            assert _texts(r.json()) == _texts(TOY)
            r = http.get("/v1/subjects/sam/export", params={"format": "nope"})
            assert r.status_code == 422 and "toy" in r.text

        async def mcp() -> None:
            from mcp import Client

            caller = Caller(credential_id="tok_op", role="operator", subjects=None)
            async with Client(build_mcp(served.backend, fixed_caller(caller))) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                schema = tools["export_memories"].input_schema["properties"]["format"]
                assert schema["enum"] == ["konshus", "persona", "toy"]
                r = await c.call_tool("export_memories", {"subject": "sam", "format": "toy"})
                assert not r.is_error
                assert _texts(json.loads(r.content[0].text)) == _texts(TOY)  # type: ignore[union-attr]

        anyio.run(mcp)


def _export_enum(doc: dict[str, Any]) -> list[str]:
    params = doc["paths"]["/v1/subjects/{subject}/export"]["get"]["parameters"]
    (fmt,) = [p for p in params if p["name"] == "format"]
    return list(fmt["schema"]["enum"])


def test_the_registry_refuses_a_second_format_of_one_name_and_a_written_ingest() -> None:
    with pytest.raises(ValueError, match="registered already"):
        formats.register(formats.Format("konshus", "again", "document", __name__, writes=True))
    with pytest.raises(ValueError, match="never written"):
        formats.register(formats.Format("x", "x", "ingest", __name__, writes=True))
    assert formats.names("write") == ("konshus", "mem", "persona")
    assert formats.names("write", shape="document") == ("konshus", "persona")
