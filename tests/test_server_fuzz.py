"""Property test of the HTTP API against its own OpenAPI document (schemathesis): no 5xx,
no response outside the schema, and no content of another subject in any response.

The caller is an assistant scoped to subject ``alice``; subject ``bob``'s memories carry
a marker that must appear in no response whatever the generated request asks for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from ledger.application import LedgerApp

from .conftest import run_cli
from .serving import Server, issue, serving

pytestmark = pytest.mark.slow

DOC = json.loads((Path(__file__).resolve().parents[1] / "docs" / "openapi.json").read_text())
schema = schemathesis.openapi.from_dict(DOC)
BOB_MARKER = "zq-bob-marker-7731"


class Fuzzed:
    def __init__(self, server: Server, token: str) -> None:
        self.server = server
        self.token = token


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    home = tmp_path_factory.mktemp("fuzz") / "home"
    LedgerApp.initialize(home)
    h = str(home)
    for ref in ("alice", "bob"):
        assert run_cli("--home", h, "subject", "add", ref).code == 0
    run_cli("--home", h, "atom", "add", "--subject", "alice", "--text", "Keeps bees")
    run_cli("--home", h, "atom", "add", "--subject", "bob", "--ref", "bob_atom",
            "--text", f"Secret {BOB_MARKER} of bob")
    run_cli("--home", h, "artifact", "add", "--subject", "bob", "--kind", "chat",
            "--ref", "bob_art", "--body", f"Chat {BOB_MARKER}")
    _, token = issue(home, "fuzz", "assistant", ["alice"])
    with serving(home) as server:
        yield Fuzzed(server, token)
        assert BOB_MARKER not in server.output()


OPERATIONS = [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_api_conforms_to_its_schema_and_leaks_nothing(operation: Any, fuzzed: Fuzzed) -> None:
    """One test per operation of the document (plain pytest parameters, so pytest-xdist
    sees each), each with examples generated from the operation's schema: valid requests
    and, where the schema allows one, invalid ones."""
    strategies = [operation.as_strategy(GenerationMode.POSITIVE)]
    try:
        strategies.append(operation.as_strategy(GenerationMode.NEGATIVE))
    except Exception:  # noqa: S110 - an operation with nothing to make invalid
        pass
    cases = st.one_of(*strategies)

    @settings(max_examples=12, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        case = data.draw(cases)
        response = case.call(base_url=fuzzed.server.url,
                             headers={"Authorization": f"Bearer {fuzzed.token}"}, timeout=60)
        case.validate_response(response, checks=[not_a_server_error,
                                                 response_schema_conformance])
        assert BOB_MARKER.encode() not in response.content

    check()
