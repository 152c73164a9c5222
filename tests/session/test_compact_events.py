"""A restored log keeps its events as lines and decodes them when read; readers see no change.

``Session.restore`` of a log read from disk keeps each event as its JSON line
(compressed in blocks, decoded on read) instead of the decoded value. These tests
hold the compact storage to the full decoder (every event type, every reader:
``events[i]``, negative indices, slices, iteration, ``len``, ``derive_messages``)
and the JSON accelerator to the standard library.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from dsh_trio import user_message
from dsh_trio.errors import InvalidEventError, SessionCorruptError
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._jsonl_lines import encode_events
from dsh_trio.persistence._jsonl_load import scan_log
from dsh_trio.persistence._persistence import load_session
from dsh_trio.persistence._recorder import persist_new_session
from dsh_trio.session import (
    LoadedLog,
    Session,
    _compact,
    _line_chunks,
    _settling,
)
from dsh_trio.session._compact import DecodedEvents
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    Completed,
    MessageId,
    ModelSource,
    RequestContextData,
    SessionEvent,
    StepEnd,
    StepStart,
    SurfaceReplace,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    UserMessage,
    _codec,
    _jsonline,
    event_from_json,
    parse_json_line,
    parse_json_line_stdlib,
)
from dsh_trio.values._fast import Slow

from ..support import ticking_clock

# --------------------------------------------------------------------------- helpers


def _round_trip_module() -> Any:
    """The event strategies of the JSON round-trip tests (every event type)."""
    path = Path(__file__).with_name("test_event_json_round_trip.py")
    spec = importlib.util.spec_from_file_location("_compact_event_strategies", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


_STRATEGIES = _round_trip_module()


def _always_slow(type_: str, data: object) -> Any:
    raise Slow


def _general(line: bytes) -> SessionEvent:
    """The event of ``line`` through the general converter alone (no fast path)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_codec, "fast_data", _always_slow)
        return event_from_json(json.loads(line))


