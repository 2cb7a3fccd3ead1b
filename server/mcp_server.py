"""The MCP server: the ledger's memory use cases as MCP tools and resources (ADR 0031).

Built on the official ``mcp`` SDK's high-level :class:`~mcp.server.mcpserver.MCPServer`
over the same :class:`server.backend.Backend` as the HTTP API, so a tool call is the
facade call the HTTP route makes, scoped by the same :class:`service.caller.Caller`.
Two transports:

* streamable HTTP at ``/mcp`` on the ``ledger serve`` app (``server/mounts.py``), stateless
  and answering in JSON, behind the same bearer authentication as ``/v1``: the server's
  auth middleware puts the request's caller in the ASGI scope (``state["caller"]``);
* stdio (``ledger mcp``, :func:`run_stdio`) for desktop clients, authenticated by a token
  given at start-up (``LEDGER_TOKEN`` or ``--token-file``) and checked again on every
  request, so a revoked or expired token stops working mid-session.

Every request passes :class:`_CallerScope` first: it resolves the caller of *this*
request (never of the session that happened to open a connection) and holds it in a
context variable that the tools and resources read. Errors of the ledger reach the
client as a tool error result (``isError``) with the CLI's ``error:``/``hint:`` lines;
an id outside the caller's scope reads as not found, exactly as an unknown one. Nothing
of a request's content reaches a log line.
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import structlog
from mcp.server import CacheHint
from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.types import ASGIApp

from ledger.errors import LedgerError
from server.backend import Backend
from server.telemetry import mcp_span, memory_span
from service.caller import Caller
from service.core import named_subject
from service.facade import MemoryService
from service.models import (
    MAX_PAGE,
    PAGE,
    ArtifactIn,
    AtomAdded,
    AtomCorrectionIn,
    AtomIn,
    AtomOut,
    Corrected,
    DocumentFormat,
    ErasureRequestIn,
    MemoryRow,
    OnSimilar,
    RecallIn,
    RecallOut,
    RequestStatus,
)

log = structlog.get_logger("ledger.mcp")

SERVER_NAME = "memory-ledger"
INSTRUCTIONS = (
    "Signed, event-sourced memory about the people you assist. `recall` before you answer "
    "(it returns a 'What you remember' block for your context); `remember` what the person "
    "states or what you infer, with its source when you have one; `correct_memory` when "
    "they correct you; `forget_memory` when they ask you to forget one thing; "
    "`extract_memories` to propose memories from an imported chat or a document with your "
    "own model (it asks you through sampling). A request to "
    "be forgotten altogether is filed with `file_erasure_request`: an operator executes it. "
    "Your credential decides whose memories you can see; anything else reads as not found.")

CallerOf = Callable[[Any], Awaitable[Caller]]
"""Resolves the caller of one MCP request from the transport's request object (the
Starlette request over HTTP, None on stdio); raises :class:`LedgerError` to refuse."""

_CALLER: ContextVar[Caller | None] = ContextVar("ledger_mcp_caller", default=None)

# Hints per tool (MCP ToolAnnotations): what a client may assume before it calls one.
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                       open_world_hint=False)


def _write(destructive: bool, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(read_only_hint=False, destructive_hint=destructive,
                           idempotent_hint=idempotent, open_world_hint=False)


# ----------------------------------------------------------------------------- outputs
class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class SourceIn(BaseModel):
    """The artifact a memory was drawn from, captured in the same call as the memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["chat", "document", "journal", "voice", "message", "email", "calendar"]
    ref: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:\-]{0,127}$",
                            description="Your id for the artifact (optional).")
    title: str | None = Field(default=None, max_length=1_000)
    body: str | None = Field(default=None, max_length=1_000_000,
                             description="The text it was drawn from (encrypted).")
    source: str | None = Field(default=None, max_length=200,
                               description="Where it came from, e.g. the app's name.")
    private: bool = False
    captured_at: str | None = Field(default=None, description="RFC 3339 instant.")


class Remembered(AtomAdded):
    artifact_id: str | None = Field(default=None,
                                    description="The source artifact captured with it.")


class MemoryList(_Out):
    subject: str | None
    memories: list[MemoryRow]
    next_after: str | None = Field(
        None, description="More memories follow: pass this as `after` for the next page.")


class Forgotten(_Out):
    atom_id: str
    tombstone_id: str = Field(description="The signed event that records the deletion.")
    batch_id: str | None
    event_ids: list[str]


