"""Shared fixtures. Every storage test runs on SQLite and on PostgreSQL.

PostgreSQL is required, not optional, and never skipped. The tests use the server at
``LEDGER_TEST_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``) when it
answers; when nothing answers there, the session starts a throwaway server of its own
(tests/pgserver.py, ADR 0025) and removes it at the end. ``LEDGER_TEST_PG_START=never``
makes a missing server an error instead. Each test gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from cli.main import main
from ledger.application import LedgerApp
from ledger.home import Config
from service.facade import MemoryService
from service.root import opened_service

from . import pgserver

os.environ.setdefault("LEDGER_LOG_LEVEL", "debug")  # so capture_logs() sees every line
PG_URL, PG_THROWAWAY = pgserver.session_url()
os.environ["LEDGER_TEST_PG"] = PG_URL  # the same server for tests that start processes
BACKENDS = ["sqlite", "postgres"]

KEK_MODE = os.environ.get("LEDGER_TEST_KEK", "file")
"""``softhsm``: every ledger a test makes keeps its KEKs in a throwaway SoftHSM2 token
instead of the home's kek/ folder (``make test`` runs the keystore and erasure suites so,
ADR 0044). Set for the whole session, before any ledger is made, and inherited by the
processes the tests start."""
if KEK_MODE == "softhsm":
    import tempfile

    from .softhsm import MODULE, PIN, TOKEN, make_softhsm, missing

    if missing():
        raise pytest.UsageError(f"LEDGER_TEST_KEK=softhsm, but softhsm2 is missing: {missing()}")
    make_softhsm(Path(tempfile.mkdtemp(prefix="ledger-softhsm-")))
    os.environ["LEDGER_KEK"] = f"pkcs11:token={TOKEN}?module-path={MODULE}"
    os.environ["LEDGER_PKCS11_PIN"] = PIN


def pg_connect() -> psycopg.Connection:
    from sqlalchemy.engine import make_url

    u = make_url(PG_URL)
    return psycopg.connect(dbname=u.database, host=u.host, port=u.port or 5432,
                           user=u.username, password=u.password, autocommit=True)


def drop_schema(schema: str) -> None:
    with pg_connect() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# `make test-fast` (pytest -m "not slow") leaves these out: the functions taking the most
# time in a full run (all parameters together; `pytest --durations=120` to re-measure).
# Each still runs in `make test`.
# New slow tests: @pytest.mark.slow on the test, or a line here.
SLOW = {
    "test_sweep.py::test_each_class_expires_exactly_on_its_day_and_not_before",
    "test_sweep.py::test_a_sweep_run_twice_does_the_work_once",
    "test_sweep.py::test_a_hard_swept_atom_is_not_recalled_and_in_no_file",
    "test_projections_contract.py::test_rebuild_from_zero_equals_incremental",
    "test_projections_contract.py::test_crash_between_batches_resumes_without_loss_or_duplicates",
    "test_canonical.py::test_same_bytes_or_same_error_as_rfc8785",
    "test_canonical.py::test_every_code_point_as_a_string_matches_rfc8785",
    "test_residue_repair.py::test_without_secure_delete_the_word_stays_until_optimize",
    "test_residue_repair.py::test_checkpoint_pages_names_exactly_the_pages_the_checkpoint_writes",
    "test_residue_repair.py::test_residue_in_a_content_page_is_removed_from_that_page_or_table_only",
    "test_residue_repair.py::"
    "test_a_checkpoint_that_cannot_name_its_pages_makes_the_scan_read_the_file_again",
    "test_pack_schema.py::test_resigned_pack_with_altered_predicate_fails_at_step_1_1",
    "test_pack_schema.py::test_built_predicates_validate",
    "test_pack_schema.py::test_every_stored_envelope_validates",
    "test_pack_schema.py::test_build_pack_refuses_a_predicate_outside_the_schema",
    "test_tamper.py::test_flipped_byte_in_any_stored_event_detected",
    "test_requests.py::test_redact_user_takes_its_deadlines_from_the_policy_sla",
    "test_requests.py::test_a_late_completion_is_listed_but_no_longer_overdue",
    "test_portability_roundtrip.py::test_mem_roundtrip_is_identical",
    "test_portability_roundtrip.py::test_konshus_roundtrip_is_identical",
    "test_portability_roundtrip.py::test_persona_roundtrip_is_identical",
    "test_audit_report.py::test_tampered_log_reported_as_failed_with_exit_1",
    "test_audit_report.py::test_audit_flags_of_the_policy_in_force_at_the_period_end",
    "test_audit_report.py::test_whole_log_numbers_match_what_was_done",
    "test_audit_report.py::test_no_memory_content_in_any_format",
    "test_keys.py::test_blocked_shred_fails_loudly_and_a_retry_completes",
    "test_append_throughput.py::test_pooled_keystore_shreds_and_a_blocked_checkpoint_still_fails",
    "test_merkle.py::test_sampled_sizes_up_to_100000_match_pymerkle",
    "test_policy_enforcement.py::test_policy_check_warns_with_the_ids_to_fix",
    "test_policy_enforcement.py::"
    "test_max_atoms_archives_the_lowest_salience_atoms_with_signed_events",
    "test_governance.py::test_any_changed_byte_fails_at_a_named_step",
    "test_governance.py::test_dropped_file_and_foreign_proof_fail",
    "test_transparency.py::test_proofs_still_verify_after_crypto_shredding",
    "test_transparency.py::test_checkpoint_proofs_and_offline_audit_tools",
    "test_transparency.py::test_forked_log_detected",
    "test_envelope.py::test_canonical_bytes_stable_through_round_trip",
    "test_tree_tiles.py::test_a_ledger_with_node_rows_is_converted_on_open",
    "test_portability_mem.py::test_bundle_written_by_portable_memory_imports_with_nothing_lost",
    "test_progress.py::test_quiet_and_json_draw_nothing_on_a_terminal",
    "test_progress.py::test_verify_draws_nothing_on_a_pipe",
    "test_cli.py::test_console_script_runs",
    # measured in a `pytest -m "not slow" --durations=80` run on 2 shared cores (issue 15):
    # the 40 that took 2.2 s or more there (all parameters together), the pty tests of
    # import and redact-user, and the browser test (it needs Chromium: `make test` finds it)
    "test_serve_demo.py::test_serve_demo_runs_end_to_end",
    "test_server.py::test_every_endpoint_answers_like_the_cli",
    "test_receipt.py::test_receipt_any_byte_changed_fails",
    "test_server.py::test_openapi_document_is_committed_and_current",
    "test_erasure_crash.py::test_requests_resume_and_redact_user_resume",
    "test_projections_cli.py::test_rebuild_shows_progress_on_a_terminal_only",
    "test_governance.py::test_redact_user_reaches_every_atom_and_spares_others",
    "test_readme.py::test_the_python_api_block_runs_as_written",
    "test_portability_history.py::"
    "test_correction_survives_export_and_reimport_into_a_fresh_ledger",
    "test_receipt.py::test_receipt_contains_none_of_the_erased_markers",
    "test_receipt.py::test_receipt_under_another_key_or_log_fails",
    "test_mcp.py::test_ledger_mcp_writes_nothing_but_protocol_on_stdout",
    "test_console_security.py::test_revoked_operator_session_ends_at_its_next_request",
    "test_portability_inputs.py::"
    "test_fuzzed_imports_never_crash_and_a_refusal_changes_nothing",
    "test_mcp.py::test_every_tool_in_process_equals_the_cli",
    "test_progress.py::test_a_slow_command_shows_activity_on_a_terminal_only",
    "test_receipt.py::test_receipt_verifies_offline",
    "test_projections_cli.py::test_recall_rehearses_unless_told_not_to",
    "test_portability_roundtrip.py::"
    "test_provenance_and_sensitivity_survive_a_chain_through_every_format",
    "test_pinned_outputs.py::test_output_is_byte_identical_to_the_pinned_one",
    "test_receipt.py::test_receipt_cli_writes_json_and_html",
    "test_governance.py::test_hard_erased_atom_is_reachable_by_no_route",
    "test_erasure_scope.py::test_identifier_ann_does_not_touch_annual_planning",
    "test_server.py::test_sigterm_lets_requests_in_flight_finish",
    "test_projections_cli.py::test_memory_list_and_inspect",
    "test_erasure_scope.py::test_identifier_match_in_other_subject_is_flagged_not_erased",
    "test_portability_sealed_source.py::"
    "test_item6_mem0_user_id_metadata_and_unknown_keys_gone_after_redact_user",
    "test_portability_sealed_source.py::"
    "test_item6_konshus_x_fields_are_sealed_and_erased_with_the_subject",
    "test_receipt.py::test_receipt_verifies_with_a_standard_dsse_verifier",
    "test_projections_cli.py::test_status_and_rebuild",
    "test_envelope.py::test_any_single_byte_change_fails_verification",
    "test_erasure_scope.py::"
    "test_subject_own_memories_matching_identifier_are_erased_as_before",
    "test_projections_contract.py::test_two_runners_racing_apply_each_position_once",
    "test_pack_revocation.py::test_pack_signed_before_the_revocation_still_verifies",
    "test_progress.py::test_activity_line_on_a_terminal_is_wiped_before_other_output",
    "test_merkle.py::test_consistency_proofs_for_sampled_large_pairs",
    "test_recall_semantic.py::test_erasure_reaches_the_recall_index_and_the_dense_vectors",
    "test_architecture.py::test_no_layer_takes_the_application_as_any",
    "test_witness.py::test_witness_killed_between_storing_and_answering_recovers",
    "test_pack_revocation.py::"
    "test_pack_signed_by_key_revoked_before_the_pack_time_fails_at_step_4",
    "test_progress.py::test_import_draws_a_counted_bar_on_a_terminal_and_nothing_on_a_pipe",
    "test_progress.py::"
    "test_redact_user_draws_counted_bars_on_a_terminal_and_nothing_on_a_pipe",
    "test_audit_report.py::test_html_report_in_headless_chromium_shows_the_json_numbers",
}


HEAVY_FILES = ["test_erasure_crash.py", "test_webhooks.py", "test_mcp.py",
               "test_kek_rotation.py", "test_erasure_readers.py", "test_server_load.py",
               "test_extraction.py", "test_readme.py", "test_on_similar.py",
               "test_metrics.py", "test_governance.py", "test_tenants.py"]
"""The files whose tests take longest in all, longest first (the sums of a
``--durations=0`` run on 2026-12-07), collected before the others: pytest-xdist's
``--dist loadfile`` hands files to workers in collection order, so a long file collected
last would run alone at the end while the other workers idle. Only the order of files
changes; a file's own tests keep theirs."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if f"{item.path.name}::{getattr(item, 'originalname', item.name)}" in SLOW:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(HEAVY_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files keep order


