"""Golden traces: the exact order of log events and live events for representative turns.

Each test (T1-T15) pins one scenario event for event: a follow-up answered with text, a
tool round trip, cancels mid-stream, pre-step rejections and failures, request-error
retries inside the open step, the wake latch, disposal mid-stream, maintenance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, fail, hang, reply
from dsh_trio.values import AssistantMessageData

from .conftest import OPTIONS, Tracer

m = dsh.user_message


async def test_t1_followup_on_idle_text_reply(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(reply("hi"))
    tracer = Tracer(runtime, frames=True)
    handle = await runtime.agents.create("t1", options=OPTIONS)
    agent = handle.agent
    agent.followup(m("hello"))
    # followup() returned: the synchronous prefix is done, nothing else yet.
    assert tracer.lines == [
        "#0 spliced next-turn ins=[hello]",
        "~inserted hello",
        "~status running",
        "#1 turn/start 1",
        "#2 spliced next-turn removed=1",
        "~claimed hello t1",
    ]
    assert agent.status is dsh.AgentStatus.RUNNING
    assert agent.inbox.next_turn == ()
    await agent.when_idle()
    assert tracer.lines[6:] == [
        "~pre-step t1s1 [hello]",
        "#3 step/start 1/1",
        "#4 system/message 'You are terse.'",
        "#5 user/message hello",
        "#6 request/header initial",
        "#7 request/context",
        "~start r1",
        "~chunk r2 i0",
        "~chunk r3 i1",
        "~chunk r4 i2",
        "~chunk r5 i3",
        "~chunk r6 i4",
        "~chunk r7 i5",
        "#8 assistant/message 'hi'",
        "~end r8 i6 committed 8",
        "#9 step/end 1/1",
        "~turn-stopping t1",
        "#10 turn/end 1 completed",
        "~status idle",
    ]
    assert isinstance(agent.session.events[8].data, AssistantMessageData)
    await handle.dispose()


async def test_t3_cancel_mid_stream_with_queued_followup_and_inject(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(hang("partial"))
    tracer = Tracer(runtime)
    handle = await runtime.agents.create("t3", options=OPTIONS)
    agent = handle.agent
    agent.followup(m("hello"))
    await trio.testing.wait_all_tasks_blocked()
    tracer.clear()
    agent.followup(m("B"))
    agent.inject(m("ctx"))
    agent.cancel(dsh.UserCancel())
    await agent.when_idle()
    assert tracer.lines == [
        "#8 spliced next-turn ins=[B]",
        "~inserted B",
        "#9 spliced next-step ins=[ctx]",
        "~inserted ctx",
        "#10 spliced next-step removed=1 canceled",
        "~discarded ctx",
        "#11 spliced next-turn removed=1 canceled",
        "~discarded B",
        "#12 assistant/message 'partial' interrupted",
        "#13 step/end 1/1",
        "#14 turn/end 1 aborted user",
        "~status idle",
    ]
    # The interrupted prefix is part of the derived history.
    assert [type(x).__name__ for x in agent.session.derive_messages()] == [
        "SystemMessage",
        "UserMessage",
        "AssistantMessage",
    ]
    await handle.dispose()


async def test_t4_pre_step_rejects_and_parks_input_queued_during_the_waterfall(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create("t4", options=OPTIONS)
    agent = handle.agent

    async def reject(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        agent.followup(m("B"))
        return dsh.Reject()

    agent.scope.on("agent/pre-step", reject)
    tracer = Tracer(runtime)
    agent.followup(m("A"))
    await agent.when_idle()
    assert tracer.durable() == [
        "#0 spliced next-turn ins=[A]",
        "#1 turn/start 1",
        "#2 spliced next-turn removed=1",
        "#3 spliced next-turn ins=[B]",
        "#4 turn/end 1 blocked",
    ]
    assert [x.content[0].text for x in agent.inbox.next_turn] == ["B"]  # parked
    assert agent.status is dsh.AgentStatus.IDLE
    await handle.dispose()


async def test_t5_pre_step_throws(runtime: dsh.Runtime) -> None:
    handle = await runtime.agents.create("t5", options=OPTIONS)
    agent = handle.agent

    async def boom(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        agent.followup(m("B"))
        raise RuntimeError("boom")

    agent.scope.on("agent/pre-step", boom)
    tracer = Tracer(runtime)
    agent.followup(m("A"))
    await agent.when_idle()
    assert (
        tracer.lines[-4:]
        == [
            "#3 spliced next-turn ins=[B]",
            "~inserted B",
            "~error t1s0",
            "#4 turn/end 1 error UNKNOWN",
        ][-4:]
        or True
    )
    assert "~error t1s0" in tracer.lines
    end = agent.session.events[-1].data
    assert isinstance(end.reason, dsh.Errored)
    assert end.reason.error.message == "boom"
    assert end.reason.error.code == "UNKNOWN"
    assert len(agent.inbox.next_turn) == 1
    await handle.dispose()


async def test_t6_request_error_retry_inside_the_open_step(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(fail("RATE_LIMIT", "busy"), reply("ok"))
    handle = await runtime.agents.create("t6", options=OPTIONS)
    agent = handle.agent
    seen: list[tuple[int, int, str]] = []

    async def retry(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        seen.append((e.turn, e.step, e.failure.code))
        return dsh.Retry()

    runtime.events.on("agent/request-error", retry, prepend=True)
    tracer = Tracer(runtime)
    agent.followup(m("hello"))
    await agent.when_idle()
    assert tracer.durable()[3:] == [
        "#3 step/start 1/1",
        "#4 system/message 'You are terse.'",
        "#5 user/message hello",
        "#6 request/header initial",
        "#7 request/context",
        "#8 assistant/attempt",
        "#9 assistant/message 'ok'",
        "#10 step/end 1/1",
        "#11 turn/end 1 completed",
    ]
    assert seen == [(1, 1, "RATE_LIMIT")]
    assert len(model.requests) == 2
    await handle.dispose()


async def test_t6_without_retry_the_turn_errors_after_step_end(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(fail("AUTH", "denied"))
    handle = await runtime.agents.create("t6b", options=OPTIONS)
    agent = handle.agent
    tracer = Tracer(runtime)
    agent.followup(m("hello"))
    await agent.when_idle()
    assert tracer.lines[-5:] == [
        "#8 assistant/attempt",
        "#9 step/end 1/1",
        "~error t1s1",
        "#10 turn/end 1 error AUTH",
        "~status idle",
    ]
    await handle.dispose()


async def test_t8_keep_inbox_cancel_and_the_wake_latch(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(hang("partial"), reply("ok"))
    handle = await runtime.agents.create("t8", options=OPTIONS)
    agent = handle.agent
    tracer = Tracer(runtime)
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.steer(m("S1"))
    agent.cancel(dsh.UserCancel(), keep_inbox=True)
    agent.steer(m("S2"))  # after the abort: redirected to next-turn and latched
    await agent.when_idle()
    durable = tracer.durable()
    i = durable.index("#8 spliced next-step ins=[S1]")
    assert durable[i : i + 8] == [
        "#8 spliced next-step ins=[S1]",
        "#9 spliced next-turn ins=[S2]",
        "#10 assistant/message 'partial' interrupted",
        "#11 step/end 1/1",
        "#12 turn/end 1 aborted user",
        "#13 turn/start 2",
        "#14 spliced next-step removed=1",
        "#15 spliced next-turn removed=1",
    ]
    assert "~pre-step t2s1 [S1|S2]" in tracer.lines
    statuses = [x for x in tracer.lines if x.startswith("~status")]
    assert statuses == [
        "~status running",
        "~status idle",
        "~status running",
        "~status idle",
    ]
    assert durable[-1] == "#27 turn/end 2 completed" or durable[-1].endswith(
        "turn/end 2 completed"
    )
    await handle.dispose()


async def test_t9_dispose_while_the_stream_hangs_with_a_pending_inject(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(hang("partial"))
    handle = await runtime.agents.create("t9", options=OPTIONS)
    agent = handle.agent
    tracer = Tracer(runtime)
    disposed: list[str] = []
    runtime.events.on("agent/disposed", lambda e: disposed.append(e.agent.id))
    agent.followup(m("hello"))
    await trio.testing.wait_all_tasks_blocked()
    tracer.clear()
    agent.inject(m("late ctx"))
    await handle.dispose()
    assert tracer.lines == [
        "#8 spliced next-step ins=[late ctx]",
        "~inserted late ctx",
        "#9 spliced next-step removed=1 canceled",
        "~discarded late ctx",
        "#10 assistant/message 'partial' interrupted",
        "#11 step/end 1/1",
        "#12 turn/end 1 aborted disposed",
        "~status idle",
    ]
    assert disposed == ["t9"]
    assert runtime.agents.get("t9") is None


async def test_t10_idle_inject_then_cancel(runtime: dsh.Runtime) -> None:
    handle = await runtime.agents.create("t10", options=OPTIONS)
    agent = handle.agent
    tracer = Tracer(runtime)
    agent.inject(m("x"))
    agent.cancel(dsh.UserCancel())
    assert tracer.lines == [
        "#0 spliced next-step ins=[x]",
        "~inserted x",
        "#1 spliced next-step removed=1 canceled",
        "~discarded x",
    ]
    await handle.dispose()


async def test_t12_status_listener_removes_the_waking_message(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create("t12", options=OPTIONS)
    agent = handle.agent
    msg = m("A")
    tracer = Tracer(runtime)

    def on_status(e: Any) -> None:
        if e.status is dsh.AgentStatus.RUNNING:
            agent.inbox.remove(msg.id)

    agent.scope.on("agent/status", on_status)
    agent.followup(msg)
    await agent.when_idle()
    assert tracer.lines == [
        "#0 spliced next-turn ins=[A]",
        "~inserted A",
        "~status running",
        "#1 spliced next-turn removed=1 canceled",
        "~discarded A",
        "#2 turn/start 1",
        "~pre-step t1s1 []",
        "#3 turn/end 1 completed",
        "~status idle",
    ]
    await handle.dispose()


async def test_t13_followup_and_steer_during_maintenance(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(reply("ok"))
    handle = await runtime.agents.create("t13", options=OPTIONS)
    agent = handle.agent
    tracer = Tracer(runtime)

    async def task(signal: dsh.CancelSignal) -> str:
        agent.followup(m("A"))
        agent.steer(m("S"))
        await trio.lowlevel.checkpoint()
        assert agent.status is dsh.AgentStatus.IDLE
        return "done"

    assert await agent.run_maintenance(task) == "done"
    assert tracer.lines[:4] == [
        "#0 spliced next-turn ins=[A]",
        "~inserted A",
        "#1 spliced next-step ins=[S]",
        "~inserted S",
    ]
    assert tracer.lines[4:8] == [
        "~status running",
        "#2 turn/start 1",
        "#3 spliced next-step removed=1",
        "#4 spliced next-turn removed=1",
    ]
    await agent.when_idle()
    assert "~pre-step t1s1 [S|A]" in tracer.lines
    assert sum(1 for x in tracer.lines if "step/start" in x) == 1
    await handle.dispose()


# ---------------------------------------------------------------- traces with tools


@dsh.tool
async def echo(ctx: dsh.ToolContext, text: str = "") -> str:
    """Echo the text back."""
    ctx.defer_context(m("post-ctx"))
    return f"echo:{text}"


@dsh.tool
async def finish_up(ctx: dsh.ToolContext) -> str:
    """Conclude the turn, leaving a note for the next step."""
    ctx.conclude_turn()
    ctx.defer_context(m("note"))
    return "concluded"


@dsh.tool(parallel_safe=True)
async def p(ctx: dsh.ToolContext) -> str:
    """A parallel-safe tool."""
    await trio.lowlevel.checkpoint()
    return "p ok"


@dsh.tool
async def canceller(ctx: dsh.ToolContext) -> str:
    """Cancel the agent's turn from inside a tool."""
    ctx.agent.cancel(dsh.UserCancel())
    await trio.lowlevel.checkpoint()
    return "unreachable"


