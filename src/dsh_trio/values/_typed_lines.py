"""Checking a whole log line in one typed ``msgspec`` decode, when it is installed.

Loading a log checks every line: it is parsed (:func:`parse_json_line`), its event
decoded into attrs values by the generated decoders of :mod:`._fast`, and those
values are thrown away once admitted (only the line is kept). With the optional
``msgspec`` package the common line is checked instead by one typed decode in C,
into ``msgspec`` structs mirrored from the same shapes (:mod:`._wire`: wire keys,
tags, defaults, unions) and shape rules, which is several times cheaper than
parsing the line alone into dicts.

The typed check never decides alone. It **accepts** a line only when the general
path would give an event with data checked by the fast decoders, with that type,
seq and time and a surface operation of ``"append"`` (surface types) or none; it
never rejects. Anything it does not accept outright (an unknown or marker type, an
extra key, a ``null`` where the fast decoder wants a value, an unsafe integer, a
float field, a nested tool result inside a tool result, anything that is not
JSON) is read again by the general path, which gives the event or the error it
always gave. So the typed check changes the speed of a load, never its result.

What cannot be mirrored exactly is left out, not approximated: an annotation the
fast decoders hand to the general converter (``float``, unions mixing classes and
``None``) drops its class from the mirror, and a union drops that member; a
recursive type is mirrored to one level of nesting. A shape rule of :mod:`._rules`
runs on the struct: it reads fields by name, and a class identity through the
struct's ``MIRRORS`` (the attrs class it stands for).

Example::

    check = typed_line_check()
    if check is not None:
        found = check(line)   # None, or (type, seq, time, turn)
"""

from __future__ import annotations

import enum
import threading
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Final

import attrs

from ._content import AssistantMessage
from ._event_data import SURFACE_TYPES
from ._fast import _decoder
from ._json import MAX_SAFE_INTEGER, check_json
from ._rules import RULES
from ._wire import EVENTS, UNIONS, Tagged, is_json, shape

__all__ = ["TYPED_EXCLUDED", "TypedLine", "assistant_message_of", "typed_line_check"]

#: What an accepted line gives: its event type, seq and time, and the turn of a
#: ``turn/start`` (else ``None``).
TypedLine = tuple[str, int, int, "int | None"]

#: Event types the typed check leaves to the general path: the marker whose decoded
#: data a load keeps at once (the latest request header; the latest request context
#: is decoded once, at the end, from its line).
TYPED_EXCLUDED: Final = frozenset({"request/header"})

msgspec: Any
try:
    import msgspec
except ImportError:  # pragma: no cover - depends on the environment
    msgspec = None


class _Unmirrorable(Exception):
    """This annotation has no exact mirror: its class (or union member) is left out."""


Check = Callable[[Any], object]


def _number(v: Any) -> None:
    """What the general converter and checker take for ``float`` and ``int | float``:
    a safe integer (kept an integer) or a finite float other than ``-0.0``."""
    cls = v.__class__
    if cls is not int and cls is not float:
        raise TypeError(f"expected a number, got {cls.__name__}")
    check_json(v)


def _tuple_check(item: Check) -> Check:
    def check(v: Any) -> None:
        for x in v:
            item(x)

    return check


def _optional_check(inner: Check) -> Check:
    def check(v: Any) -> None:
        if v is not None:
            inner(v)

    return check