class Exported(_Out):
    format: DocumentFormat
    subject: str
    media_type: str
    filename: str
    counts: dict[str, int]


# ----------------------------------------------------------------------------- the caller
class _CallerScope:
    """MCPServer middleware: the caller of this request, for the handlers it runs."""

    def __init__(self, caller_of: CallerOf) -> None:
        self.caller_of = caller_of

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        try:
            caller = await self.caller_of(ctx.request)
        except LedgerError as e:
            log.info("mcp.refused", method=ctx.method, reason=type(e).__name__)
            raise MCPError(code=INVALID_REQUEST, message=_error_text(e)) from None
        token = _CALLER.set(caller)
        try:  # a SERVER span, its parent from params._meta.traceparent (ADR 0054)
            with mcp_span(ctx.method, ctx.params, ctx.meta, ctx.request_id,
                          ctx.protocol_version):
                return await call_next(ctx)
        finally:
            _CALLER.reset(token)


def current_caller() -> Caller:
    caller = _CALLER.get()
    if caller is None:  # a handler run outside _CallerScope: a bug; refuse, never widen
        raise MCPError(code=INVALID_REQUEST, message="error: no authenticated caller")
    return caller


async def caller_from_request(request: Any) -> Caller:
    """The caller the server's bearer-auth middleware put in the request's ASGI scope."""
    scope = getattr(request, "scope", None)
    found = scope.get("state", {}).get("caller") if isinstance(scope, dict) else None
    if not isinstance(found, Caller):
        from ledger.errors import InputError

        raise InputError("this request carries no authenticated caller",
                         hint="send Authorization: Bearer TOKEN")
    return found


def fixed_caller(caller: Caller) -> CallerOf:
    async def caller_of(_request: Any) -> Caller:
        return caller

    return caller_of


# ----------------------------------------------------------------------------- results
def _error_text(e: LedgerError) -> str:
    return f"error: {e}" + (f"\nhint: {e.hint}" if e.hint else "")


def _error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _result(model: BaseModel, text: str | None = None) -> CallToolResult:
    data = model.model_dump(mode="json")
    if text is None:
        text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=data)


def _params(model: type[BaseModel], exclude: Sequence[str] = ()) -> list[inspect.Parameter]:
    """A model's fields as keyword parameters: the tool's JSON Schema is the model's."""
    out = []
    for name, f in model.model_fields.items():
        if name in exclude:
            continue
        out.append(_param(name, f.annotation, f.metadata, f.description,
                          inspect.Parameter.empty if f.is_required()
                          else f.get_default(call_default_factory=True)))
    return out


def _param(name: str, annotation: Any, metadata: Sequence[Any] = (),
           description: str | None = None, default: Any = inspect.Parameter.empty
           ) -> inspect.Parameter:
    extra = [*metadata, Field(description=description)] if description else [*metadata]
    ann = Annotated[(annotation, *extra)] if extra else annotation
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann,
                             default=default)