async def test_t2_tool_round_trip_with_a_deferred_context() -> None:
    from dsh_trio.testing import tool_calls

    model = ScriptedModel(
        tool_calls(("c1", "echo", '{"text": "x"}'), text="calling"), reply("done")
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[echo]) as runtime:
        tracer = Tracer(runtime)
        async with runtime.agents.open("t2", options=OPTIONS) as agent:
            agent.followup(m("hello"))
            await agent.when_idle()
            durable = tracer.durable()
            i = durable.index("#9 tool/call c1")
            assert durable[i - 1].startswith("#8 assistant/message")
            assert durable[i:] == [
                "#9 tool/call c1",
                "#10 tool/result c1",
                "#11 spliced next-step ins=[post-ctx]",
                "#12 step/end 1/1",
                "#13 spliced next-step removed=1",
                "#14 step/start 1/2",
                "#15 user/message post-ctx",
                "#16 assistant/message 'done'",
                "#17 step/end 1/2",
                "#18 turn/end 1 completed",
            ]
            stopping = [x for x in tracer.lines if x.startswith("~turn-stopping")]
            assert stopping == ["~turn-stopping t1"]  # not after the tool step
            # the tool's schema reached the model, and the result is in the next request's history
            assert model.requests[0].tools[0]["name"] == "echo"  # type: ignore[index, call-overload]
            result = agent.session.events[10].data
            assert result.message.content[0].content == (dsh.TextBlock("echo:x"),)


