"""Structural checks of typed session data, without copying it.

``attrs`` does not check field types, so a typed value handed to ``Session.append``
could hold anything. The checkers here walk a value against the annotations of
its classes (and a few shape rules of the reference format) and report the first
problem with its path, e.g. ``data.message.content[0].text must be a str, got int``.
They never copy: typed data is shared, immutable, and trusted once checked.

The checkers are generated once per class from the type annotations in
:mod:`dsh_trio._values`.
"""

from __future__ import annotations

import enum
import itertools
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from ._causes import (
    CANCEL_CAUSES,
    CancelCause,
)
from ._chunks import (
    ReasoningChunksRecord,
    TextChunksRecord,
    ToolCallChunksRecord,
)
from ._content import (
    AssistantMessage,
    SystemMessage,
    ToolResultBlock,
    ToolSource,
    UserMessage,
)
from ._event_data import (
    AdapterDefaults,
    AssistantMessageData,
    EndSeed,
    EpochHeader,
    RequestHeaderData,
    ToolResultData,
)
from ._ids import (
    JsonValue,
)

__all__ = [
    "DataShapeError",
    "check_typed",
    "check_json_value",
    "checker",
    "run_times_ok",
    "utf8_ok",
]

MAX_SAFE: Final = 2**53 - 1

Check = Callable[[Any], None]


class DataShapeError(Exception):
    """A value does not have the shape its type promises.

    ``path`` collects the location segments while the error unwinds (innermost
    first); :meth:`describe` renders ``<root><path> <what>``.
    """

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str] = []

    def at(self, segment: str) -> DataShapeError:
        self.path.append(segment)
        return self

    def describe(self, root: str) -> str:
        return f"{root}{''.join(reversed(self.path))} {self.what}"


def _tname(value: object) -> str:
    return type(value).__name__


# --------------------------------------------------------------------------- JSON


def check_json_value(value: object) -> None:
    """Check that ``value`` is lossless JSON (the rules of ``_codec.check_json``)."""
    _json(value, set())


def _json(value: object, active: set[int]) -> None:
    tp = value.__class__
    if value is None or tp is bool:
        return
    if tp is str:
        if not utf8_ok(value):  # type: ignore[arg-type]
            raise DataShapeError(_SURROGATE)
        return
    if tp is int:
        if not -MAX_SAFE <= value <= MAX_SAFE:  # type: ignore[operator]
            raise DataShapeError(f"is an integer outside the safe range: {value!r}")
        return
    if tp is float:
        f: float = value  # type: ignore[assignment]
        if not math.isfinite(f):
            raise DataShapeError(f"is not a finite number: {f!r}")
        if f == 0.0 and math.copysign(1.0, f) < 0:
            raise DataShapeError("is -0.0, which JSON cannot keep")
        return
    if isinstance(value, str):
        if not utf8_ok(value):
            raise DataShapeError(_SURROGATE)
        return
    if tp is list or tp is tuple or tp is dict:
        key = id(value)
        if key in active:
            raise DataShapeError("contains a cycle")
        active.add(key)
        try:
            if tp is dict:
                for k, v in value.items():  # type: ignore[attr-defined]
                    if k.__class__ is not str:
                        raise DataShapeError(f"has a non-string key {k!r:.40}")
                    try:
                        _json(v, active)
                    except DataShapeError as exc:
                        raise exc.at(f".{k}") from None
            else:
                for i, v in enumerate(value):  # type: ignore[arg-type]
                    try:
                        _json(v, active)
                    except DataShapeError as exc:
                        raise exc.at(f"[{i}]") from None
        finally:
            active.discard(key)
        return
    raise DataShapeError(f"is not JSON: {tp.__name__} {value!r:.60}")


# --------------------------------------------------------------------------- leaves


def _check_int(value: object) -> None:
    if value.__class__ is not int:
        raise DataShapeError(f"must be an int, got {_tname(value)}")
    if not -MAX_SAFE <= value <= MAX_SAFE:
        raise DataShapeError(f"is an integer outside the safe range: {value!r}")


