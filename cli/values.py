"""Command-line values of plain types converted without pydantic (ADR 0060).

typer converts every parameter's value through a pydantic ``TypeAdapter`` built when the
command runs: pydantic's import and a schema per parameter, a fifth of a short command's
CPU. Nearly all of ours are text, paths, numbers, flags and lists of them, converted by
``str``, ``Path``, ``int`` or ``float`` (a flag is a ``bool`` already, or unset);
:func:`install` gives such a parameter a converter that does just that, and hands every
other value (a choice, a malformed number, a path it cannot read) to typer's own
conversion, so results and error messages stay typer's. ``tests/test_startup.py`` checks
that both agree on every parameter of the command tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class _NotPlain(Exception):
    """The value is not one the plain converter takes: typer converts it."""


def _text(value: Any) -> str:
    if type(value) is not str:
        raise _NotPlain
    return value


def _flag(value: Any) -> bool:
    if type(value) is not bool:
        raise _NotPlain
    return value


def _int(value: Any) -> int:
    if type(value) is not str or not _INT.fullmatch(value):
        raise _NotPlain
    return int(value)


def _float(value: Any) -> float:
    if type(value) is not str or not _FLOAT.fullmatch(value):
        raise _NotPlain
    return float(value)


def _path(value: Any) -> Path:
    # typer (click's Path, default flags): a path that exists must be readable.
    if type(value) is not str or not value or (os.path.exists(value)
                                               and not os.access(value, os.R_OK)):
        raise _NotPlain
    return Path(value)


_CONVERTERS: dict[Any, Callable[[Any], Any]] = {str: _text, bool: _flag, int: _int,
                                                  float: _float, Path: _path}
_PATH_DEFAULTS = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False,
                  "readable": True, "resolve_path": False, "allow_dash": False,
                  "path_type": None}


def _converter(descriptor: Any) -> Callable[[Any], Any] | None:
    """The plain converter of a parameter's type, if its type and options are plain."""
    info = descriptor.parameter_info
    if (descriptor.file_annotation is not None or info.parser is not None
            or info.min is not None or info.max is not None or info.clamp
            or any(getattr(info, k, v) != v for k, v in _PATH_DEFAULTS.items())):
        return None
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    return _CONVERTERS.get(annotation)


class PlainValue:
    """What typer's ``RuntimeParam`` does for a parameter of a plain type, without pydantic."""

    def __init__(self, convert: Callable[[Any], Any], is_list: bool) -> None:
        self.convert, self.is_list = convert, is_list

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        multi = param.multiple or param.nargs == -1
        if value is None:
            return () if multi else None
        try:
            if multi or self.is_list:
                if not multi or isinstance(value, str):
                    raise _NotPlain
                return [self.convert(item) for item in value]
            return self.convert(value)
        except _NotPlain:
            return typers(param).coerce(value, param=param, ctx=ctx)


def typers(param: Any) -> Any:
    """typer's own conversion of ``param`` (pydantic)."""
    from typer._coercion import build_runtime_param

    return build_runtime_param(param.type_descriptor)


def install(param: Any) -> None:
    """Give ``param`` the plain converter if its type has one; else leave it to typer."""
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is None or getattr(param, "_runtime_param", "unset") is not None:
        return  # not a typer parameter, or converter already built
    convert = _converter(descriptor)
    if convert is not None:
        param._runtime_param = PlainValue(convert, get_origin(descriptor.annotation) is list)


def install_all(command: Any) -> None:
    """:func:`install` on every parameter of ``command`` and of the commands under it,
    and on the help option that click makes when a command is parsed."""
    for param in command.params:
        install(param)
    made = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            install(option)
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        install_all(sub)
