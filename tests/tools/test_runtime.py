"""Tools through the real runtime and driver: T15, T11, continuation, schemas."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.tools import ToolContext, tool
from dsh_trio.values import ToolResultBlock, ToolResultData

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


@tool(parallel_safe=True)
async def p(ctx: ToolContext) -> str:
    """Parallel-safe no-op."""
    await trio.lowlevel.checkpoint()
    return "ok"


@tool
async def stop(ctx: ToolContext) -> str:
    """Cancel the turn from inside a tool."""
    ctx.agent.cancel(dsh.UserCancel())
    await trio.sleep_forever()
    raise AssertionError("not reached")


@tool
async def finish(ctx: ToolContext) -> str:
    """Conclude the turn, leaving a note for the next step."""
    ctx.defer_context(dsh.user_message("post-ctx"))
    ctx.conclude_turn()
    return "finished"


@tool
async def conclude(ctx: ToolContext) -> str:
    """Conclude the turn."""
    ctx.conclude_turn()
    return "concluded"


@tool(parallel_safe=True)
async def echo(ctx: ToolContext, text: str) -> str:
    """Echo the text."""
    return text


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def runtime(model: ScriptedModel) -> AsyncIterator[dsh.Runtime]:
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[stop, p, finish, conclude, echo]
    ) as rt:
        yield rt


def brief(events: object) -> list[str]:
    out: list[str] = []
    for ev in events:  # type: ignore[attr-defined]
        d = ev.data
        if ev.type == "tool/call":
            out.append(f"tool/call {d.call_id}")
        elif ev.type == "tool/result":
            out.append(
                f"tool/result {d.message.source.call_id} {d.error.code if d.error else 'ok'}"
            )
        elif ev.type == "turn/end":
            reason = d.reason
            extra = f" {reason.reason.kind}" if isinstance(reason, dsh.Aborted) else ""
            out.append(f"turn/end {reason.TAG}{extra}")
        elif ev.type == "agent/inbox/spliced":
            out.append(
                f"spliced {d.target.value} {'claim' if d.removed_count else 'insert'}"
            )
        else:
            out.append(ev.type)
    return out


async def test_t15_through_the_driver(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(tool_calls(("c1", "p", "{}"), ("c2", "stop", "{}"), ("c3", "p", "{}")))
    async with runtime.agents.open(options=OPTIONS) as agent:
        agent.followup(dsh.user_message("go"))
        await agent.when_idle()
        tail = brief(agent.session.events)[-8:]
    assert tail == [
        "tool/call c1",
        "tool/result c1 ok",
        "tool/call c2",
        "tool/result c2 ABORTED",
        "tool/call c3",
        "tool/result c3 ABORTED_BEFORE_DISPATCH",
        "step/end",
        "turn/end aborted user",
    ]
    assert len(model.requests) == 1


async def test_t11_concluding_tool_with_a_deferred_context_runs_another_step(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(tool_calls(("c1", "finish", "{}")), reply("done"))
    async with runtime.agents.open(options=OPTIONS) as agent:
        agent.followup(dsh.user_message("go"))
        await agent.when_idle()
        lines = brief(agent.session.events)
    i = lines.index("tool/call c1")
    assert lines[i : i + 6] == [
        "tool/call c1",
        "tool/result c1 ok",
        "spliced next-step insert",
        "step/end",
        "spliced next-step claim",
        "step/start",
    ]
    assert lines[-1] == "turn/end completed"
    assert len(model.requests) == 2


async def test_concluding_tool_ends_the_turn_without_another_request(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(tool_calls(("c1", "conclude", "{}")))
    async with runtime.agents.open(options=OPTIONS) as agent:
        agent.followup(dsh.user_message("go"))
        await agent.when_idle()
        lines = brief(agent.session.events)
    assert lines[-4:] == [
        "tool/call c1",
        "tool/result c1 ok",
        "step/end",
        "turn/end completed",
    ]
    assert len(model.requests) == 1


async def test_results_go_back_to_the_model_and_schemas_are_sorted(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(
        tool_calls(("c1", "echo", '{"text": "hi"}'), ("c2", "echo", '{"text": 5}')),
        reply("done"),
    )
    async with runtime.agents.open(options=OPTIONS) as agent:
        agent.followup(dsh.user_message("go"))
        await agent.when_idle()
        results = [e.data for e in agent.session.events if e.type == "tool/result"]
    first, second = model.requests
    names = [t["name"] for t in first.tools]  # type: ignore[index, call-overload]
    assert names == ["conclude", "echo", "finish", "p", "stop"]
    assert first.tools == tuple(t.schema for t in (conclude, echo, finish, p, stop))
    sent = [
        m
        for m in second.messages
        if isinstance(m, dsh.UserMessage) and isinstance(m.source, dsh.ToolSource)
    ]
    assert [m.content[0] for m in sent] == [
        r.message.content[0] for r in results if isinstance(r, ToolResultData)
    ]
    assert isinstance(sent[0].content[0], ToolResultBlock)
    assert sent[0].content[0].content == (dsh.TextBlock("hi"),)
    assert sent[1].content[0].is_error
    assert second.tools == first.tools
