"""The one ``cattrs`` converter between dsh_trio's attrs values and the reference JSON.

It writes and reads by the shapes of :mod:`._wire` (wire keys, tags, key orders,
which keys may be absent and which are left out while ``None``, the tagged unions);
structuring is strict: unknown keys, missing keys and wrong types are refused.

This module builds the converter (its hooks are registered at import);
:mod:`dsh_trio.values._codec` uses it for session events and headers.
"""

from __future__ import annotations

import enum
import functools
import operator
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._causes import CancelCause
from ._chunks import StreamChunk
from ._content import ToolSource, UserMessage
from ._ids import JsonValue
from ._json import check_json
from ._wire import TOOL_RESULT_ORDER, UNIONS, is_json, shape, tag_of

__all__ = ["converter", "to_json", "structure"]

T = TypeVar("T")

# --------------------------------------------------------------------------- converter

converter = cattrs.Converter(forbid_extra_keys=True)


def _structure_json(value: object, _tp: object) -> JsonValue:
    return check_json(value)


converter.register_structure_hook_func(is_json, _structure_json)


# cattrs' default scalar hooks convert (``int("1")``, ``int(1.5)``, ``str(5)``); JSON
# data must already have the declared type, so these refuse instead.
def _structure_int(value: object, _tp: object) -> int:
    if type(value) is not int:
        raise TypeError(
            f"expected an integer, got {type(value).__name__} {value!r:.40}"
        )
    return cast(int, check_json(value, "integer"))


def _structure_str(value: object, _tp: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__} {value!r:.40}")
    return value


def _structure_bool(value: object, _tp: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected a boolean, got {type(value).__name__} {value!r:.40}")
    return value


def _structure_float(value: object, _tp: object) -> float:
    if type(value) is not float and type(value) is not int:
        raise TypeError(f"expected a number, got {type(value).__name__} {value!r:.40}")
    return cast(float, check_json(value, "number"))


def _structure_str_enum(value: object, tp: type[enum.StrEnum]) -> enum.StrEnum:
    if type(value) is not str and not isinstance(value, tp):
        raise TypeError(f"expected a string, got {type(value).__name__} {value!r:.40}")
    return tp(value)


# cattrs reads a homogeneous tuple from any iterable: a string as its characters, an
# object as its keys. A JSON array is a list; a typed value handed over may hold a tuple.
_structure_tuple: Final = converter.get_structure_hook(tuple[int, ...])


def _is_array(tp: object) -> bool:
    args = typing.get_args(tp)
    return typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


def _structure_array(value: object, tp: Any) -> tuple[Any, ...]:
    if value.__class__ is not list and value.__class__ is not tuple:
        raise TypeError(f"expected an array, got {type(value).__name__} {value!r:.40}")
    return cast("tuple[Any, ...]", _structure_tuple(value, tp))


converter.register_structure_hook_func(_is_array, _structure_array)
converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(bool, _structure_bool)
converter.register_structure_hook(float, _structure_float)
converter.register_structure_hook(str, _structure_str)
# Without this, the ``str`` hook above would also capture ``StrEnum`` subclasses.
converter.register_structure_hook(enum.StrEnum, _structure_str_enum)


def _structure_number(value: object, _tp: object) -> int | float | None:
    if value is None and _tp == (int | float | None):
        return None
    if type(value) is int or type(value) is float:
        return check_json(value, "number")  # type: ignore[return-value]
    raise TypeError(f"expected a number, got {type(value).__name__}")


converter.register_structure_hook_func(
    lambda t: t in ((int | float), (int | float | None)), _structure_number
)
converter.register_unstructure_hook_func(is_json, lambda v: v)


def _field_overrides(cls: type[Any]) -> dict[str, Any]:
    """The wire key of each field, and whether it is left out while ``None``."""
    return {
        f.name: override(
            rename=f.key if f.key != f.name else None,
            omit_if_default=f.omitted_when_none,
        )
        for f in shape(cls).fields
    }


def _unstructure_factory(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    fn = make_dict_unstructure_fn(cls, converter, **_field_overrides(cls))
    found = shape(cls)
    tag_key, tag, order = found.tag_key, found.tag, found.order
    # ``fn`` writes the keys always written first, then those left out while
    # ``None``; where the shape's order differs, the written object is reordered.
    natural = (
        *(() if tag_key is None else (tag_key,)),
        *(f.key for f in found.fields if not f.omitted_when_none),
        *(f.key for f in found.fields if f.omitted_when_none),
    )
    if order != natural:

        def ordered(value: Any) -> dict[str, Any]:
            d = fn(value)
            if tag_key is not None:
                d[tag_key] = tag
            return {k: d[k] for k in order if k in d}

        if cls is not UserMessage:
            return ordered

        def user_message(value: Any) -> dict[str, Any]:
            if value.source.__class__ is not ToolSource:
                return ordered(value)
            d = fn(value)
            d["role"] = "user"
            return {k: d[k] for k in TOOL_RESULT_ORDER}

        return user_message
    if tag_key is None:
        return fn

    def tagged(value: Any) -> dict[str, Any]:
        d = fn(value)
        return {tag_key: tag, **d}

    return tagged


def _structure_factory(cls: type[Any]) -> Callable[[Any, Any], Any]:
    fn = make_dict_structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=True, **_field_overrides(cls)
    )
    tag_key, tag = tag_of(cls)

    def structure_obj(value: Any, tp: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(
                f"expected an object for {cls.__name__}, got {type(value).__name__}"
            )
        if tag_key is not None:
            value = dict(value)
            got = value.pop(tag_key, tag)
            if got != tag:
                raise ValueError(
                    f"{cls.__name__}: {tag_key} must be {tag!r}, got {got!r}"
                )
        return fn(value, tp)

    return structure_obj


converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, enum.Enum), lambda v: v.value
)
converter.register_structure_hook_factory(attrs.has, _structure_factory)


