"""The layering rule holds: rawfiles -> keys -> ledger -> portability -> projections ->
governance | stores -> service -> credentials -> server | witness -> cli, each importing
only the layers below it, the `ledger` command reaching the ledger through the facade, and
the witness using only the protocol (.importlinter; docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in r.stdout
    assert "The Python client reaches the ledger only over HTTP KEPT" in r.stdout
    assert "The witness uses the protocol, never the ledger it witnesses KEPT" in r.stdout



def test_surfaces_reach_the_layers_only_through_the_facade() -> None:
    """The surfaces (the `ledger` command; HTTP routes, MCP tools, console pages) hold no
    domain logic: they name no internals below the facade (the app, its recorder,
    repository, data keys, mapper, tree, or the read models), and open neither the
    application nor the read models (service/root.py does, ADR 0042)."""
    internals = (".recorder", ".repository", ".datakeys", ".mapper", ".tlog", ".proj.")
    opening = ("LedgerApp(", "Projections(", "LedgerApp.", "open_session(")
    offenders = []
    for path in sorted([*(REPO / "server").rglob("*.py"), *(REPO / "cli").rglob("*.py")]):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "svc.app" in line or "svc.proj" in line or \
                    any(word in line for word in opening) or \
                    any(f"app{name}" in line for name in internals):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_no_layer_takes_the_application_as_any() -> None:
    """Issue 14: the seam between the layers is typed. A parameter or attribute named
    ``app`` (or ``*_app``, an opener) annotated with ``Any`` anywhere in the packages fails
    (``app: LedgerApp``, imported under TYPE_CHECKING where a runtime import would cycle)."""
    import ast

    found = []
    for package in ("rawfiles", "keys", "ledger", "portability", "projections", "governance",
                    "stores", "service", "server", "cli"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.arg):
                    name, annotation = node.arg, node.annotation
                elif isinstance(node, ast.AnnAssign):
                    target = node.target
                    name = target.attr if isinstance(target, ast.Attribute) else \
                        target.id if isinstance(target, ast.Name) else ""
                    annotation = node.annotation
                else:
                    continue
                if annotation is None or not (name == "app" or name.endswith("_app")):
                    continue
                text = ast.unparse(annotation)
                if text == "Any" or "[Any]" in text or "Any," in text:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}: {text}")
    assert not found, "the application typed as Any:\n" + "\n".join(found)


def _read_model_tables() -> set[str]:
    """The attribute names under which the read models (projections/) keep an
    ``sa.Table``: ``self.atoms = sa.Table(...)``."""
    import ast

    names = set()
    for path in sorted((REPO / "projections").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    ast.unparse(node.value.func) in ("sa.Table", "sqlalchemy.Table", "Table"):
                names |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)
                          and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return names


SQL_KEPT = {
    ("governance/backup.py", "sqlalchemy"):
        "make_url parses a PostgreSQL store's URL to describe it in the manifest; no SQL",
    ("governance/restore.py", ".engine"):
        "the staged keystore's engine (keys/), forgetting its old epochs; not a read model",
}
"""Known uses that are not a read model's SQL nor the application's stores, with why. The
service's own stores are in stores/ (ADR 0075), which is not a layer above the read models:
it is where their SQL lives."""

ABOVE_THE_READ_MODELS = ("governance", "service", "server", "cli", "credentials")
APPLICATION_STORES = {"recorder", "repository", "datakeys", "mapper", "tlog", "keyring",
                      "census", "saver"}


@pytest.mark.parametrize("package", ABOVE_THE_READ_MODELS)
def test_the_layers_above_ask_the_read_models_and_the_ledger_by_name(package: str) -> None:
    """Issue 32 (ADR 0067, ADR 0071): governance, the facade and the surfaces ask the read
    models named queries (``proj.atoms.reading()``, ``proj.keyword.phrase_holders(...)``,
    ``feed.rows_after(...)``) and the ledger its reader (``app.reader``) and commands, and
    never see their SQL or stores: no module imports ``sqlalchemy``, reaches an
    ``.engine``, names a read model's table (``proj.<model>.<table>``, the member an
    ``sa.Table`` of projections/) or one of the application's stores
    (``app.recorder``, ``app.datakeys``, ``app.tlog``, ...). The service's own stores ask
    stores/ by name (ADR 0075); what is left is listed, with why, in :data:`SQL_KEPT`."""
    import ast

    tables = _read_model_tables()
    assert {"atoms", "atom_content", "artifact_content", "docs"} <= tables
    found = []
    for path in sorted((REPO / package).rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(m == "sqlalchemy" or m.startswith("sqlalchemy.") for m in modules):
                kind = "sqlalchemy"
            elif isinstance(node, ast.Attribute) and node.attr == "engine":
                kind = ".engine"
            elif isinstance(node, ast.Attribute) and node.attr in tables and \
                    isinstance(node.value, ast.Attribute) and \
                    ast.unparse(node.value.value).split(".")[-1] == "proj":
                kind = "table"
            elif isinstance(node, ast.Attribute) and node.attr in APPLICATION_STORES and \
                    ast.unparse(node.value).split(".")[-1] == "app":
                kind = "application store"
            else:
                continue
            if (rel, kind) not in SQL_KEPT:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)}: {kind}: {ast.unparse(node)}")
    assert not found, f"{package}/ reaches SQL or stores below it:\n" + "\n".join(found)


SERVICE_TABLES = {"drp_requests", "webhook_subscriptions", "webhook_deliveries",
                  "fleet_tenants", "auth_tokens"}
PACKAGES = ("rawfiles", "keys", "ledger", "portability", "projections", "governance",
            "stores", "service", "credentials", "server", "witness", "cli")


def test_the_services_own_tables_are_declared_in_stores_alone() -> None:
    """Issue 32 (ADR 0075): the tables of the service's own (the DRP's requests, the webhook
    subscriptions and deliveries, the fleet's tenants, the bearer tokens) are declared in
    stores/, the room for the SQL the use cases and the credentials may not write, and
    nowhere else."""
    import ast

    where: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and node.args and \
                        isinstance(node.args[0], ast.Constant) and \
                        node.args[0].value in SERVICE_TABLES and \
                        ast.unparse(node.func) in ("sa.Table", "sa.table", "Table", "table"):
                    where.setdefault(node.args[0].value, set()).add(
                        str(path.relative_to(REPO).parent))
    assert where == {table: {"stores"} for table in SERVICE_TABLES}, where


def test_no_cycles_between_the_application_and_its_rules_and_log() -> None:
    """Issue 14's three cycles stay broken: ``ledger/policy_rules.py`` and
    ``ledger/transparency.py`` know the application only by a Protocol of what they read
    (no import of ``ledger.application``, not even for type checking) and call no command
    back (the sweep's ``archive_atoms`` is a ``LedgerApp`` command); ``mem.py`` no longer
    imports the import service that imports it (through ``adapters.py``)."""
    import grimp

    graph = grimp.build_graph("ledger", "portability", "keys", "rawfiles",
                              exclude_type_checking_imports=False)
    for importer, imported in (("ledger.policy_rules", "ledger.application"),
                               ("ledger.transparency", "ledger.application"),
                               ("ledger.verification", "ledger.application"),
                               ("portability.mem", "portability.service"),
                               ("portability.adapters", "portability.service")):
        chain = graph.find_shortest_chain(importer=importer, imported=imported)
        assert chain is None, " -> ".join(chain or ())
    for module in ("ledger/policy_rules.py", "ledger/transparency.py",
                   "ledger/verification.py"):
        text = (REPO / module).read_text(encoding="utf-8")
        for call in ("app.writing(", "app.commit(", "app.recorder", "app.repository"):
            assert call not in text, f"{module} calls {call} on the application"


def test_no_import_circles() -> None:
    """Issue 32: no module reaches back to one it imports, counting imports inside
    functions and under TYPE_CHECKING (as ``farm-studio look`` counts them). The copies
    statement reads a batch's events from ``governance.batch_events``, not from the pack;
    both KEK stores take the wrapped form from ``keys.wrapped``; the server's counters
    know the backend by a Protocol and ``Overloaded`` is ``server.problems``'."""
    import grimp

    graph = grimp.build_graph("rawfiles", "keys", "ledger", "portability", "projections",
                              "governance", "stores", "service", "credentials", "server",
                              "witness", "cli", "memory_ledger_client",
                              exclude_type_checking_imports=False)
    found = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                found.append(" -> ".join((module, *back)))
    assert not found, "import circles:\n  " + "\n  ".join(found)


MAX_FUNCTION_LINES = 60
MAX_FUNCTION_COMPLEXITY = 15


@pytest.mark.parametrize("package", ["governance", "portability"])
def test_functions_are_short_steps(package: str) -> None:
    """Issue 32: no function over 60 lines or of cyclomatic complexity over 15 in
    governance/ (the erasure, the verifiers and the renderers are named steps) and in
    portability/ (an import plan, a record's mapping and applying a plan are named steps)."""
    import ast

    long = []
    for path in sorted((REPO / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"{package} functions over 60 lines:\n  " + "\n  ".join(long)
    ruff = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901",
         "--config", f"lint.mccabe.max-complexity={MAX_FUNCTION_COMPLEXITY}",
         "--output-format", "concise", str(REPO / package)],
        capture_output=True, text=True, cwd=REPO, check=False)
    assert ruff.returncode == 0, f"{package} functions too complex:\n" + ruff.stdout


WRITE_SIDE = ("ledger.application", "ledger.write_side", "ledger.memory_commands",
              "ledger.erasure_commands")
APPLICATION_MAX_LINES = 500


def test_reads_are_a_reader_apart_from_the_commands() -> None:
    """Issue 32 (ADR 0071): the ledger's reads are :class:`ledger.reader.LedgerReader`'s,
    and no read is passed through the application again; the read models and
    verification are handed the reader and cannot reach a command (no import of the write
    side, not even for type checking); ``LedgerApp``'s module stays under 500 lines."""
    import grimp

    from ledger.application import LedgerApp
    from ledger.reader import LedgerReader

    reads = {n for n in vars(LedgerReader) if not n.startswith("_")}
    passed_through = sorted(n for n in reads if hasattr(LedgerApp, n))
    assert not passed_through, f"reads the application passes through: {passed_through}"
    graph = grimp.build_graph("ledger", "keys", "rawfiles", "portability", "projections",
                              exclude_type_checking_imports=False)
    readers = ["ledger.reader", "ledger.verification", "ledger.verify",
               *sorted(graph.find_descendants("projections"))]
    for importer in readers:
        for imported in WRITE_SIDE:
            chain = graph.find_shortest_chain(importer=importer, imported=imported)
            assert chain is None, " -> ".join(chain or ())
    lines = len((REPO / "ledger" / "application.py").read_text(encoding="utf-8").splitlines())
    assert lines < APPLICATION_MAX_LINES, f"ledger/application.py has {lines} lines"


def test_the_atom_is_declared_once_from_the_surface_down() -> None:
    """Issue 32: the API's atom (``service.models.AtomIn``) and the command's
    (``ledger.inputs.AtomInput``) are one declaration, ``AtomProposal``, with what each
    adds; a field both take has the same type and limits in both, so the API cannot
    accept what the command refuses (it took 100 sources where the command took 1,000,
    details of 10,000 characters where it took 2,000)."""
    from ledger.inputs import AtomInput, AtomProposal
    from service.models import AtomIn

    assert issubclass(AtomIn, AtomProposal) and issubclass(AtomInput, AtomProposal)
    api, command = AtomIn.model_fields, AtomInput.model_fields
    as_given = {"subject", "valid_from", "valid_to"}  # the API's strings, the command's parsed
    assert set(api) - set(command) == {"on_similar"}
    for name in set(api) & set(command) - as_given:
        assert (api[name].annotation, api[name].metadata, api[name].default) == (
            command[name].annotation, command[name].metadata, command[name].default), name
