"""One code path per use case in the facade (issue 32, ADR 0070): the facade does the same
thing for every caller and the CLI words the typed results and errors itself
(``cli/words.py``). ``Caller.is_local`` may decide only what a caller may do (policy),
never how an answer is worded or in which order the checks run; every use of it in
``service/`` is listed here, by module, function and reason, so a new wording branch
fails this test."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

SERVICE = Path(__file__).resolve().parent.parent / "service"

#: (module, function) -> (uses, reason). A policy decision: what the caller may do.
ALLOWED: dict[tuple[str, str], tuple[int, str]] = {
    ("core.py", "_local_files"): (
        1, "policy: only the local operator reads and writes files of this machine "
           "(export_file, import_file, a certificate's --pack)"),
}


def is_local_uses(root: Path = SERVICE) -> Counter[tuple[str, str]]:
    """Every read of ``.is_local`` in the package, by module and enclosing function (the
    property's own definition in ``caller.py`` is not a use)."""
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        module = path.relative_to(root).as_posix()

        _visit(tree, "<module>", module, found)
    return found


def _visit(node: ast.AST, function: str, module: str,
           found: Counter[tuple[str, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _visit(child, child.name, module, found)
            continue
        if isinstance(child, ast.Attribute) and child.attr == "is_local":
            found[(module, function)] += 1
        _visit(child, function, module, found)


def test_is_local_decides_only_what_a_caller_may_do() -> None:
    expected = {place: uses for place, (uses, _reason) in ALLOWED.items()}
    found = dict(is_local_uses())
    extra = {p: n for p, n in found.items() if expected.get(p) != n}
    assert found == expected, (
        f"Caller.is_local used where the list does not allow it: {extra}. The facade "
        "does one thing for every caller: raise a typed error with the facts as fields "
        "(NotFound's kind and ref) or return a typed result, and let the CLI word it "
        "(cli/words.py). If this is a policy decision (what the caller may do), add it "
        "to ALLOWED with its reason (ADR 0070).")


def test_the_counter_sees_a_wording_branch(tmp_path: Path) -> None:
    (tmp_path / "cases.py").write_text(
        "def get(caller, app, ref):\n"
        "    if caller.is_local:\n"
        "        return app.get(ref)  # the application's words\n"
        "    return app.scoped(caller, ref)\n")
    assert is_local_uses(tmp_path) == Counter({("cases.py", "get"): 1})
