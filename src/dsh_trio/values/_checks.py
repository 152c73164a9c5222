"""Structural checks of typed session data, without copying it.

``attrs`` does not check field types, so a typed value handed to ``Session.append``
could hold anything. The checkers here walk a value against the annotations of
its classes (and the shape rules of :mod:`dsh_trio.values._rules`) and report the
first problem with its path, e.g. ``data.message.content[0].text must be a str, got
int``. They never copy: typed data is shared, immutable, and trusted once checked.

The checkers are generated once per class from the field types of its shape
(:mod:`._wire`).
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from ._causes import CancelCause
from ._json import (
    MAX_SAFE_INTEGER as MAX_SAFE,
    DataShapeError,
    check_json_value,
    utf8_ok,
)
from ._rules import RULES
from ._wire import UNIONS, is_json, shape

__all__ = ["check_typed", "checker"]

Check = Callable[[Any], None]

_SURROGATE: Final = "contains a lone surrogate, which UTF-8 cannot encode"


def _tname(value: object) -> str:
    return type(value).__name__


# --------------------------------------------------------------------------- leaves


def _check_int(value: object) -> None:
    if value.__class__ is not int:
        raise DataShapeError(f"must be an int, got {_tname(value)}")
    if not -MAX_SAFE <= value <= MAX_SAFE:
        raise DataShapeError(f"is an integer outside the safe range: {value!r}")


def _check_str(value: object) -> None:
    if not isinstance(value, str):
        raise DataShapeError(f"must be a str, got {_tname(value)}")
    if not utf8_ok(value):
        raise DataShapeError(_SURROGATE)


def _check_bool(value: object) -> None:
    if value.__class__ is not bool:
        raise DataShapeError(f"must be a bool, got {_tname(value)}")


def _check_none(value: object) -> None:
    if value is not None:
        raise DataShapeError(f"must be None, got {_tname(value)}")


def _check_number(value: object) -> None:
    if value.__class__ is int:
        _check_int(value)
    elif value.__class__ is float:
        check_json_value(value)
    else:
        raise DataShapeError(f"must be a number, got {_tname(value)}")


_check_json_field: Final = check_json_value


# --------------------------------------------------------------------------- builders

_CACHE: dict[object, Check] = {}


def checker(tp: object) -> Check:
    """The checker of annotation ``tp`` (cached)."""
    found = _CACHE.get(tp)
    if found is not None:
        return found
    built = _build(tp)
    _CACHE[tp] = built
    return built


def _build(tp: object) -> Check:
    if is_json(tp):
        return _check_json_field
    if tp is type(None) or tp is None:
        return _check_none
    if tp is int:
        return _check_int
    if tp is str:
        return _check_str
    if tp is bool:
        return _check_bool
    if tp is float:
        return _check_number
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # typing.NewType
        return checker(supertype)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return _literal(typing.get_args(tp))
    if origin is tuple:
        return _tuple(typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return _union(typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if tp is CancelCause:
        return _classes(UNIONS[CancelCause].members, "a cancel cause")
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_class(tp)
    raise TypeError(f"no checker for annotation {tp!r}")  # a bug in _values, not input


def _literal(options: tuple[object, ...]) -> Check:
    allowed = frozenset(options)
    shown = ", ".join(repr(o) for o in options)

    def check(value: object) -> None:
        if value.__class__ is not str or value not in allowed:
            raise DataShapeError(f"must be one of {shown}, got {value!r:.40}")

    return check


def _enum(cls: type[enum.Enum]) -> Check:
    allowed = frozenset(m.value for m in cls)
    shown = ", ".join(repr(v) for v in sorted(allowed))

    def check(value: object) -> None:
        if not isinstance(value, str) or value not in allowed:
            raise DataShapeError(f"must be one of {shown}, got {value!r:.40}")

    return check


def _tuple(args: tuple[object, ...]) -> Check:
    if len(args) != 2 or args[1] is not Ellipsis:
        raise TypeError(f"only homogeneous tuples are supported, got {args!r}")
    item_type = args[0]
    if item_type is int:
        return _int_tuple
    if item_type is str:
        return _str_tuple
    item: Check | None = None

    def check(value: object) -> None:
        nonlocal item
        if value.__class__ is not tuple:
            raise DataShapeError(f"must be a tuple, got {_tname(value)}")
        if item is None:
            item = checker(item_type)
        for i, v in enumerate(value):
            try:
                item(v)
            except DataShapeError as exc:
                raise exc.at(f"[{i}]") from None

    return check


def _int_tuple(value: object) -> None:
    if value.__class__ is not tuple:
        raise DataShapeError(f"must be a tuple, got {_tname(value)}")
    items: tuple[Any, ...] = value
    if not all(v.__class__ is int for v in items) or (
        items and (min(items) < -MAX_SAFE or max(items) > MAX_SAFE)
    ):
        for i, v in enumerate(items):
            try:
                _check_int(v)
            except DataShapeError as exc:
                raise exc.at(f"[{i}]") from None


def _str_tuple(value: object) -> None:
    if value.__class__ is not tuple:
        raise DataShapeError(f"must be a tuple, got {_tname(value)}")
    items: tuple[Any, ...] = value
    if not all(v.__class__ is str and v.isascii() for v in items):
        for i, v in enumerate(items):
            try:
                _check_str(v)
            except DataShapeError as exc:
                raise exc.at(f"[{i}]") from None


def _union(args: tuple[object, ...]) -> Check:
    optional = type(None) in args
    members = tuple(a for a in args if a is not type(None))
    classes = tuple(m for m in members if isinstance(m, type) and attrs.has(m))
    if len(classes) == len(members):
        inner = _classes(classes, " | ".join(m.__name__ for m in classes))
    elif len(members) == 1:
        inner = checker(members[0])
    else:
        parts: list[Check] | None = None

        def inner(value: object) -> None:
            nonlocal parts
            if parts is None:
                parts = [checker(m) for m in members]
            first: DataShapeError | None = None
            for part in parts:
                try:
                    part(value)
                except DataShapeError as exc:
                    first = first or exc
                else:
                    return
            assert first is not None
            raise first

    if not optional:
        return inner

    def check_optional(value: object) -> None:
        if value is not None:
            inner(value)

    return check_optional


def _classes(members: tuple[type[Any], ...], names: str) -> Check:
    table: dict[type[Any], Check] = {}

    def check(value: object) -> None:
        found = table.get(value.__class__)
        if found is None:
            if value.__class__ not in members:
                raise DataShapeError(f"must be {names}, got {_tname(value)}")
            found = table[value.__class__] = checker(value.__class__)
        found(value)

    return check


def _attrs_class(cls: type[Any]) -> Check:
    # The checker is generated as straight-line code (one test per field, the
    # common scalar cases inline) because it runs on every append. Tuples and
    # unions resolve their members lazily, so recursive types (a tool result block
    # holding blocks) never recurse here.
    # Field types from the class's shape: resolved once and cached by attrs (the
    # public classes are resolved before their __module__ is pointed at the public
    # package, see dsh_trio/__init__).
    fields = shape(cls).fields
    ns: dict[str, Any] = {
        "cls": cls,
        "M": MAX_SAFE,
        "DataShapeError": DataShapeError,
        "_tname": _tname,
        "_check_int": _check_int,
        "_check_str": _check_str,
        "_check_bool": _check_bool,
        "_check_json_field": _check_json_field,
        "extra": RULES.get(cls),
    }
    lines = [
        "def check(value):",
        "    if value.__class__ is not cls:",
        "        raise DataShapeError(",
        "            f'must be a {cls.__name__}, got {_tname(value)}')",
    ]
    for k, field in enumerate(fields):
        name = field.name
        seg = repr(f".{name}")
        tp = field.type
        if is_json(tp):
            base, guard, chk = tp, "v is not None", "_check_json_field"
        else:
            args = typing.get_args(tp)
            is_union = typing.get_origin(tp) in (typing.Union, types.UnionType)
            if is_union and len(args) == 2 and type(None) in args:
                base = next(a for a in args if a is not type(None))
                optional = "v is not None and "
            else:
                base, optional = tp, ""
            if getattr(base, "__supertype__", None) is not None:
                base = base.__supertype__
            if base is int:
                guard = f"{optional}(v.__class__ is not int or not -M <= v <= M)"
                chk = "_check_int"
            elif base is str:
                guard = f"{optional}(v.__class__ is not str or not v.isascii())"
                chk = "_check_str"
            elif base is bool:
                guard = f"{optional}v.__class__ is not bool"
                chk = "_check_bool"
            else:
                chk = f"c{k}"
                ns[chk] = checker(base)
                guard = f"{optional}True" if optional else "True"
        lines += [
            f"    v = value.{name}",
            f"    if {guard}:",
            "        try:",
            f"            {chk}(v)",
            "        except DataShapeError as exc:",
            f"            raise exc.at({seg}) from None",
        ]
    if ns["extra"] is not None:
        lines.append("    extra(value)")
    exec(compile("\n".join(lines), f"<check {cls.__qualname__}>", "exec"), ns)
    check: Check = ns["check"]
    return check


def check_typed(cls: type[Any], value: object) -> None:
    """Check ``value`` against attrs class ``cls``.

    Raises:
        DataShapeError: the first problem, with its path below the value.
    """
    checker(cls)(value)
