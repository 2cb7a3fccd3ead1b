"""Memories proposed from an artifact by a model, recorded as one signed command (ADR 0053).

The ledger runs no model of its own. Two models may read an artifact (an imported chat, a
document) and propose memories about its subject:

* the caller's own model, asked through MCP sampling by the ``extract_memories`` tool
  (``server/mcp_server.py``): :func:`prepare` builds the request, the client's model
  answers, :func:`record` validates and writes;
* an OpenAI-compatible endpoint the operator configured (``[extract]`` in the home's
  ``config.toml`` or ``LEDGER_EXTRACT_*``; off otherwise), for batch work:
  :func:`extract_with_endpoint`, behind ``ledger extract ARTIFACT|--subject S``.

Both send the shipped, versioned prompt (``service/prompts/extract-v1.md``) and the
artifact's title and body, to the model only: nothing of them, nor of the answer, reaches
a log line. The answer is parsed strictly (:class:`Proposal`): one invalid proposal
refuses the whole answer and nothing is written. Valid proposals become ``inferred``
atoms of the artifact's own subject, citing the artifact, with the model's name and the
prompt's version and digest as their extractor, all in one signed command.

Scope is the caller's (service/caller.py): an artifact outside its subjects reads as not
found, and only writers of memory (assistants, operators) may extract.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ledger.errors import EnvironmentProblem, InputError, LedgerError
from ledger.inputs import MAX_ATOM_TEXT, MAX_GIST
from service.caller import Caller
from service.memory_cases import check_on_similar
from service.models import AtomAdded, AtomIn, AtomKind, OnSimilar, Sensitivity

if TYPE_CHECKING:
    from service.facade import MemoryService

log = structlog.get_logger("ledger.extract")

PROMPT_VERSION = "extract-v1"
DEFAULT_MAX = 20
"""Memories asked for per artifact unless the caller says otherwise."""
DEFAULT_ON_SIMILAR: OnSimilar = "rehearse"
"""A proposal that says what a memory of the subject says rehearses it (ADR 0052, 0053):
extracting the same chat twice adds no near-copies."""
MAX_PROPOSALS = 50
MAX_SOURCE_CHARS = 200_000
"""The longest title and body sent to a model in one request (about 50,000 tokens)."""
MAX_REPLY_CHARS = 200_000
MAX_TOKENS = 4_096
"""The answer's token budget asked of the model (50 memories of 500 characters fit)."""
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+\- ]{0,99}$")
TAG = re.compile(r"^[^\x00-\x1f\x7f]{1,50}$")
API_KEY_ENV = "LEDGER_EXTRACT_API_KEY"
DEFAULT_TIMEOUT = 120.0


class ProposalRefused(InputError):
    """The model's answer is not a valid set of proposals; nothing was written."""


@dataclass(frozen=True)
class Prompt:
    version: str
    text: str
    sha256: str


@cache
def prompt() -> Prompt:
    """The shipped prompt, its version and the SHA-256 of its bytes (recorded with every
    atom it produced, in the extractor)."""
    data = resources.files("service").joinpath("prompts", f"{PROMPT_VERSION}.md").read_bytes()
    return Prompt(PROMPT_VERSION, data.decode("utf-8"), hashlib.sha256(data).hexdigest())


def extractor_of(model: str) -> str:
    """What an extracted atom names as its extractor: the model and the prompt."""
    if not MODEL_NAME.match(model):
        raise ProposalRefused(
            "the model's name is not a plain name of at most 100 characters (letters, digits, "
            "'._:/@+- '); nothing was written",
            hint="use a client or endpoint that reports its model's name plainly")
    p = prompt()
    return f"{model} via prompt {p.version}@sha256:{p.sha256}"


