"""Ingest adapters through portable-memory's own: mem0 JSON, pasted memory text, Claude
memory files (atoms), and the ChatGPT ``conversations.json`` (artifacts).

The package maps each source onto episodes; from there they take the same path as a
foreign ``.mem`` episode (strict record checks, an atom inferred by an unknown
extractor from one per-format import artifact, everything the source said kept). A
ChatGPT conversation is raw source material, so each becomes one private ``chat``
artifact holding its visible turns, and nothing is claimed as a memory.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from portable_memory import PortableEpisode, to_wire
from portable_memory.adapters import (
    ClaudeAdapter,
    Mem0Adapter,
    OpenAIAdapter,
    TransferTextAdapter,
)

from ledger.errors import InputError
from ledger.inputs import MAX_BODY
from portability.common import (
    MAX_DOCUMENT_BYTES,
    Plan,
    Refusal,
    check_subject_ref,
    loads_strict,
    namespaced,
    read_capped,
)
from portability.mem import plan_records
from portability.membundle import check_record, compile_spec

_EPISODE = compile_spec(PortableEpisode)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _read(path: Path, limit: int, what: str) -> bytes:
    if path.is_dir():
        raise InputError(f"{path} is a directory; {what} is one file")
    return read_capped(path, limit, what)


def _claude_files(path: Path, limit: int) -> list[dict[str, str]]:
    paths = sorted(path.rglob("*.md")) if path.is_dir() else [path]
    files = []
    total = 0
    for p in paths:
        if p.is_symlink():
            raise InputError(f"{p} is a symlink; memory files are read only as regular files")
        data = read_capped(p, limit, "Claude memory file")
        total += len(data)
        if total > limit:
            raise InputError(f"Claude memory files under {path} exceed {limit} bytes in all",
                             hint="pass --max-bytes to raise the limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{p} is not UTF-8 (byte {e.start})") from None
        files.append({"path": p.relative_to(path).as_posix() if path.is_dir() else p.name,
                      "content": text})
    return files


def episodes_from(fmt: str, path: Path, limit: int | None) -> list[dict[str, Any]]:
    """The source mapped by portable-memory's adapter, as checked episode records."""
    cap = limit or MAX_DOCUMENT_BYTES
    if fmt == "claude":
        eps = ClaudeAdapter.parse_episodes(_claude_files(path, cap))
    elif fmt == "text":
        raw = _read(path, cap, "memory text")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{path} is not UTF-8 (byte {e.start})") from None
        eps = TransferTextAdapter.parse_episodes(text, source="pasted", now=EPOCH)
    else:
        doc = loads_strict(_read(path, cap, f"{fmt} export"), f"{fmt} export")
        adapter: Any = Mem0Adapter if fmt == "mem0" else OpenAIAdapter
        try:
            eps = adapter.parse_episodes(doc)
        except (TypeError, ValueError, AttributeError) as e:
            raise InputError(f"{path} does not have the shape of a {fmt} export: {e}") from None
    records = []
    for i, episode in enumerate(eps):
        rec = to_wire(episode)
        check_record(rec, _EPISODE, f"{fmt} record {i + 1}")
        records.append(rec)
    return records


def plan_import(fmt: str, path: Path, *, subject: str | None, max_bytes: int | None,
                artifact_exists: Callable[[str], bool], skip_unsupported: bool,
                known_source_ids: Callable[[str], set[str]] | None = None) -> Plan:
    """Plan an import from one of the ``ingest`` formats of :mod:`portability.formats`;
    nothing is written.

    ``known_source_ids(subject)``: the source ids already kept (sealed) for the
    subject's atoms; pasted text is matched against them (see :func:`_content_ids`).
    """
    if subject is None:
        raise InputError(f"a {fmt} export names no ledger subject", hint="pass --subject REF")
    ref = check_subject_ref(subject, "--subject")
    records = episodes_from(fmt, path, max_bytes)
    plan = Plan(format=fmt, subject={"ref": ref})
    if fmt == "chatgpt" and any(r.get("contextID") for r in records):
        return _conversations(plan, records)
    ids = [r["id"] for r in records]
    if len(set(ids)) != len(ids):
        raise InputError(f"the {fmt} export maps two records to one id; nothing was imported")
    original: dict[str, str] = {}
    if fmt == "text":
        records, original = _content_ids(records, known_source_ids(ref)
                                         if known_source_ids else set(), plan)
    plan = plan_records(plan, {"episode": records}, [], artifact_exists=artifact_exists,
                        skip_unsupported=skip_unsupported, source=f"import.{fmt}")
    for atom in plan.atoms:
        local = atom["ref"][len(ref) + 1:]
        if local in original:
            atom["source_data"] = {**(atom.get("source_data") or {}), "id": original[local]}
    return plan


def _content_ids(records: list[dict[str, Any]], known: set[str], plan: Plan
                 ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Pasted text: portable-memory names each memory ``tx_`` + SHA-256(date + text), a
    plain hash of the memory that anyone could test a guess against, so it never becomes
    a ref (refs are signed, in the clear, for ever; ADR 0004). Each memory gets a random
    id instead; the package's id is kept sealed with the atom (``source_data``) and
    exported again, and a memory whose id is already kept for the subject is a repeat
    (the package's "paste twice and it merges"), skipped. Returns the records and
    {random id: package id}."""
    out: list[dict[str, Any]] = []
    original: dict[str, str] = {}
    repeats = 0
    for r in records:
        if r["id"] in known:
            repeats += 1
            continue
        new = f"tx.{uuid.uuid4().hex}"
        original[new] = r["id"]
        out.append({**r, "id": new})
    if repeats:
        plan.warnings.append(f"{repeats} pasted memor{'y' if repeats == 1 else 'ies'} "
                             "already in the ledger for this subject were skipped")
        plan.repeats = repeats
    return out, original


def _conversations(plan: Plan, records: list[dict[str, Any]]) -> Plan:
    """ChatGPT conversations: one private chat artifact per conversation."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r.get("contextID") or r["id"], []).append(r)
    for conv, turns in groups.items():
        body = "\n\n".join(f"[{t['metadata'].get('openai_role', t.get('speaker') or '?')}] "
                           f"{t['details']}" for t in turns)
        ref, reversible = namespaced(plan.subject_ref, f"chatgpt.{conv}")
        if not reversible or len(body) > MAX_BODY:
            why = "conversation id is not a valid ref" if not reversible else \
                f"transcript longer than {MAX_BODY} characters"
            plan.refused.append(Refusal("artifact", conv, why))
            continue
        title = turns[0]["metadata"].get("openai_conversation_title")
        plan.artifacts.append({"subject": plan.subject_ref, "ref": ref, "kind": "chat",
                               "title": title[:1000] if title else None, "body": body,
                               "captured_at": min(t["eventTime"] for t in turns),
                               "source": "chatgpt-export", "private": True})
    plan.warnings.append(f"{len(plan.artifacts)} ChatGPT conversation(s) became private chat "
                         "artifacts; no memories were claimed from them. Next step: have a "
                         "model propose memories from them (ADR 0053): your assistant through "
                         "MCP (the extract_memories tool, one artifact at a time), or a model "
                         "endpoint set in [extract] of config.toml: `ledger extract --subject "
                         f"{plan.subject_ref}`")
    return plan