def _same(a: Any, b: Any) -> None:
    # ``repr`` tells apart what ``==`` does not: 1 and 1.0, an enum and its str.
    assert a == b
    assert repr(a) == repr(b)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 lines, so small logs span many blocks and a partial last one."""
    monkeypatch.setattr(_compact, "BLOCK_LINES", 4)


def _assistant(
    turn: int, text: str, calls: tuple[str, ...] = ()
) -> AssistantMessageData:
    content: tuple[Any, ...] = (
        TextBlock(text),
        *(ToolCallBlock(call, "lookup", '{"q": 1}') for call in calls),
    )
    return AssistantMessageData(
        turn=turn,
        step=1,
        message=AssistantMessage(
            id=MessageId(f"a{turn}"), content=content, source=ModelSource("p", "m")
        ),
        stream=(),
    )


def _result(turn: int, call: str, text: str) -> ToolResultData:
    return ToolResultData(
        turn=turn,
        step=1,
        message=UserMessage(
            id=MessageId(f"r-{call}"),
            content=(ToolResultBlock(call, (TextBlock(text),)),),
            source=ToolSource(call),
        ),
    )


def _session(turns: int = 12, *, open_last: bool = False) -> Session:
    """A session with every kind of surface change: appends, a replace op, a
    tool-result replacement, markers, an unknown event type; the last turn open
    (a pending tool call) when asked."""
    s = Session.create("compact", cwd="/w/p", clock=ticking_clock())
    s.append(
        "system/message",
        SystemMessageData(
            turn=0,
            step=0,
            message=SystemMessage(MessageId("sys"), (TextBlock("be brief"),)),
        ),
        surface_op="append",
    )
    for turn in range(1, turns + 1):
        last = turn == turns
        s.append("turn/start", TurnStart(turn))
        s.append("step/start", StepStart(turn, 1))
        user = s.append(
            "user/message", user_message(f"q{turn}", id=f"u{turn}"), surface_op="append"
        )
        s.append("request/context", RequestContextData(provider="p", model=f"m{turn}"))
        call = f"c{turn}"
        s.append(
            "assistant/message",
            _assistant(turn, f"a{turn}", (call,)),
            surface_op="append",
        )
        s.append(
            "tool/call",
            ToolCallData(
                turn=turn, step=1, call_id=call, name="lookup", arguments="{}"
            ),
        )
        if last and open_last:
            return s  # the crash: a started call without its result
        result = s.append(
            "tool/result",
            _result(turn, call, "v1"),
            surface_op="append",
            source_event_seqs=[s.next_seq - 1],
        )
        if turn % 3 == 0:  # the tool result edited in place
            s.append(
                "tool/result",
                _result(turn, call, "v2"),
                surface_op=SurfaceReplace(result.seq, result.seq),
                source_event_seqs=[result.seq],
            )
        if turn % 4 == 0:  # the user message and what follows folded into one
            s.append(
                "user/message",
                user_message(f"summary of {turn}", id=f"s{turn}"),
                surface_op=SurfaceReplace(user.seq, s.surface[-1]),
                source_event_seqs=[n for n in s.surface if n >= user.seq],
            )
        s.append(
            "plugin/note",
            {"turn": turn, "big": 2**52, "x": [1.5, None, "é"]},
            ignorable=True,
        )
        s.append("step/end", StepEnd(turn, 1))
        s.append("turn/end", TurnEnd(turn, Completed()))
    return s


async def _store(root: Path, session: Session) -> Path:
    writer = await persist_new_session(JsonlPersistence(root), session)
    await writer.close()
    (path,) = await trio.Path(root).rglob("session.v3.jsonl")
    return Path(path)


def _scan(path: Path) -> Any:
    fd = os.open(path, os.O_RDONLY)
    try:
        return scan_log(fd, str(path), None)
    finally:
        os.close(fd)


def _plain(path: Path) -> list[SessionEvent]:
    """The events of the log at ``path``, each line decoded on its own."""
    lines = path.read_bytes().split(b"\n")[1:-1]
    return [event_from_json(json.loads(line)) for line in lines]


def _assert_same_state(got: Session, want: Session) -> None:
    assert len(got.events) == len(want.events) == got.next_seq == want.next_seq
    assert got.surface == want.surface
    assert got.replace_generation == want.replace_generation
    assert got.last_turn == want.last_turn
    assert got.open_turn == want.open_turn
    assert got.request_context() == want.request_context()
    assert got.request_header() == want.request_header()
    _same(list(got.derive_messages()), list(want.derive_messages()))


# --------------------------------------------------------------------------- the decoder


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_STRATEGIES.events(), min_size=1, max_size=12))
def test_every_event_type_decodes_from_its_line_like_the_full_decoder(
    small_blocks: None, drawn: list[SessionEvent]
) -> None:
    events = [
        SessionEvent(
            seq=i,
            time=e.time,
            type=e.type,
            data=e.data,
            surface_op=e.surface_op,
            source_event_seqs=e.source_event_seqs,
            ignorable=e.ignorable,
        )
        for i, e in enumerate(drawn)
    ]
    try:
        lines = encode_events(events).split(b"\n")[:-1]
    except InvalidEventError:
        assume(False)  # a lone surrogate: never written, so never read
        return
    full = [event_from_json(json.loads(line)) for line in lines]
    compact = DecodedEvents()
    for line in lines:
        compact.append_line(line)
    assert len(compact) == len(lines) == compact.compact_count
    for i, line in enumerate(lines):
        _same(compact[i], full[i])
        _same(compact[i], _general(line))
        _same(compact[i - len(lines)], full[i])
    _same(list(compact), full)
    _same(compact[1:-1:2], tuple(full[1:-1:2]))
    _same(list(reversed(compact)), full[::-1])
    assert compact == full
    assert compact == tuple(full)


def test_lines_come_before_values_and_indices_are_checked() -> None:
    line = b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'
    events = DecodedEvents()
    events.append_line(line)
    extra = SessionEvent(seq=1, time=2, type="turn/end", data=TurnEnd(1, Completed()))
    events.append(extra)
    assert events[0] == SessionEvent(
        seq=0, time=1, type="turn/start", data=TurnStart(1)
    )
    assert events[1] is events[-1] is extra
    assert events[-2] == events[0]
    with pytest.raises(IndexError):
        events[2]
    with pytest.raises(IndexError):
        events[-3]
    with pytest.raises(ValueError, match="lines must come before"):
        events.append_line(line)
    assert events.share() == events
    assert "1 kept as lines" in repr(events)


def test_sequences_without_lines_share_no_mutable_store() -> None:
    """A live session's events hold no line stores of their own (idle-agent memory),
    and the shared empty ones stay empty whatever other sequences do."""
    from dsh_trio.session import _compact

    line = b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}'
    live, other = DecodedEvents(), DecodedEvents()
    assert live._lines is other._lines is live._blocks  # the shared empty store
    live.append(SessionEvent(seq=0, time=1, type="turn/start", data=TurnStart(1)))
    copy = live.share()
    held = DecodedEvents()
    held.append_line(line, "turn/start")
    held.unchecked.add(0)
    assert held[0].data == TurnStart(1)
    twin = held.share()
    twin.unchecked.add(7)
    log = LoadedLog()
    log.unchecked.add(3)
    assert held.unchecked == {0} and log.unchecked == {3}
    assert held._lines is not _compact._NO_LINES and twin._lines is not held._lines
    assert live._unchecked is None  # made only when asked for
    shared = (
        _compact._NO_LINES,
        _compact._NO_RECENT,
        _compact._NO_TYPES,
        _compact._NO_CODES,
    )
    assert all(len(store) == 0 for store in shared)
    assert copy == live and len(other) == 0 and other.compact_count == 0


# --------------------------------------------------------------------------- readers


async def test_a_restored_log_reads_like_the_decoded_one(
    tmp_path: Path, small_blocks: None
) -> None:
    original = _session()
    path = await _store(tmp_path, original)
    scan = _scan(path)
    # The reader folds as it reads: no decoded events are kept, only lines.
    assert isinstance(scan.events, LoadedLog)
    assert scan.events.values == []
    assert scan.events.compact_count == len(original.events)
    restored = Session.restore(original.header, scan.events)
    plain = Session.restore(original.header, _plain(path))
    _assert_same_state(restored, plain)
    _assert_same_state(restored, original)
    n = len(plain.events)
    got, want = restored.events, plain.events
    for i in range(-n, n):
        _same(got[i], want[i])
    for bad in (n, -n - 1):
        with pytest.raises(IndexError):
            got[bad]
    for s in (
        slice(None),
        slice(3, 17),
        slice(-9, None),
        slice(None, None, 3),
        slice(None, None, -1),
        slice(20, 2, -4),
        slice(n + 5, n + 9),
    ):
        _same(got[s], want[s])
        assert isinstance(got[s], tuple)
    _same(list(got), list(want))
    _same(list(reversed(got)), list(reversed(want)))
    assert got == want and got == list(want) and got == tuple(want)
    assert [e.seq for e in got] == list(range(n))


async def test_appends_after_restore_read_and_derive_like_a_live_session(
    tmp_path: Path, small_blocks: None
) -> None:
    original = _session(9)
    path = await _store(tmp_path, original)
    restored = Session.restore(
        original.header, _scan(path).events, clock=ticking_clock()
    )
    plain = Session.restore(original.header, _plain(path), clock=ticking_clock())
    before = restored.derive_messages()
    seen: list[int] = []
    for s in (restored, plain):
        s.subscribe(lambda e: seen.append(e.seq))
        s.append("turn/start", TurnStart(10))
        s.append("user/message", user_message("more", id="u10"), surface_op="append")
        s.append(
            "user/message",
            user_message("all of it", id="all"),
            surface_op=SurfaceReplace(s.surface[0], s.surface[-1]),
            source_event_seqs=list(s.surface),
        )
        s.append("turn/end", TurnEnd(10, Completed()))
    assert seen[:4] == seen[4:]
    _assert_same_state(restored, plain)
    assert len(before) > len(restored.derive_messages()) == 1  # snapshots never change
    _same(list(restored.events), list(plain.events))
    # The view follows appends made while iterating it.
    grown = []
    for event in restored.events:
        grown.append(event.seq)
        if event.seq == len(restored.events) - 1 and event.seq < 200:
            restored.append("plugin/tick", {"n": event.seq}, ignorable=True)
    assert grown == list(range(len(restored.events)))
    # A fork of a restored session holds the same prefix.
    child = restored.fork(len(original.events) - 1)
    _same(list(child.events)[:-1], list(plain.events)[: len(original.events)])


async def test_resume_reads_only_the_open_turn(
    tmp_path: Path, small_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _session(8, open_last=True)
    await _store(tmp_path, original)
    decoded: list[int] = []
    real = _compact.decode_line

    def counting(line: bytes, seq: int) -> SessionEvent:
        decoded.append(seq)
        return real(line, seq)

    monkeypatch.setattr(_compact, "decode_line", counting)
    session, writer = await load_session(JsonlPersistence(tmp_path), "compact")
    await writer.close()
    start = max(e.seq for e in original.events if e.type == "turn/start")
    # Read: the tool results a replacement checks against, and the open turn.
    replaced = {
        e.surface_op.start_seq
        for e in original.events
        if e.type == "tool/result" and isinstance(e.surface_op, SurfaceReplace)
    }
    assert replaced and replaced <= set(decoded)
    assert decoded and min(set(decoded) - replaced) >= start
    closers = list(session.events)[len(original.events) :]
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    plain = Session.restore(original.header, list(original.events))
    from dsh_trio.session import close_interrupted_turn

    _same(
        [(e.type, e.data, e.source_event_seqs) for e in close_interrupted_turn(plain)],
        [(e.type, e.data, e.source_event_seqs) for e in closers],
    )


async def test_of_types_reads_only_the_events_asked_for(
    tmp_path: Path, small_blocks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _session(6)
    path = await _store(tmp_path, original)
    restored = Session.restore(
        original.header, _scan(path).events, clock=ticking_clock()
    )
    restored.append("turn/start", TurnStart(7))
    plain = [*original.events, restored.events[-1]]
    decoded: list[int] = []
    real = _compact.decode_line

    def counting(line: bytes, seq: int) -> SessionEvent:
        decoded.append(seq)
        return real(line, seq)

    monkeypatch.setattr(_compact, "decode_line", counting)
    for types in (("turn/start",), ("tool/result", "plugin/note"), ("nothing/here",)):
        decoded.clear()
        want = [e for e in plain if e.type in types]
        _same(list(restored.events.of_types(*types)), want)
        assert len(decoded) == len([e for e in want if e.seq < len(original.events)])
        _same(list(restored.events.of_types(*types, reverse=True)), want[::-1])


# --------------------------------------------------------------------------- refusals


async def test_a_log_that_breaks_a_surface_rule_is_refused_as_before(
    tmp_path: Path,
) -> None:
    original = _session(3)
    path = await _store(tmp_path, original)
    lines = path.read_bytes().split(b"\n")
    seq = next(e.seq for e in original.events if e.type == "assistant/message")
    obj = json.loads(lines[seq + 1])
    obj["surfaceOp"] = {"op": "replace", "startSeq": 0, "endSeq": seq - 1}
    lines[seq + 1] = json.dumps(obj, separators=(",", ":")).encode()
    path.write_bytes(b"\n".join(lines))
    before = path.read_bytes()
    scan = _scan(path)  # reading does not refuse: restoring does, as before
    assert len(scan.events) == len(original.events)
    with pytest.raises(SessionCorruptError) as compact:
        Session.restore(original.header, scan.events)
    with pytest.raises(SessionCorruptError) as plain:
        Session.restore(original.header, _plain(path))
    assert str(compact.value) == str(plain.value)
    assert compact.value.seq == plain.value.seq == seq
    with pytest.raises(SessionCorruptError) as loaded:
        await load_session(JsonlPersistence(tmp_path), "compact")
    assert loaded.value.seq == seq and loaded.value.line == seq + 2
    assert path.read_bytes() == before
    # ``open`` hands the events over as a list, as it always did.
    writer, events = await JsonlPersistence(tmp_path).open("compact")
    await writer.close()
    assert isinstance(events, list)
    _same(events, _plain(path))


# --------------------------------------------------------------------------- JSON


_json_texts = _STRATEGIES.json_values.map(
    lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")
)
_edge_lines = st.sampled_from(
    [
        b'"\\ud800"',
        b'{"\\ud800":1}',
        b"1e400",
        b"-1e400",
        b"123456789012345678901234567890",
        b"-0.0",
        b"NaN",
        b"Infinity",
        b' {"a":1} ',
        b'{"a":1,"a":2}',
        b"[" * 5000 + b"]" * 5000,
        b'"\xff"',
        b'"\xed\xa0\x80"',
        b'"a\tb"',
        b"\xef\xbb\xbf{}",
        b"",
        b"[1,]",
        b"01",
    ]
)


def _parsed(parse: Any, line: bytes) -> str:
    try:
        return "value " + repr(parse(line))
    except RecursionError:
        return "RecursionError"
    except ValueError:
        return "ValueError"


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_json_texts | _edge_lines | st.binary(max_size=40))
def test_the_accelerated_parser_gives_what_the_standard_library_gives(
    line: bytes,
) -> None:
    assert _parsed(parse_json_line, line) == _parsed(parse_json_line_stdlib, line)


async def test_a_log_loads_the_same_with_and_without_the_accelerator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = _session(5)
    path = await _store(tmp_path, original)
    with_accelerator = list(Session.restore(original.header, _scan(path).events).events)
    monkeypatch.setattr(_jsonline, "_fast_decode", None)
    assert parse_json_line(b'{"a":[1,2]}') == {"a": [1, 2]}
    without = list(Session.restore(original.header, _scan(path).events).events)
    _same(with_accelerator, without)
    _same(without, list(original.events))


def test_the_accelerator_is_msgspec_when_installed() -> None:
    pytest.importorskip("msgspec")
    assert _jsonline.JSON_ACCELERATOR == "msgspec"


# --------------------------------------------------------------------------- live settling


@pytest.fixture
def settle_early(monkeypatch: pytest.MonkeyPatch, small_blocks: None) -> None:
    """A live session settles once 8 events lie before its previous turn."""
    monkeypatch.setattr(_settling, "SETTLE_AFTER", 8)


def _live_session(
    turns: int, seen: list[SessionEvent], *, unknown: bool = False
) -> Session:
    """:func:`_session`'s log, appended through a session whose listener records
    every event; ``unknown`` adds an undeclared event type before turn 2."""
    s = Session.create("compact", cwd="/w/p", clock=ticking_clock())
    s.subscribe(seen.append)
    for event in _session(turns).events:
        if unknown and event.type == "turn/start" and event.data == TurnStart(2):
            s.append("app/undeclared", {"k": 1})
        by = s.next_seq - event.seq
        op = event.surface_op
        if isinstance(op, SurfaceReplace):
            op = SurfaceReplace(op.start_seq + by, op.end_seq + by)
        kept = s.append(
            event.type,
            event.data,
            surface_op=op,
            source_event_seqs=_shifted(event, by),
            ignorable=event.ignorable,
        )
        assert kept.type == event.type
    return s


def _shifted(event: SessionEvent, by: int) -> list[int] | None:
    if event.source_event_seqs is None:
        return None
    return [seq + by for seq in event.source_event_seqs]


def _assert_reads_back(session: Session, seen: list[SessionEvent]) -> None:
    """Every reader of ``session`` gives the events exactly as they were appended."""
    events = session.events
    assert len(events) == len(seen) == session.next_seq
    _same(list(events), seen)
    for i, want in enumerate(seen):
        _same(events[i], want)
        _same(events[i - len(seen)], want)
    _same(events[3:-2], tuple(seen[3:-2]))
    _same(events[::5], tuple(seen[::5]))
    _same(list(reversed(events)), seen[::-1])
    assert events == seen
    wanted = ("turn/start", "tool/result")
    _same(list(events.of_types(*wanted)), [e for e in seen if e.type in wanted])
    _same(
        list(events.of_types(*wanted, reverse=True)),
        [e for e in reversed(seen) if e.type in wanted],
    )


def test_a_live_session_keeps_its_older_turns_as_lines_and_reads_them_equal(
    settle_early: None,
) -> None:
    seen: list[SessionEvent] = []
    live = _live_session(12, seen)
    held: DecodedEvents = live._events
    # Settled: all but the events from the previous turn's start on.
    starts = [e.seq for e in seen if e.type == "turn/start"]
    assert held.compact_count == starts[-2] and len(held.values) < 30
    assert len(held._store.chunks) >= 3  # compressed, not only lines
    _assert_reads_back(live, seen)
    # The same state as a session that keeps every event as a value.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_settling, "SETTLE_AFTER", 10**9)
        plain = _live_session(12, [])
    assert plain._events.compact_count == 0
    _assert_same_state(live, plain)
    # Appends, forks and replace ops go on as on the plain session.
    for s in (live, plain):
        s.append("turn/start", TurnStart(13))
        s.append(
            "user/message",
            user_message("fold", id="f"),
            surface_op=SurfaceReplace(s.surface[1], s.surface[-1]),
            source_event_seqs=list(s.surface[1:]),
        )
    _assert_same_state(live, plain)
    boundary = next(e.seq for e in seen if e.type == "turn/end" and e.seq > 40)
    _same(list(live.fork(boundary).events), list(plain.fork(boundary).events))


def test_an_event_without_a_faithful_line_stays_a_value(settle_early: None) -> None:
    # An undeclared type a log reader would refuse: its line would not read back,
    # so it and what follows stay values.
    seen: list[SessionEvent] = []
    live = _live_session(12, seen, unknown=True)
    odd_seq = next(e.seq for e in seen if e.type == "app/undeclared")
    assert 0 < live._events.compact_count == odd_seq
    _assert_reads_back(live, seen)


async def test_a_settled_live_session_is_stored_and_restored_unchanged(
    settle_early: None, tmp_path: Path
) -> None:
    seen: list[SessionEvent] = []
    live = _live_session(12, seen)
    assert live._events.compact_count > 0
    path = await _store(tmp_path, live)
    _same(_plain(path), seen)
    restored, writer = await load_session(JsonlPersistence(tmp_path), "compact")
    await writer.close()
    _assert_same_state(restored, live)


def test_a_session_without_a_log_settles_only_when_a_bound_is_set() -> None:
    # Off by default: encoding its lines itself costs more of a turn than its bytes
    # are worth (a session with a log takes its writer's lines instead).
    assert _settling.SETTLE_AFTER is None
    seen: list[SessionEvent] = []
    live = _live_session(30, seen)
    assert live._events.compact_count == 0
    _assert_reads_back(live, seen)


# --------------------------------------------------------------------------- a writer's lines


def test_a_writers_lines_are_gathered_into_chunks_and_adopted_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_line_chunks, "CHUNK_LINES", 4)
    seen = list(_session(3).events)
    data = encode_events(seen)
    lines = data.split(b"\n")[:-1]
    chunks = _line_chunks.LineChunks()
    chunks.add(0, b"".join(x + b"\n" for x in lines[:3]), 3)
    assert chunks.take() == []  # 3 lines: not a chunk yet
    chunks.add(3, b"".join(x + b"\n" for x in lines[3:5]), 2)
    (first,) = chunks.take()
    assert first[:2] == (0, 5) and chunks.take() == []
    # A batch that does not continue the gathered lines starts them afresh.
    chunks.add(5, lines[5] + b"\n", 1)
    chunks.add(7, b"".join(x + b"\n" for x in lines[7:11]), 4)
    (second,) = chunks.take()
    assert second[:2] == (7, 4)

    events = DecodedEvents(seen)
    assert not events.adopt_lines(*second)  # not the first values: refused
    assert events.adopt_lines(*first)
    assert events.compact_count == 5 and len(events.values) == len(seen) - 5
    assert not events.adopt_lines(*first)  # held as lines already
    assert list(events) == seen and [events[i] for i in range(len(seen))] == seen
    for i, event in enumerate(seen[:5]):  # the message alone, from a chunk's line
        if event.type == "assistant/message":
            want = event.data_as(AssistantMessageData).message
            assert events.assistant_message(i) == want
    wanted = {"turn/start", "assistant/message"}
    assert list(events.of_types(wanted)) == [e for e in seen if e.type in wanted]
    twin = events.share()
    assert twin == seen and twin._store.chunks == events._store.chunks


def test_a_writers_chunk_of_settled_events_is_adopted_as_it_is_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The writer's chunk arrives after the turn/start that settled its events: the
    # session takes it at once, and counts, reads and appends go on from it.
    monkeypatch.setattr(_line_chunks, "CHUNK_LINES", 4)
    seen: list[SessionEvent] = []
    live = _live_session(4, seen)
    starts = [e.seq for e in seen if e.type == "turn/start"]
    count = starts[-2]  # the events before the previous turn's start are settled
    lines = encode_events(seen[:count])
    chunks = _line_chunks.LineChunks()
    chunks.add(0, lines, count)
    live._offer_lines(chunks.take())
    assert live._events.compact_count == count
    assert live.next_seq == len(seen)
    live.append("app/note", {"n": 1})
    assert seen[-1].seq == len(seen) - 1
    _assert_reads_back(live, seen)


def test_lines_of_an_event_a_reader_refuses_are_not_adopted() -> None:
    odd = SessionEvent(seq=0, time=1, type="app/undeclared", data={"k": 1})
    data = encode_events([odd])
    events = DecodedEvents([odd])
    chunk = zlib.compress(data[:-1])
    assert not events.adopt_lines(0, 1, chunk)
    assert events.compact_count == 0 and list(events) == [odd]


async def test_an_iteration_follows_events_that_settle_meanwhile() -> None:
    seen = list(_session(3).events)
    events = DecodedEvents(seen)
    lines = encode_events(seen).split(b"\n")[:-1]
    it = iter(events)
    got = [next(it) for _ in range(3)]
    chunk = zlib.compress(b"\n".join(lines[:6]))
    assert events.adopt_lines(0, 6, chunk)
    got.extend(it)
    assert got == seen


def test_a_writers_chunks_use_the_lines_vocabulary_as_a_preset_dictionary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_line_chunks, "CHUNK_LINES", 12)
    seen = list(_session(3).events)
    lines = encode_events(seen).split(b"\n")[:-1]
    chunks = _line_chunks.LineChunks()
    chunks.add(0, b"".join(x + b"\n" for x in lines[:12]), 12)
    ((start, count, chunk),) = chunks.take()
    plain = zlib.compress(b"\n".join(lines[:12]), 6)
    # The chunk asks for the dictionary (zlib's FDICT flag) and is the smaller for it.
    assert chunk[1] & 0x20 and not plain[1] & 0x20
    assert len(chunk) < len(plain) * 0.9
    with pytest.raises(zlib.error):
        zlib.decompress(chunk)
    # Either reads back.
    for packed in (chunk, plain):
        events = DecodedEvents(seen)
        assert events.adopt_lines(start, count, packed)
        assert list(events) == seen and [events[i] for i in range(12)] == seen[:12]
