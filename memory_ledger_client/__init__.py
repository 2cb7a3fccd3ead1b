"""A typed Python client of the ledger's HTTP API (``ledger serve``, ADR 0057).

    from memory_ledger_client import Client

    with Client("http://127.0.0.1:8765", token=TOKEN) as ledger:
        ledger.remember("Prefers short answers with one example", kind="preference")
        print(ledger.recall("how long should answers be", k=3).prompt)

It imports the request and response models of ``service/models.py`` (pydantic only) and
httpx: not the server, the write side or any database.
"""

from __future__ import annotations

from memory_ledger_client._calls import RetryPolicy
from memory_ledger_client.client import AsyncClient, Client
from memory_ledger_client.errors import (
    ApiError,
    BadInput,
    ClientError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    RefusedInput,
    ServerError,
    TimedOut,
    TooLarge,
    Unauthorized,
    Unavailable,
    Unreachable,
    VerificationFailed,
)

__all__ = [
    "ApiError", "AsyncClient", "BadInput", "Client", "ClientError", "Conflict", "Forbidden",
    "InvalidRequest", "NotFound", "RateLimited", "RefusedInput", "RetryPolicy",
    "ServerError", "TimedOut", "TooLarge", "Unauthorized", "Unavailable", "Unreachable",
    "VerificationFailed",
]
