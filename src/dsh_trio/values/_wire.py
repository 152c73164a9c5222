"""The wire format of a session log: one description that every engine is built from.

A log line is an event: the envelope :data:`ENVELOPE` whose ``data`` is the JSON object
of the event type's value class (:data:`EVENTS`). Every value class written to a log
has a :class:`Shape`:

* its **tag**, when the class is a member of a tagged union (:data:`UNIONS`): the key
  (``type``, ``kind`` or ``role``) and the class's own value (its ``TAG``, ``ROLE`` or
  ``kind``), written wherever the class is written; on read the tag is required where
  the union is (it chooses the class) and may be left out where only the class fits;
* its **fields**, each with its wire key (the camelCase of its name, or a rename of
  :data:`_RENAMED`), its annotation and its default: a field with a default may be
  absent on read; one whose default is ``None`` is left out on write while ``None``
  (never written as ``null``);
* its **key order**: the tag, then the fields in declaration order, except where the
  reference's writer builds the object in another order (:data:`_KEY_ORDERS`, and
  :data:`TOOL_RESULT_ORDER` for a tool result's message).

Built from it, once, at first use: the converter (:mod:`._converter`: it writes and
reads by the shapes), the checkers of typed values (:mod:`._checks`), the fast decoders
of the log reader (:mod:`._fast`) and its typed line check (:mod:`._typed_lines`). The
fast decoders are generated straight-line code, so reading the shapes while building
them costs a decode nothing. What an engine does with a leaf (a safe integer, a string
UTF-8 can encode, a strict boolean) stays in that engine, in its own form (a ``cattrs``
hook, an inline test, a ``msgspec`` constraint): a tests module holds every engine to
the shapes for every event type, field by field.

Example::

    shape(ToolCallData).order  # ('turn', 'step', 'callId', 'name', 'arguments')
    EVENTS["turn/end"].fields[1].type  # TurnEndReason
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ._causes import CANCEL_CAUSES, CancelCause, TurnEndReason
from ._chunks import StreamChunk, StreamRecord, ToolCallChunksRecord, Usage
from ._content import (
    AssistantMessage,
    ContentBlock,
    Message,
    MessageSource,
    SystemMessage,
    UserMessage,
)
from ._event_data import (
    EVENT_DATA_TYPES,
    AssistantMessageData,
    InboxSplice,
    SessionHeader,
)
from ._ids import JsonValue

__all__ = [
    "ENVELOPE",
    "EVENTS",
    "HEADER_TAG",
    "TOOL_RESULT_ORDER",
    "UNIONS",
    "Shape",
    "Tagged",
    "WireField",
    "describe",
    "is_json",
    "shape",
    "tag_of",
    "wire_key",
]

# --------------------------------------------------------------------------- declarations

#: The keys of an event line, in the order they are written (the last three only when
#: set: ``sourceEventSeqs`` and ``surfaceOp`` on surface events, ``ignorable`` when true).
ENVELOPE: Final = (
    "type",
    "seq",
    "time",
    "data",
    "sourceEventSeqs",
    "surfaceOp",
    "ignorable",
)

#: The tag of a log's header line, written before the fields of ``SessionHeader``.
HEADER_TAG: Final = ("type", "session")

#: Field names whose wire key is not the plain camelCase of the name.
_RENAMED: Final = {"retry_after_ms": "providerRetryAfterMs"}


@attrs.frozen
class Tagged:
    """A tagged union: the key whose value names the member, and the members.

    A member in ``nested`` is written as ``{key: tag, nested[cls]: <the member>}``
    instead of carrying the tag itself (the usage chunk: ``{"type": "usage",
    "usage": {...counters}}``, while the ``usage`` of an assistant message holds the
    bare counters).
    """

    key: str
    members: tuple[type[Any], ...]
    nested: Mapping[type[Any], str] = attrs.field(factory=dict)

    def by_tag(self) -> dict[str, type[Any]]:
        """Tag → member, in member order."""
        return {_tag_value(cls): cls for cls in self.members}


#: The tagged unions of the format, by annotation. The members are the union's own
#: classes (``CancelCause``: its subclasses, :data:`CANCEL_CAUSES`).
UNIONS: Final[Mapping[object, Tagged]] = {
    ContentBlock: Tagged("type", typing.get_args(ContentBlock)),
    MessageSource: Tagged("kind", typing.get_args(MessageSource)),
    Message: Tagged("role", typing.get_args(Message)),
    TurnEndReason: Tagged("kind", typing.get_args(TurnEndReason)),
    CancelCause: Tagged("kind", tuple(CANCEL_CAUSES.values())),
    StreamChunk: Tagged("type", typing.get_args(StreamChunk), {Usage: "usage"}),
    StreamRecord: Tagged("type", typing.get_args(StreamRecord)),
}

#: The objects whose keys the reference's writer does not write in field order: their
#: keys in the order written (an absent optional key is skipped). The reference's
#: objects keep the order its code builds them in: a user message is ``{...input,
#: role}`` and then ``{..., id}``; an inbox splice spreads ``removedCount`` between
#: ``start`` and ``inserted``; an interrupted assistant message writes
#: ``interrupted`` before ``usage`` and ``stream``.
_KEY_ORDERS: Final[Mapping[type[Any], tuple[str, ...]]] = {
    UserMessage: ("content", "source", "role", "id"),
    AssistantMessage: ("role", "content", "source", "id"),
    SystemMessage: ("role", "content", "source", "id"),
    ToolCallChunksRecord: ("type", "time0", "index", "dt", "id", "name", "args"),
    AssistantMessageData: ("turn", "step", "message", "interrupted", "usage", "stream"),
    InboxSplice: ("target", "start", "removedCount", "inserted", "outcome"),
}

#: The key order of a tool result's message (a user message whose source is a
#: ``ToolSource``): the reference builds it from ``{source, content}``.
TOOL_RESULT_ORDER: Final = ("source", "content", "role", "id")

# --------------------------------------------------------------------------- shapes


@attrs.frozen
class WireField:
    """One field of a shape: its name, wire key, resolved annotation and default
    (``attrs.NOTHING`` when the field is required)."""

    name: str
    key: str
    type: Any
    default: Any
    #: The constructor's parameter name (``attrs``' alias).
    alias: str

    @property
    def required(self) -> bool:
        """The key must be present on read."""
        return self.default is attrs.NOTHING

    @property
    def omitted_when_none(self) -> bool:
        """The key is left out on write while the field holds ``None``."""
        return self.default is None


@attrs.frozen
class Shape:
    """The wire shape of one value class (see the module's docstring)."""

    cls: type[Any]
    tag_key: str | None
    tag: str | None
    #: In declaration order (the constructor's).
    fields: tuple[WireField, ...]
    #: Every key, the tag's included, in the order written.
    order: tuple[str, ...]

    def field(self, key: str) -> WireField:
        """The field written under ``key``."""
        for f in self.fields:
            if f.key == key:
                return f
        raise KeyError(key)


def wire_key(name: str) -> str:
    """The wire key of field ``name`` (``tool_call_id`` → ``toolCallId``)."""
    renamed = _RENAMED.get(name)
    if renamed is not None:
        return renamed
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _tag_value(cls: type[Any]) -> str:
    names: set[str] = set()
    for klass in cls.__mro__:
        names.update(vars(klass))
    if "TAG" in names:
        return typing.cast(str, cls.TAG)
    if "ROLE" in names:
        return typing.cast(str, cls.ROLE)
    if issubclass(cls, CancelCause):
        return cls.kind
    raise TypeError(f"{cls.__name__} is a union member without a tag")


#: Class → (tag key, tag), for every member that carries its tag itself.
_TAGS: Final[Mapping[type[Any], tuple[str, str]]] = {
    cls: (union.key, _tag_value(cls))
    for union in UNIONS.values()
    for cls in union.members
    if cls not in union.nested
}


def tag_of(cls: type[Any]) -> tuple[str | None, str | None]:
    """``(key, tag)`` of the class's own tag, or ``(None, None)`` for an untagged class."""
    return _TAGS.get(cls, (None, None))


_SHAPES: dict[type[Any], Shape] = {}


def shape(cls: type[Any]) -> Shape:
    """The shape of the attrs class ``cls`` (cached)."""
    found = _SHAPES.get(cls)
    if found is None:
        found = _SHAPES[cls] = _shape(cls)
    return found


def _shape(cls: type[Any]) -> Shape:
    tag_key, tag = tag_of(cls)
    # Field types, resolved once and cached by attrs.
    fields = tuple(
        WireField(f.name, wire_key(f.name), f.type, f.default, f.alias)
        for f in attrs.fields(attrs.resolve_types(cls))
    )
    keys = tuple(f.key for f in fields)
    written = keys if tag_key is None else (tag_key, *keys)
    order = _KEY_ORDERS.get(cls, written)
    if sorted(order) != sorted(written):
        raise TypeError(f"the key order of {cls.__name__} names {order}, not {written}")
    if cls is UserMessage and sorted(TOOL_RESULT_ORDER) != sorted(written):
        raise TypeError(f"the tool result order names {TOOL_RESULT_ORDER}")
    return Shape(cls, tag_key, tag, fields, order)


#: Event type → the shape of its data (types not listed keep plain JSON data).
EVENTS: Final[Mapping[str, Shape]] = {
    type_: shape(cls) for type_, cls in EVENT_DATA_TYPES.items()
}

# --------------------------------------------------------------------------- annotations

_JSON_SCALARS: Final = frozenset({type(None), bool, int, float, str})


def is_json(tp: object) -> bool:
    """Whether annotation ``tp`` is :data:`JsonValue` (any lossless JSON)."""
    # The recursive alias comes back from annotation resolution with fresh
    # ForwardRefs, so recognise it by its scalar members rather than by identity.
    if tp is JsonValue:
        return True
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return False
    return set(typing.get_args(tp)) >= _JSON_SCALARS


# --------------------------------------------------------------------------- description


def spell(tp: object) -> str:
    """Annotation ``tp`` as the description writes it (``ContentBlock[]``, ``int?``)."""
    if is_json(tp):
        return "json"
    for name, union in _UNION_NAMES.items():
        if tp is union or tp == union:
            return name
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(f'"{m.value}"' for m in tp)
    if isinstance(tp, type):
        return tp.__name__
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return spell(supertype)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' for a in args)
    if origin is tuple:
        return f"{spell(args[0])}[]"
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        return " | ".join(spell(m) for m in members) + (
            " | null" if len(members) < len(args) else ""
        )
    return repr(tp)


_UNION_NAMES: Final = {
    "ContentBlock": ContentBlock,
    "MessageSource": MessageSource,
    "Message": Message,
    "TurnEndReason": TurnEndReason,
    "CancelCause": CancelCause,
    "StreamChunk": StreamChunk,
    "StreamRecord": StreamRecord,
}


def _classes_of(tp: object, seen: dict[type[Any], None]) -> None:
    """Every attrs class annotation ``tp`` reaches, in first-met order."""
    if is_json(tp):
        return
    union = UNIONS.get(tp)
    if union is not None:
        for member in union.members:
            _classes_of(member, seen)
        return
    if isinstance(tp, type) and attrs.has(tp):
        if tp in seen:
            return
        seen[tp] = None
        for f in shape(tp).fields:
            _classes_of(f.type, seen)
        return
    for arg in typing.get_args(tp):
        _classes_of(arg, seen)


def describe() -> str:
    """The whole format as text: the envelope, each event type's class, each class's
    keys in written order, and the unions.

    A key ``k?`` may be absent and is left out while ``None``; ``k = v`` may be absent
    (read as ``v``) and is always written; a tag is written ``key="value"``.
    """
    lines = [f"envelope: {', '.join(ENVELOPE)}"]
    header = shape(SessionHeader)
    header_keys = [f'{HEADER_TAG[0]}="{HEADER_TAG[1]}"', *_keys(header)]
    lines.append(f"header: {{{', '.join(header_keys)}}}")
    seen: dict[type[Any], None] = {}
    for type_, found in EVENTS.items():
        lines.append(f"event {type_}: {found.cls.__name__}")
        _classes_of(found.cls, seen)
    for name, union in _UNION_NAMES.items():
        tagged = UNIONS[union]
        members = [
            f'{tag}: {{{tagged.key}="{tag}", {tagged.nested[cls]}: {cls.__name__}}}'
            if cls in tagged.nested
            else f"{tag}: {cls.__name__}"
            for tag, cls in tagged.by_tag().items()
        ]
        lines.append(f"union {name} by {tagged.key}: {'; '.join(members)}")
    for cls in seen:
        lines.append(f"{cls.__name__} {{{', '.join(_keys(shape(cls)))}}}")
        if cls is UserMessage:
            lines.append(
                f"UserMessage with a ToolSource: {', '.join(TOOL_RESULT_ORDER)}"
            )
    return "\n".join(lines) + "\n"


def _keys(found: Shape) -> list[str]:
    parts = []
    for key in found.order:
        if key == found.tag_key:
            parts.append(f'{key}="{found.tag}"')
            continue
        f = found.field(key)
        if f.required:
            parts.append(f"{key}: {spell(f.type)}")
        elif f.omitted_when_none:
            parts.append(f"{key}?: {spell(f.type).removesuffix(' | null')}")
        else:
            default = f.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            parts.append(f"{key}: {spell(f.type)} = {default!r}")
    return parts
