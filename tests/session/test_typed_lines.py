"""The typed check of a log line: it only ever accepts what the general path accepts.

A load checks the common line with one typed ``msgspec`` decode
(:func:`dsh_trio.values.typed_line_check`) and reads every other line the general
way (parse, then :func:`decode_event`). The check may refuse anything, but what it
accepts must be what the general path gives as a checked event of that type, seq
and time, with an appending ``surfaceOp`` exactly on a surface event. These tests
compare the two on generated events, on events damaged at random, and on whole
logs loaded with and without the check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.errors import SessionCorruptError
from dsh_trio.persistence import _jsonl_load
from dsh_trio.session import Session, _compact, _history
from dsh_trio.session._compact import DecodedEvents
from dsh_trio.values import (
    EVENT_DATA_TYPES,
    MAX_SAFE_INTEGER,
    SURFACE_TYPES,
    TYPED_EXCLUDED,
    AssistantMessage,
    AssistantMessageData,
    MessageId,
    ModelSource,
    RequestContextData,
    SessionEvent,
    ToolResultBlock,
    _typed_lines,
    decode_event,
    event_to_json,
    parse_json_line,
    typed_line_check,
)

from .test_compact_events import _scan
from .test_event_json_round_trip import data_by_type, events, json_values

pytestmark = pytest.mark.skipif(
    typed_line_check() is None, reason="the typed check needs msgspec"
)

CHECK = typed_line_check()


def _line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def _agrees(line: bytes) -> None:
    """If the typed check accepts ``line``, the general path gives that event, checked."""
    assert CHECK is not None
    found = CHECK(line)
    if found is None:
        return
    type_, seq, time, turn = found
    assert type_ not in TYPED_EXCLUDED
    assert -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER  # what admitting checks
    event, checked = decode_event(parse_json_line(line), seq)
    assert checked, line
    assert (event.type, event.seq, event.time) == (type_, seq, time)
    assert event.surface_op == ("append" if type_ in SURFACE_TYPES else None)
    assert event.source_event_seqs is None
    assert event.ignorable is False
    data: Any = event.data
    assert turn == (data.turn if type_ == "turn/start" else None)


def _nested_tool_result(value: object, depth: int = 0) -> bool:
    """Whether ``value`` holds a tool result block inside a tool result block."""
    if isinstance(value, ToolResultBlock):
        if depth:
            return True
        return any(_nested_tool_result(b, depth + 1) for b in value.content)
    if isinstance(value, (tuple, list)):
        return any(_nested_tool_result(v, depth) for v in value)
    fields = getattr(value.__class__, "__attrs_attrs__", None)
    if fields is None:
        return False
    return any(_nested_tool_result(getattr(value, f.name), depth) for f in fields)


# --------------------------------------------------------------------------- events

_SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(events())
def test_typed_check_accepts_the_common_event_and_agrees(event: SessionEvent) -> None:
    """A generated event: accepted exactly when it is a common, checked one."""
    line = _line(event_to_json(event))
    _agrees(line)
    assert CHECK is not None
    accepted = CHECK(line) is not None
    try:
        decoded, checked = decode_event(parse_json_line(line), event.seq)
    except SessionCorruptError:
        assert not accepted
        return
    common = (
        checked
        and decoded.type in EVENT_DATA_TYPES  # unknown types are the general path's
        and decoded.type not in TYPED_EXCLUDED
        and decoded.surface_op == ("append" if decoded.type in SURFACE_TYPES else None)
        and decoded.source_event_seqs is None
        and not decoded.ignorable
        and not _nested_tool_result(decoded.data)
    )
    assert accepted == common, line


def _paths(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            found += _paths(v, (*path, i))
    return found


def _set(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    *head, last = path
    node = obj
    for key in head:
        node = node[key]
    node[last] = value
    return obj


def _delete(obj: Any, path: tuple[Any, ...]) -> Any:
    *head, last = path
    node = obj
    for key in head:
        node = node[key]
    del node[last]
    return obj


_ODD_VALUES: st.SearchStrategy[Any] = st.sampled_from(
    [None, True, False, 0, -1, 1.5, 2**53, -(2**53), "", "x", [], {}, "append"]
)


@st.composite
def common_events(draw: st.DrawFn) -> SessionEvent:
    """A generated event as a runtime writes most of them: not ignorable, and an
    appending surface event without sources."""
    event = draw(events())
    surface = event.type in SURFACE_TYPES
    return attrs.evolve(
        event,
        ignorable=False,
        surface_op="append" if surface else None,
        source_event_seqs=None,
    )


@st.composite
def damaged_lines(draw: st.DrawFn) -> bytes:
    """The line of a generated event, damaged in one place (or not at all)."""
    obj = event_to_json(draw(common_events() | events()))
    paths = _paths(obj)
    path = draw(st.sampled_from(paths))
    how = draw(
        st.sampled_from(
            ["set", "delete", "add", "number", "number", "repeat", "surrogate"]
        )
    )
    if how == "set":
        obj = _set(obj, path, draw(_ODD_VALUES | json_values))
    elif how == "delete" and path:
        obj = _delete(obj, path)
    elif how == "add":
        parents = [p for p in paths if isinstance(_get(obj, p), dict)]
        parent = draw(st.sampled_from(parents))
        key = draw(st.sampled_from(["extra", "type", "kind", "seq", "surfaceOp"]))
        _get(obj, parent)[key] = draw(_ODD_VALUES)
    line = _line(obj)
    # Spellings JSON allows that the values above cannot give: a float of an
    # integer, an integer out of range, -0.0, a repeated key, a lone surrogate.
    if how == "number":
        numbers = list(re.finditer(rb"(?<=[:\[,])-?\d+(?=[,\]}])", line))
        edits = [b"1.0", b"-0.0", b"1e400", b"9007199254740993", b"-0"]
        m = draw(st.sampled_from(numbers))  # every line has a seq
        line = line[: m.start()] + draw(st.sampled_from(edits)) + line[m.end() :]
    elif how == "repeat":
        keys = list(re.finditer(rb'\{"(\w+)":', line))
        m = draw(st.sampled_from(keys))
        repeated = b'{"' + m.group(1) + b'":' + draw(st.sampled_from([b"1,", b'"x",']))
        line = line[: m.start()] + repeated + line[m.start() + 1 :]
    elif how == "surrogate":
        line = line.replace(b'"text":"', b'"text":"\\ud800', 1)
    return line


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        obj = obj[key]
    return obj


@settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damaged_lines())
def test_typed_check_never_accepts_what_the_general_path_refuses(line: bytes) -> None:
    _agrees(line)


@pytest.mark.parametrize(
    "line",
    [
        # A repeated key: the general path reads the last value; so does the check.
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"turn":"x"}}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"type":"step/x"}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1.0}}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":9007199254740992}}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":true}}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"ignorable":false}',
        b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1},"surfaceOp":"append"}',
        b'{"type":"turn/start","seq":-1,"time":1,"data":{"turn":1}}',
        (
            b'{"type":"request/header","seq":0,"time":1,"data":{"reason":"initial",'
            b'"header":{"config":{"provider":"p","model":"m"}}}}'
        ),
        (
            b'{"type":"user/message","seq":0,"time":1,"data":{"role":"user","id":"u",'
            b'"content":[],"source":{"kind":"user"}}}'
        ),
        (
            b'{"type":"user/message","seq":0,"time":1,"data":{"role":"user","id":"",'
            b'"content":[],"source":{"kind":"user"}},"surfaceOp":"append"}'
        ),
        (
            b'{"type":"user/message","seq":0,"time":1,"data":{"role":"user","id":"u",'
            b'"content":[{"type":"text","text":"\\ud800"}],"source":{"kind":"user"}},'
            b'"surfaceOp":"append"}'
        ),
        (
            b'{"type":"assistant/message","seq":0,"time":1,"data":{"turn":1,"step":1,'
            b'"message":{"role":"assistant","id":"a","content":[],"source":{"kind":"model",'
            b'"provider":"p","model":"m"}},"interrupted":false},"surfaceOp":"append"}'
        ),
        (
            b'{"type":"tool/result","seq":0,"time":1,"data":{"turn":1,"step":1,"message":'
            b'{"role":"user","id":"r","content":[{"type":"tool-result","toolCallId":"c",'
            b'"content":[]}],"source":{"kind":"user"}}},"surfaceOp":"append"}'
        ),
        (
            b'{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":'
            b'"error","error":{"message":"m","code":"c","providerRetryAfterMs":-0.0}}}}'
        ),
        (
            b'{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":'
            b'"error","error":{"message":"m","code":"c","providerRetryAfterMs":"1"}}}}'
        ),
        (
            b'{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":'
            b'"error","error":{"message":"m","code":"c","providerRetryAfterMs":true}}}}'
        ),
        (
            b'{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":'
            b'"error","error":{"message":"m","code":"c",'
            b'"providerRetryAfterMs":9007199254740993}}}}'
        ),
        b'{"type":"turn/start","seq":0,"time":9007199254740992,"data":{"turn":1}}',
    ],
)
def test_typed_check_refuses_what_it_cannot_vouch_for(line: bytes) -> None:
    assert CHECK is not None
    assert CHECK(line) is None
    _agrees(line)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            b'{"type":"turn/start","seq":3,"time":5,"data":{"turn":2}}',
            ("turn/start", 3, 5, 2),
        ),
        (
            (
                b'{"type":"turn/end","seq":0,"time":1,"data":{"turn":1,"reason":{"kind":'
                b'"error","error":{"message":"m","code":"c","providerRetryAfterMs":1.5}}}}'
            ),
            ("turn/end", 0, 1, None),
        ),
        (
            (
                b'{"type":"tool/result","seq":0,"time":1,"data":{"turn":1,"step":1,'
                b'"message":{"role":"user","id":"r","content":[{"type":"tool-result",'
                b'"toolCallId":"c","content":[]}],"source":{"kind":"tool","callId":"c"}}},'
                b'"surfaceOp":"append"}'
            ),
            ("tool/result", 0, 1, None),
        ),
    ],
)
def test_typed_check_accepts_the_common_line(line: bytes, expected: object) -> None:
    assert CHECK is not None
    assert CHECK(line) == expected
    _agrees(line)


def test_without_msgspec_there_is_no_typed_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_typed_lines, "msgspec", None)
    monkeypatch.setattr(_typed_lines, "_built", False)
    monkeypatch.setattr(_typed_lines, "_check", None)
    assert _typed_lines.typed_line_check() is None


# --------------------------------------------------------------------------- loads


def _write_log(path: Path, session: Session) -> None:
    from dsh_trio.values import header_to_json

    lines = [_line(header_to_json(session.header))]
    lines += [_line(event_to_json(e)) for e in session.events]
    path.write_bytes(b"\n".join(lines) + b"\n")


def _restored(path: Path) -> tuple[list[Any], Any, Any]:
    scan = _scan(path)
    markers = attrs.asdict(scan.events.settled_markers(), recurse=False)
    nodes = list(scan.events.surface.nodes)
    session = Session.restore(scan.header, scan.events)
    assert session.request_context() == markers["request_context"]
    return [event_to_json(e) for e in session.events], markers, nodes


def _session(*models: str) -> Session:
    """Five benchmark turns, the last one open, then a request/context per model."""
    from benchmarks.jsonl_append import append_turn

    session = Session.create("typed", cwd="/w")
    for turn in range(1, 6):
        append_turn(session, turn, close=turn != 5)
    for model in models:
        session.append("request/context", RequestContextData(provider="p", model=model))
    return session


def test_a_load_with_the_typed_check_restores_what_the_general_path_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "session.v3.jsonl"
    _write_log(path, _session("late"))
    calls: list[int] = []
    real = decode_event

    def counted(obj: object, seq: int | None = None) -> tuple[SessionEvent, bool]:
        calls.append(0)
        return real(obj, seq)

    monkeypatch.setattr(_jsonl_load, "decode_event", counted)
    typed = _restored(path)
    assert calls == []  # every line took the typed check
    monkeypatch.setattr(_jsonl_load, "typed_line_check", lambda: None)
    general = _restored(path)
    assert len(calls) == len(typed[0])
    assert typed[0] == general[0]
    assert typed[1] == general[1]
    assert typed[1]["open_turn"] == 5
    assert typed[1]["request_context"] == RequestContextData(provider="p", model="late")
    assert typed[2] == general[2]


@pytest.mark.parametrize("general_one", [0, 1])
def test_the_latest_request_context_wins_whichever_way_it_was_read(
    tmp_path: Path, general_one: int
) -> None:
    """Of two request/context lines, one goes the general way (it carries an
    ``ignorable`` flag, which the typed check does not take): the later one is the
    marker either way."""
    path = tmp_path / "session.v3.jsonl"
    _write_log(path, _session("first", "second"))
    lines = path.read_bytes().split(b"\n")
    at = len(lines) - 3 + general_one  # the two last lines, then the final b""
    assert b'"model":"' + (b"first", b"second")[general_one] in lines[at]
    lines[at] = lines[at][:-1] + b',"ignorable":false}'
    path.write_bytes(b"\n".join(lines))
    assert CHECK is not None and CHECK(lines[at]) is None
    markers = _restored(path)[1]
    assert markers["request_context"] == RequestContextData(
        provider="p", model="second"
    )


def test_a_refused_line_after_typed_lines_is_named_as_before(tmp_path: Path) -> None:
    path = tmp_path / "session.v3.jsonl"
    _write_log(path, _session())
    lines = path.read_bytes().split(b"\n")
    lines[10] = lines[10].replace(b'"turn":2', b'"turn":"two"', 1)
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionCorruptError) as info:
        _scan(path)
    assert info.value.line == 11


# --------------------------------------------------------------------------- history


@_SETTINGS
@given(data_by_type["assistant/message"])
def test_an_assistant_line_gives_its_message_without_its_stream(data: Any) -> None:
    event = SessionEvent(
        seq=0, time=1, type="assistant/message", data=data, surface_op="append"
    )
    line = _line(event_to_json(event))
    events = DecodedEvents()
    events.append_line(line, "assistant/message")
    message = events.assistant_message(0)
    decoded, checked = decode_event(parse_json_line(line), 0)
    whole: Any = decoded.data
    if checked:  # what the fast decoders take, the projection takes too
        assert message is not None
    if message is not None:
        assert message == whole.message
    assert events.assistant_message(1) is None  # past the lines


def test_only_assistant_lines_are_projected(tmp_path: Path) -> None:
    path = tmp_path / "session.v3.jsonl"
    _write_log(path, _session())
    events = _scan(path).events
    projected = [events.assistant_message(i) is not None for i in range(len(events))]
    types = [events[i].type for i in range(len(events))]
    assert projected == [t == "assistant/message" for t in types]


def test_a_resumed_history_is_what_the_whole_events_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "session.v3.jsonl"
    written = _session()
    empty = AssistantMessage(MessageId("empty"), (), ModelSource("p", "m"))
    written.append(
        "assistant/message",
        AssistantMessageData(turn=5, step=1, message=empty, stream=()),
        surface_op="append",
    )  # an empty reply is left out of the history
    _write_log(path, written)
    scan = _scan(path)
    session = Session.restore(scan.header, scan.events)
    whole = [
        message
        for message in (_history._project(e) for e in session.events)
        if message is not None
    ]
    decoded: list[int] = []
    real = _compact.decode_line

    def counted(line: bytes, seq: int) -> SessionEvent:
        decoded.append(seq)
        event: SessionEvent = real(line, seq)
        return event

    monkeypatch.setattr(_compact, "decode_line", counted)
    assert list(session.derive_messages()) == whole
    assert len(whole) == 10  # five questions, five answers
    # Only the user messages were decoded whole.
    assert [session.events[s].type for s in decoded] == ["user/message"] * 5
    assert empty not in session.derive_messages()
