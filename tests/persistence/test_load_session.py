"""load_session: torn tails, crash closers written durably, corruption, the reference format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from dsh_trio import user_message
from dsh_trio.errors import SessionCorruptError, SessionFormatError, SessionLockedError
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._persistence import load_session
from dsh_trio.persistence._recorder import persist_new_session
from dsh_trio.session import Session
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    Completed,
    InboxSplice,
    InboxTarget,
    Interrupted,
    MessageId,
    ModelSource,
    RawChunkRecord,
    RequestContextData,
    SessionEvent,
    StepEnd,
    StepStart,
    SystemMessage,
    SystemMessageData,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolResultData,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
)

from ..support import ticking_clock

FIXTURES = Path(__file__).parent / "fixtures"


def open_turn_session(*, record_calls: bool) -> Session:
    """A session whose last turn is open with two tool calls pending (the crash)."""
    s = Session.create("crashed", cwd="/w/p", clock=ticking_clock())
    s.append("turn/start", TurnStart(1))
    s.append("step/start", StepStart(1, 1))
    s.append(
        "user/message", user_message("do two things", id="u1"), surface_op="append"
    )
    s.append("request/context", RequestContextData(provider="mock", model="mock"))
    s.append(
        "assistant/message",
        AssistantMessageData(
            turn=1,
            step=1,
            message=AssistantMessage(
                id=MessageId("a1"),
                content=(
                    TextBlock("on it"),
                    ToolCallBlock("c1", "echo", '{"x": 1}'),
                    ToolCallBlock("c2", "write", "{}"),
                ),
                source=ModelSource("mock", "mock"),
            ),
            stream=(RawChunkRecord(5, Usage(1, 2)),),
        ),
        surface_op="append",
    )
    if record_calls:
        s.append(
            "tool/call",
            ToolCallData(
                turn=1, step=1, call_id="c1", name="echo", arguments='{"x": 1}'
            ),
        )
    return s


async def write_session(persistence: JsonlPersistence, session: Session) -> Path:
    writer = await persist_new_session(persistence, session)
    await writer.close()
    return Path(persistence.path_for(session.header))


def check_closers(
    events: list[SessionEvent], prefix_len: int, call_seq: int | None
) -> None:
    """The events after ``prefix_len`` close turn 1 step 1 with both calls answered."""
    closers = events[prefix_len:]
    assert [ev.type for ev in closers] == [
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
    ]
    r1, r2 = closers[0].data, closers[1].data
    assert isinstance(r1, ToolResultData) and isinstance(r2, ToolResultData)
    assert [r1.message.content[0].tool_call_id, r2.message.content[0].tool_call_id] == [
        "c1",
        "c2",
    ]
    assert r2.error is not None and r2.error.code == "TOOL_NOT_STARTED"
    assert closers[1].source_event_seqs is None
    assert r1.error is not None
    if call_seq is None:
        assert r1.error.code == "TOOL_NOT_STARTED"
        assert closers[0].source_event_seqs is None
    else:
        assert r1.error.code == "TOOL_OUTCOME_UNKNOWN"
        assert closers[0].source_event_seqs == (call_seq,)
    assert closers[2].data == StepEnd(1, 1)
    assert closers[3].data == TurnEnd(1, Interrupted())
    assert [ev.seq for ev in events] == list(range(len(events)))


async def test_truncation_at_every_offset_of_the_last_line(tmp_path: Path) -> None:
    original = open_turn_session(record_calls=True)
    source = await write_session(JsonlPersistence(tmp_path / "source"), original)
    full = source.read_bytes()
    last_line_start = full.rindex(b"\n", 0, len(full) - 1) + 1
    whole = list(original.events)
    for cut in range(last_line_start, len(full) + 1):
        root = tmp_path / f"cut-{cut}"
        target = root / source.relative_to(tmp_path / "source")
        target.parent.mkdir(parents=True)
        target.write_bytes(full[:cut])
        persistence = JsonlPersistence(root)
        session, writer = await load_session(persistence, "crashed")
        await writer.close()
        survived = whole if cut == len(full) else whole[:-1]
        events = list(session.events)
        assert events[: len(survived)] == survived, cut
        check_closers(events, len(survived), call_seq=5 if cut == len(full) else None)
        # The repair is on disk: a fresh reader sees the same balanced log, no torn
        # bytes, and adds no closers of its own.
        writer, reread = await JsonlPersistence(root).open("crashed")
        await writer.close()
        assert reread == events
        assert target.read_bytes().endswith(b"\n")
        again, writer = await load_session(JsonlPersistence(root), "crashed")
        await writer.close()
        assert list(again.events) == events


async def test_a_balanced_log_loads_unchanged(persistence: JsonlPersistence) -> None:
    s = open_turn_session(record_calls=False)
    s.append("step/end", StepEnd(1, 1))
    s.append("turn/end", TurnEnd(1, Completed()))
    path = await write_session(persistence, s)
    before = path.read_bytes()
    session, writer = await load_session(persistence, "crashed")
    try:
        assert list(session.events) == list(s.events)
        assert writer.durable_seq == session.next_seq
        # The loaded session keeps the claim.
        with pytest.raises(SessionLockedError):
            await load_session(persistence, "crashed")
    finally:
        await writer.close()
    assert path.read_bytes() == before


async def test_garbage_before_later_valid_lines_is_corrupt(
    persistence: JsonlPersistence,
) -> None:
    s = open_turn_session(record_calls=False)
    s.append("step/end", StepEnd(1, 1))
    s.append("turn/end", TurnEnd(1, Completed()))
    path = await write_session(persistence, s)
    lines = path.read_bytes().split(b"\n")
    lines[3] = b'{"type":"user/mess'  # seq 2, damaged
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionCorruptError, match="seq 2") as info:
        await load_session(persistence, "crashed")
    assert (info.value.seq, info.value.line) == (2, 4)
    assert path.read_bytes() == b"\n".join(lines)
    # Without the later turn/end the valid lines after the damage still forbid a
    # cut: they may hold a tool call that already ran.
    path.write_bytes(b"\n".join(lines[:-3]) + b"\n")
    with pytest.raises(SessionCorruptError, match="seq 2") as info:
        await load_session(persistence, "crashed")
    assert path.read_bytes() == b"\n".join(lines[:-3]) + b"\n"
    # Damage with nothing parseable after it is a crash's tail: cut, and kept.
    path.write_bytes(b"\n".join(lines[:4]) + b"\n")
    session, writer = await load_session(persistence, "crashed")
    await writer.close()
    assert [ev.type for ev in session.events] == [
        "turn/start",
        "step/start",
        "step/end",
        "turn/end",
    ]
    assert session.events[3].data == TurnEnd(1, Interrupted())
    (side,) = path.parent.glob("session.v3.jsonl.damaged-*")
    assert side.read_bytes() == lines[3] + b"\n"


async def test_a_foreign_version_leaves_the_log_unchanged(
    persistence: JsonlPersistence,
) -> None:
    path = await write_session(persistence, open_turn_session(record_calls=False))
    lines = path.read_bytes().split(b"\n")
    lines[0] = lines[0].replace(b'"version":3', b'"version":7')
    path.write_bytes(b"\n".join(lines) + b"half a line")
    before = path.read_bytes()
    with pytest.raises(SessionFormatError, match="version 7"):
        await load_session(persistence, "crashed")
    assert path.read_bytes() == before


async def test_an_invalid_history_is_corrupt_and_releases_the_claim(
    persistence: JsonlPersistence,
) -> None:
    path = await write_session(persistence, open_turn_session(record_calls=False))
    lines = path.read_bytes().split(b"\n")
    # Well-formed lines, but seq 3 claims to replace surface nodes that do not exist.
    event = json.loads(lines[4])
    assert event["seq"] == 3
    lines[4] = json.dumps(
        {
            "type": "user/message",
            "seq": 3,
            "time": 1,
            "data": json.loads(lines[3])["data"],
            "surfaceOp": {"op": "replace", "startSeq": 90, "endSeq": 91},
            "sourceEventSeqs": [2],
        }
    ).encode()
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(SessionCorruptError) as info:
        await load_session(persistence, "crashed")
    assert info.value.seq == 3
    with pytest.raises(SessionCorruptError):  # not SessionLockedError
        await load_session(persistence, "crashed")


# --------------------------------------------------------------------------- reference format


def key_shape(value: object) -> object:
    if isinstance(value, dict):
        return {k: key_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [key_shape(v) for v in value]
    return type(value).__name__


async def test_the_reference_t1_log_loads_and_we_write_the_same_shapes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reference"
    shutil.copytree(FIXTURES / "reference_t1", root)
    path = root / "--w-p--" / "t1-reference" / "session.v3.jsonl"
    reference = path.read_bytes()
    persistence = JsonlPersistence(root)
    assert [h.id for h in await persistence.list()] == ["t1-reference"]

    session, writer = await load_session(persistence, "t1-reference")
    await writer.close()
    assert path.read_bytes() == reference  # balanced: nothing to repair
    events = list(session.events)
    assert [ev.type for ev in events] == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "step/start",
        "system/message",
        "user/message",
        "request/header",
        "request/context",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert session.header.cwd == "/w/p"
    assert session.header.created_at == 1800144000000
    splice = events[0].data
    assert isinstance(splice, InboxSplice) and splice.target is InboxTarget.NEXT_TURN
    system = events[4].data
    assert isinstance(system, SystemMessageData) and isinstance(
        system.message, SystemMessage
    )
    reply = events[8].data
    assert isinstance(reply, AssistantMessageData)
    assert reply.message.content == (TextBlock("hi"),)
    assert reply.usage == Usage(5, 2)
    assert [type(r).__name__ for r in reply.stream] == [
        "RawChunkRecord",
        "TextChunksRecord",
        "RawChunkRecord",
        "RawChunkRecord",
        "RawChunkRecord",
    ]
    assert events[10].data == TurnEnd(1, Completed())
    messages = session.derive_messages()
    assert [type(m) for m in messages] == [SystemMessage, UserMessage, AssistantMessage]

    # The same events written by dsh_trio: same header keys, same line shapes and
    # values (key order aside).
    ours = JsonlPersistence(tmp_path / "ours")
    writer = await ours.create(session.header)
    await writer.append(events, sync=True)
    await writer.close()
    written = Path(ours.path_for(session.header))
    assert written.relative_to(tmp_path / "ours") == path.relative_to(root)
    ref_lines = [json.loads(line) for line in reference.splitlines()]
    our_lines = [
        json.loads(line)
        for line in (await trio.Path(written).read_bytes()).splitlines()
    ]
    assert list(our_lines[0]) == list(ref_lines[0])  # header keys in the same order
    assert len(our_lines) == len(ref_lines)
    for ref, our in zip(ref_lines, our_lines, strict=True):
        assert key_shape(our) == key_shape(ref)
        assert our == ref
