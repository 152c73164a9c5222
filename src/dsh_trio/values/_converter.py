"""The one ``cattrs`` converter between dsh_trio's attrs values and the reference JSON.

* keys are camelCase on the wire (``tool_call_id`` → ``toolCallId``);
* tagged unions carry their tag first: content blocks and stream chunks/records by
  ``type``, sources, causes and turn-end reasons by ``kind``, messages by ``role``;
* keys follow the field order, except where the reference's writer orders them
  otherwise (``_KEY_ORDER``: messages, a tool result's message, ``tool-call-chunks``
  records, ``assistant/message`` data ``{turn, step, message, interrupted?, usage?,
  stream}``, ``agent/inbox/spliced`` data ``{target, start, removedCount?,
  inserted, outcome?}``);
* an absent optional field (``None``) is omitted, never written as ``null``;
* structuring is strict: unknown keys, missing keys and wrong types are refused.

This module builds the converter (its hooks are registered at import);
:mod:`dsh_trio.values._codec` uses it for session events and headers.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._causes import (
    CANCEL_CAUSES,
    Aborted,
    Blocked,
    CancelCause,
    Completed,
    Errored,
    Interrupted,
    MaxTokens,
    TurnEndReason,
)
from ._chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    RawChunkRecord,
    ReasoningChunksRecord,
    ReasoningDelta,
    StreamChunk,
    StreamRecord,
    TextChunksRecord,
    TextDelta,
    ToolCallChunksRecord,
    ToolCallDelta,
    Usage,
)
from ._content import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    Message,
    MessageSource,
    ModelSource,
    PluginSource,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSource,
    UserMessage,
    UserSource,
)
from ._event_data import AssistantMessageData, InboxSplice
from ._ids import JsonValue
from ._json import check_json

__all__ = ["converter", "to_json", "structure"]

T = TypeVar("T")

#: Names whose wire spelling is not the plain camelCase of the field name.
_SPECIAL_NAMES = {"retry_after_ms": "providerRetryAfterMs"}


def _camel(name: str) -> str:
    special = _SPECIAL_NAMES.get(name)
    if special is not None:
        return special
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# --------------------------------------------------------------------------- converter

converter = cattrs.Converter(forbid_extra_keys=True)

_JSON_SCALARS = frozenset({type(None), bool, int, float, str})


def _is_json_value(tp: object) -> bool:
    # The recursive alias comes back from annotation resolution with fresh
    # ForwardRefs, so recognise it by its scalar members rather than by identity.
    if tp is JsonValue:
        return True
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return set(typing.get_args(tp)) >= _JSON_SCALARS


def _structure_json(value: object, _tp: object) -> JsonValue:
    return check_json(value)


converter.register_structure_hook_func(_is_json_value, _structure_json)


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
converter.register_unstructure_hook_func(_is_json_value, lambda v: v)


def _field_overrides(cls: type[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in attrs.fields(cls):
        omit = f.default is None
        rename = _camel(f.name)
        out[f.name] = override(
            rename=rename if rename != f.name else None, omit_if_default=omit
        )
    return out


#: Wire key order of the objects whose keys the reference's writer does not write
#: in field order (tag first, then the fields); absent optional keys are skipped.
#: The reference's objects keep the order its code builds them in: a user message
#: is ``{...input, role}`` and then ``{..., id}``; an inbox splice spreads
#: ``removedCount`` between ``start`` and ``inserted``; an interrupted assistant
#: message writes ``interrupted`` before ``usage`` and ``stream``.
_KEY_ORDER: dict[type[Any], tuple[str, ...]] = {
    UserMessage: ("content", "source", "role", "id"),
    AssistantMessage: ("role", "content", "source", "id"),
    SystemMessage: ("role", "content", "source", "id"),
    ToolCallChunksRecord: ("type", "time0", "index", "dt", "id", "name", "args"),
    AssistantMessageData: ("turn", "step", "message", "interrupted", "usage", "stream"),
    InboxSplice: ("target", "start", "removedCount", "inserted", "outcome"),
}

#: The key order of a tool result's message (a user message with a
#: :class:`ToolSource`): the reference builds it from ``{source, content}``.
_TOOL_RESULT_ORDER: tuple[str, ...] = ("source", "content", "role", "id")


def _unstructure_factory(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    fn = make_dict_unstructure_fn(cls, converter, **_field_overrides(cls))
    tag_key, tag = _tag_of(cls)
    order = _KEY_ORDER.get(cls)
    if order is not None:
        names = {_camel(f.name) for f in attrs.fields(cls)}
        if tag_key is not None:
            names.add(tag_key)
        assert names == set(order), f"key order of {cls.__name__} misses keys"

        def ordered(value: Any) -> dict[str, Any]:
            d = fn(value)
            if tag_key is not None:
                d[tag_key] = tag
            return {k: d[k] for k in order if k in d}

        if cls is not UserMessage:
            return ordered
        assert set(_TOOL_RESULT_ORDER) == set(order)

        def user_message(value: Any) -> dict[str, Any]:
            if value.source.__class__ is not ToolSource:
                return ordered(value)
            d = fn(value)
            d["role"] = "user"
            return {k: d[k] for k in _TOOL_RESULT_ORDER}

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
    tag_key, tag = _tag_of(cls)

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


def _tag_of(cls: type[Any]) -> tuple[str | None, str | None]:
    if "TAG" in _all_class_vars(cls):
        key = "kind" if cls in _KIND_TAGGED else "type"
        return key, cast(str, cls.TAG)
    if "ROLE" in _all_class_vars(cls):
        return "role", cast(str, cls.ROLE)
    if issubclass(cls, CancelCause):
        return "kind", cls.kind
    return None, None


def _all_class_vars(cls: type[Any]) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(vars(klass))
    return names


_KIND_TAGGED: frozenset[type[Any]] = frozenset(
    {
        UserSource,
        PluginSource,
        ModelSource,
        ToolSource,
        Completed,
        MaxTokens,
        Blocked,
        Aborted,
        Errored,
        Interrupted,
    }
)

converter.register_unstructure_hook_factory(attrs.has, _unstructure_factory)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, enum.Enum), lambda v: v.value
)
converter.register_structure_hook_factory(attrs.has, _structure_factory)


def _register_union(union: object, key: str, members: tuple[type[Any], ...]) -> None:
    by_tag: dict[str, type[Any]] = {}
    for cls in members:
        _, tag = _tag_of(cls)
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


_register_union(
    ContentBlock,
    "type",
    (TextBlock, ReasoningBlock, ImageBlock, ToolCallBlock, ToolResultBlock),
)
_register_union(
    MessageSource, "kind", (UserSource, PluginSource, ModelSource, ToolSource)
)
_register_union(Message, "role", (UserMessage, AssistantMessage, SystemMessage))
_register_union(
    TurnEndReason,
    "kind",
    (Completed, MaxTokens, Blocked, Aborted, Errored, Interrupted),
)
_register_union(
    StreamChunk,
    "type",
    (BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd, Usage, Finish),
)
_register_union(
    StreamRecord,
    "type",
    (TextChunksRecord, ReasoningChunksRecord, ToolCallChunksRecord, RawChunkRecord),
)


def _structure_cause(value: Any, _tp: Any) -> CancelCause:
    if not isinstance(value, dict):
        raise TypeError(f"expected a cancel cause object, got {type(value).__name__}")
    cls = CANCEL_CAUSES.get(value.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown cancel cause kind {value.get('kind')!r}")
    return cast(CancelCause, _structure_factory(cls)(value, cls))


converter.register_structure_hook_func(lambda t: t is CancelCause, _structure_cause)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, CancelCause),
    lambda v: _unstructure_factory(type(v))(v),
)

# The usage chunk nests its counters: {"type": "usage", "usage": {...}}, while the
# ``usage`` field of assistant/message holds the bare counters.
_usage_fields = make_dict_unstructure_fn(Usage, converter, **_field_overrides(Usage))
_usage_struct = make_dict_structure_fn(
    Usage, converter, _cattrs_forbid_extra_keys=True, **_field_overrides(Usage)
)


def _unstructure_chunk(value: Any) -> Any:
    if type(value) is Usage:
        return {"type": "usage", "usage": _usage_fields(value)}
    return converter.unstructure(value, type(value))


def _structure_chunk(value: Any, _tp: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "usage":
        if set(value) != {"type", "usage"}:
            raise ValueError(
                f"usage chunk must have exactly the keys type, usage: {sorted(value)}"
            )
        return _usage_struct(value["usage"], Usage)
    return converter.structure(value, cast(Any, _chunk_only_union))


_chunk_only_union = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | Finish
)
_register_union(
    _chunk_only_union,
    "type",
    (BlockStart, TextDelta, ReasoningDelta, ToolCallDelta, BlockEnd, Finish),
)
converter.register_structure_hook_func(lambda t: t == StreamChunk, _structure_chunk)
converter.register_unstructure_hook_func(lambda t: t == StreamChunk, _unstructure_chunk)
# Usage as a bare field (assistant/message data) keeps the plain counters.
converter.register_unstructure_hook(Usage, _usage_fields)
converter.register_structure_hook(Usage, lambda v, t: _usage_struct(v, t))


# --------------------------------------------------------------------------- public helpers


def to_json(value: object) -> JsonValue:
    """Unstructure an attrs value (or a tuple/list of them) to its JSON shape."""
    if isinstance(value, StreamChunk):
        return cast(JsonValue, _unstructure_chunk(value))
    return cast(JsonValue, converter.unstructure(value))


def structure(data: object, cls: type[T] | object) -> T:
    """Structure JSON ``data`` into ``cls``, strictly; raises ``cattrs`` errors on mismatch."""
    return cast(T, converter.structure(data, cast(Any, cls)))