class LedgerMCP(MCPServer[Any]):
    """MCPServer whose argument errors read like the ledger's (field and problem, not a
    pydantic dump)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                    for err in e.__cause__.errors())
                raise ToolError(f"error: invalid arguments: {problems}\nhint: see the "
                                f"input schema of {name} (tools/list)") from None
            raise


# ----------------------------------------------------------------------------- the server
def build_mcp(backend: Backend, caller_of: CallerOf) -> LedgerMCP:
    """The MCP server over ``backend``; ``caller_of`` authenticates each request."""
    from importlib.metadata import version

    mcp = LedgerMCP(
        SERVER_NAME, title="memory-ledger", version=version("memory-ledger"),
        instructions=INSTRUCTIONS, log_level="WARNING",
        website_url=None, middleware=[_CallerScope(caller_of)],
        cache_hints={"resources/read": CacheHint(ttl_ms=0, scope="private"),
                     "resources/list": CacheHint(ttl_ms=0, scope="private")})
    _tools(mcp, backend)
    _extract_tool(mcp, backend)
    _resources(mcp, backend)
    return mcp


def _add(mcp: MCPServer[Any], name: str, title: str, description: str,
         annotations: ToolAnnotations, params: list[inspect.Parameter],
         output: type[BaseModel],
         run: Callable[[Caller, dict[str, Any]], Awaitable[CallToolResult]]) -> None:
    async def tool(**kwargs: Any) -> CallToolResult:
        caller = current_caller()
        try:
            return await run(caller, kwargs)
        except LedgerError as e:
            log.info("mcp.tool_refused", tool=name, error=type(e).__name__,
                     credential=caller.credential_id)
            return _error(_error_text(e))
        except Exception as e:  # a bug: its class to the log, nothing of it to the client
            log.error("mcp.tool_failed", tool=name, error=type(e).__name__,
                      credential=caller.credential_id)
            return _error(f"error: {name} failed inside the server ({type(e).__name__})\n"
                          "hint: nothing was acknowledged; the server's log names the "
                          "failure")

    tool.__name__ = name
    tool.__doc__ = description
    tool.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=Annotated[CallToolResult, output])
    mcp.add_tool(tool, name=name, title=title, description=description,
                 annotations=annotations)


ATOM_ID = "The memory's atom_id (as remember and recall return it), or your ref for it."


def _tools(mcp: MCPServer[Any], b: Backend) -> None:
    # ------------------------------------------------------------------ remember
    async def remember(c: Caller, a: dict[str, Any]) -> CallToolResult:
        artifact = a.pop("artifact", None)
        item = AtomIn(**a)
        if artifact is None:
            added = await b.add_atom(c, item)
            return _result(Remembered(**added.model_dump()))
        subject = named_subject(c, item.subject)  # the credential's only one, if unnamed
        item = item.model_copy(update={"subject": subject})
        source = ArtifactIn(subject=subject, **SourceIn.model_validate(artifact).model_dump())
        with memory_span("update_memory", c) as span:
            out = await b.write(lambda s: s.add_atom_with_source(c, item, source))
            span.set_attribute("gen_ai.memory.id", out.atom_id)
        return _result(Remembered(**out.model_dump()))

    _add(mcp, "remember", "Remember",
         "Record one memory (an atom: a fact, preference, episode...) about a subject you "
         "may see, optionally with the artifact it was drawn from (captured in the same "
         "call and cited by the memory). The text is encrypted under the subject's key and "
         "the record is signed. Returns the new atom's id, and in `similar` the subject's "
         "memories that already say the same thing (id and score). Call it whenever the "
         "person tells you something worth keeping, but do not fill memory with copies: "
         "with on_similar 'add' (the default) it adds anyway and shows you the similar "
         "ones; when they merely repeat a memory you already have, pass 'rehearse' (no "
         "new memory: the existing one is reinforced); when the new statement updates or "
         "corrects it, pass 'supersede' (the new memory replaces the most similar one, "
         "whose history is kept); 'refuse' writes nothing if a similar memory exists and "
         "names it in the error. Nothing is ever merged across subjects or erased.",
         _write(destructive=False, idempotent=False),
         [*_params(AtomIn), _param("artifact", SourceIn | None, (),
                                   "The source it was drawn from, captured with it.", None)],
         Remembered, remember)

    # ------------------------------------------------------------------ recall
    async def recall(c: Caller, a: dict[str, Any]) -> CallToolResult:
        body = RecallIn(**a)
        found = await b.recall(c, body)
        return _result(found, text=found.prompt)

    _add(mcp, "recall", "Recall",
         "Recall what you remember about a subject for a query: the text content is the "
         "'What you remember' block to put in your context; the structured result lists "
         "each memory with its id, score and markers. Each recalled memory gets a signed "
         "rehearsal event unless rehearse is false.",
         _write(destructive=False, idempotent=False), _params(RecallIn), RecallOut, recall)

    # ------------------------------------------------------------------ list, get
    async def list_memories(c: Caller, a: dict[str, Any]) -> CallToolResult:
        limit = a["limit"]
        rows = await b.read(lambda s: s.list_memories(
            c, a["subject"], a["privacy_class"], a["min_salience"], limit=limit + 1,
            after=a["after"]))
        more = len(rows) > limit
        rows = rows[:limit]
        return _result(MemoryList(subject=a["subject"], memories=rows,
                                  next_after=rows[-1].atom_id if more else None))

    _add(mcp, "list_memories", "List memories",
         "List a subject's memories with their current salience, status and markers "
         "(erased content reads as ERASED).", READ,
         [_param("subject", str | None, (), "Subject ref or id (required unless your "
                                            "credential sees every subject).", None),
          _param("privacy_class", str | None, (), "Only this privacy class.", None),
          _param("min_salience", float | None, (Field(ge=0.0, le=1.0),),
                 "Only memories whose current salience is at least this.", None),
          _param("limit", int, (Field(ge=1, le=MAX_PAGE),),
                 "At most this many memories (next_after names the next page).", PAGE),
          _param("after", str | None, (Field(max_length=200),),
                 "The next_after of the previous page.", None)],
         MemoryList, list_memories)

    async def get_memory(c: Caller, a: dict[str, Any]) -> CallToolResult:
        atom = await b.read(lambda s: s.get_atom(c, a["atom_id"]))
        return _result(atom)

    _add(mcp, "get_memory", "Get a memory",
         "One memory's current state: text, kind, status, provenance, salience inputs.",
         READ, [_param("atom_id", str, (Field(min_length=1, max_length=200),), ATOM_ID)],
         AtomOut, get_memory)

    # ------------------------------------------------------------------ correct, forget
    async def correct_memory(c: Caller, a: dict[str, Any]) -> CallToolResult:
        atom = a.pop("atom_id")
        change = AtomCorrectionIn(**a)
        with memory_span("update_memory", c, **{"gen_ai.memory.id": atom}):
            return _result(await b.write(lambda s: s.correct_atom(c, atom, change)))

    _add(mcp, "correct_memory", "Correct a memory",
         "Correct a memory: a new atom supersedes it (the old one stays in the signed "
         "history, no longer current). Give the new text, gist or confidence and why.",
         _write(destructive=False, idempotent=False),
         [_param("atom_id", str, (Field(min_length=1, max_length=200),), ATOM_ID),
          *_params(AtomCorrectionIn)],
         Corrected, correct_memory)

    async def forget_memory(c: Caller, a: dict[str, Any]) -> CallToolResult:
        with memory_span("delete_memory", c) as span:
            out = await b.write(lambda s: forget(s, c, a["atom_id"], a["reason"]))
            span.set_attribute("gen_ai.memory.id", out.atom_id)
        return _result(out, text=f"forgot {out.atom_id}; tombstone {out.tombstone_id}")

    _add(mcp, "forget_memory", "Forget a memory",
         "Delete one memory for good (as `ledger delete`): its data key is destroyed, so its "
         "content is unrecoverable from every file of the ledger; a signed tombstone records "
         "the deletion. Returns the tombstone's event id. Cannot be undone.",
         _write(destructive=True, idempotent=True),
         [_param("atom_id", str, (Field(min_length=1, max_length=200),), ATOM_ID),
          _param("reason", str, (Field(min_length=1, max_length=1_000),),
                 "Why, e.g. 'asked by the user'.")],
         Forgotten, forget_memory)

    # ------------------------------------------------------------------ export
    async def export_memories(c: Caller, a: dict[str, Any]) -> CallToolResult:
        fmt: str = a["format"]
        out = await b.read(lambda s: s.export(c, a["subject"], fmt, a["include_private"]))
        meta = Exported(format=fmt, subject=out.subject, media_type=out.media_type,
                        filename=out.filename, counts=out.counts)
        return _result(meta, text=out.content.decode("utf-8"))

    _add(mcp, "export_memories", "Export memories",
         "Export a subject's memories as a portable JSON document (Konshus or Persona): the "
         "text content is the document; the structured result its name and counts.", READ,
         [_param("subject", str, (Field(min_length=1, max_length=200),),
                 "Subject ref or id."),
          _param("format", DocumentFormat, (), "The document format.",
                 "konshus"),
          _param("include_private", bool, (), "Include artifacts marked private.", False)],
         Exported, export_memories)

    # ------------------------------------------------------------------ erasure requests
    async def file_erasure_request(c: Caller, a: dict[str, Any]) -> CallToolResult:
        body = ErasureRequestIn(**a)
        return _result(await b.write(lambda s: s.file_request(c, body)))

    _add(mcp, "file_erasure_request", "File an erasure request",
         "File a right-to-be-forgotten request for a whole subject: its receipt is signed "
         "with its deadlines. Executing it is an operator's act (not a tool); the status "
         "says whether it is open, overdue or completed.",
         _write(destructive=False, idempotent=False), _params(ErasureRequestIn),
         RequestStatus, file_erasure_request)


def _resources(mcp: MCPServer[Any], b: Backend) -> None:
    @mcp.resource("memory://subjects/{subject}/memories", name="memories",
                  title="A subject's current memories", mime_type="application/json",
                  description="The subject's memories as list_memories gives them (JSON).")
    async def memories(subject: str) -> str:
        c = current_caller()
        try:
            rows = await b.read(lambda s: s.list_memories(c, subject, limit=MAX_PAGE + 1))
        except LedgerError as e:
            from mcp.server.mcpserver.exceptions import ResourceError

            raise ResourceError(_error_text(e)) from None
        more = len(rows) > MAX_PAGE
        rows = rows[:MAX_PAGE]  # the rest through the list_memories tool
        data = MemoryList(subject=subject, memories=rows,
                          next_after=rows[-1].atom_id if more else None).model_dump(mode="json")
        return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)

    @mcp.resource("ledger://checkpoint", name="checkpoint", title="Latest signed checkpoint",
                  mime_type="text/plain",
                  description="The log's latest signed tree head, as a C2SP signed note.")
    async def checkpoint() -> str:
        c = current_caller()
        try:
            cp = await b.read(lambda s: s.checkpoint(c))
        except LedgerError as e:
            from mcp.server.mcpserver.exceptions import ResourceError

            raise ResourceError(_error_text(e)) from None
        return cp.note


def _extract_tool(mcp: MCPServer[Any], b: Backend) -> None:
    """``extract_memories`` (ADR 0053): the client's own model reads an artifact and
    proposes memories, asked through MCP sampling (on 2026-07-28 a multi-round-trip
    ``input_required`` result, which works statelessly; on older revisions a request on
    the session's back-channel). The prompt is the shipped one; the artifact goes to the
    model only; the answer is validated strictly and written as one signed command."""
    from mcp.server.mcpserver.resolve import Resolve, Sample
    from mcp_types import CreateMessageResult, SamplingMessage

    from service import extraction

    async def ask_model(artifact_id: str, max_memories: int) -> Sample | LedgerError:
        c = current_caller()
        try:  # scope and limits first: nothing is sent for an artifact the caller can't see
            ask = await b.read(lambda s: extraction.prepare(s, c, artifact_id, max_memories))
        except LedgerError as e:
            return e  # answered by the tool body, as every tool answers a refusal
        return Sample([SamplingMessage(role="user",
                                       content=TextContent(type="text", text=ask.user))],
                      max_tokens=extraction.MAX_TOKENS, system_prompt=ask.system,
                      include_context="none", temperature=0.0)

    async def extract_memories(**kw: Any) -> CallToolResult:
        c = current_caller()
        sampled = kw["sampled"]
        try:
            if isinstance(sampled, LedgerError):
                raise sampled
            if not isinstance(sampled, CreateMessageResult) or sampled.content.type != "text":
                raise extraction.ProposalRefused(
                    "the model answered with no text; nothing was written",
                    hint="use a client whose sampling answers with text")
            if sampled.stop_reason == "maxTokens":
                raise extraction.ProposalRefused(
                    "the model's answer was cut off at its token limit; nothing was written",
                    hint="ask for fewer memories (max_memories)")
            reply, model = sampled.content.text, sampled.model
            out = await b.write(lambda s: extraction.record_reply(
                s, c, kw["artifact_id"], kw["max_memories"], reply, model,
                kw["on_similar"]))
        except LedgerError as e:
            log.info("mcp.tool_refused", tool="extract_memories", error=type(e).__name__,
                     credential=c.credential_id)
            return _error(_error_text(e))
        except Exception as e:  # a bug: its class to the log, nothing of it to the client
            log.error("mcp.tool_failed", tool="extract_memories", error=type(e).__name__,
                      credential=c.credential_id)
            return _error("error: extract_memories failed inside the server "
                          f"({type(e).__name__})\nhint: nothing was written")
        return _result(out)

    params = [
        _param("artifact_id", str, (Field(min_length=1, max_length=200),),
               "The artifact's ref or id (an imported chat, a document)."),
        _param("max_memories", int, (Field(ge=1, le=extraction.MAX_PROPOSALS),),
               "At most this many memories.", extraction.DEFAULT_MAX),
        _param("on_similar", OnSimilar, (),
               "A proposal that says what one of the subject's memories already says: "
               "'rehearse' that memory instead of adding a near-copy (the default), 'add' it "
               "anyway, 'supersede' the old one, or 'refuse' the whole extraction.",
               extraction.DEFAULT_ON_SIMILAR),
        _param("sampled", Any, (Resolve(ask_model),))]
    ret = Annotated[CallToolResult, extraction.Extracted]
    extract_memories.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params, return_annotation=ret)
    extract_memories.__annotations__ = {p.name: p.annotation for p in params} | {"return": ret}
    mcp.add_tool(
        extract_memories, name="extract_memories", title="Extract memories",
        description="Propose memories from an artifact (an imported chat, a document) with "
                    "your own model: the server asks you, through MCP sampling, with the "
                    "prompt it ships, to read the artifact; every valid proposal becomes an "
                    "inferred memory of the artifact's subject citing it, with your model's "
                    "name and the prompt's version as extractor, in one signed command; a "
                    "proposal the subject's memory already holds rehearses it instead "
                    "(on_similar). An invalid answer writes nothing. Returns the atoms' ids "
                    "and what happened to each.",
        annotations=_write(destructive=False, idempotent=False))


# ----------------------------------------------------------------------------- use cases
# Two use cases the facade does not offer as one call; kept here, clearly apart, until it
# does (the report of issue 17's MCP part names the facade change).
def forget(s: MemoryService, c: Caller, atom: str, reason: str) -> Forgotten:
    """``MemoryService.delete_atom`` (the path of ``ledger delete``) and the id of the
    atom's own tombstone event."""
    atom_id = s.get_atom(c, atom).atom_id  # in the caller's scope, or not found
    out = s.delete_atom(c, atom_id, reason)
    if len(out.tombstone_ids) != 1:
        from ledger.errors import EnvironmentProblem

        raise EnvironmentProblem(f"atom {atom_id} was deleted in batch {out.batch_id} but "
                                 "records no tombstone", hint="run `ledger verify`")
    return Forgotten(atom_id=atom_id, tombstone_id=out.tombstone_ids[0],
                     batch_id=out.batch_id, event_ids=out.event_ids)


# ----------------------------------------------------------------------------- HTTP
@dataclass(frozen=True)
class MCPMount:
    """What the server mounts: the ASGI app answering ``/mcp`` and the lifespan its
    session manager must run in."""

    app: ASGIApp
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]]
    server: LedgerMCP


