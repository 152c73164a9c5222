"""Every engine that reads or writes the log keeps to the one description of the format.

``dsh_trio.values._wire`` describes the wire format: each event type's class, each
class's keys (wire key, annotation, whether it may be absent, whether it is left out
while ``None``) in the order written, its tag, and the tagged unions. Four engines are
built from it: the converter (writes and reads), the generated checkers of typed
values, the fast decoders of the log reader and the typed line check. Here, for every
event type, values are made from the description alone (every union member in turn,
all optional fields set or none), and each engine is held to it:

* the converter writes exactly the described keys, in the described order, leaving
  out what is ``None`` and optional;
* for every object in the value and every key: removing it, setting it to each of a
  pool of JSON values, adding an unknown key, and changing or removing a tag, the
  converter takes what the description takes and refuses the rest; the fast decoder
  and the typed check take exactly what the converter takes and the checker passes
  (and give the same value), and refuse the rest;
* the checker refuses every value of the wrong Python type in every field.

The description itself is pinned in ``wire_format.txt`` next to this file: a change of
the format shows there as a diff.
"""

from __future__ import annotations

import copy
import enum
import json
import typing
from pathlib import Path
from typing import Any

import attrs
import cattrs
import pytest

from dsh_trio.persistence import _jsonl_lines
from dsh_trio.values import (
    MAX_SAFE_INTEGER,
    SURFACE_TYPES,
    TYPED_EXCLUDED,
    DataShapeError,
    MessageId,
    ReasoningChunksRecord,
    SessionEvent,
    SessionHeader,
    SessionId,
    TextBlock,
    TextChunksRecord,
    ToolCallChunksRecord,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
    _codec,
    checker,
    data_from_json,
    event_to_json,
    header_to_json,
    typed_line_check,
)
from dsh_trio.values._fast import Slow, fast_data
from dsh_trio.values._wire import (
    ENVELOPE,
    EVENTS,
    HEADER_TAG,
    TOOL_RESULT_ORDER,
    UNIONS,
    Shape,
    describe,
    is_json,
    shape,
)

DESCRIPTION = Path(__file__).with_name("wire_format.txt")
CHECK = typed_line_check()

# --------------------------------------------------------------------------- the description


def test_the_format_is_the_one_described() -> None:
    """A change of the wire format changes this file (regenerate it with
    ``python -c "from dsh_trio.values._wire import describe; print(describe(), end='')"``)."""
    assert describe() == DESCRIPTION.read_text(encoding="utf-8")


def test_the_envelope_and_the_header_are_written_in_the_described_order() -> None:
    event = SessionEvent(
        seq=3,
        time=1,
        type="user/message",
        data=UserMessage(MessageId("m"), (TextBlock("t"),)),
        surface_op="append",
        source_event_seqs=(1,),
        ignorable=True,
    )
    assert tuple(event_to_json(event)) == ENVELOPE
    assert frozenset(ENVELOPE) == _codec._EVENT_KEYS
    header = SessionHeader(
        id=SessionId("s"),
        created_at=1,
        cwd="/",
        parent_session="p",
        is_seeded=True,
        origin="o",
        delegation_depth=1,
        agent_preset="a",
    )
    order = (HEADER_TAG[0], *shape(SessionHeader).order)
    assert tuple(header_to_json(header)) == order
    assert order == _jsonl_lines._HEADER_KEY_ORDER
    line = json.loads(_jsonl_lines.encode_header(header))
    assert tuple(line) == order


# --------------------------------------------------------------------------- values from the description

#: Fields whose sample must follow a shape rule the annotations cannot say: a run of
#: one member has no time gap, a tool result answers the call its source names.
OVERRIDES: dict[tuple[type[Any], str], Any] = {
    **{
        (cls, "dt"): ()
        for cls in (TextChunksRecord, ReasoningChunksRecord, ToolCallChunksRecord)
    },
    (ToolResultData, "message"): UserMessage(
        MessageId("r"),
        (ToolResultBlock("c", (TextBlock("t"),), True),),
        ToolSource("c"),
    ),
}


