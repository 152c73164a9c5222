"""A fast path for structuring event data: straight-line decoders, one per class.

Reading a long log structures hundreds of thousands of event data objects; the
general converter of :mod:`._converter` dispatches every field through ``cattrs``
hooks. The decoders here are generated once per attrs class from the same shapes
(:mod:`._wire`: wire keys, tags, defaults, unions), with the common cases inline (safe integers,
UTF-8-clean strings, booleans, homogeneous tuples, tagged unions), and they also
apply the shape rules of :mod:`._rules`, so what they return passes the checkers of
:mod:`._checks` as well.

A decoder never reports an error itself: anything it does not accept outright
(a missing or extra key, a wrong type, an unusual annotation, a rule the value
breaks) raises :class:`Slow`, and the caller then structures the data through the
general converter, which gives the value or the error it always gave. So the fast
path changes the speed, never the result: it returns exactly what the converter
returns, for the inputs it accepts.
"""

from __future__ import annotations

import enum
import threading
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from ._converter import structure
from ._fast_leaves import (
    MISSING,
    SHARED_FIELDS,
    Slow,
    bool_,
    direct_setters,
    int_,
    int_tuple,
    json_,
    share,
    str_,
    str_tuple,
)
from ._json import MAX_SAFE_INTEGER, DataShapeError, utf8_ok
from ._rules import RULES
from ._slots import twin
from ._wire import EVENTS, UNIONS, Tagged, is_json, shape

__all__ = ["Slow", "direct_setters", "fast_data"]

_SLOW: Final = Slow  # raised as the class: a fresh instance each time

Decode = Callable[[Any], Any]


# --------------------------------------------------------------------------- builders

_CACHE: dict[object, Decode] = {}


def _decoder(tp: object) -> Decode:
    found = _CACHE.get(tp)
    if found is None:
        # A recursive type (a tool result block holding blocks) meets itself while
        # it is being built: it then gets a forwarder to the finished decoder.
        _CACHE[tp] = _forward(tp)
        try:
            found = _CACHE[tp] = _build(tp)
        except BaseException:
            del _CACHE[tp]
            raise
    return found


def _forward(tp: object) -> Decode:
    def decode(v: Any) -> Any:
        return _CACHE[tp](v)

    return decode


