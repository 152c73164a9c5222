"""The leaves of the fast decoders of :mod:`._fast`: checks of plain values, shared
strings, and building an attrs value slot by slot."""

from __future__ import annotations

from typing import Any, Final

import attrs

from ._json import MAX_SAFE_INTEGER, check_json, utf8_ok

__all__ = [
    "MISSING",
    "SHARED_FIELDS",
    "Slow",
    "bool_",
    "direct_setters",
    "int_",
    "int_tuple",
    "json_",
    "share",
    "str_",
    "str_tuple",
]


class Slow(Exception):
    """The fast decoder does not take this input; use the general converter."""


_SLOW: Final = Slow  # raised as the class: a fresh instance each time
MISSING: Final = object()


# --------------------------------------------------------------------------- leaves


def int_(v: Any) -> int:
    if v.__class__ is not int or not -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
        raise _SLOW
    return v


def str_(v: Any) -> str:
    if v.__class__ is not str or not (v.isascii() or utf8_ok(v)):
        raise _SLOW
    return v


def bool_(v: Any) -> bool:
    if v.__class__ is not bool:
        raise _SLOW
    return v


def json_(v: Any) -> Any:
    try:
        return check_json(v)
    except TypeError:
        raise _SLOW from None


def int_tuple(v: Any) -> tuple[int, ...]:
    if v.__class__ is not list:
        raise _SLOW
    for x in v:
        if x.__class__ is not int or not -MAX_SAFE_INTEGER <= x <= MAX_SAFE_INTEGER:
            raise _SLOW
    return tuple(v)


def str_tuple(v: Any) -> tuple[str, ...]:
    if v.__class__ is not list:
        raise _SLOW
    for x in v:
        if x.__class__ is not str or not (x.isascii() or utf8_ok(x)):
            raise _SLOW
    return tuple(v)


# --------------------------------------------------------------------------- sharing

#: String fields whose values repeat across a log (routes, tool names, block kinds,
#: error codes): equal values are kept once. Ids and texts are not shared (they
#: rarely repeat, and a table entry would cost more than it saves).
SHARED_FIELDS: Final = frozenset({"provider", "model", "name", "block_type", "code"})
_SHARED_MAX: Final = 4096
_SHARED_LEN: Final = 64
_shared: dict[str, str] = {}


def share(v: str) -> str:
    found = _shared.get(v)
    if found is not None:
        return found
    if len(v) <= _SHARED_LEN and len(_shared) < _SHARED_MAX:
        _shared[v] = v
    return v


def direct_setters(cls: type[Any]) -> dict[str, Any] | None:
    """The slot setters of ``cls`` when its ``__init__`` only stores its arguments.

    Such an instance can be built without the ``__init__`` call: a new object, then
    each slot set (defaults included), exactly what ``__init__`` would store. Any
    class whose ``__init__`` does more (validators, converters, a post-init hook, a
    cached hash, a field left out of ``__init__``, a default computed from the
    instance) is built by calling it.
    """
    if "__slots__" not in cls.__dict__ or "__attrs_cached_hash__" in cls.__slots__:
        return None
    if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
        return None
    setters: dict[str, Any] = {}
    for field in attrs.fields(cls):
        default = field.default
        if (
            not field.init
            or field.validator is not None
            or field.converter is not None
            or (isinstance(default, attrs.Factory) and default.takes_self)  # type: ignore[arg-type]
        ):
            return None
        slot: Any = getattr(cls, field.name, None)
        if type(slot).__name__ != "member_descriptor":
            return None
        setters[field.name] = slot.__set__
    return setters