# ----------------------------------------------------------------------------- proposals
class Proposal(BaseModel):
    """One memory a model proposes. Strict: no field beyond these, no coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    text: str = Field(min_length=1, max_length=MAX_ATOM_TEXT)
    kind: AtomKind
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    sensitivity: Sensitivity = "private"
    gist: str | None = Field(default=None, max_length=MAX_GIST)
    tags: list[str] = Field(default_factory=list, max_length=10)
    artifact_ids: list[str] = Field(min_length=1, max_length=1)


class Proposals(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    memories: list[Proposal] = Field(max_length=MAX_PROPOSALS)


@dataclass(frozen=True)
class Ask:
    """One artifact put to a model: the system prompt and the user message (content)."""

    artifact_id: str
    subject_id: str
    max_memories: int
    system: str
    user: str


class Extracted(BaseModel):
    """What an extraction wrote."""

    model_config = ConfigDict(frozen=True)
    artifacts: list[str] = Field(description="The artifacts read, by id.")
    atom_ids: list[str] = Field(description="Per proposal, in the order proposed: the atom "
                                            "recorded, or the similar one rehearsed instead.")
    outcomes: list[Literal["added", "rehearsed", "superseded"]] = Field(
        default_factory=list, description="Per proposal, what the update-or-add rule did "
                                          "(ADR 0052).")
    archived: list[str] = Field(default_factory=list,
                                description="Atoms the policy's maxAtoms archived.")
    extractor: str | None = Field(description="The model and prompt, as each atom names them "
                                              "(None when nothing was proposed).")
    prompt_version: str
    prompt_sha256: str
    on_similar: OnSimilar = Field(description="The rule a proposal similar to a memory "
                                              "of the subject followed.")


def prepare(svc: MemoryService, caller: Caller, artifact: str,
            max_memories: int = DEFAULT_MAX) -> Ask:
    """The request for one artifact of the caller's scope (not found otherwise)."""
    svc._require(caller, "assistant", "operator")
    if not 1 <= max_memories <= MAX_PROPOSALS:
        raise InputError(f"max_memories must be from 1 to {MAX_PROPOSALS}, not {max_memories}")
    a = svc.get_artifact(caller, artifact)
    if a.content_erased:
        raise InputError(f"artifact {a.artifact_id} was erased; there is nothing to read",
                         hint="extract from an artifact whose content is kept")
    title, body = a.title or "", a.body or ""
    if not body.strip() and not title.strip():
        raise InputError(f"artifact {a.artifact_id} has no text to read",
                         hint="capture the artifact with its body first")
    if len(title) + len(body) > MAX_SOURCE_CHARS:
        raise InputError(
            f"artifact {a.artifact_id} holds {len(title) + len(body)} characters; a model is "
            f"sent at most {MAX_SOURCE_CHARS} in one request; nothing was sent",
            hint="capture the source as several artifacts (one per conversation or "
                 "section) and extract from each")
    user = (f"Source id: {a.artifact_id}\nSource kind: {a.kind}\n"
            + (f"Title: {title}\n" if title else "")
            + f"Propose at most {max_memories} memories.\n\n<source>\n{body}\n</source>\n")
    return Ask(artifact_id=a.artifact_id, subject_id=a.subject_id, max_memories=max_memories,
               system=prompt().text, user=user)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ProposalRefused("the model's answer repeats a key in one JSON object; "
                              "nothing was written")
    return dict(pairs)


