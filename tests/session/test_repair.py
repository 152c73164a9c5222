"""Crash repair: closers for a turn left open at the end of the log."""

from __future__ import annotations

import pytest

from dsh_trio import user_message
from dsh_trio.session import Session, close_interrupted_turn, interrupted_turn_closers
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    Completed,
    Interrupted,
    MessageId,
    ModelSource,
    StepEnd,
    StepStart,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    UserMessage,
)


def calls(*pairs: tuple[str, str], step: int = 1) -> AssistantMessageData:
    return AssistantMessageData(
        turn=1,
        step=step,
        message=AssistantMessage(
            id=MessageId(f"a{step}"),
            content=(
                TextBlock("let me look"),
                *(ToolCallBlock(cid, name, "{}") for cid, name in pairs),
            ),
            source=ModelSource("p", "m"),
        ),
        stream=(),
    )


def result(call_id: str, step: int = 1) -> ToolResultData:
    return ToolResultData(
        turn=1,
        step=step,
        message=UserMessage(
            id=MessageId(f"r-{call_id}"),
            content=(ToolResultBlock(call_id, (TextBlock("ok"),)),),
            source=ToolSource(call_id),
        ),
    )


def session_mid_step() -> Session:
    """Turn 1, step 2 open; calls c1 (done), c2 (started), c3 (not started)."""
    s = Session.create("s", clock=lambda: 1)
    s.append("turn/start", TurnStart(1))
    s.append("step/start", StepStart(1, 1))
    s.append("user/message", user_message("q"), surface_op="append")
    s.append("assistant/message", calls(("old", "f")), surface_op="append")
    s.append("step/end", StepEnd(1, 1))  # "old" was left pending in a closed step
    s.append("step/start", StepStart(1, 2))
    s.append(
        "assistant/message",
        calls(("c1", "read"), ("c2", "write"), ("c3", "shell"), step=2),
        surface_op="append",
    )
    s.append(
        "tool/call",
        ToolCallData(turn=1, step=2, call_id="c1", name="read", arguments="{}"),
    )
    s.append(
        "tool/result", result("c1", step=2), surface_op="append", source_event_seqs=[7]
    )
    s.append(
        "tool/call",
        ToolCallData(turn=1, step=2, call_id="c2", name="write", arguments="{}"),
    )
    return s


def test_pending_calls_get_synthetic_results_then_step_and_turn_end() -> None:
    s = session_mid_step()
    closers = interrupted_turn_closers(s.events)
    assert [c[0] for c in closers] == [
        "tool/result",
        "tool/result",
        "step/end",
        "turn/end",
    ]

    _, data, op, sources = closers[0]
    assert isinstance(data, ToolResultData)
    assert (op, sources) == ("append", (9,))
    assert data.error == ToolErrorInfo(
        "ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN"
    )
    assert (data.turn, data.step) == (1, 2)
    assert data.message.id == "interrupted-tool-result-c2-10"
    assert data.message.source == ToolSource("c2")
    (block,) = data.message.content
    assert (
        isinstance(block, ToolResultBlock)
        and block.is_error
        and block.tool_call_id == "c2"
    )
    (text,) = block.content
    assert isinstance(text, TextBlock)
    assert "write" in text.text and "not safe" in text.text

    _, data, op, sources = closers[1]
    assert isinstance(data, ToolResultData)
    assert (op, sources) == ("append", None)
    assert data.error == ToolErrorInfo("ToolNotStartedError", "TOOL_NOT_STARTED")
    assert data.message.id == "interrupted-tool-result-c3-11"
    (block,) = data.message.content
    assert isinstance(block, ToolResultBlock)
    (text,) = block.content
    assert isinstance(text, TextBlock) and "safe to retry" in text.text

    assert closers[2] == ("step/end", StepEnd(1, 2), None, None)
    assert closers[3] == ("turn/end", TurnEnd(1, Interrupted()), None, None)


def test_close_interrupted_turn_appends_them_all() -> None:
    s = session_mid_step()
    seen: list[int] = []
    s.subscribe(lambda e: seen.append(e.seq))
    appended = close_interrupted_turn(s)
    assert [e.seq for e in appended] == [10, 11, 12, 13] == seen
    assert (
        appended[0].data_as(ToolResultData).message.id
        == "interrupted-tool-result-c2-10"
    )
    assert appended[0].source_event_seqs == (9,)
    assert s.open_turn is None
    assert interrupted_turn_closers(s.events) == []
    assert close_interrupted_turn(s) == []
    # results are model-visible
    assert [m.id for m in s.derive_messages()][-2:] == [
        "interrupted-tool-result-c2-10",
        "interrupted-tool-result-c3-11",
    ]


def test_mid_turn_without_a_step_only_ends_the_turn() -> None:
    s = Session.create("s")
    s.append("turn/start", TurnStart(3))
    s.append("user/message", user_message("q"), surface_op="append")
    assert interrupted_turn_closers(s.events) == [
        ("turn/end", TurnEnd(3, Interrupted()), None, None)
    ]


def test_open_step_without_pending_calls() -> None:
    s = Session.create("s")
    s.append("turn/start", TurnStart(1))
    s.append("step/start", StepStart(1, 1))
    s.append("assistant/message", calls(("c1", "f")), surface_op="append")
    s.append(
        "tool/call",
        ToolCallData(turn=1, step=1, call_id="c1", name="f", arguments="{}"),
    )
    s.append("tool/result", result("c1"), surface_op="append", source_event_seqs=[3])
    assert [c[0] for c in interrupted_turn_closers(s.events)] == [
        "step/end",
        "turn/end",
    ]


@pytest.mark.parametrize("closed", [True, False])
def test_balanced_or_empty_log_needs_nothing(closed: bool) -> None:
    s = Session.create("s")
    if closed:
        s.append("turn/start", TurnStart(1))
        s.append("step/start", StepStart(1, 1))
        s.append("assistant/message", calls(("c1", "f")), surface_op="append")
        s.append("step/end", StepEnd(1, 1))
        s.append("turn/end", TurnEnd(1, Completed()))
    assert interrupted_turn_closers(s.events) == []
    assert interrupted_turn_closers([]) == []


def test_closed_step_in_an_open_turn_only_ends_the_turn() -> None:
    s = Session.create("s")
    s.append("turn/start", TurnStart(2))
    s.append("step/start", StepStart(2, 1))
    s.append("assistant/message", calls(("c1", "f")), surface_op="append")
    s.append("step/end", StepEnd(2, 1))
    assert interrupted_turn_closers(s.events) == [
        ("turn/end", TurnEnd(2, Interrupted()), None, None)
    ]