class _Mirror:
    """Builds the ``msgspec`` types that mirror the attrs annotations of the log."""

    def __init__(self) -> None:
        self._safe_int: Any = Annotated[
            int, msgspec.Meta(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)
        ]
        self._structs: dict[tuple[type[Any], frozenset[type[Any]]], Any] = {}
        self._stack: list[type[Any]] = []
        self._count = 0

    def type_of(self, tp: Any) -> tuple[Any, Check | None]:
        """The mirror of annotation ``tp`` and the check its value still needs."""
        if is_json(tp):
            return Any, check_json
        if tp is int:
            return self._safe_int, None
        if tp is str:  # msgspec refuses strings UTF-8 cannot encode
            return str, None
        if tp is bool:
            return bool, None
        # Numbers that may be floats are decoded as any JSON (what the line parser
        # gives), then checked as the general path checks them.
        if tp is float or tp == (int | float):
            return Any, _number
        if tp == (int | float | None):
            return Any, _optional_check(_number)
        supertype = getattr(tp, "__supertype__", None)
        if supertype is not None:  # typing.NewType
            return self.type_of(supertype)
        union = UNIONS.get(tp)
        if union is not None:
            return self._union(union), None
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Literal and all(a.__class__ is str for a in args):
            return tp, None
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            item, check = self.type_of(args[0])
            many: Any = tuple  # built at run time: not a static annotation
            return many[item, ...], None if check is None else _tuple_check(check)
        if origin in (typing.Union, types.UnionType):
            members = [a for a in args if a is not type(None)]
            if len(members) == 1 and len(args) == 2:
                inner, check = self.type_of(members[0])
                return (
                    inner | None,
                    None if check is None else _optional_check(check),
                )
            raise _Unmirrorable(tp)
        if isinstance(tp, type) and issubclass(tp, enum.StrEnum):
            return tp, None
        if isinstance(tp, type) and attrs.has(tp):
            return self.struct(tp), None
        raise _Unmirrorable(tp)

    def _union(self, union: Tagged) -> Any:
        kept = []
        for tag, cls in union.by_tag().items():
            nested = union.nested.get(cls)
            try:
                member = self.struct(cls)
            except _Unmirrorable:
                continue  # that member's lines go the general way
            if nested is not None:  # ``{key: tag, nested: <the member>}``
                self._count += 1
                member = msgspec.defstruct(
                    f"{cls.__name__}Nested{self._count}",
                    [(nested, member)],
                    tag=tag,
                    tag_field=union.key,
                    forbid_unknown_fields=True,
                    kw_only=True,
                    gc=False,
                )
            kept.append(member)
        if not kept:
            raise _Unmirrorable(union)
        return kept[0] if len(kept) == 1 else typing.Union[tuple(kept)]  # noqa: UP007

    def struct(self, cls: type[Any]) -> Any:
        """The struct mirroring attrs class ``cls`` (one level of self-nesting)."""
        if cls in self._stack:
            raise _Unmirrorable(cls)
        key = (cls, frozenset(self._stack))
        found = self._structs.get(key)
        if found is not None:
            return found
        self._stack.append(cls)
        try:
            found = self._structs[key] = self._build(cls)
        finally:
            self._stack.pop()
        return found

    def _build(self, cls: type[Any]) -> Any:
        if hasattr(cls, "__attrs_pre_init__") or hasattr(cls, "__attrs_post_init__"):
            raise _Unmirrorable(cls)
        found = shape(cls)
        fields: list[Any] = []
        rename: dict[str, str] = {}
        checks: list[tuple[str, Check]] = []
        tag_key, tag = found.tag_key, found.tag
        for field, wired in zip(attrs.fields(cls), found.fields, strict=True):
            if not field.init or field.validator is not None or field.converter:
                raise _Unmirrorable(cls)
            tp, check = self.type_of(wired.type)
            wire = wired.key
            if wire == tag_key:
                raise _Unmirrorable(cls)
            rename[field.name] = wire
            if check is not None:
                checks.append((field.name, check))
            default = field.default
            if default is attrs.NOTHING:
                fields.append((field.name, tp))
            elif isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                if default.takes_self:
                    raise _Unmirrorable(cls)
                fields.append(
                    (field.name, tp, msgspec.field(default_factory=default.factory))
                )
            else:
                fields.append((field.name, tp, default))
        # A rule that tests a class identity reads it here (``_rules._class``).
        namespace: dict[str, Any] = {"MIRRORS": cls}
        rule = RULES.get(cls)
        if checks or rule is not None:
            namespace["__post_init__"] = _post_init(tuple(checks), rule)
        options: dict[str, Any] = {}
        if tag is not None:
            options = {"tag": tag, "tag_field": tag_key}
        self._count += 1
        try:
            return msgspec.defstruct(
                f"{cls.__name__}Wire{self._count}",
                fields,
                namespace=namespace,
                rename=rename,
                forbid_unknown_fields=True,
                kw_only=True,
                gc=False,
                **options,
            )
        except (TypeError, ValueError) as exc:
            raise _Unmirrorable(cls) from exc

    def envelope(self, type_: str, cls: type[Any]) -> Any:
        """The struct of a whole line of event type ``type_`` with data ``cls``."""
        data, check = self.type_of(cls)
        if check is not None:
            raise _Unmirrorable(cls)
        seq = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INTEGER)]
        fields: list[Any] = [("seq", seq), ("time", self._safe_int), ("data", data)]
        rename = None
        if type_ in SURFACE_TYPES:
            fields.append(("surface_op", typing.Literal["append"]))
            rename = {"surface_op": "surfaceOp"}
        self._count += 1
        return msgspec.defstruct(
            f"Line{self._count}",
            fields,
            rename=rename,
            tag=type_,
            tag_field="type",
            forbid_unknown_fields=True,
            kw_only=True,
            gc=False,
        )


