"""RFC 8785 (JCS) canonical JSON, byte-identical to ``rfc8785.dumps``, at C speed.

``rfc8785`` is the reference for every signed or hashed byte string (ADR 0001); it is
pure Python and costs more per event than the signature itself (ADR 0008). For the
values where it is provably identical, :func:`dumps` uses CPython's C JSON encoder
(keys sorted, no whitespace, UTF-8 output, ``\\uXXXX`` escapes only for control
characters) and hands everything else to ``rfc8785.dumps``, so the result, or the
exception raised, is always exactly the one ``rfc8785.dumps`` gives. Where they meet:

* ``None``, ``bool``, ``str``: identical. Both escape ``"``, ``\\``, ``\\b``, ``\\f``,
  ``\\n``, ``\\r``, ``\\t`` by name and the other characters below U+0020 as lowercase
  ``\\u00xx``, and nothing else (U+007F, U+2028 and astral characters stay raw). A
  lone surrogate cannot be encoded to UTF-8, so it falls back and ``rfc8785`` raises.
* ``int`` (exact type): identical within ±(2**53 - 1); outside it ``rfc8785`` raises
  ``IntegerDomainError``, so those fall back.
* ``float`` (exact type): ``rfc8785`` formats ``repr(x)`` in the ECMAScript style. For
  ``1e-4 <= |x| < 1e16`` Python's ``repr`` has no exponent and the same shortest
  round-trip digits, so it is identical except that an integral float loses its
  ``.0``: those become ``int`` (when ``|x| <= 2**53 - 1``, so exactly). ``0.0`` and
  ``-0.0`` become ``0``. Everything else (smaller, larger, NaN, infinities) falls back.
* ``dict`` (exact type) with ``str`` keys: ``rfc8785`` sorts keys by UTF-16 code
  units, Python by code points; the orders agree unless a key holds a character at or
  above U+D800, and such a dict falls back. Non-``str`` keys fall back (``json`` would
  coerce them; ``rfc8785`` raises).
* ``list`` and ``tuple`` (exact types): arrays in both.
* Anything else, subclasses included, and nesting too deep to walk, falls back.

``tests/test_canonical.py`` checks this differentially with hypothesis and on the
RFC 8785 examples.
"""

from __future__ import annotations

import json
from typing import Any

import rfc8785

__all__ = ["CanonicalizationError", "dumps"]

CanonicalizationError = rfc8785.CanonicalizationError

_INT_MAX = 2**53 - 1


class _Fallback(Exception):
    """The fast path cannot promise rfc8785's bytes for this value."""


def _no_default(obj: object) -> object:
    raise _Fallback  # unreachable: _prepare lets only JSON types through


def _make_encoder() -> Any:
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
    c_encode = getattr(json.encoder, "c_encode_basestring", None)
    if c_make_encoder is None or c_encode is None:  # not CPython's C accelerator
        # (the pure-Python encoder gives the same bytes, only slower)
        encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                   allow_nan=False, check_circular=False)
        return encoder.encode
    # Same arguments json.JSONEncoder.iterencode passes, built once: markers None (no
    # circularity check; _prepare already walked the value), indent None, keys sorted,
    # skipkeys False, allow_nan False.
    c_encoder = c_make_encoder(None, _no_default, c_encode, None, ":", ",", True, False, False)

    def encode(value: Any) -> str:
        return "".join(c_encoder(value, 0))

    return encode


_encode = _make_encoder()


_PLAIN = frozenset({str, bool, type(None)})


def _prepare(v: Any) -> Any:
    """``v`` with integral floats as ints, or raise :class:`_Fallback` (module docstring)."""
    t = type(v)
    return v if t in _PLAIN else _prepare_other(v, t)


def _prepare_other(v: Any, t: type) -> Any:
    if t is int:
        if -_INT_MAX <= v <= _INT_MAX:
            return v
        raise _Fallback
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
            if type(k) is not str or (not k.isascii() and max(k) >= "\ud800"):
                raise _Fallback
            tx = type(x)
            if tx in _PLAIN:
                continue
            y = _prepare_other(x, tx)
            if y is not x:
                if out is None:
                    out = dict(v)
                out[k] = y
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
        return _encode(_prepare(value)).encode("utf-8")  # type: ignore[no-any-return]
    except (_Fallback, RecursionError, UnicodeEncodeError):
        pass
    return rfc8785.dumps(value)
