"""The core of the facade (ADR 0027): what every use case stands on. One
:class:`FacadeCore` per open ledger holds the write side (:class:`LedgerApp`) and the read
models (:class:`Projections`, opened when first needed), and enforces the caller's scope:
its role (:meth:`_require`), its subjects and tenant (an id outside them is
:class:`~ledger.errors.NotFound` with an unknown id's words), and the key that signs its
operator acts. The use cases are in ``service/memory_cases.py``,
``service/erasure_cases.py`` and ``service/ledger_cases.py``; ``service/facade.py``
joins them into :class:`service.facade.MemoryService`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ledger import clock
from ledger.errors import InputError, NotFound
from ledger.inputs import is_uuid
from service.caller import LOCAL, Caller
from service.models import (
    ErasureOutcome,
)

if TYPE_CHECKING:
    from ledger.application import LedgerApp
    from ledger.domain import Artifact, Atom
    from projections.service import Projections

ATOM_CONTENT = ("text", "gist", "details", "tags")


class Forbidden(NotFound):
    """The caller's role may not run this use case. A subclass of NotFound so that a
    surface which does not distinguish them leaks nothing; the HTTP API answers 403 for a
    role that is refused outright (the use case exists, the caller may not run it) and
    404 for an id outside the caller's scope."""


def _erased_marker() -> str:
    from ledger.domain import ERASED

    return str(ERASED)


def named_subject(caller: Caller, subject: str | None) -> str:
    """The subject a request means: the one it names, else the credential's only subject
    (a token of one subject already says whose memory it is). A credential of several
    subjects, or of all of them, must name one."""
    if subject is not None:
        return subject
    if caller.subjects is not None and len(caller.subjects) == 1:
        return next(iter(caller.subjects))
    many = "every subject" if caller.subjects is None else f"{len(caller.subjects)} subjects"
    raise InputError(f"subject: name the subject; this credential may see {many}",
                     hint='add "subject": REF to the request (a credential of exactly one '
                          "subject may leave it out)")