def _build(tp: object) -> Decode:
    if is_json(tp):
        return json_
    if tp is int:
        return int_
    if tp is str:
        return str_
    if tp is bool:
        return bool_
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:  # typing.NewType
        return _decoder(supertype)
    union = UNIONS.get(tp)
    if union is not None:
        return _tagged(union)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Literal and all(a.__class__ is str for a in args):
        return _literal(frozenset(args))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple(args[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if len(members) == 1 and len(args) == 2:
            return _optional(members[0])
    if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
        return _str_enum(tp)
    if isinstance(tp, type) and attrs.has(tp):
        return _attrs_class(tp)
    return _general(tp)


def _general(tp: object) -> Decode:
    """Any other annotation: the general converter, then the checker of ``tp``."""
    from ._checks import checker

    check = checker(tp)

    def decode(v: Any) -> Any:
        try:
            value: Any = structure(v, tp)
            check(value)
        except Exception:
            raise _SLOW from None
        return value

    return decode


def _literal(allowed: frozenset[str]) -> Decode:
    canonical = {a: a for a in allowed}

    def decode(v: Any) -> Any:
        if v.__class__ is not str:
            raise _SLOW
        found = canonical.get(v)
        if found is None:
            raise _SLOW
        return found

    return decode


def _str_enum(cls: type[enum.StrEnum]) -> Decode:
    members = {m.value: m for m in cls}

    def decode(v: Any) -> Any:
        if v.__class__ is not str:
            raise _SLOW
        member = members.get(v)
        if member is None:
            raise _SLOW
        return member

    return decode


def _optional(tp: object) -> Decode:
    inner = _decoder(tp)

    def decode(v: Any) -> Any:
        if v is None:
            return None
        return inner(v)

    return decode


def _tuple(item_type: object) -> Decode:
    if item_type is int:
        return int_tuple
    if item_type is str:
        return str_tuple
    item = _decoder(item_type)
    tagged = _TAGGED.get(item)
    if tagged is not None:  # the union's dispatch inline: one call per item
        key, table = tagged
        get: Callable[[Any], Decode | None] = table.get

        def decode_tagged(v: Any) -> Any:
            if v.__class__ is not list:
                raise _SLOW
            out = []
            for x in v:
                if x.__class__ is not dict:
                    raise _SLOW
                fn = get(x.get(key))  # an unhashable tag raises: the slow path
                if fn is None:
                    raise _SLOW
                out.append(fn(x))
            return tuple(out)

        return decode_tagged

    def decode(v: Any) -> Any:
        if v.__class__ is not list:
            raise _SLOW
        return tuple([item(x) for x in v])

    return decode


#: The tagged-union decoders, with their tag key and tag → decoder table, so a
#: caller can dispatch inline.
_TAGGED: dict[Decode, tuple[str, dict[str, Decode]]] = {}


def _tagged(union: Tagged) -> Decode:
    """A tagged union of the format: its tag chooses the member's decoder."""
    key = union.key
    table: dict[str, Decode] = {}
    for tag, cls in union.by_tag().items():
        inner = _decoder(cls)
        nested = union.nested.get(cls)
        table[tag] = inner if nested is None else _nested(key, nested, inner)

    def decode(v: Any) -> Any:
        if v.__class__ is not dict:
            raise _SLOW
        tag = v.get(key)
        fn = table.get(tag) if tag.__class__ is str else None
        if fn is None:
            raise _SLOW
        return fn(v)

    _TAGGED[decode] = (key, table)
    return decode


def _nested(key: str, nested: str, inner: Decode) -> Decode:
    """A member written as ``{key: tag, nested: <the member>}`` (the usage chunk);
    its caller has checked that ``v`` is a dict with that tag."""
    keys = frozenset({key, nested})

    def decode(v: Any) -> Any:
        if len(v) != 2 or v.keys() != keys:
            raise _SLOW
        return inner(v[nested])

    return decode


def _attrs_class(cls: type[Any]) -> Decode:
    # Straight-line code: one block per field. A field whose key is absent takes
    # its default (the key is not passed), as the general converter does. A class
    # whose ``__init__`` only stores its arguments is built slot by slot (what its
    # ``__init__`` stores, without the call).
    setters = direct_setters(cls)
    found = shape(cls)
    tag_key, tag = found.tag_key, found.tag
    ns: dict[str, Any] = {
        "cls": cls,
        "SLOW": _SLOW,
        "MISSING": MISSING,
        "M": MAX_SAFE_INTEGER,
        "utf8_ok": utf8_ok,
        "DataShapeError": DataShapeError,
        "extra": RULES.get(cls),
        "share": share,
        "new": object.__new__,
    }
    lines = ["def decode(o):", "    if o.__class__ is not dict:", "        raise SLOW"]
    lines.append("    n = 0")
    required = 0
    if tag_key is not None:
        ns["TAG"] = tag
        lines += [
            f"    t = o.get({tag_key!r}, MISSING)",
            "    if t is not MISSING:",
            "        if t != TAG:",
            "            raise SLOW",
            "        n = 1",
        ]
    # Built on the class's twin where it has one (see ``_slots.twin``): plain
    # attribute stores, then the class.
    mutable = None if setters is None else twin(cls)
    if mutable is not None:
        ns["T"] = mutable
    lines.append(
        "    kw = {}"
        if setters is None
        else "    value = new(cls)"
        if mutable is None
        else "    value = new(T)"
    )
    for k, field in enumerate(found.fields):
        wire, tp = field.key, field.type
        if field.required:
            lines += [
                f"    if {wire!r} not in o:",
                "        raise SLOW",
                f"    v = o[{wire!r}]",
                "    if True:",
            ]
            required += 1
        else:
            lines += [
                f"    v = o.get({wire!r}, MISSING)",
                "    if v is not MISSING:",
                "        n += 1",
            ]
        if tp is int:
            lines += [
                "        if v.__class__ is not int or not -M <= v <= M:",
                "            raise SLOW",
            ]
        elif tp is str or getattr(tp, "__supertype__", None) is str:
            lines += [
                "        if v.__class__ is not str or not (v.isascii() or utf8_ok(v)):",
                "            raise SLOW",
            ]
            if field.name in SHARED_FIELDS:
                lines.append("        v = share(v)")
        elif tp is bool:
            lines += ["        if v.__class__ is not bool:", "            raise SLOW"]
        else:
            name = f"d{k}"
            ns[name] = inner = _decoder(tp)
            tagged = _TAGGED.get(inner)
            if tagged is None:
                lines.append(f"        v = {name}(v)")
            else:  # the union's dispatch inline (an unhashable tag raises)
                ns[f"K{k}"], table = tagged
                ns[f"g{k}"] = table.get
                lines += [
                    "        if v.__class__ is not dict:",
                    "            raise SLOW",
                    f"        fn = g{k}(v.get(K{k}))",
                    "        if fn is None:",
                    "            raise SLOW",
                    "        v = fn(v)",
                ]
        if setters is None:
            lines.append(f"        kw[{field.alias!r}] = v")
            continue
        if mutable is not None:
            store = f"value.{field.name} = {{}}"
        else:
            ns[f"s{k}"] = setters[field.name]
            store = f"s{k}(value, {{}})"
        lines.append("        " + store.format("v"))
        if not field.required:  # absent: the default
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                ns[f"f{k}"] = default.factory
                lines += ["    else:", "        " + store.format(f"f{k}()")]
            else:
                ns[f"v{k}"] = default
                lines += ["    else:", "        " + store.format(f"v{k}")]
    lines += [f"    if n + {required} != len(o):", "        raise SLOW"]
    if setters is None:
        lines.append("    value = cls(**kw)")
    elif mutable is not None:
        lines.append("    value.__class__ = cls")
    if ns["extra"] is not None:
        lines += [
            "    try:",
            "        extra(value)",
            "    except DataShapeError:",
            "        raise SLOW from None",
        ]
    lines.append("    return value")
    exec(compile("\n".join(lines), f"<decode {cls.__qualname__}>", "exec"), ns)
    decode: Decode = ns["decode"]
    return decode


# --------------------------------------------------------------------------- entry


# Built on first use, all at once under a lock, so loads in several worker threads
# never meet a decoder that is still being built.
_by_type: dict[str, Decode] | None = None
_build_lock: Final = threading.Lock()


def _table() -> dict[str, Decode]:
    global _by_type
    with _build_lock:
        if _by_type is None:
            _by_type = {type_: _decoder(found.cls) for type_, found in EVENTS.items()}
        return _by_type


def fast_data(type_: str, data: object) -> Any:
    """The typed data of a known event type ``type_``, decoded and checked.

    Raises:
        Slow: this input is not for the fast path (unknown type included).
    """
    fn = (_by_type or _table()).get(type_)
    if fn is None:
        raise _SLOW
    try:
        return fn(data)
    except Slow:
        raise
    except Exception:  # a constructor or converter refused: the general path says why
        raise _SLOW from None