def _post_init(
    checks: tuple[tuple[str, Check], ...], rule: Callable[[Any], None] | None
) -> Callable[[Any], None]:
    def __post_init__(self: Any) -> None:  # msgspec's hook
        for name, check in checks:
            check(getattr(self, name))
        if rule is not None:
            rule(self)

    return __post_init__


_check: Callable[[bytes], TypedLine | None] | None = None
_built = False
_build_lock: Final = threading.Lock()  # loads in several worker threads build it once


def _build_check() -> Callable[[bytes], TypedLine | None] | None:
    if msgspec is None:  # pragma: no cover - depends on the environment
        return None
    mirror = _Mirror()
    envelopes: dict[type[Any], str] = {}
    for type_, found in EVENTS.items():
        if type_ in TYPED_EXCLUDED:
            continue
        try:
            envelope = mirror.envelope(type_, found.cls)
            msgspec.json.Decoder(envelope)  # msgspec checks the types it is given here
        except (_Unmirrorable, TypeError, ValueError):
            continue  # this type's lines go the general way
        envelopes[envelope] = type_
    if not envelopes:  # pragma: no cover - every event class has a mirror
        return None
    decode = msgspec.json.Decoder(typing.Union[tuple(envelopes)]).decode  # noqa: UP007
    kinds = {cls: (type_, type_ == "turn/start") for cls, type_ in envelopes.items()}

    def check(line: bytes) -> TypedLine | None:
        try:
            found = decode(line)
        except Exception:  # any refusal: the general path decides
            return None
        type_, starts = kinds[found.__class__]
        return type_, found.seq, found.time, found.data.turn if starts else None

    return check


def typed_line_check() -> Callable[[bytes], TypedLine | None] | None:
    """The typed check of a log line, or ``None`` without ``msgspec``.

    The check returns ``(type, seq, time, turn)`` for a line it accepts (``turn``
    is the turn of a ``turn/start``, else ``None``), and ``None`` for any other
    line, which the caller then reads the general way. Built on first use.
    Never blocks (after the first call, which builds the mirror once).
    """
    global _check, _built
    if not _built:
        with _build_lock:
            if not _built:
                _check = _build_check()
                _built = True
    return _check


_message_of: Callable[[bytes], Any] | None = None


def _build_message_of() -> Callable[[bytes], Any]:
    if msgspec is None:  # pragma: no cover - depends on the environment
        return lambda line: None
    decode_message = _decoder(AssistantMessage)
    # Only ``data.message`` is read; the rest of the line (its stream records, most
    # of it) is skipped unread.
    data = msgspec.defstruct("MessageOnly", [("message", msgspec.Raw)], gc=False)
    message_raw = msgspec.json.Decoder(
        msgspec.defstruct("AssistantLine", [("data", data)], gc=False)
    ).decode
    parse = msgspec.json.Decoder().decode

    def message_of(line: bytes) -> Any:
        try:
            return decode_message(parse(message_raw(line).data.message))
        except Exception:  # anything unusual: the caller decodes the whole event
            return None

    return message_of


def assistant_message_of(line: bytes) -> AssistantMessage | None:
    """The message of an ``assistant/message`` line already read once (so valid),
    decoded without its stream records; ``None`` when the fast decoders do not take
    it (the caller then decodes the whole event, which gives the same message).

    Example::

        message = assistant_message_of(line) or decode_line(line, seq).data.message
    """
    global _message_of
    found = _message_of
    if found is None:
        with _build_lock:
            found = _message_of = _message_of or _build_message_of()
    message: AssistantMessage | None = found(line)
    return message