class FacadeCore:
    """The ledger, its read models, and the caller's scope (module docstring)."""

    def __init__(self, app: LedgerApp,
                 projections: Projections | Callable[[], Projections]) -> None:
        """``projections``: the read models, or how to open them when a use case first
        needs them (the CLI's commands that read only the log never open them)."""
        self.app = app
        self._proj: Projections | None = None
        self._open_proj: Callable[[], Projections] | None = None
        if callable(projections):
            self._open_proj = projections
        else:
            self._proj = projections
        self._refs: dict[str, str] = {}  # subject id -> stored ref (refs never change)

    @property
    def proj(self) -> Projections:
        if self._proj is None:
            assert self._open_proj is not None
            self._proj = self._open_proj()
        return self._proj

    @property
    def proj_opened(self) -> bool:
        return self._proj is not None

    def _require(self, caller: Caller, *roles: str) -> None:
        if caller.role not in roles:
            article = "an" if caller.role[0] in "aeiou" else "a"
            raise Forbidden(f"{article} {caller.role} credential may not do this",
                            hint=f"use a credential with the {' or '.join(roles)} role")

    def _require_ledger_operator(self, caller: Caller) -> None:
        """Acts on the whole ledger (its roster, policy, checkpoints): operators of the
        whole ledger only."""
        self._require(caller, "operator")
        if not caller.unrestricted:
            raise Forbidden("a credential scoped to subjects or a tenant may not do this",
                            hint="use an unrestricted operator credential")

    def _stored_ref_of(self, subject_id: str) -> str:
        ref = self._refs.get(subject_id)
        if ref is None:
            ref = self.app.reader.get_subject(subject_id).ref
            self._refs[subject_id] = ref
        return ref

    def _visible(self, caller: Caller, subject_id: str) -> str | None:
        """The subject's ref as the caller names it, or None when out of its scope."""
        return caller.visible_ref(self._stored_ref_of(subject_id))

    def subject_id(self, caller: Caller, subject: str | None) -> str:
        """Resolve a subject ref (as the caller names it) or id inside the caller's scope;
        None: the credential's only subject (:func:`named_subject`)."""
        subject = named_subject(caller, subject)
        # one hint for an unknown subject and one outside the scope: true of both, so it
        # tells neither apart (registering answers 403 outside the credential's subjects)
        missing = NotFound(f"no subject {subject!r} in this ledger",
                           hint="check the ref: a subject is found once it is registered "
                                "(`ledger subject add`, POST /v1/subjects), and only with a "
                                "credential whose subjects include it",
                           kind="subject", ref=subject)
        try:
            if caller.tenant is not None and not is_uuid(subject):
                sid = str(self.app.reader.resolve_subject(caller.stored_ref(subject)))
            else:
                sid = str(self.app.reader.resolve_subject(subject))
        except NotFound:
            raise missing from None
        if self._visible(caller, sid) is None:
            raise missing
        return sid

    def _item_id(self, caller: Caller, kind: str, ref_or_id: str) -> UUID:
        missing = NotFound(f"no {kind} {ref_or_id!r} in this ledger", kind=kind, ref=ref_or_id)
        try:
            if caller.tenant is not None and not is_uuid(ref_or_id):
                return self.app.reader.resolve(kind, caller.stored_ref(ref_or_id))
            return self.app.reader.resolve(kind, ref_or_id)
        except NotFound:
            raise missing from None

    def _atom(self, caller: Caller, atom: str) -> Atom:
        """The atom a ref or id names, inside the caller's scope; else :class:`NotFound`
        with ``kind`` and ``ref`` (the same for every caller: the CLI words it itself)."""
        aid = self._item_id(caller, "atom", atom)
        try:
            found = self.app.reader.get_atom(aid)
        except NotFound:  # the id is of an item of another kind
            raise NotFound(f"no atom {atom!r} in this ledger", kind="atom", ref=atom,
                           other_kind=True) from None
        if self._visible(caller, found.subject_id) is None:
            raise NotFound(f"no atom {atom!r} in this ledger", kind="atom", ref=atom)
        return found

    def _atom_id(self, caller: Caller, atom: str) -> UUID:
        return self._atom(caller, atom).id

    def _artifact(self, caller: Caller, artifact: str) -> Artifact:
        """The artifact a ref or id names, inside the caller's scope (as :meth:`_atom`)."""
        aid = self._item_id(caller, "artifact", artifact)
        try:
            a = self.app.reader.get_artifact(str(aid))
        except NotFound as e:  # the id is of an item of another kind
            raise NotFound(str(e), e.hint, kind="artifact", ref=artifact,
                           other_kind=True) from None
        if self._visible(caller, a.subject_id) is None:
            raise NotFound(f"no artifact {artifact!r} in this ledger", kind="artifact",
                           ref=artifact)
        return a

    def _request(self, caller: Caller, request: str) -> Any:
        from ledger.domain import ErasureRequest

        missing = NotFound(f"no erasure request {request!r}",
                           hint="see `ledger requests list` or GET /v1/requests",
                           kind="erasure request", ref=request)
        if not is_uuid(request):
            raise missing
        try:
            req: Any = self.app.reader.aggregate(UUID(request))
        except Exception:
            raise missing from None
        if not isinstance(req, ErasureRequest) or self._visible(caller, req.subject_id) is None:
            raise missing
        return req

    def _batch_in_scope(self, caller: Caller, batch_id: str) -> None:
        from ledger.domain import RedactionBatch

        missing = NotFound(f"no batch {batch_id!r}", kind="batch", ref=batch_id)
        try:
            batch: Any = self.app.reader.aggregate(UUID(batch_id))
        except Exception:
            raise missing from None
        if not isinstance(batch, RedactionBatch):
            raise missing
        if caller.unrestricted:
            return
        targets: dict[str, list[str]] = getattr(batch, "targets", {})
        subjects = {self.app.reader.get_atom(a).subject_id for a in targets.get("atoms", [])}
        subjects |= set(targets.get("subjects", []))
        if not subjects or any(self._visible(caller, s) is None for s in subjects):
            raise missing

    def _signing_key(self, caller: Caller) -> str:
        """The key that signs the caller's operator acts, as given (the CLI's --operator;
        a token's signing key); the home's ``operator`` key when none is given."""
        return "operator" if caller.signing_key is None else caller.signing_key

    def _acting(self, caller: Caller) -> AbstractContextManager[None]:
        """Operator events signed inside record which credential acted (by id)."""
        return self.app.acting_for(None if caller.credential_id == LOCAL
                                   else caller.credential_id)

    @staticmethod
    def _masked(row: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
        """``row`` with ``fields`` reading ``ERASED`` when its content was erased."""
        if not row.get("content_erased"):
            return row
        erased = _erased_marker()
        return {k: (erased if k in fields else v) for k, v in row.items()}

    def _local_files(self, caller: Caller) -> None:
        """Policy, not wording: only the CLI's caller (the person at this machine, who can
        read the home's private keys) reads and writes files of this machine by path."""
        if not caller.is_local:
            raise Forbidden("only the local operator reads and writes files of this machine",
                            hint="send or fetch the document itself (/v1/import, /v1/export)")


# ---------------------------------------------------------------------- helpers
def _reason(reason: str) -> str:
    if not reason.strip():
        raise InputError("a reason is required", hint='e.g. "asked by the user"')
    return reason


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return clock.format_instant(value)
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value)
    return value


def _outcome(data: dict[str, Any], app: LedgerApp | None = None) -> ErasureOutcome:
    """An erasure's report with the ids of its items' own tombstone events (the
    ``atom.redacted``/``deleted`` and ``artifact.deleted`` events left in the log)."""
    tombstones: list[str] = []
    targets = data.get("targets") or {}
    ids = [*targets.get("atoms", []), *targets.get("artifacts", [])]
    if app is not None and ids:
        for item in app.reader.get_many([UUID(i) for i in ids]):
            event = getattr(item, "tombstone_event", None)
            if event:
                tombstones.append(str(event))
    return ErasureOutcome(**{**data, "tombstone_ids": tombstones})