def sample(tp: Any, pick: int, full: bool, stack: tuple[type[Any], ...] = ()) -> Any:
    """A valid value of annotation ``tp``: union members chosen by ``pick``, every
    optional field set (``full``) or none, no class inside itself."""
    if is_json(tp):
        return {"j": [1, "x", None, 0.5, True]}
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return sample(supertype, pick, full, stack)
    if tp is int:
        return 7
    if tp is str:
        return "s"
    if tp is bool:
        return True
    if tp is float:
        return 0.5
    union = UNIONS.get(tp)
    if union is not None:
        members = [m for m in union.members if m not in stack]
        return sample(members[pick % len(members)], pick, full, stack)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return args[pick % len(args)]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        members = list(tp)
        return members[pick % len(members)]
    if origin is tuple:
        return (sample(args[0], pick, full, stack),)
    if origin in (typing.Union, type(int | str)):
        inner = [a for a in args if a is not type(None)]
        if len(inner) < len(args) and not full:
            return None
        return sample(inner[pick % len(inner)], pick, full, stack)
    assert attrs.has(tp), tp
    kwargs = {}
    for f in shape(tp).fields:
        if (tp, f.name) in OVERRIDES:
            kwargs[f.alias] = OVERRIDES[tp, f.name]
        elif f.required or full:
            kwargs[f.alias] = sample(f.type, pick, full, (*stack, tp))
    return tp(**kwargs)


def expected_json(value: Any, tp: Any) -> Any:
    """The JSON of ``value`` at a place of annotation ``tp``, as the description says."""
    if value is None or is_json(tp):
        return value
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return expected_json(value, supertype)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bool, int, float, str)):
        return value
    union = UNIONS.get(tp)
    if union is not None:
        nested = union.nested.get(type(value))
        if nested is not None:
            tag = next(t for t, c in union.by_tag().items() if c is type(value))
            return {union.key: tag, nested: _object(value)}
        return _object(value)
    if isinstance(value, tuple):
        (item,) = {a for a in typing.get_args(_strip_none(tp)) if a is not Ellipsis}
        return [expected_json(v, item) for v in value]
    return _object(value)


def _strip_none(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, type(int | str)) and len(args) == 1:
        return args[0]
    return tp


def _object(value: Any) -> dict[str, Any]:
    found = shape(type(value))
    order = found.order
    if type(value) is UserMessage and type(value.source) is ToolSource:
        order = TOOL_RESULT_ORDER
    out: dict[str, Any] = {}
    for key in order:
        if key == found.tag_key:
            out[key] = found.tag
            continue
        f = found.field(key)
        v = getattr(value, f.name)
        if v is None and f.omitted_when_none:
            continue
        out[key] = expected_json(v, _strip_none(f.type))
    return out


