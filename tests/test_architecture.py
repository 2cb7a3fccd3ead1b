"""The layering rule holds: keys -> ledger -> projections -> governance -> service ->
server, each importing only the layers below it (.importlinter; docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept() -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout



def test_surfaces_reach_the_layers_only_through_the_facade() -> None:
    """The server's surfaces (HTTP routes, MCP tools, console pages) hold no domain logic:
    they name no internals below the facade (the app, its recorder, repository, data keys,
    mapper, tree, or the read models)."""
    internals = (".recorder", ".repository", ".datakeys", ".mapper", ".tlog", ".proj.")
    offenders = []
    for path in sorted((REPO / "server").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "svc.app" in line or "svc.proj" in line or \
                    any(f"app{name}" in line for name in internals):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_no_layer_takes_the_application_as_any() -> None:
    """Issue 14: the seam between the layers is typed. A parameter or attribute named
    ``app`` (or ``*_app``, an opener) annotated with ``Any`` anywhere in the packages fails
    (``app: LedgerApp``, imported under TYPE_CHECKING where a runtime import would cycle)."""
    import ast

    found = []
    for package in ("keys", "ledger", "projections", "governance", "service", "server"):
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
