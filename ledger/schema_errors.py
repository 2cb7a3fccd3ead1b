"""JSON Schema errors in words a person can act on: where (a field path), what is wrong,
and what is allowed there; jsonschema's own text is for programmers (issue 15).

    memoryPolicy.maxAtom: unknown field (did you mean 'maxAtoms'?); allowed here: enabled,
    maxAtoms, ... and x-... extension fields
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from typing import Any

_TYPES = {"boolean": "true or false", "integer": "a whole number", "number": "a number",
          "string": "a string", "object": "a JSON object {...}", "array": "a JSON list [...]",
          "null": "null"}
_FORMATS = {"date-time": "a date and time like 2026-01-31T12:00:00Z (RFC 3339)",
            "date": "a date like 2026-01-31", "uri": "a URI", "email": "an e-mail address",
            "uuid": "a UUID"}


def field_path(root: str, parts: Iterable[Any]) -> str:
    path = root
    for p in parts:
        path += f"[{p}]" if isinstance(p, int) else (f".{p}" if path else str(p))
    return path or "(the document)"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _wanted(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    return " or ".join(_TYPES.get(k, str(k)) for k in kinds) or "another value"


def _unknown(error: Any) -> str:
    schema, instance = error.schema, error.instance
    known = list(schema.get("properties", {}))
    patterns = list(schema.get("patternProperties", {}))
    extra = [k for k in instance if k not in known
             and not any(re.search(p, k) for p in patterns)] if isinstance(instance, dict) else []
    parts = []
    for name in extra:
        close = difflib.get_close_matches(name, known, n=1)
        parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    allowed = ", ".join(known) if known else "no fields"
    if any(p.startswith("^x-") for p in patterns):
        allowed += " and x-... extension fields"
    what = "unknown field" + ("s " if len(parts) > 1 else " ") + ", ".join(parts)
    return f"{what}; allowed here: {allowed}"


def describe(error: Any) -> str:
    """One jsonschema ``ValidationError`` as 'WHAT IS WRONG; WHAT IS ALLOWED'."""
    v, schema, value = error.validator, error.schema, error.instance
    if v in ("additionalProperties", "unevaluatedProperties"):
        return _unknown(error)
    if v == "required":
        missing = [k for k in error.validator_value if not isinstance(value, dict)
                   or k not in value]
        return "missing required field " + ", ".join(f"'{k}'" for k in missing)
    if v == "type":
        return f"must be {_wanted(schema)}, not {_shown(value)}"
    if v == "enum":
        return f"must be one of {', '.join(_shown(x) for x in error.validator_value)}; " \
               f"not {_shown(value)}"
    if v == "const":
        return f"must be {_shown(error.validator_value)}, not {_shown(value)}"
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        word = {"minimum": "at least", "exclusiveMinimum": "more than",
                "maximum": "at most", "exclusiveMaximum": "less than"}[v]
        return f"must be {word} {error.validator_value}, not {_shown(value)}"
    if v == "format":
        return f"must be {_FORMATS.get(error.validator_value, error.validator_value)}, " \
               f"not {_shown(value)}"
    if v in ("minLength", "maxLength"):
        word = "at least" if v == "minLength" else "at most"
        return f"must be {word} {error.validator_value} characters long"
    if v in ("minItems", "maxItems"):
        word = "at least" if v == "minItems" else "at most"
        return f"must hold {word} {error.validator_value} items"
    if v == "pattern":
        return f"{_shown(value)} does not have the expected form (pattern " \
               f"{error.validator_value})"
    return str(error.message)


def summarize(errors: Iterable[Any], root: str = "", limit: int = 5) -> str:
    """Every error on its own line, ``PATH: WHAT``; the first ``limit`` of them."""
    ordered = sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])
    lines = [f"  {field_path(root, e.absolute_path)}: {describe(e)}" for e in ordered[:limit]]
    if len(ordered) > limit:
        lines.append(f"  ... and {len(ordered) - limit} more")
    return "\n".join(lines)


__all__ = ["describe", "field_path", "summarize"]
