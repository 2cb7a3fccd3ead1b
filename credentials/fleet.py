"""A fleet's bearer tokens (ADR 0061, ADR 0069): the fleet opened with its token store, the
tokens issued against its registry, and the tenant a fleet token reaches.

The registry of tenants and their offboarding are a use case (service/fleet.py); the
tokens live beside it, in the fleet's own database and on its connections (the
``auth_tokens`` table, stores/tokens.py). A token's tenant is bound when it is issued. A
token without a tenant is fleet-wide: an operator's or an auditor's, which names the
tenant of each request (:func:`tenant_caller`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from credentials.tokens import IssuedToken, TokenStore, validate_new_token
from ledger.errors import InputError, NotFound
from ledger.home import StorageURL
from service.caller import Caller
from service.fleet import Fleet

__all__ = ["FLEET_ROLES", "FleetWithTokens", "tenant_caller"]

FLEET_ROLES = ("operator", "auditor")
"""The roles a fleet-wide token (one without a tenant) may hold."""


class FleetWithTokens(Fleet):
    """A fleet home, opened: its registry of tenants (:class:`service.fleet.Fleet`) and
    its token store, on the fleet's database."""

    def __init__(self, home: Path, fleet_id: str, db: StorageURL) -> None:
        super().__init__(home, fleet_id, db)
        self.tokens = TokenStore(self.store.tokens())

    def close(self) -> None:
        self.tokens.close()
        super().close()

    def issue_token(self, name: str, role: str, tenant: str | None,
                    subjects: Iterable[str] = (), expires_at: datetime | None = None,
                    signing_key: str | None = None) -> IssuedToken:
        """A bearer token bound to ``tenant``'s ledger, or fleet-wide (``tenant`` None:
        an operator or auditor, which names a tenant in each request)."""
        subjects = tuple(subjects)
        validate_new_token(name, role, subjects, tenant, expires_at, signing_key)
        if role == "privacy-agent":
            raise InputError("a fleet does not serve the Data Rights Protocol's endpoints, "
                             "so a privacy-agent token would reach nothing",
                             hint="a one-ledger server serves it: the tenant's home on "
                                  "its own (ledger --home FLEET/tenants/NAME serve), with "
                                  "a token of that home (ADR 0061)")
        if tenant is None:
            if role not in FLEET_ROLES:
                raise InputError(f"a fleet-wide token is an operator's or an auditor's, not "
                                 f"an {role}'s", hint="give --tenant NAME")
            if subjects:
                raise InputError("a fleet-wide token reaches every subject of the tenant it "
                                 "names; --subject does not apply",
                                 hint="give --tenant NAME to confine it to subjects")
        else:
            self.tenant(tenant)
            key = signing_key or ("operator" if role == "operator" else None)
            if key is not None and not (self.tenant_home(tenant) / "keys" /
                                        f"{key}.key").is_file():
                raise InputError(f"tenant {tenant} has no private key named {key!r}",
                                 hint=f"create it: ledger --home "
                                      f"{self.tenant_home(tenant)} keys authorize {key} "
                                      "--role operator")
        return self.tokens.create(name, role, subjects, tenant, expires_at, signing_key)


def tenant_caller(caller: Caller, asked: str | None) -> tuple[Caller, str]:
    """The caller a fleet token proves, in its tenant's ledger, and that tenant's name.

    A token bound to a tenant reaches that tenant only: ``asked`` (the request's
    ``Ledger-Tenant`` header) may repeat it, and naming another answers as if that tenant
    did not exist. A fleet-wide operator or auditor names the tenant in ``asked``.
    """
    if caller.tenant is None:  # a fleet-wide operator or auditor names the tenant
        if not asked:
            raise InputError("a fleet-wide token names the tenant of each request",
                             hint="send the header Ledger-Tenant: NAME")
        name = asked
    else:
        if asked and asked != caller.tenant:  # another tenant: as if it did not exist
            raise NotFound(f"no tenant {asked!r} in this fleet",
                           hint="a tenant's token reaches its own tenant only")
        name = caller.tenant
    # the tenant's ledger is the tenant's alone: in it, refs carry no tenant prefix
    return replace(caller, tenant=None), name