def _problems(e: ValidationError) -> str:
    """pydantic's errors as 'path: problem', never the value (content)."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'answer'}: {err['msg']}"
                     for err in e.errors(include_input=False)[:5])


def parse(ask: Ask, reply: str, model: str) -> list[AtomIn]:
    """The model's answer as atoms to record, or :class:`ProposalRefused`: the whole
    answer is refused when any part of it is invalid."""
    refused = "; nothing was written"
    hint = "ask again, or use a model that follows the prompt (service/prompts)"
    extractor = extractor_of(model)
    if len(reply) > MAX_REPLY_CHARS:
        raise ProposalRefused(f"the model's answer is longer than {MAX_REPLY_CHARS} "
                              f"characters{refused}", hint=hint)
    text = reply.strip()
    fence = re.fullmatch(r"```(?:json)?\s*\n(.*)\n```", text, flags=re.DOTALL)
    if fence:  # a lone Markdown fence around the object is a wrapper, not an answer
        text = fence.group(1).strip()
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ProposalRefused(f"the model's answer is not one JSON object (line {e.lineno}, "
                              f"column {e.colno}: {e.msg}){refused}", hint=hint) from None
    try:
        proposals = Proposals.model_validate(doc).memories
    except ValidationError as e:
        raise ProposalRefused(f"the model's answer has invalid proposals: {_problems(e)}"
                              f"{refused}", hint=hint) from None
    if len(proposals) > ask.max_memories:
        raise ProposalRefused(f"the model proposed {len(proposals)} memories, more than the "
                              f"{ask.max_memories} asked for{refused}", hint=hint)
    atoms = []
    for n, p in enumerate(proposals, 1):
        if p.artifact_ids != [ask.artifact_id]:
            raise ProposalRefused(f"proposal {n} does not cite the artifact it was drawn from "
                                  f"({ask.artifact_id}) alone{refused}", hint=hint)
        for t in p.tags:
            if not TAG.match(t):
                raise ProposalRefused(f"proposal {n} has a tag that is empty, longer than 50 "
                                      f"characters or holds control characters{refused}",
                                      hint=hint)
        try:
            atoms.append(AtomIn(
                subject=ask.subject_id, text=p.text, kind=p.kind, gist=p.gist, tags=p.tags,
                confidence=p.confidence, sensitivity=p.sensitivity, derivation="inferred",
                artifact_ids=[ask.artifact_id], extractor=extractor, human_reviewed=False))
        except ValidationError as e:
            raise ProposalRefused(f"proposal {n} is not a valid memory: {_problems(e)}"
                                  f"{refused}", hint=hint) from None
    return atoms


def record(svc: MemoryService, caller: Caller, asks: Sequence[Ask],
           atoms: Sequence[AtomIn], on_similar: OnSimilar = DEFAULT_ON_SIMILAR) -> Extracted:
    """Write the proposals of ``asks`` as one signed command (all or none), through the
    update-or-add rule of ``remember`` (ADR 0052): a proposal that says what one of the
    subject's memories already says follows ``on_similar`` (by default that memory is
    rehearsed and no near-copy is added; ``refuse`` writes nothing if any is similar)."""
    check_on_similar(on_similar)
    p = prompt()
    extractor = atoms[0].extractor if atoms else None
    kw: dict[str, Any] = {"artifacts": [a.artifact_id for a in asks], "extractor": extractor,
                          "prompt_version": p.version, "prompt_sha256": p.sha256,
                          "on_similar": on_similar}
    if not atoms:
        log.info("extract.nothing_proposed", artifacts=kw["artifacts"],
                 credential=caller.credential_id)
        return Extracted(atom_ids=[], **kw)
    done: list[AtomAdded] = svc.remember_atoms(
        caller, [a.model_copy(update={"on_similar": on_similar}) for a in atoms])
    outcomes = [d.outcome for d in done]
    log.info("extract.recorded", artifacts=kw["artifacts"], atoms=len(done),
             rehearsed=outcomes.count("rehearsed"), credential=caller.credential_id)
    archived = list(dict.fromkeys(a for d in done for a in d.archived))
    return Extracted(atom_ids=[d.atom_id for d in done], outcomes=outcomes,
                     archived=archived, **kw)


def record_reply(svc: MemoryService, caller: Caller, artifact: str, max_memories: int,
                 reply: str, model: str,
                 on_similar: OnSimilar = DEFAULT_ON_SIMILAR) -> Extracted:
    """One artifact's answer from the caller's model (MCP sampling): the artifact is read
    again under the caller's scope, the answer validated, the atoms written."""
    ask = prepare(svc, caller, artifact, max_memories)
    return record(svc, caller, [ask], parse(ask, reply, model), on_similar)


