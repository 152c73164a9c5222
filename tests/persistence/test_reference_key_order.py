"""Rows written with the reference's key order, byte for byte.

``fixtures/reference_orders`` holds one aborted turn spelled as the reference's writer
spells it: the keys of each object in the order its code builds the object. The rows
whose order is not the field order: ``agent/inbox/spliced`` data ``{target, start,
removedCount?, inserted, outcome?}``; a ``tool/result`` message ``{source, content,
role, id}`` (built from ``{source, content}``, then ``role``, then ``id``); an
interrupted ``assistant/message`` ``{turn, step, message, interrupted, usage?,
stream}``; and the envelope of a cited surface event, ``sourceEventSeqs`` before
``surfaceOp``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import trio

from dsh_trio import user_message
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._persistence import load_session
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    BlockStart,
    InboxSplice,
    InboxTarget,
    MessageId,
    ModelSource,
    RawChunkRecord,
    SessionEvent,
    TextBlock,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    Usage,
    UserMessage,
    event_to_json,
)

FIXTURE = Path(__file__).parent / "fixtures" / "reference_orders"
LOG = Path("--w-p--") / "orders" / "session.v3.jsonl"


def reference_rows() -> list[dict[str, Any]]:
    lines = (FIXTURE / LOG).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


def keys(value: object) -> object:
    """The key order of ``value``, at every level (lists by their items)."""
    if isinstance(value, dict):
        return [(k, keys(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [keys(v) for v in value]
    return None


def line_of(event: SessionEvent) -> dict[str, Any]:
    """``event`` as its log line, read back (the order is the written one)."""
    encoded = json.dumps(event_to_json(event), separators=(",", ":"))
    obj: dict[str, Any] = json.loads(encoded)
    return obj


async def test_a_reference_log_reads_and_is_written_again_byte_for_byte(
    tmp_path: Path,
) -> None:
    shutil.copytree(FIXTURE, tmp_path / "ref")
    path = tmp_path / "ref" / LOG
    reference = path.read_bytes()
    session, writer = await load_session(JsonlPersistence(tmp_path / "ref"), "orders")
    await writer.close()
    assert path.read_bytes() == reference  # a closed turn: nothing to repair

    ours = JsonlPersistence(tmp_path / "ours")
    writer = await ours.create(session.header)
    await writer.append(list(session.events), sync=True)
    await writer.close()
    written = await trio.Path(ours.path_for(session.header)).read_bytes()
    assert written.splitlines() == reference.splitlines()
    assert written == reference


def test_an_inbox_splice_is_written_target_start_removed_inserted_outcome() -> None:
    rows = reference_rows()
    inserted = user_message("read a and b", id="u")
    fresh = {
        0: InboxSplice(target=InboxTarget.NEXT_TURN, start=0, inserted=(inserted,)),
        2: InboxSplice(target=InboxTarget.NEXT_TURN, start=0, removed_count=1),
        19: InboxSplice(
            target=InboxTarget.NEXT_STEP, start=0, removed_count=1, outcome="canceled"
        ),
    }
    for seq, data in fresh.items():
        event = SessionEvent(seq=seq, time=1, type="agent/inbox/spliced", data=data)
        assert keys(line_of(event)) == keys(rows[seq]), seq
    assert list(rows[19]["data"]) == [
        "target",
        "start",
        "removedCount",
        "inserted",
        "outcome",
    ]


def test_a_tool_result_is_written_as_the_reference_builds_it() -> None:
    rows = reference_rows()
    fresh = {
        10: ToolResultData(
            turn=1,
            step=1,
            message=UserMessage(
                id=MessageId("r1"),
                content=(ToolResultBlock("c1", (TextBlock("contents of a"),)),),
                source=ToolSource("c1"),
            ),
        ),
        12: ToolResultData(
            turn=1,
            step=1,
            message=UserMessage(
                id=MessageId("r2"),
                content=(
                    ToolResultBlock("c2", (TextBlock("aborted"),), is_error=True),
                ),
                source=ToolSource("c2"),
            ),
            error=ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH"),
        ),
    }
    for seq, data in fresh.items():
        event = SessionEvent(
            seq=seq,
            time=1,
            type="tool/result",
            data=data,
            surface_op="append",
            source_event_seqs=(seq - 1,),
        )
        assert keys(line_of(event)) == keys(rows[seq]), seq
    assert list(rows[10]) == [
        "type",
        "seq",
        "time",
        "data",
        "sourceEventSeqs",
        "surfaceOp",
    ]
    assert list(rows[10]["data"]["message"]) == ["source", "content", "role", "id"]
    # Any other user message keeps the order the reference gives it.
    event = SessionEvent(
        seq=5,
        time=1,
        type="user/message",
        data=user_message("read a and b", id="u"),
        surface_op="append",
    )
    assert keys(line_of(event)) == keys(rows[5])
    assert list(rows[5]["data"]) == ["content", "source", "role", "id"]


def test_an_interrupted_assistant_message_writes_interrupted_before_usage_and_stream() -> (
    None
):
    rows = reference_rows()
    message = AssistantMessage(
        id=MessageId("a"),
        content=(TextBlock("part"),),
        source=ModelSource("mock", "mock"),
    )
    stream = (RawChunkRecord(1800144000170, BlockStart(0, "text")),)
    interrupted = AssistantMessageData(
        turn=1, step=2, message=message, stream=stream, interrupted=True
    )
    event = SessionEvent(
        seq=15, time=1, type="assistant/message", data=interrupted, surface_op="append"
    )
    assert list(line_of(event)["data"]) == list(rows[15]["data"])
    assert list(rows[15]["data"]) == [
        "turn",
        "step",
        "message",
        "interrupted",
        "stream",
    ]
    with_usage = AssistantMessageData(
        turn=1,
        step=2,
        message=message,
        stream=stream,
        usage=Usage(9, 1),
        interrupted=True,
    )
    event = SessionEvent(
        seq=15, time=1, type="assistant/message", data=with_usage, surface_op="append"
    )
    assert list(line_of(event)["data"]) == [
        "turn",
        "step",
        "message",
        "interrupted",
        "usage",
        "stream",
    ]
    # A settled (not interrupted) message: usage, then the stream.
    assert list(rows[8]["data"]) == ["turn", "step", "message", "usage", "stream"]
