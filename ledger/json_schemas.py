"""The JSON Schemas shipped in ``schemas/``, loaded once and compiled into validators.

One loader for every schema the code checks against (memoryPolicy, the Konshus and
Persona exports, the Evidence Pack predicate): Draft 2020-12, with format checking.
``jsonschema`` is imported on first use, not at start-up (ADR 0026).
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

__all__ = ["validator"]


@functools.cache
def validator(name: str) -> Draft202012Validator:
    """The validator of ``schemas/<name>`` (a file name such as ``memory-policy.json``)."""
    import importlib.resources

    import jsonschema

    schema = json.loads(importlib.resources.files("schemas").joinpath(name)
                        .read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
