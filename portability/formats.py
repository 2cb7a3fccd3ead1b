"""The one registry of the portability formats (issue 32, ADR 0063).

Every surface that names a format reads it here: the CLI's ``--format`` check, the HTTP
API's query parameters and their OpenAPI enum, the MCP export tool's argument, the facade's
export and import. A format is a module and one :func:`register` line; nothing else names it.

A format has one of three shapes, and the shape says what its module provides:

- ``document``: one JSON document. The module has
  ``plan_import(data: bytes, *, subject, artifact_exists) -> Plan`` and, when it can be
  written, ``export(view, *, include_private, now, progress) -> (document, counts)``.
- ``bundle``: a ``.mem`` bundle directory, verified with its manifest before it is planned
  (``portability.mem``).
- ``ingest``: a third party's export, read through portable-memory's ingest adapters and
  never written (``portability.adapters``).

The module is named, not imported: it is imported on first use, so reading the registry
(``ledger --help``, a request's validation) loads no format's code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from ledger.errors import InputError

if TYPE_CHECKING:  # the client imports this module: nothing here may load a store
    from portability.common import Plan

__all__ = ["Format", "ReadContext", "get", "names", "register", "unregister"]

Shape = Literal["document", "bundle", "ingest"]
Direction = Literal["read", "write"]


@dataclass(frozen=True)
class ReadContext:
    """What a reader is told about the import it plans (nothing here is written)."""

    subject: str | None
    trusted: Sequence[bytes]
    max_bytes: int | None
    skip_unsupported: bool
    artifact_exists: Callable[[str], bool]
    known_source_ids: Callable[[str], set[str]]


@dataclass(frozen=True)
class Format:
    """One portability format: its name on every surface, what it is, and its code."""

    name: str
    title: str
    shape: Shape
    module: str
    writes: bool
    media_type: str = "application/json"

    def _code(self) -> ModuleType:
        return importlib.import_module(self.module)

    def plan(self, path: Path, ctx: ReadContext) -> Plan:
        """Check the file or bundle at ``path`` and plan its import; nothing is written."""
        from portability.common import MAX_DOCUMENT_BYTES, MAX_LINE_BYTES, read_capped

        code = self._code()
        if self.shape == "ingest":
            return code.plan_import(  # type: ignore[no-any-return]
                self.name, path, subject=ctx.subject, max_bytes=ctx.max_bytes,
                artifact_exists=ctx.artifact_exists, skip_unsupported=ctx.skip_unsupported,
                known_source_ids=ctx.known_source_ids)
        if self.shape == "bundle":
            from portability import membundle

            bundle = membundle.verify_bundle(path, ctx.trusted,
                                             max_line_bytes=ctx.max_bytes or MAX_LINE_BYTES)
            return code.plan_import(  # type: ignore[no-any-return]
                bundle, subject=ctx.subject, artifact_exists=ctx.artifact_exists,
                skip_unsupported=ctx.skip_unsupported)
        if path.is_dir():
            raise InputError(f"{path} is a directory; a {self.name} file is one JSON document")
        data = read_capped(path, ctx.max_bytes or MAX_DOCUMENT_BYTES, f"{self.name} file")
        return code.plan_import(  # type: ignore[no-any-return]
            data, subject=ctx.subject, artifact_exists=ctx.artifact_exists)

    def export_document(self, view: Any, *, include_private: bool, now: datetime,
                        progress: Any = None) -> tuple[dict[str, Any], dict[str, int]]:
        """A ``document`` format's export of one subject (a
        :class:`portability.view.SubjectView`): the document and its counts;
        ``progress`` (:data:`ledger.progress.Steps`) hears the atoms encoded."""
        if self.shape != "document" or not self.writes:
            raise InputError(f"{self.name} is not written as one document")
        return self._code().export(  # type: ignore[no-any-return]
            view, include_private=include_private, now=now, progress=progress)


_REGISTRY: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a format (its name must be new); returns it, so a module can keep it."""
    if fmt.name in _REGISTRY:
        raise ValueError(f"format {fmt.name!r} is registered already")
    if fmt.shape == "ingest" and fmt.writes:
        raise ValueError(f"format {fmt.name!r}: an ingest format is read, never written")
    _REGISTRY[fmt.name] = fmt
    return fmt


def unregister(name: str) -> None:
    """Remove a format (a test's toy format, once the test is done)."""
    _REGISTRY.pop(name, None)


def names(direction: Direction | None = None, *, shape: Shape | None = None
          ) -> tuple[str, ...]:
    """The registered formats' names in registration order, those that can be read or
    written (``direction``) and of one ``shape`` when given."""
    return tuple(f.name for f in _REGISTRY.values()
                 if (direction != "write" or f.writes) and (shape is None or f.shape == shape))


def get(name: str, direction: Direction, *, shape: Shape | None = None) -> Format:
    """The format called ``name``, or an :class:`InputError` listing the ones that fit."""
    fmt = _REGISTRY.get(name)
    if fmt is None or (direction == "write" and not fmt.writes) or \
            (shape is not None and fmt.shape != shape):
        allowed = names(direction, shape=shape)
        raise InputError(f"unknown format {name!r} for this command",
                         hint=f"use one of {', '.join(allowed)}")
    return fmt


_KONSHUS = "portability.konshus"
register(Format("konshus", "Konshus v0.1 JSON export", "document", _KONSHUS, writes=True))
register(Format("mem", ".mem bundle (portable-memory)", "bundle", "portability.mem",
                writes=True, media_type="application/zip"))
register(Format("persona", "Persona Schema memory atoms", "document",
                "portability.persona", writes=True))
for _name, _title in (("chatgpt", "ChatGPT conversations export"),
                      ("claude", "Claude memory files"), ("mem0", "mem0 JSON export"),
                      ("text", "pasted memory text")):
    register(Format(_name, _title, "ingest", "portability.adapters", writes=False))