def _register_union(union: object, key: str, members: tuple[type[Any], ...]) -> None:
    by_tag: dict[str, type[Any]] = {}
    for cls in members:
        _, tag = tag_of(cls)
        assert tag is not None
        by_tag[tag] = cls

    def structure_union(value: Any, _tp: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(
                f"expected an object with a {key!r} tag, got {type(value).__name__}"
            )
        tag = value.get(key)
        cls = by_tag.get(tag) if isinstance(tag, str) else None
        if cls is None:
            raise ValueError(
                f"unknown {key} {tag!r} (expected one of {sorted(by_tag)})"
            )
        return converter.structure(value, cls)

    converter.register_structure_hook_func(lambda t: t == union, structure_union)
    converter.register_unstructure_hook_func(
        lambda t: t == union, lambda v: converter.unstructure(v, type(v))
    )


for _union, _tagged in UNIONS.items():
    # A cause is read by its kind below; the stream chunk, whose usage member is
    # nested, at the end.
    if _union is not CancelCause and not _tagged.nested:
        _register_union(_union, _tagged.key, _tagged.members)


_CAUSE_KEY: Final = UNIONS[CancelCause].key
_CAUSES: Final = UNIONS[CancelCause].by_tag()


def _structure_cause(value: Any, _tp: Any) -> CancelCause:
    if not isinstance(value, dict):
        raise TypeError(f"expected a cancel cause object, got {type(value).__name__}")
    cls = _CAUSES.get(value.get(_CAUSE_KEY))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown cancel cause kind {value.get(_CAUSE_KEY)!r}")
    return cast(CancelCause, _structure_factory(cls)(value, cls))


converter.register_structure_hook_func(lambda t: t is CancelCause, _structure_cause)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, CancelCause),
    lambda v: _unstructure_factory(type(v))(v),
)

# The usage chunk nests its counters: {"type": "usage", "usage": {...}}, while the
# ``usage`` field of assistant/message holds the bare counters (the nested member of
# the stream chunk union, see ``_wire.Tagged``).
_CHUNK: Final = UNIONS[StreamChunk]
((_NESTED, _NESTED_KEY),) = _CHUNK.nested.items()
_CHUNK_KEY: Final = _CHUNK.key
_NESTED_TAG: Final = next(t for t, c in _CHUNK.by_tag().items() if c is _NESTED)
_NESTED_KEYS: Final = {_CHUNK_KEY, _NESTED_KEY}
_usage_fields = make_dict_unstructure_fn(
    _NESTED, converter, **_field_overrides(_NESTED)
)
_usage_struct = make_dict_structure_fn(
    _NESTED, converter, _cattrs_forbid_extra_keys=True, **_field_overrides(_NESTED)
)


def _unstructure_chunk(value: Any) -> Any:
    if type(value) is _NESTED:
        return {_CHUNK_KEY: _NESTED_TAG, _NESTED_KEY: _usage_fields(value)}
    return converter.unstructure(value, type(value))


def _structure_chunk(value: Any, _tp: Any) -> Any:
    if isinstance(value, dict) and value.get(_CHUNK_KEY) == _NESTED_TAG:
        if set(value) != _NESTED_KEYS:
            raise ValueError(
                f"{_NESTED_TAG} chunk must have exactly the keys {_CHUNK_KEY}, "
                f"{_NESTED_KEY}: {sorted(value)}"
            )
        return _usage_struct(value[_NESTED_KEY], _NESTED)
    return converter.structure(value, cast(Any, _chunk_only_union))


_chunk_only = tuple(cls for cls in _CHUNK.members if cls is not _NESTED)
_chunk_only_union = functools.reduce(operator.or_, _chunk_only)
_register_union(_chunk_only_union, _CHUNK_KEY, _chunk_only)
converter.register_structure_hook_func(lambda t: t == StreamChunk, _structure_chunk)
converter.register_unstructure_hook_func(lambda t: t == StreamChunk, _unstructure_chunk)
# Usage as a bare field (assistant/message data) keeps the plain counters.
converter.register_unstructure_hook(_NESTED, _usage_fields)
converter.register_structure_hook(_NESTED, lambda v, t: _usage_struct(v, t))


# --------------------------------------------------------------------------- public helpers


def to_json(value: object) -> JsonValue:
    """Unstructure an attrs value (or a tuple/list of them) to its JSON shape."""
    if isinstance(value, StreamChunk):
        return cast(JsonValue, _unstructure_chunk(value))
    return cast(JsonValue, converter.unstructure(value))


def structure(data: object, cls: type[T] | object) -> T:
    """Structure JSON ``data`` into ``cls``, strictly; raises ``cattrs`` errors on mismatch."""
    return cast(T, converter.structure(data, cast(Any, cls)))
