"""Ingest through portable-memory's adapters: mem0, pasted memory text, Claude memory
files (atoms) and ChatGPT conversations (private chat artifacts). Idempotent."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import run_cli, snapshot
from .test_portability_support import logs_on_stderr, open_app  # noqa: F401  (autouse fixture)

MEM0 = [{"id": "m-1", "memory": "Likes green tea", "user_id": "alice",
         "created_at": "2026-02-01T10:00:00Z", "categories": ["food"]},
        {"id": "m-2", "memory": "Lives in Lisbon", "created_at": "2026-02-02T10:00:00Z"}]
TEXT = """Here is everything I remember:
```
[2026-01-15] - Prefers direct feedback
- Works on a health-tech startup
```
"""
CHATGPT = [{"id": "c-1", "title": "Board prep", "mapping": {
    "n1": {"message": {"id": "u1", "author": {"role": "user"}, "create_time": 1760000000.0,
                       "content": {"parts": ["Help me prepare the Q4 board meeting"]}}},
    "n2": {"message": {"id": "a1", "author": {"role": "assistant"},
                       "create_time": 1760000005.0,
                       "content": {"parts": ["Start with the numbers."]}}}}}]


def _import(home: Path, fmt: str, path: Path, *extra: str) -> dict[str, object]:
    r = run_cli("--home", str(home), "import", str(path), "--format", fmt, "--subject",
                "alice", "--json", *extra)
    assert r.code == 0, r.err
    out: dict[str, object] = json.loads(r.out)
    return out


def test_mem0_export_imports_as_sourced_inferences_and_is_idempotent(
        home: Path, tmp_path: Path) -> None:
    src = tmp_path / "mem0.json"
    src.write_text(json.dumps(MEM0))
    first = _import(home, "mem0", src)
    assert first["created"] == {"subjects": 1, "artifacts": 1, "atoms": 2}
    app = open_app(home)
    try:
        atom = app.reader.get_atom("alice:m-1")
        assert (atom.text, atom.derivation, atom.extractor) == ("Likes green tea", "inferred",
                                                                "unknown")
        assert atom.tags == ["food"] and atom.sensitivity == "private"
        assert atom.extensions["x-memory-ledger-source"]["sensitivity"] == "low"
        assert app.reader.get_artifact(atom.artifact_ids[0]).private is True  # the import source
    finally:
        app.close()
    before = snapshot(home)
    again = _import(home, "mem0", src)
    assert again["created"] == {"subjects": 0, "artifacts": 0, "atoms": 0}
    assert snapshot(home) == before


def test_pasted_memory_text_and_claude_files_import(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "export.txt"
    src.write_text(TEXT)
    assert _import(home, "text", src)["created"]["atoms"] == 2
    assert _import(home, "text", src)["created"]["atoms"] == 0  # content-derived ids
    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "tea.md").write_text("---\nname: tea\ndescription: Drinks green tea\n---\n"
                                   "Drinks green tea every morning.\n")
    report = _import(home, "claude", folder)
    assert report["created"]["atoms"] == 1
    app = open_app(home)
    try:
        atom = app.reader.get_atom("alice:tea")
        assert atom.text == "Drinks green tea" and atom.gist == "Drinks green tea every morning."
    finally:
        app.close()


def test_chatgpt_conversations_become_private_chat_artifacts(home: Path,
                                                             tmp_path: Path) -> None:
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps(CHATGPT))
    report = _import(home, "chatgpt", src)
    assert report["created"] == {"subjects": 1, "artifacts": 1, "atoms": 0}
    app = open_app(home)
    try:
        art = app.reader.get_artifact("alice:chatgpt.c-1")
        assert (art.kind, art.private, art.title) == ("chat", True, "Board prep")
        assert art.body == ("[user] Help me prepare the Q4 board meeting\n\n"
                            "[assistant] Start with the numbers.")
    finally:
        app.close()


def test_ingest_formats_are_import_only(home: Path, tmp_path: Path) -> None:
    r = run_cli("--home", str(home), "export", "--format", "mem0", "--out",
                str(tmp_path / "x.json"))
    assert r.code == 2 and "unknown format 'mem0' for this command" in r.err
