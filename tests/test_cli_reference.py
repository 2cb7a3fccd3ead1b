"""docs/cli.md is what the commands say (cli/reference.py), and every command is documented:
its help, an example, and a help line for each option (issue 32, as sqlite-utils checks its
CLI reference)."""

from __future__ import annotations

from cli.main import _GLOBAL_AFTER, _leaves, command
from cli.reference import REFERENCE, render


def test_docs_cli_md_is_current() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), \
        "docs/cli.md is out of date: run .venv/bin/python -m cli.reference"


def test_every_command_and_option_is_documented() -> None:
    missing = []
    for path, leaf in _leaves(command()):
        name = " ".join(path)
        if not (leaf.help or "").strip():
            missing.append(f"{name}: no help")
        elif "Example" not in leaf.help:
            missing.append(f"{name}: no example")
        for p in leaf.params:
            if p.param_type_name == "option" and p.expose_value \
                    and not any(o in _GLOBAL_AFTER for o in p.opts) \
                    and not (getattr(p, "help", None) or "").strip():
                missing.append(f"{name} {p.opts[0]}: no help")
    assert missing == []
    reference = render()
    for path, _leaf in _leaves(command()):
        assert f"\n## ledger {' '.join(path)}\n" in reference
