"""The one converter between dsh_trio's attrs values and the reference JSON shapes.

* keys are camelCase on the wire (``tool_call_id`` → ``toolCallId``);
* tagged unions carry their tag first: content blocks and stream chunks/records by
  ``type``, sources, causes and turn-end reasons by ``kind``, messages by ``role``;
* an absent optional field (``None``) is omitted, never written as ``null``;
* structuring is strict: unknown keys, missing keys and wrong types are refused.

Outside data enters through :func:`structure` / :func:`event_from_json` only.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ..errors import InvalidEventError, SessionCorruptError
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
from ._event_data import (
    EVENT_DATA_TYPES,
    SURFACE_TYPES,
    EventData,
    SessionEvent,
    SessionHeader,
    SurfaceOp,
    SurfaceReplace,
)
from ._ids import (
    JsonValue,
)

__all__ = [
    "converter",
    "to_json",
    "structure",
    "check_json",
    "event_to_json",
    "event_from_json",
    "header_to_json",
    "header_from_json",
    "data_from_json",
    "typed_data",
    "MAX_SAFE_INTEGER",
]

T = TypeVar("T")

MAX_SAFE_INTEGER = 2**53 - 1

#: Names whose wire spelling is not the plain camelCase of the field name.
_SPECIAL_NAMES = {"retry_after_ms": "providerRetryAfterMs"}


def _camel(name: str) -> str:
    special = _SPECIAL_NAMES.get(name)
    if special is not None:
        return special
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# --------------------------------------------------------------------------- lossless JSON


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_json(value: object, where: str = "value") -> JsonValue:
    """Return a private deep copy of ``value`` if it is lossless JSON, else raise.

    Lossless JSON is ``None``, ``bool``, ``str``, safe integers (|n| < 2**53), finite
    floats other than ``-0.0``, lists/tuples of JSON and ``dict``\\s with ``str`` keys.
    Cycles, NaN, infinities, ``-0.0``, bytes, sets and any other object are refused.

    Raises:
        TypeError: naming the path of the first offending element.
    """
    return _check(value, where, set())


def _check(value: object, path: str, active: set[int]) -> JsonValue:
    if isinstance(value, str) and type(value) is str:
        if not _encodable(value):
            raise TypeError(
                f"{path} contains a lone surrogate, which UTF-8 cannot encode"
            )
        return value
    if value is None or value is True or value is False:
        return cast(JsonValue, value)
    tp = type(value)
    if tp is int:
        if -MAX_SAFE_INTEGER <= cast(int, value) <= MAX_SAFE_INTEGER:
            return cast(int, value)
        raise TypeError(
            f"{path} is an integer outside the safe range (|n| < 2**53): {value!r}"
        )
    if tp is float:
        f = cast(float, value)
        if not math.isfinite(f):
            raise TypeError(f"{path} is not a finite number: {value!r}")
        if f == 0.0 and math.copysign(1.0, f) < 0:
            raise TypeError(f"{path} is -0.0, which JSON cannot keep")
        return f
    if isinstance(value, str):  # str subclasses (enums) become plain strings
        return _check(str(value), path, active)
    if tp is list or tp is tuple:
        key = id(value)
        if key in active:
            raise TypeError(f"{path} contains a cycle")
        active.add(key)
        try:
            return [
                _check(v, f"{path}[{i}]", active)
                for i, v in enumerate(cast(list[object], value))
            ]
        finally:
            active.discard(key)
    if tp is dict:
        key = id(value)
        if key in active:
            raise TypeError(f"{path} contains a cycle")
        active.add(key)
        try:
            out: dict[str, JsonValue] = {}
            for k, v in cast(dict[object, object], value).items():
                if type(k) is not str:
                    raise TypeError(f"{path} has a non-string key {k!r}")
                out[k] = _check(v, f"{path}.{k}", active)
            return out
        finally:
            active.discard(key)
    raise TypeError(f"{path} is not JSON: {tp.__name__} {value!r:.80}")


# --------------------------------------------------------------------------- converter

converter = cattrs.Converter(forbid_extra_keys=True)

_TAGGED: list[tuple[str, Mapping[str, type[Any]]]] = []


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


def _unstructure_factory(cls: type[Any]) -> Callable[[Any], dict[str, Any]]:
    fn = make_dict_unstructure_fn(cls, converter, **_field_overrides(cls))
    tag_key, tag = _tag_of(cls)
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


def _unstructure_surface_op(value: SurfaceOp) -> JsonValue:
    if value == "append":
        return "append"
    assert isinstance(value, SurfaceReplace)
    return {"op": "replace", "startSeq": value.start_seq, "endSeq": value.end_seq}


def _structure_surface_op(value: Any) -> SurfaceOp:
    if value == "append":
        return "append"
    if (
        isinstance(value, dict)
        and set(value) == {"op", "startSeq", "endSeq"}
        and value["op"] == "replace"
    ):
        s, e = value["startSeq"], value["endSeq"]
        if type(s) is int and type(e) is int:
            return SurfaceReplace(s, e)
    raise ValueError(
        f'surfaceOp must be "append" or {{"op": "replace", "startSeq", "endSeq"}}, got {value!r}'
    )


# --------------------------------------------------------------------------- public helpers


def to_json(value: object) -> JsonValue:
    """Unstructure an attrs value (or a tuple/list of them) to its JSON shape."""
    if isinstance(value, StreamChunk):
        return cast(JsonValue, _unstructure_chunk(value))
    return cast(JsonValue, converter.unstructure(value))


def structure(data: object, cls: type[T] | object) -> T:
    """Structure JSON ``data`` into ``cls``, strictly; raises ``cattrs`` errors on mismatch."""
    return cast(T, converter.structure(data, cast(Any, cls)))


def data_from_json(type_: str, data: object) -> EventData | JsonValue:
    """Turn the ``data`` of an event of ``type_`` into its typed value.

    Unknown types keep (a private copy of) their JSON verbatim.
    """
    cls = EVENT_DATA_TYPES.get(type_)
    if cls is None:
        return check_json(data, "data")
    return structure(data, cls)


def event_to_json(event: SessionEvent) -> dict[str, JsonValue]:
    """The JSON object of one log line (key order: type, seq, time, data, surfaceOp, sourceEventSeqs)."""
    data = event.data
    out: dict[str, JsonValue] = {
        "type": event.type,
        "seq": event.seq,
        "time": event.time,
        "data": cast(JsonValue, converter.unstructure(data))
        if attrs.has(type(data))
        else cast(JsonValue, data),
    }
    if event.surface_op is not None:
        out["surfaceOp"] = _unstructure_surface_op(event.surface_op)
    if event.source_event_seqs is not None:
        out["sourceEventSeqs"] = list(event.source_event_seqs)
    return out


_EVENT_KEYS = frozenset(
    {"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}
)


def event_from_json(obj: object, *, expected_seq: int | None = None) -> SessionEvent:
    """Structure one log line's object into a :class:`SessionEvent`.

    Raises:
        SessionCorruptError: the object is not a valid event (``seq`` names it when known).
    """
    seq = obj.get("seq") if isinstance(obj, dict) else None
    where_seq = seq if type(seq) is int else expected_seq
    try:
        if not isinstance(obj, dict):
            raise TypeError(f"an event must be an object, got {type(obj).__name__}")
        extra = set(obj) - _EVENT_KEYS
        if extra:
            raise ValueError(f"unknown envelope keys {sorted(extra)}")
        type_, time_ = obj.get("type"), obj.get("time")
        if type(type_) is not str or not type_:
            raise ValueError("type must be a non-empty string")
        if type(seq) is not int or seq < 0:
            raise ValueError("seq must be a non-negative integer")
        if expected_seq is not None and seq != expected_seq:
            raise ValueError(
                f"seq {seq} breaks the contiguous order (expected {expected_seq})"
            )
        if type(time_) is not int:
            raise ValueError("time must be an integer (epoch milliseconds)")
        if "data" not in obj:
            raise ValueError("data is missing")
        data = data_from_json(type_, obj["data"])
        surface_op = (
            _structure_surface_op(obj["surfaceOp"]) if "surfaceOp" in obj else None
        )
        sources: tuple[int, ...] | None = None
        if "sourceEventSeqs" in obj:
            raw = obj["sourceEventSeqs"]
            if not isinstance(raw, list) or not all(type(s) is int for s in raw):
                raise ValueError("sourceEventSeqs must be a list of integers")
            sources = tuple(raw)
        if (
            surface_op is not None or sources is not None
        ) and type_ not in SURFACE_TYPES:
            raise ValueError(f"{type_} may not carry surfaceOp or sourceEventSeqs")
        return SessionEvent(
            seq=seq,
            time=time_,
            type=type_,
            data=data,
            surface_op=surface_op,
            source_event_seqs=sources,
        )
    except SessionCorruptError:
        raise
    except (TypeError, ValueError, KeyError, cattrs.BaseValidationError) as exc:
        raise SessionCorruptError(
            f"malformed session event at seq {where_seq}: {_describe(exc)}",
            seq=where_seq,
        ) from exc


def header_to_json(header: SessionHeader) -> dict[str, JsonValue]:
    """The JSON object of a session file's header line (``{"type": "session", ...}``)."""
    body = cast(dict[str, JsonValue], converter.unstructure(header))
    return {"type": "session", **body}