# ----------------------------------------------------------------------------- endpoint
@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat-completions endpoint (``[extract]`` of config.toml, or
    ``LEDGER_EXTRACT_URL``/``_MODEL``/``_TIMEOUT``; the key only in an environment
    variable, ``LEDGER_EXTRACT_API_KEY`` unless ``api_key_env`` names another)."""

    url: str
    model: str
    timeout: float
    api_key_env: str

    @classmethod
    def configured(cls, home: Path) -> Endpoint:
        """The configured endpoint, or :class:`EnvironmentProblem` saying how to set one:
        extraction through an endpoint is off until it is configured."""
        try:
            doc = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise EnvironmentProblem(f"cannot read {home / 'config.toml'}: "
                                     f"{type(e).__name__}") from None
        table = doc.get("extract", {})
        if not isinstance(table, dict):
            raise EnvironmentProblem("[extract] of config.toml is not a table")
        if "api_key" in table or "key" in table:
            raise EnvironmentProblem(
                "config.toml holds an API key in clear under [extract]; it is not read",
                hint=f"remove it and set {API_KEY_ENV} (or the variable named by "
                     "[extract] api_key_env) in the environment instead")
        unknown = sorted(set(table) - {"url", "model", "timeout", "api_key_env"})
        if unknown:
            raise EnvironmentProblem(f"[extract] of config.toml has unknown keys: "
                                     f"{', '.join(unknown)}",
                                     hint="it takes url, model, timeout and api_key_env")
        url = os.environ.get("LEDGER_EXTRACT_URL") or table.get("url")
        model = os.environ.get("LEDGER_EXTRACT_MODEL") or table.get("model")
        if not url or not model:
            raise EnvironmentProblem(
                "no model endpoint is configured: extraction through one is off, and nothing "
                "leaves this machine",
                hint="set url and model under [extract] in the home's config.toml (or "
                     "LEDGER_EXTRACT_URL and LEDGER_EXTRACT_MODEL), the key in "
                     f"{API_KEY_ENV}; or let your assistant extract through MCP "
                     "(the extract_memories tool)")
        raw_timeout = os.environ.get("LEDGER_EXTRACT_TIMEOUT") or table.get("timeout",
                                                                              DEFAULT_TIMEOUT)
        try:
            timeout = float(raw_timeout)
        except (TypeError, ValueError):
            timeout = -1.0
        if not 0 < timeout <= 3600:
            raise EnvironmentProblem("the extraction timeout must be a number of seconds "
                                     "from 0 to 3600", hint="fix [extract] timeout or "
                                                            "LEDGER_EXTRACT_TIMEOUT")
        key_env = str(table.get("api_key_env", API_KEY_ENV))
        endpoint = cls(url=str(url).rstrip("/"), model=str(model), timeout=timeout,
                       api_key_env=key_env)
        endpoint.check()
        return endpoint

    def check(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EnvironmentProblem("the extraction endpoint's URL must be http(s)://HOST...",
                                     hint="e.g. https://api.example.com/v1 or "
                                          "http://127.0.0.1:8080/v1")
        if parts.username or parts.password:
            raise EnvironmentProblem("the extraction endpoint's URL holds credentials",
                                     hint=f"put the key in {self.api_key_env} instead")
        if parts.scheme == "http" and not _loopback(parts.hostname):
            raise EnvironmentProblem(
                "the extraction endpoint is a remote host over plain http: memory content "
                "would cross the network unencrypted", hint="use https:// for a remote host")
        if not MODEL_NAME.match(self.model):
            raise EnvironmentProblem("the configured extraction model is not a plain name of "
                                     "at most 100 characters")

    def complete(self, ask: Ask) -> tuple[str, str]:
        """One chat completion: (the answer's text, the model that answered)."""
        import httpx

        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env, "")
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {"model": self.model, "temperature": 0, "max_tokens": MAX_TOKENS,
                "messages": [{"role": "system", "content": ask.system},
                             {"role": "user", "content": ask.user}]}
        where = urlsplit(self.url).netloc
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
                r = client.post(f"{self.url}/chat/completions", json=body, headers=headers)
        except httpx.TimeoutException:
            raise EnvironmentProblem(f"the model endpoint at {where} did not answer within "
                                     f"{self.timeout:g} s; nothing was written",
                                     hint="raise [extract] timeout, or try again") from None
        except httpx.HTTPError as e:
            raise EnvironmentProblem(f"cannot reach the model endpoint at {where} "
                                     f"({type(e).__name__}); nothing was written",
                                     hint="check [extract] url and that the server runs"
                                     ) from None
        if r.status_code != 200:
            hint = (f"check the key in {self.api_key_env}" if r.status_code in (401, 403)
                    else "check [extract] url and model")
            raise EnvironmentProblem(f"the model endpoint at {where} answered HTTP "
                                     f"{r.status_code}; nothing was written", hint=hint)
        return _completion(r.content, self.model)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _completion(raw: bytes, asked: str) -> tuple[str, str]:
    """The text and model of an OpenAI chat-completions response, or ProposalRefused."""
    hint = "check that the endpoint speaks the OpenAI chat-completions API"
    try:
        doc = json.loads(raw)
        choice = doc["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ProposalRefused("the model endpoint's answer is not a chat completion; "
                              "nothing was written", hint=hint) from None
    if not isinstance(message, dict):
        raise ProposalRefused("the model endpoint's answer holds no message; nothing was "
                              "written", hint=hint)
    if message.get("refusal"):
        raise ProposalRefused("the model refused to answer (its words are not shown); "
                              "nothing was written")
    if choice.get("finish_reason") == "length":
        raise ProposalRefused("the model's answer was cut off at its token limit; nothing "
                              "was written", hint="ask for fewer memories (--max)")
    content = message.get("content")
    if not isinstance(content, str):
        raise ProposalRefused("the model's answer holds no text; nothing was written",
                              hint=hint)
    model = doc.get("model") if isinstance(doc.get("model"), str) and doc["model"] else asked
    return content, str(model)