def pytest_report_header(config: pytest.Config) -> str:
    if PG_THROWAWAY is None:
        return f"postgresql: {PG_URL} (LEDGER_TEST_PG)"
    return (f"postgresql: throwaway server {PG_URL} from {PG_THROWAWAY.binaries}, started in "
            f"{PG_THROWAWAY.seconds:.1f} s (nothing answered at LEDGER_TEST_PG)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if PG_THROWAWAY is not None:
        PG_THROWAWAY.stop()


@dataclass
class CliResult:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> CliResult:
    """Run ``ledger`` in-process with the exit code, stdout and stderr it produced."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(backend: str) -> Iterator[str | None]:
    if backend == "sqlite":
        yield None
        return
    schema = f"t_{uuid.uuid4().hex[:12]}"
    yield f"{PG_URL}?schema={schema}"
    drop_schema(schema)


@pytest.fixture
def home(tmp_path: Path, db_url: str | None, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LEDGER_NOW", raising=False)
    monkeypatch.delenv("LEDGER_HOME", raising=False)
    path = tmp_path / "home"
    LedgerApp.initialize(path, db=db_url)
    return path


@pytest.fixture
def other_home(tmp_path: Path, backend: str) -> Iterator[Path]:
    """A second, independent ledger on the same backend."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    path = tmp_path / "other-home"
    LedgerApp.initialize(path, db=None if backend == "sqlite" else f"{PG_URL}?schema={schema}")
    yield path
    if backend != "sqlite":
        drop_schema(schema)


@pytest.fixture
def app(home: Path) -> Iterator[LedgerApp]:
    a = LedgerApp(Config.load(home))
    yield a
    a.close()


@pytest.fixture
def svc(home: Path) -> Iterator[MemoryService]:
    """The facade over ``home``, opened as the ``ledger`` command opens it (the read
    models when a use case first needs them); the command's caller is
    ``service.caller.local_operator()``."""
    with opened_service(home, lazy=True) as service:
        yield service


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Byte-for-byte contents of every file below ``folder`` (for 'nothing changed')."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in files_under(folder)}


class RawStore:
    """Direct access to the event table, as an attacker with database access has it."""

    def __init__(self, home: Path) -> None:
        self.config = Config.load(home)
        self.pg = self.config.events.is_postgres
        self.schema = self.config.events.schema

    def _conn(self):  # type: ignore[no-untyped-def]
        if self.pg:
            return pg_connect()
        import sqlite3

        return sqlite3.connect(self.config.events.sqlite_path, isolation_level=None)

    @property
    def table(self) -> str:
        return f'"{self.schema}".ledger_events' if self.pg else "stored_events"

    @property
    def pos(self) -> str:
        return "notification_id" if self.pg else "rowid"

    def _q(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.pg else sql

    def rows(self) -> list[tuple[int, str, int, str, bytes]]:
        with self._conn() as conn:
            cur = conn.execute(
                f"SELECT {self.pos}, originator_id, originator_version, topic, state "
                f"FROM {self.table} ORDER BY {self.pos}")
            return [(int(r[0]), str(r[1]), int(r[2]), str(r[3]), bytes(r[4]))
                    for r in cur.fetchall()]

    def set_state(self, position: int, state: bytes) -> None:
        with self._conn() as conn:
            conn.execute(self._q(f"UPDATE {self.table} SET state=? WHERE {self.pos}=?"),
                         (state, position))

    def delete(self, position: int) -> None:
        with self._conn() as conn:
            conn.execute(self._q(f"DELETE FROM {self.table} WHERE {self.pos}=?"), (position,))

    def swap(self, a: int, b: int) -> None:
        """Exchange the events stored at two log positions (a reordering attack)."""
        rows = {r[0]: r for r in self.rows()}
        ra, rb = rows[a], rows[b]
        with self._conn() as conn:
            upd = self._q(f"UPDATE {self.table} SET originator_id=?, originator_version=?, "
                          f"topic=?, state=? WHERE {self.pos}=?")
            oid = (lambda v: uuid.UUID(v)) if self.pg else (lambda v: v)
            conn.execute(upd, (oid(str(uuid.uuid4()) if self.pg else uuid.uuid4().hex), -1,
                               ra[3], ra[4], a))
            conn.execute(upd, (oid(ra[1]), ra[2], ra[3], ra[4], b))
            conn.execute(upd, (oid(rb[1]), rb[2], rb[3], rb[4], a))

    def insert(self, originator_id: str, version: int, topic: str, state: bytes) -> None:
        with self._conn() as conn:
            if self.pg:
                conn.execute(
                    f"INSERT INTO {self.table} (originator_id, originator_version, topic, state)"
                    " VALUES (%s, %s, %s, %s)", (uuid.UUID(originator_id), version, topic, state))
            else:
                conn.execute(f"INSERT INTO {self.table} VALUES (?,?,?,?)",
                             (uuid.UUID(originator_id).hex, version, topic, state))


@pytest.fixture
def raw(home: Path) -> RawStore:
    return RawStore(home)