def header_from_json(obj: object) -> SessionHeader:
    """Structure a header line's object (the version must already have been checked)."""
    try:
        if not isinstance(obj, dict) or obj.get("type") != "session":
            raise ValueError('the header line must be an object with "type": "session"')
        body = {k: v for k, v in obj.items() if k != "type"}
        return structure(body, SessionHeader)
    except (TypeError, ValueError, KeyError, cattrs.BaseValidationError) as exc:
        raise SessionCorruptError(
            f"malformed session header: {_describe(exc)}"
        ) from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        msgs = cattrs.transform_error(exc)
        return "; ".join(msgs)
    return str(exc)


def typed_data(type_: str, data: object, *, seq: int) -> EventData | JsonValue:
    """Validate ``data`` handed to ``Session.append`` for an event of ``type_``.

    Known types take their typed value (or its JSON shape, which is structured);
    unknown types take lossless JSON, copied.

    Raises:
        InvalidEventError: the data does not fit.
    """
    cls = EVENT_DATA_TYPES.get(type_)
    try:
        if cls is None:
            return check_json(data, "data")
        if type(data) is cls:
            return data
        if attrs.has(type(data)):
            raise TypeError(f"expected {cls.__name__}, got {type(data).__name__}")
        return structure(data, cls)
    except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
        raise InvalidEventError(
            f'session event "{type_}" at seq {seq} carries invalid data: {_describe(exc)}',
            seq=seq,
            type=type_,
        ) from exc