def utf8_ok(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SURROGATE = "contains a lone surrogate, which UTF-8 cannot encode"


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
        _json(value, set())
    else:
        raise DataShapeError(f"must be a number, got {_tname(value)}")


def _check_json_field(value: object) -> None:
    _json(value, set())


# --------------------------------------------------------------------------- builders

_CACHE: dict[object, Check] = {}


def _is_json_alias(tp: object) -> bool:
    if tp is JsonValue:
        return True
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return set(typing.get_args(tp)) >= {type(None), bool, int, float, str}


def checker(tp: object) -> Check:
    """The checker of annotation ``tp`` (cached)."""
    found = _CACHE.get(tp)
    if found is not None:
        return found
    built = _build(tp)
    _CACHE[tp] = built
    return built


def _build(tp: object) -> Check:
    if _is_json_alias(tp):
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
        return _classes(tuple(CANCEL_CAUSES.values()), "a cancel cause")
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
    if all(isinstance(m, type) and attrs.has(m) for m in members):
        names = " | ".join(m.__name__ for m in members)  # type: ignore[attr-defined]
        inner = _classes(members, names)  # type: ignore[arg-type]
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
    hints = typing.get_type_hints(cls)
    ns: dict[str, Any] = {
        "cls": cls,
        "M": MAX_SAFE,
        "DataShapeError": DataShapeError,
        "_tname": _tname,
        "_check_int": _check_int,
        "_check_str": _check_str,
        "_check_bool": _check_bool,
        "_check_json_field": _check_json_field,
        "extra": _EXTRA.get(cls),
    }
    lines = [
        "def check(value):",
        "    if value.__class__ is not cls:",
        "        raise DataShapeError(",
        "            f'must be a {cls.__name__}, got {_tname(value)}')",
    ]
    for k, field in enumerate(attrs.fields(cls)):
        name = field.name
        seg = repr(f".{name}")
        tp = hints[name]
        if _is_json_alias(tp):
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


# --------------------------------------------------------------------------- shape rules


def _true_or_absent(value: object, field: str) -> None:
    if getattr(value, field) is False:
        raise DataShapeError("must be True or None (false is written by omission)").at(
            f".{field}"
        )


def _message_id(value: Any) -> None:
    if not value.id:
        raise DataShapeError("must be a non-empty message id").at(".id")


def _tool_result(value: ToolResultData) -> None:
    message = value.message
    source = message.source
    if source.__class__ is not ToolSource:
        raise DataShapeError(
            f"must be a ToolSource naming the call, got {_tname(source)}"
        ).at(".message.source")
    call_id = source.call_id
    if not message.content:
        raise DataShapeError("must hold the call's result block").at(".message.content")
    for i, block in enumerate(message.content):
        if block.__class__ is not ToolResultBlock:
            raise DataShapeError(f"must be a ToolResultBlock, got {_tname(block)}").at(
                f".message.content[{i}]"
            )
        if block.tool_call_id != call_id:
            raise DataShapeError(
                f"must name the call {call_id!r} of the message source, "
                f"got {block.tool_call_id!r}"
            ).at(f".message.content[{i}].tool_call_id")


def _assistant_data(value: AssistantMessageData) -> None:
    _true_or_absent(value, "interrupted")


def _end_seed(value: EndSeed) -> None:
    _true_or_absent(value, "inherited")


def _request_header(value: RequestHeaderData) -> None:
    _true_or_absent(value, "starts_series")


def _epoch_header(value: EpochHeader) -> None:
    config = value.config
    if not config.provider:
        raise DataShapeError("must be a non-empty provider").at(".config.provider")
    if not config.model:
        raise DataShapeError("must be a non-empty model").at(".config.model")
    if value.tools is not None and not value.tools:
        raise DataShapeError("must be omitted (None) when empty").at(".tools")
    defaults = value.adapter_defaults
    if defaults is not None:
        _adapter_defaults(defaults)


def _adapter_defaults(value: AdapterDefaults) -> None:
    try:
        _true_or_absent(value, "reasoning_effort")
        _true_or_absent(value, "max_tokens")
    except DataShapeError as exc:
        raise exc.at(".adapter_defaults") from None
    if value.reasoning_effort is None and value.max_tokens is None:
        raise DataShapeError("must be omitted (None) when no marker is set").at(
            ".adapter_defaults"
        )


def run_times_ok(time0: int, dt: tuple[int, ...]) -> int | None:
    """Return the index of the first member whose time leaves the safe range, or None."""
    times = list(itertools.accumulate(dt, initial=time0))
    if min(times) >= -MAX_SAFE and max(times) <= MAX_SAFE:
        return None
    return next(k for k, t in enumerate(times) if not -MAX_SAFE <= t <= MAX_SAFE)


def _run(
    value: TextChunksRecord | ReasoningChunksRecord | ToolCallChunksRecord,
) -> None:
    members = value.args if value.__class__ is ToolCallChunksRecord else value.texts  # type: ignore[union-attr]
    if not members:
        raise DataShapeError("must not be empty").at(
            ".args" if value.__class__ is ToolCallChunksRecord else ".texts"
        )
    if len(value.dt) != len(members) - 1:
        raise DataShapeError(
            f"must have one entry fewer than the members ({len(members) - 1}), "
            f"got {len(value.dt)}"
        ).at(".dt")
    bad = run_times_ok(value.time0, value.dt)
    if bad is not None:
        raise DataShapeError(
            f"puts member {bad}'s time outside the safe integer range"
        ).at(".dt")


def _tool_run(value: ToolCallChunksRecord) -> None:
    if not value.id:
        raise DataShapeError("must be a non-empty call id").at(".id")
    if value.name == "":
        raise DataShapeError("must be non-empty when present").at(".name")
    _run(value)


_EXTRA: dict[type[Any], Callable[[Any], None]] = {
    UserMessage: _message_id,
    AssistantMessage: _message_id,
    SystemMessage: _message_id,
    ToolResultData: _tool_result,
    AssistantMessageData: _assistant_data,
    EndSeed: _end_seed,
    RequestHeaderData: _request_header,
    EpochHeader: _epoch_header,
    TextChunksRecord: _run,
    ReasoningChunksRecord: _run,
    ToolCallChunksRecord: _tool_run,
}


def check_typed(cls: type[Any], value: object) -> None:
    """Check ``value`` against attrs class ``cls``.

    Raises:
        DataShapeError: the first problem, with its path below the value.
    """
    checker(cls)(value)