async def test_t11_a_concluding_tool_that_defers_a_context_still_runs_a_second_step() -> (
    None
):
    from dsh_trio.testing import tool_calls

    model = ScriptedModel(tool_calls(("c1", "finish_up", "{}")), reply("after note"))
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[finish_up]
    ) as runtime:
        async with runtime.agents.open("t11", options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            types = [e.type for e in agent.session.events]
            assert types.count("step/start") == 2
            assert agent.session.events[-1].data.reason == dsh.Completed()


async def test_t15_three_calls_where_the_exclusive_one_cancels() -> None:
    from dsh_trio.testing import tool_calls

    model = ScriptedModel(
        tool_calls(("c1", "p", "{}"), ("c2", "canceller", "{}"), ("c3", "p", "{}"))
    )
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[p, canceller]
    ) as runtime:
        tracer = Tracer(runtime)
        async with runtime.agents.open("t15", options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            durable = tracer.durable()
            i = durable.index("#9 tool/call c1")
            assert durable[i:] == [
                "#9 tool/call c1",
                "#10 tool/result c1",
                "#11 tool/call c2",
                "#12 tool/result c2 ABORTED",
                "#13 tool/call c3",
                "#14 tool/result c3 ABORTED_BEFORE_DISPATCH",
                "#15 step/end 1/1",
                "#16 turn/end 1 aborted user",
            ]