def mcp_asgi_app(backend: Backend, caller_of: CallerOf = caller_from_request) -> MCPMount:
    """The streamable HTTP endpoint, stateless and answering in JSON (ADR 0031): any
    server process of a deployment can answer any request, and each request carries its
    own credential. The server's auth middleware must run before it (it reads the caller
    from the ASGI scope); Host/Origin checks are off because that credential is the guard
    and the server may sit behind a proxy."""
    mcp = build_mcp(backend, caller_of)
    mcp.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    manager = mcp.session_manager

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with manager.run():
            yield

    return MCPMount(app=StreamableHTTPASGIApp(manager), lifespan=lifespan, server=mcp)


# ----------------------------------------------------------------------------- stdio
TOKEN_ENV = "LEDGER_TOKEN"  # noqa: S105 - the variable's name, not a token


def read_token(token_file: Path | None) -> str:
    """The token for ``ledger mcp``: ``--token-file`` (first line) or ``LEDGER_TOKEN``."""
    import os

    from ledger.errors import EnvironmentProblem, InputError

    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read the token file {token_file}: "
                             f"{getattr(e, 'strerror', None) or type(e).__name__}",
                             hint="give a file holding the token printed by "
                                  "`ledger tokens create`") from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise InputError(f"the token file {token_file} is empty",
                             hint="put the token printed by `ledger tokens create` in it")
        return token
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise EnvironmentProblem(
            "no credential: the MCP server refuses to start without a token",
            hint=f"set {TOKEN_ENV} or give --token-file FILE, with a token from "
                 "`ledger tokens create NAME --role assistant --subject REF`")
    return token


def run_stdio(home: Path | None, token_file: Path | None) -> None:
    """``ledger mcp``: authenticate, open the ledger, serve MCP on stdin/stdout until the
    client closes it. Only protocol on stdout; logs on stderr."""
    import anyio

    from ledger.home import Config, find_home

    found = find_home(home)  # no home: exit 3 before anything else
    token = read_token(token_file)
    from credentials.tokens import TokenStore

    # ttl=0: the token's row (revoked? expired?) is read again on every request, one
    # primary-key query; the argon2 check is done once
    store = TokenStore.open(Config.load(found), ttl=0)
    try:
        first = store.authenticate(token)  # refuse before anything else starts

        async def caller_of(_request: Any) -> Caller:
            # again on every request: a token revoked or expired mid-session stops here
            return await anyio.to_thread.run_sync(store.authenticate, token)

        backend = Backend(found)
        backend.start()
        try:
            log.info("mcp.stdio_started", credential=first.credential_id, role=first.role)
            build_mcp(backend, caller_of).run("stdio")
        finally:
            backend.close()
    finally:
        store.close()