def ordered(value: Any) -> Any:
    """``value`` with every object as its list of items (so order counts)."""
    if isinstance(value, dict):
        return [(k, ordered(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [ordered(v) for v in value]
    return value


CASES = [
    (type_, pick, full)
    for type_ in EVENTS
    for pick in range(7)  # the largest union has seven members
    for full in (True, False)
]


def _id(case: tuple[str, int, bool]) -> str:
    type_, pick, full = case
    return f"{type_}-{pick}-{'full' if full else 'bare'}"


# --------------------------------------------------------------------------- the converter writes it


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_the_converter_writes_the_described_keys_in_order(
    case: tuple[str, int, bool],
) -> None:
    type_, pick, full = case
    cls = EVENTS[type_].cls
    value = sample(cls, pick, full)
    written = event_to_json(SessionEvent(seq=0, time=0, type=type_, data=value))
    assert ordered(written["data"]) == ordered(_object(value))


# --------------------------------------------------------------------------- every engine reads it

#: JSON values put in place of a key's value.
POOL: tuple[Any, ...] = (
    None,
    True,
    0,
    -1,
    1.5,
    MAX_SAFE_INTEGER + 1,
    "s",
    "",
    "next-turn",
    "canceled",
    "initial",
    "stop",
    [],
    ["s"],
    [1],
    {},
)


def takes(tp: Any, v: Any) -> bool:
    """Whether the description takes JSON ``v`` at a place of annotation ``tp``
    (before the shape rules of ``_rules``, which the checker adds)."""
    safe = v.__class__ is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    if is_json(tp):
        return _json_ok(v)
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return takes(supertype, v)
    if tp is int:
        return safe
    if tp is str:
        return v.__class__ is str
    if tp is bool:
        return v.__class__ is bool
    if tp is float:
        return safe or v.__class__ is float
    union = UNIONS.get(tp)
    if union is not None:
        return False  # no pool value carries a tag
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return v.__class__ is str and v in args
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return v.__class__ is str and v in {m.value for m in tp}
    if origin is tuple:
        return v.__class__ is list and all(takes(args[0], x) for x in v)
    if origin in (typing.Union, type(int | str)):
        return (v is None and type(None) in args) or any(
            takes(a, v) for a in args if a is not type(None)
        )
    assert attrs.has(tp), tp
    # An object: only ``{}`` is in the pool; it fits a class whose keys may all be
    # absent (its tag too, outside a union).
    return (
        v == {}
        and v.__class__ is dict
        and not any(f.required for f in shape(tp).fields)
    )


def _json_ok(v: Any) -> bool:
    if v.__class__ is int:
        return -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    if isinstance(v, list):
        return all(_json_ok(x) for x in v)
    if isinstance(v, dict):
        return all(_json_ok(x) for x in v.values())
    return True


@attrs.frozen
class Node:
    """An object of a sample's JSON: where it is (JSON keys and indices; field names
    and indices in the value), its shape, and whether a union chose its class."""

    json_path: tuple[Any, ...]
    value_path: tuple[Any, ...]
    shape: Shape | None  # None: a nested member's wrapper ``{key: tag, nested: ...}``
    in_union: bool
    wrapper_keys: tuple[str, ...] = ()


def nodes(
    value: Any, tp: Any, jp: tuple[Any, ...] = (), vp: tuple[Any, ...] = ()
) -> list[Node]:
    if value is None or is_json(tp):
        return []
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return nodes(value, supertype, jp, vp)
    union = UNIONS.get(tp)
    if union is not None:
        nested = union.nested.get(type(value))
        if nested is not None:
            return [
                Node(jp, vp, None, True, (union.key, nested)),
                *_object_nodes(value, (*jp, nested), vp, False),
            ]
        return _object_nodes(value, jp, vp, True)
    if isinstance(value, tuple):
        (item,) = {a for a in typing.get_args(_strip_none(tp)) if a is not Ellipsis}
        out: list[Node] = []
        for i, v in enumerate(value):
            out += nodes(v, item, (*jp, i), (*vp, i))
        return out
    if attrs.has(type(value)):
        return _object_nodes(value, jp, vp, False)
    return []


def _object_nodes(
    value: Any, jp: tuple[Any, ...], vp: tuple[Any, ...], in_union: bool
) -> list[Node]:
    found = shape(type(value))
    out = [Node(jp, vp, found, in_union)]
    for f in found.fields:
        out += nodes(
            getattr(value, f.name), _strip_none(f.type), (*jp, f.key), (*vp, f.name)
        )
    return out


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = (
            obj[step]
            if isinstance(step, int) or isinstance(obj, dict)
            else getattr(obj, step)
        )
    return obj


def mutations(
    raw: Any, node: Node
) -> list[tuple[str, Any, bool, tuple[Any, ...] | None]]:
    """``(what, mutated JSON, taken, value path of a default to check)``."""
    out: list[tuple[str, Any, bool, tuple[Any, ...] | None]] = []

    def changed(change: Any) -> Any:
        m = copy.deepcopy(raw)
        change(_at(m, node.json_path))
        return m

    where = "/".join(map(str, node.json_path)) or "data"
    out.append(
        (f"{where}: an unknown key", changed(lambda o: o.update(zz=1)), False, None)
    )
    if node.shape is None:
        for key in node.wrapper_keys:
            out.append(
                (
                    f"{where}: without {key}",
                    changed(lambda o, k=key: o.pop(k)),
                    False,
                    None,
                )
            )
        return out
    found = node.shape
    if found.tag_key is not None:
        key = found.tag_key
        out.append(
            (
                f"{where}: without its tag",
                changed(lambda o: o.pop(key)),
                not node.in_union,
                None,
            )
        )
        out.append(
            (
                f"{where}: another tag",
                changed(lambda o: o.update({key: "zz"})),
                False,
                None,
            )
        )
    for f in found.fields:
        present = f.key in _at(raw, node.json_path)
        if present:
            out.append(
                (
                    f"{where}: without {f.key}",
                    changed(lambda o, k=f.key: o.pop(k)),
                    not f.required,
                    None if f.required else (*node.value_path, f.name),
                )
            )
        for v in POOL:
            out.append(
                (
                    f"{where}: {f.key} = {v!r}",
                    changed(lambda o, k=f.key, v=v: o.update({k: copy.deepcopy(v)})),
                    takes(f.type, v),
                    None,
                )
            )
    return out


def _general(type_: str, raw: Any) -> tuple[bool, Any]:
    try:
        return True, data_from_json(type_, raw)
    except (TypeError, ValueError, KeyError, cattrs.BaseValidationError):
        return False, None


def _fast(type_: str, raw: Any) -> tuple[bool, Any]:
    try:
        return True, fast_data(type_, raw)
    except Slow:
        return False, None


def _passes(cls: type[Any], value: Any) -> bool:
    try:
        checker(cls)(value)
    except DataShapeError:
        return False
    return True


def _typed(type_: str, raw: Any) -> bool | None:
    """Whether the typed check takes the line (``None``: it does not look at this type)."""
    if CHECK is None or type_ in TYPED_EXCLUDED:
        return None
    obj: dict[str, Any] = {"type": type_, "seq": 0, "time": 0, "data": raw}
    if type_ in SURFACE_TYPES:
        obj["surfaceOp"] = "append"
    line = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return CHECK(line) is not None


def _default_of(shape_: Shape, name: str) -> Any:
    default = next(f.default for f in shape_.fields if f.name == name)
    return default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_engine_takes_what_the_description_takes(
    case: tuple[str, int, bool],
) -> None:
    type_, pick, full = case
    cls = EVENTS[type_].cls
    value = sample(cls, pick, full)
    raw = json.loads(json.dumps(_object(value)))
    # The sample itself: every engine takes it, as itself.
    assert _general(type_, raw) == (True, value)
    assert _passes(cls, value)
    assert _fast(type_, raw) == (True, value)
    assert _typed(type_, raw) in (True, None)
    for node in nodes(value, cls):
        for what, mutated, taken, default_at in mutations(raw, node):
            ok, general = _general(type_, mutated)
            assert ok == taken, f"converter: {what}: {'refused' if taken else 'taken'}"
            if ok and default_at is not None:
                parent = _at(general, default_at[:-1])
                expected = _default_of(shape(type(parent)), default_at[-1])
                assert getattr(parent, default_at[-1]) == expected, what
            checked = ok and _passes(cls, general)
            fast_ok, fast = _fast(type_, mutated)
            assert fast_ok == checked, f"fast decoder: {what}"
            if fast_ok:
                assert fast == general and repr(fast) == repr(general), what
            typed = _typed(type_, mutated)
            assert typed in (None, checked), f"typed check: {what}"


# --------------------------------------------------------------------------- the checker


#: Python values put in place of a field's value.
PY_POOL: tuple[Any, ...] = (
    None,
    True,
    0,
    1.5,
    MAX_SAFE_INTEGER + 1,
    "s",
    (),
    [],
    {},
    object(),
)


def takes_py(tp: Any, v: Any) -> bool:
    """Whether a typed value may hold ``v`` at a place of annotation ``tp`` (before
    the shape rules)."""
    if is_json(tp):  # a typed value's JSON may hold tuples for arrays
        return v.__class__ in (type(None), bool, str, float, list, tuple, dict) or (
            v.__class__ is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
        )
    supertype = getattr(tp, "__supertype__", None)
    if supertype is not None:
        return takes_py(supertype, v)
    if tp is int:
        return v.__class__ is int and -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER
    if tp is float:
        return takes_py(int, v) or v.__class__ is float
    if tp in (str, bool):
        return v.__class__ is tp
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return v.__class__ is tuple and all(takes_py(args[0], x) for x in v)
    if origin in (typing.Union, type(int | str)):
        return (v is None and type(None) in args) or any(
            takes_py(a, v) for a in args if a is not type(None)
        )
    if origin is typing.Literal:
        return v.__class__ is str and v in args
    return False  # a class, a union of classes, an enum: no pool value is one


@pytest.mark.parametrize("case", [c for c in CASES if c[2]], ids=_id)
def test_the_checker_refuses_every_field_of_the_wrong_type(
    case: tuple[str, int, bool],
) -> None:
    type_, pick, _ = case
    cls = EVENTS[type_].cls
    value = sample(cls, pick, True)
    for node in nodes(value, cls):
        if node.shape is None:
            continue
        for f in node.shape.fields:
            for v in PY_POOL:
                if takes_py(f.type, v):
                    continue
                broken = copy.deepcopy(value)
                object.__setattr__(_at(broken, node.value_path), f.name, v)
                with pytest.raises(DataShapeError):
                    checker(cls)(broken)
                    pytest.fail(f"{node.value_path} {f.name} = {v!r} passed")
