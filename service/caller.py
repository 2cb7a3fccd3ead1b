"""Who is calling: the scope every surface hands the facade (ADR 0027).

A surface (the CLI, the HTTP API, the MCP server, the console) turns a credential into a
:class:`Caller` and passes it to every :class:`service.facade.MemoryService` call. The
facade enforces it in one place: a caller's role says which use cases it may run, its
subjects and tenant say which memories it may see. Nothing in a request body widens it:
an id outside the scope answers :class:`ledger.errors.NotFound`, exactly as an unknown id
does, so ids of other people do not leak.

Tenants namespace subject refs: a caller of tenant ``acme`` that names subject
``user_1`` means the stored subject ``acme:user_1``; the same ref in another tenant is
another person. The tenant is derived from the signed log (the ref), not from a side table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Role = Literal["assistant", "operator", "auditor", "privacy-agent"]
ROLES: tuple[Role, ...] = ("assistant", "operator", "auditor", "privacy-agent")
# privacy-agent: a Data Rights Protocol agent, refused everywhere but /drp/ (ADR 0056)
TENANT_SEP = ":"
LOCAL = "local"  # the credential id of the CLI's caller


@dataclass(frozen=True)
class Caller:
    """A credential's scope, as the facade enforces it.

    ``subjects``: the subject refs (as the caller names them, inside its tenant) it may
    touch; ``None`` means every subject of its tenant (every subject, without a tenant).
    ``signing_key``: the home's key that signs the operator acts of this caller
    (operators only; the CLI's ``--operator``). ``writer_key``: the key that signs its
    memory writes (subjects, artifacts, atoms; the CLI's ``--as``); None: the home's
    writer key. ``credential_id`` names the credential in audit records and logs (a token
    id, never its secret; ``local`` for the CLI); ``name``: what people call it (a token's
    name, shown by the console), None when it has none.
    """

    credential_id: str
    role: Role
    subjects: frozenset[str] | None = None
    tenant: str | None = None
    signing_key: str | None = None
    expires_at: datetime | None = None
    writer_key: str | None = None
    name: str | None = None

    def stored_ref(self, ref: str) -> str:
        """The ref as stored in the log: namespaced by the caller's tenant."""
        if self.tenant is None:
            return ref
        return f"{self.tenant}{TENANT_SEP}{ref}"

    def item_ref(self, stored: str) -> str | None:
        """A stored ref (of a subject, an atom or an artifact) as the caller names it:
        without its tenant's prefix; None when it is not of the caller's tenant."""
        if self.tenant is None:
            return stored
        prefix = f"{self.tenant}{TENANT_SEP}"
        return stored[len(prefix):] if stored.startswith(prefix) else None

    def visible_ref(self, stored: str) -> str | None:
        """A subject's ref as the caller names it, or None when the subject is outside
        its scope (another tenant, or not one of its subjects)."""
        ref = self.item_ref(stored)
        if ref is None or (self.subjects is not None and ref not in self.subjects):
            return None
        return ref

    @property
    def may_write_memory(self) -> bool:
        return self.role in ("assistant", "operator")

    @property
    def is_operator(self) -> bool:
        return self.role == "operator"

    @property
    def unrestricted(self) -> bool:
        return self.tenant is None and self.subjects is None

    @property
    def is_local(self) -> bool:
        """The CLI's caller (unrestricted). It decides what the caller may do (read and
        write files of this machine), never how an answer is worded: the CLI words the
        facade's typed results itself (ADR 0070; tests/test_facade_one_path.py)."""
        return self.credential_id == LOCAL and self.unrestricted


def local_operator(signing_key: str = "operator", writer_key: str | None = None) -> Caller:
    """The CLI's caller: whoever can read the home's private keys acts as its operator;
    ``writer_key`` signs its memory writes (default: the home's writer key)."""
    return Caller(credential_id=LOCAL, role="operator", signing_key=signing_key,
                  writer_key=writer_key)
