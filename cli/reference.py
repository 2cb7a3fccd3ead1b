"""The reference of every ``ledger`` command, drawn from the commands themselves.

``python -m cli.reference`` writes ``docs/cli.md``; ``tests/test_cli_reference.py`` checks
that the file is what the commands say now, so a new command, option or help text cannot
land without its reference (as sqlite-utils keeps its CLI reference). Each command gets its
help text, its example, its usage line and a table of its arguments and options; the
options every command takes (``--home``, ``-q``, ``-v``) are listed once.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any

from cli.main import _GLOBAL_AFTER, _leaves, command

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

HEADER = """\
# The `ledger` command

Every command, as `ledger COMMAND --help` says it. Written by `python -m cli.reference`
from the commands themselves; `tests/test_cli_reference.py` fails when this file and the
commands differ. Exit codes: README, "Exit codes".

Every command also takes these, before or after its name:

| option | meaning |
|---|---|
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(param: Any) -> str:
    value = param.default
    if value is None or callable(value) or getattr(param, "is_flag", False) \
            or value == () or value == []:
        return ""
    if isinstance(value, (list, tuple)):
        value = ", ".join(map(str, value))
    return f"`{value}`"


def _names(param: Any) -> str:
    if param.param_type_name == "argument":
        return f"`{str(param.name).upper()}`"
    opts = [*param.opts, *param.secondary_opts]
    metavar = "" if getattr(param, "is_flag", False) or getattr(param, "count", False) \
        else f" {param.metavar or str(param.name).upper()}"
    return ", ".join(f"`{o}{metavar if o == opts[0] else ''}`" for o in opts)


def _help(text: str) -> tuple[str, list[str]]:
    """The help text's prose and its example lines (from the first ``Example``)."""
    text = re.sub(r"(?<=\S)[ \t]+(?=Examples?:)", "\n\n", inspect.cleandoc(text))
    lines = text.replace("\b\n", "").splitlines()
    for n, line in enumerate(lines):
        if line.lstrip().startswith(("Example:", "Examples:")):
            first = line.split(":", 1)[1].strip()
            example = ([first] if first else []) + [x.strip() for x in lines[n + 1:]
                                                     if x.strip()]
            return "\n".join(lines[:n]).strip(), example
    return "\n".join(lines).strip(), []


def render() -> str:
    root = command()
    out = [HEADER]
    for param in root.params:
        if any(o in _GLOBAL_AFTER for o in param.opts):
            out.append(f"| {_names(param)} | {_cell(param.help or '')} |\n")
    for path, leaf in sorted(_leaves(root)):
        name = " ".join(("ledger", *path))
        prose, example = _help(leaf.help or "")
        out.append(f"\n## {name}\n\n{prose}\n")
        if example:
            out.append("\n```sh\n" + "\n".join(example) + "\n```\n")
        own = [p for p in leaf.params
               if p.expose_value and not any(o in _GLOBAL_AFTER for o in p.opts)]
        args = " ".join(str(p.name).upper() if p.required else f"[{str(p.name).upper()}]"
                        for p in own if p.param_type_name == "argument")
        options = [p for p in own if p.param_type_name != "argument"]
        out.append(f"\nUsage: `{name}{' [OPTIONS]' if options else ''}"
                   f"{' ' + args if args else ''}`\n")
        if own:
            out.append("\n| argument or option | meaning | default |\n|---|---|---|\n")
            for p in own:
                required = " (required)" if p.required and p.param_type_name != "argument" \
                    else ""
                out.append(f"| {_names(p)} | {_cell(getattr(p, 'help', None) or '')}"
                           f"{required} | {_default(p)} |\n")
    return "".join(out)


def main() -> None:
    text = render()
    if "--check" in sys.argv[1:]:
        if REFERENCE.read_text(encoding="utf-8") != text:
            sys.exit(f"{REFERENCE} is out of date: run python -m cli.reference")
        return
    REFERENCE.write_text(text, encoding="utf-8")
    print(f"wrote {REFERENCE} ({text.count(chr(10) + '## ')} commands)")


if __name__ == "__main__":
    main()
