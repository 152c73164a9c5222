"""Untrusted model output never breaks a turn or leaves a tool call unanswered.

Hostile tool arguments (100,000-deep nesting, garbage, huge numbers) become
``INVALID_ARGS`` results and the turn goes on; every way a step can end after its
assistant message carried tool calls (a model error, max-tokens, a cancel while
streaming or while tools run, a failing or forgetful tool executor, a body escaping
with a ``BaseException``) leaves a history whose every tool call has exactly one
result, so the next request is well-formed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.llm import ModelRequest
from dsh_trio.llm._openai_request import request_body
from dsh_trio.testing import ScriptedModel, chunks, custom, gate, reply, tool_calls
from dsh_trio.tools import ToolRegistry
from dsh_trio.values import (
    AssistantMessage,
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    Message,
    SessionId,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallData,
    ToolCallDelta,
    ToolResultBlock,
    ToolResultData,
)

from .conftest import OPTIONS, Tracer

m = dsh.user_message

DEEP_ARRAYS = "[" * 100_000 + "]" * 100_000
DEEP_OBJECTS = '{"a":' * 100_000 + "1" + "}" * 100_000


@dsh.tool
async def add(ctx: dsh.ToolContext, a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@dsh.tool
async def anything(ctx: dsh.ToolContext, value: list | None = None) -> str:  # type: ignore[type-arg]
    """Take any array."""
    return "took it"


@dsh.tool
async def waits(ctx: dsh.ToolContext) -> str:
    """Wait until cancelled."""
    await trio.sleep_forever()
    return "never"


# --------------------------------------------------------------------------- helpers


def assert_well_formed(messages: Sequence[Message]) -> None:
    """Each assistant message's tool calls are answered exactly once before the next
    assistant message, no result answers a call that was not made, and the history
    encodes as a provider request (UTF-8 JSON)."""
    open_calls: Counter[str] = Counter()
    for message in messages:
        if isinstance(message, AssistantMessage):
            assert not +open_calls, f"unanswered tool calls: {sorted(open_calls)}"
            open_calls = Counter(
                b.id for b in message.content if isinstance(b, ToolCallBlock)
            )
            continue
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                assert open_calls[block.tool_call_id] > 0, (
                    f"result without a call: {block.tool_call_id!r}"
                )
                open_calls[block.tool_call_id] -= 1
    assert not +open_calls, f"unanswered tool calls: {sorted(open_calls)}"
    request = ModelRequest(
        provider="p", model="m", messages=tuple(messages), session_id=SessionId("s")
    )
    json.dumps(request_body(request), ensure_ascii=False).encode("utf-8")


def tool_results(agent: dsh.Agent) -> list[ToolResultData]:
    return [e.data for e in agent.session.events if isinstance(e.data, ToolResultData)]


def codes(agent: dsh.Agent) -> list[str | None]:
    return [r.error.code if r.error else None for r in tool_results(agent)]


def result_text(data: ToolResultData) -> str:
    block = data.message.content[0]
    assert isinstance(block, ToolResultBlock)
    return "".join(b.text for b in block.content if isinstance(b, TextBlock))


def turn_ends(agent: dsh.Agent) -> list[Any]:
    return [e.data.reason for e in agent.session.events if e.type == "turn/end"]


def tool_call_stream(
    *tail: StreamChunk, call: ToolCallBlock | None = None
) -> list[StreamChunk]:
    """A complete tool-call block (start, delta, end), then ``tail``."""
    block = call or ToolCallBlock("c1", "add", '{"a": 1, "b": 2}')
    return [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, block.id, block.name, block.arguments),
        BlockEnd(0, block),
        *tail,
    ]


# --------------------------------------------------------------------------- hostile arguments


@pytest.mark.parametrize("deep", [DEEP_ARRAYS, DEEP_OBJECTS], ids=["arrays", "objects"])
async def test_100k_deep_arguments_are_an_invalid_args_result_and_the_turn_goes_on(
    deep: str,
) -> None:
    model = ScriptedModel(tool_calls(("c1", "add", deep)), reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        tracer = Tracer(rt)
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            (result,) = tool_results(agent)
            assert result.error is not None
            assert result.error.code == "INVALID_ARGS"
            text = result_text(result)
            assert "more than 64 levels deep" in text
            assert len(text) < 300  # says what was wrong without echoing the input
            assert turn_ends(agent) == [dsh.Completed()]
            # the next step's request saw the call answered
            assert len(model.requests) == 2
            assert_well_formed(model.requests[1].messages)
            assert_well_formed(agent.session.derive_messages())
            durable = [line.split(" ", 1)[1] for line in tracer.durable()]
            assert durable[durable.index("assistant/message ''") :] == [
                "assistant/message ''",
                "tool/call c1",
                "tool/result c1 INVALID_ARGS",
                "step/end 1/1",
                "step/start 1/2",
                "assistant/message 'ok'",
                "step/end 1/2",
                "turn/end 1 completed",
            ]


async def test_every_hostile_call_of_one_message_is_answered_in_order() -> None:
    calls = [
        ("c1", "add", '{"a": 1, "b": 2}'),
        ("c2", "anything", DEEP_ARRAYS),
        ("c3", "anything", '{"value": ' + "[" * 65 + "]" * 65 + "}"),
        ("c4", "anything", '{"value": ' + "[" * 63 + "]" * 63 + "}"),
        ("c5", "add", "x" * 1_000_000),
        ("c6", "add", '{"a": 1e999, "b": 1}'),
        ("c7", "add", '{"a": ' + "9" * 5000 + ', "b": 1}'),
        ("c8", "add", '{"a": "\\ud800", "b": 1}'),
        ("c9", "add", '{"' + "k" * 1_000_000 + '": 1}'),
        ("c10", "no_such_tool" * 100_000, "{}"),
        ("c11", "add", '"just a string"'),
    ]
    model = ScriptedModel(tool_calls(*calls), reply("ok"))
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[add, anything]
    ) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            results = tool_results(agent)
            assert [r.message.content[0].tool_call_id for r in results] == [
                c[0] for c in calls
            ]
            assert codes(agent) == [
                None,
                "INVALID_ARGS",
                "INVALID_ARGS",
                None,
                "INVALID_ARGS",
                "INVALID_ARGS",
                "INVALID_ARGS",
                "INVALID_ARGS",
                "INVALID_ARGS",
                "UNKNOWN_TOOL",
                "INVALID_ARGS",
            ]
            assert all(len(result_text(r)) < 600 for r in results)
            assert turn_ends(agent) == [dsh.Completed()]
            assert_well_formed(model.requests[1].messages)


async def test_an_exception_while_checking_arguments_is_invalid_args(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dsh_trio.tools import _scheduler

    def explode(raw: str, tool: str) -> object:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(_scheduler, "parse_arguments", explode)
    model = ScriptedModel(tool_calls(("c1", "add", "{}")), reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            assert codes(agent) == ["INVALID_ARGS"]
            assert "RecursionError" in result_text(tool_results(agent)[0])
            assert turn_ends(agent) == [dsh.Completed()]
            assert_well_formed(model.requests[1].messages)


async def test_a_result_too_deep_to_check_is_an_invalid_output_result() -> None:
    deep: Any = None
    for _ in range(100_000):
        deep = [deep]

    @dsh.tool
    async def nested(ctx: dsh.ToolContext) -> dsh.ToolResult:
        """Return a very deep meta."""
        return dsh.ToolResult("fine", meta=deep)

    model = ScriptedModel(tool_calls(("c1", "nested", "{}")), reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[nested]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            assert codes(agent) == ["INVALID_TOOL_OUTPUT"]
            assert turn_ends(agent) == [dsh.Completed()]
            assert_well_formed(model.requests[1].messages)


# --------------------------------------------------------------------------- every path answers


async def _stream(
    items: Sequence[StreamChunk], error: LlmFailure | None
) -> AsyncIterator[StreamChunk]:
    for item in items:
        await trio.lowlevel.checkpoint()
        yield item
    if error is not None:
        raise LlmError(error)


@pytest.mark.parametrize("in_band", [False, True], ids=["raised", "in-band"])
async def test_a_model_error_after_a_complete_tool_call_block(in_band: bool) -> None:
    failure = LlmFailure("the server hung up", "SERVER_GONE")
    if in_band:
        script = chunks(*tool_call_stream(Finish(FinishReason("error", failure))))
    else:
        script = custom(lambda request: _stream(tool_call_stream(), failure))
    model = ScriptedModel(script, reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            (end,) = turn_ends(agent)
            assert isinstance(end, dsh.Errored)
            assert end.error.code == "SERVER_GONE"
            # the failed attempt keeps its stream, not a message with the call
            types = [e.type for e in agent.session.events]
            assert "assistant/attempt" in types
            assert "assistant/message" not in types
            assert_well_formed(agent.session.derive_messages())
            agent.followup(m("again"))
            await agent.when_idle()
            assert_well_formed(model.requests[1].messages)


async def test_max_tokens_after_a_tool_call_block_keeps_no_call() -> None:
    script = chunks(
        BlockStart(1, "text"),
        TextDelta(1, "partial"),
        *tool_call_stream(Finish(FinishReason("max-tokens"))),
    )
    model = ScriptedModel(script, reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            assert turn_ends(agent) == [dsh.MaxTokens()]
            assert tool_results(agent) == []
            assert_well_formed(agent.session.derive_messages())
            agent.followup(m("again"))
            await agent.when_idle()
            assert_well_formed(model.requests[1].messages)


async def test_a_cancel_while_streaming_after_a_tool_call_block() -> None:
    text: list[StreamChunk] = [BlockStart(1, "text"), TextDelta(1, "thinking aloud")]
    g = gate(chunks(*text, *tool_call_stream()), after=5)
    model = ScriptedModel(g, reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await g.wait_reached()
            agent.cancel(dsh.UserCancel())
            await agent.when_idle()
            assert isinstance(turn_ends(agent)[0], dsh.Aborted)
            # the interrupted prefix keeps the text, never the call
            (message,) = [
                e.data.message
                for e in agent.session.events
                if e.type == "assistant/message"
            ]
            assert message.content == (TextBlock("thinking aloud"),)
            assert_well_formed(agent.session.derive_messages())
            agent.followup(m("again"))
            await agent.when_idle()
            assert_well_formed(model.requests[1].messages)


async def test_a_cancel_while_tools_run_answers_every_call() -> None:
    model = ScriptedModel(
        tool_calls(("c1", "waits", "{}"), ("c2", "add", '{"a": 1, "b": 2}')),
        reply("ok"),
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[waits, add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await trio.testing.wait_all_tasks_blocked()
            agent.cancel(dsh.UserCancel())
            await agent.when_idle()
            assert codes(agent) == ["ABORTED", "ABORTED_BEFORE_DISPATCH"]
            agent.followup(m("again"))
            await agent.when_idle()
            assert_well_formed(model.requests[1].messages)


def _started_then_failing(
    monkeypatch: pytest.MonkeyPatch, *, raises: BaseException | None
) -> None:
    """Make the registry start its first call (``tool/call``) and then fail, or
    return without a single result."""

    async def execute(
        self: ToolRegistry,
        agent: dsh.Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: dsh.CancelSignal,
    ) -> bool:
        first = calls[0]
        agent.session.append(
            "tool/call",
            ToolCallData(
                turn=turn,
                step=step,
                call_id=first.id,
                name=first.name,
                arguments=first.arguments,
            ),
        )
        await trio.lowlevel.checkpoint()
        if raises is not None:
            raise raises
        return False

    monkeypatch.setattr(ToolRegistry, "execute", execute)


@pytest.mark.parametrize("fails", [True, False], ids=["raises", "returns"])
async def test_calls_the_executor_did_not_answer_get_stand_in_results(
    monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    _started_then_failing(
        monkeypatch, raises=RuntimeError("scheduler broke") if fails else None
    )
    model = ScriptedModel(
        tool_calls(("c1", "add", '{"a": 1, "b": 2}'), ("c2", "add", "{}")),
        reply("ok"),
        reply("ok again"),
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        tracer = Tracer(rt)
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            assert codes(agent) == ["TOOL_OUTCOME_UNKNOWN", "TOOL_NOT_STARTED"]
            first, second = tool_results(agent)
            if fails:
                assert "the step failed (RuntimeError: scheduler broke)" in (
                    result_text(first)
                )
                assert isinstance(turn_ends(agent)[0], dsh.Errored)
                assert "~error t1s1" in tracer.lines
            else:
                assert "returned without recording its result" in result_text(first)
                assert turn_ends(agent) == [dsh.Completed()]
            assert "It is safe to retry" in result_text(second)
            started = next(e for e in agent.session.events if e.type == "tool/call")
            result_events = [e for e in agent.session.events if e.type == "tool/result"]
            assert result_events[0].source_event_seqs == (started.seq,)
            assert result_events[1].source_event_seqs is None
            durable = [line.split(" ", 1)[1] for line in tracer.durable()]
            at = durable.index("tool/call c1")
            assert durable[at : at + 4] == [
                "tool/call c1",
                "tool/result c1 TOOL_OUTCOME_UNKNOWN",
                "tool/result c2 TOOL_NOT_STARTED",
                "step/end 1/1",
            ]
            assert_well_formed(agent.session.derive_messages())
            if fails:
                agent.followup(m("again"))
                await agent.when_idle()
            assert_well_formed(model.requests[-1].messages)


async def test_a_base_exception_from_a_body_still_answers_every_call() -> None:
    class Fatal(BaseException):
        pass

    @dsh.tool
    async def fatal(ctx: dsh.ToolContext) -> str:
        """Escape with a BaseException."""
        raise Fatal("stop everything")

    model = ScriptedModel(
        tool_calls(("c1", "fatal", "{}"), ("c2", "add", '{"a": 1, "b": 2}'))
    )
    kept: list[dsh.Agent] = []
    with pytest.RaisesGroup(Fatal, flatten_subgroups=True):
        async with dsh.open_runtime(
            models={"scripted": model}, tools=[fatal, add]
        ) as rt:
            async with rt.agents.open(options=OPTIONS) as agent:
                kept.append(agent)
                agent.followup(m("go"))
                await agent.when_idle()
    (agent,) = kept
    assert codes(agent) == ["TOOL_ERROR", "ABORTED_BEFORE_DISPATCH"]
    assert "stopped by Fatal: stop everything" in result_text(tool_results(agent)[0])
    assert_well_formed(agent.session.derive_messages())