def artifacts_of(svc: MemoryService, caller: Caller, subject: str) -> list[str]:
    """The ids of a subject's artifacts whose content is kept, oldest first."""
    from ledger.domain import Artifact

    sid = svc.subject_id(caller, subject)
    out = []
    for n in svc.app.reader.notifications(1, 10**9, topics=[Artifact.Created.TOPIC]):
        a = svc.app.reader.get_artifact(str(n.originator_id))
        if a.subject_id == sid and not a.content_erased:
            out.append(str(a.id))
    return out


def configured_endpoint(svc: MemoryService) -> Endpoint:
    """The endpoint configured for the service's home (:meth:`Endpoint.configured`)."""
    return Endpoint.configured(svc.app.config.home)


def extract_with_endpoint(svc: MemoryService, caller: Caller, endpoint: Endpoint,
                          artifacts: Sequence[str], max_memories: int = DEFAULT_MAX,
                          progress: Callable[[], None] | None = None,
                          on_similar: OnSimilar = DEFAULT_ON_SIMILAR) -> Extracted:
    """Ask the endpoint about every artifact, validate every answer, then write all the
    proposals as one signed command: any refusal writes nothing."""
    check_on_similar(on_similar)
    if not artifacts:
        raise InputError("no artifact to extract from",
                         hint="capture or import one first (`ledger import ... --format "
                              "chatgpt`)")
    asks = [prepare(svc, caller, a, max_memories) for a in artifacts]
    atoms: list[AtomIn] = []
    for ask in asks:
        try:
            reply, model = endpoint.complete(ask)
            atoms += parse(ask, reply, model)
        except LedgerError as e:
            log.info("extract.refused", artifact=ask.artifact_id, error=type(e).__name__,
                     credential=caller.credential_id)
            if len(asks) > 1:
                e.args = (f"artifact {ask.artifact_id}: {e}",)
            raise
        if progress is not None:
            progress()
    return record(svc, caller, asks, atoms, on_similar)
