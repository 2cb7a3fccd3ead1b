"""RFC 8785 (JCS) canonical JSON, byte-identical to ``rfc8785.dumps``, at C speed.

``rfc8785`` is the reference for every signed or hashed byte string (ADR 0001); it is
pure Python and costs more per event than the signature itself (ADR 0008). For the
values where it is provably identical, :func:`dumps` serialises with ``orjson`` (keys
sorted, no whitespace, UTF-8 output) and hands everything else to ``rfc8785.dumps``,
so the result, or the exception raised, is always exactly the one ``rfc8785.dumps``
gives. A short walk over the value (:func:`_prepare`) proves the fast path applies and
rewrites integral floats; ``orjson`` itself refuses the rest. Where they meet:

* ``None``, ``bool``, ``str``: identical. Both escape ``"``, ``\\``, ``\\b``, ``\\f``,
  ``\\n``, ``\\r``, ``\\t`` by name and the other characters below U+0020 as lowercase
  ``\\u00xx``, and nothing else (U+007F, U+2028 and astral characters stay raw);
  ``tests/test_canonical.py`` checks every code point. ``orjson`` refuses a lone
  surrogate (not valid UTF-8), which falls back, and ``rfc8785`` raises.
* ``int`` (exact type): identical within ±(2**53 - 1); ``OPT_STRICT_INTEGER`` makes
  ``orjson`` refuse anything outside (``rfc8785`` raises ``IntegerDomainError``).
* ``float`` (exact type): ``rfc8785`` formats ``repr(x)`` in the ECMAScript style. For
  ``1e-4 <= |x| < 1e16`` Python's ``repr`` has no exponent and the same shortest
  round-trip digits as ``orjson``, so it is identical except that an integral float
  loses its ``.0``: the walk turns those into ``int`` (when ``|x| <= 2**53 - 1``, so
  exactly). ``0.0`` and ``-0.0`` become ``0``. Everything else (smaller, larger, NaN,
  which ``orjson`` would write as ``null``, infinities) falls back.
* ``dict`` (exact type) with ``str`` keys: ``rfc8785`` sorts keys by UTF-16 code
  units, ``orjson`` by code points; the orders agree unless a key holds a character at
  or above U+D800, and such a dict falls back. Non-``str`` keys fall back.
* ``list`` and ``tuple`` (exact types): arrays in both.
* Anything else falls back: subclasses of the types above (``OPT_PASSTHROUGH_SUBCLASS``
  hands them to ``default``, which refuses; the walk refuses them first), and the types
  ``orjson`` would serialise but ``rfc8785`` refuses (``UUID``, enums, ``datetime``,
  dataclasses, ``orjson.Fragment``), which the walk never lets through; so does nesting
  too deep to walk.

``tests/test_canonical.py`` checks this differentially with hypothesis, on every code
point, and on the RFC 8785 examples.
"""

from __future__ import annotations

from typing import Any

import orjson
import rfc8785

__all__ = ["CanonicalizationError", "dumps"]

CanonicalizationError = rfc8785.CanonicalizationError

_INT_MAX = 2**53 - 1

_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER | orjson.OPT_PASSTHROUGH_SUBCLASS
            | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS)

_orjson_dumps = orjson.dumps


class _Fallback(Exception):
    """The fast path cannot promise rfc8785's bytes for this value."""


def _no_default(obj: object) -> object:
    raise _Fallback  # unreachable: _prepare lets only JSON types through


# Exact types the walk passes as they are: orjson encodes them as rfc8785 does (ints
# outside ±(2**53 - 1) are refused by OPT_STRICT_INTEGER and fall back).
_PLAIN = frozenset({str, bool, int, type(None)})


def _prepare(v: Any) -> Any:
    """``v`` with integral floats as ints, or raise :class:`_Fallback` (module docstring)."""
    t = type(v)
    return v if t in _PLAIN else _prepare_other(v, t)


def _prepare_other(v: Any, t: type) -> Any:
    if t is float:
        a = abs(v)
        if 1e-4 <= a < 1e16:  # False for NaN
            if v.is_integer():
                if a <= _INT_MAX:
                    return int(v)
                raise _Fallback
            return v
        if v == 0:
            return 0
        raise _Fallback
    if t is dict:
        out = None
        for k, x in v.items():
            if type(k) is not str:
                raise _Fallback
            tx = type(x)
            if tx in _PLAIN:
                continue
            y = _prepare_other(x, tx)
            if y is not x:
                if out is None:
                    out = dict(v)
                out[k] = y
        keys = "".join(v)  # every key is a str: one check for the characters of all
        if not keys.isascii() and max(keys) >= "\ud800":
            raise _Fallback
        return v if out is None else out
    if t is list or t is tuple:
        out_list = None
        for i, x in enumerate(v):
            tx = type(x)
            if tx in _PLAIN:
                continue
            y = _prepare_other(x, tx)
            if y is not x:
                if out_list is None:
                    out_list = list(v)
                out_list[i] = y
        return v if out_list is None else out_list
    raise _Fallback


def dumps(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value``: exactly ``rfc8785.dumps(value)``, or its error."""
    try:
        return _orjson_dumps(_prepare(value), default=_no_default, option=_OPTIONS)
    except (_Fallback, RecursionError, orjson.JSONEncodeError):
        pass
    return rfc8785.dumps(value)
