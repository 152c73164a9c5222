"""A message with one tool call: its body runs in the step's own task, no nursery.

The outcomes, events and failures are those of the pooled path (the scheduler tests
cover both); what differs is only where the body runs.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dsh_trio.tools import ToolContext, ToolRegistry, tool
from dsh_trio.values import ToolErrorInfo, UserCancel

from .conftest import FakeAgent, call, describe, drive, results


def _registry(*tools: object) -> ToolRegistry:
    registry = ToolRegistry(max_parallel_tool_calls=10)
    for t in tools:
        registry.register(t)  # type: ignore[arg-type]
    return registry


@pytest.mark.parametrize("parallel_safe", [True, False])
async def test_one_call_runs_in_the_callers_task(
    agent: FakeAgent, parallel_safe: bool
) -> None:
    seen: list[trio.lowlevel.Task] = []

    @tool(parallel_safe=parallel_safe)
    async def where(ctx: ToolContext) -> str:
        seen.append(trio.lowlevel.current_task())
        return "here"

    out = await drive(_registry(where), agent, [call("a", "where")])
    assert seen == [trio.lowlevel.current_task()]
    assert out.concluded is False
    assert describe(agent) == ["call a", "result a ok"]


async def test_two_calls_run_in_tasks_of_their_own(agent: FakeAgent) -> None:
    seen: list[trio.lowlevel.Task] = []

    @tool(parallel_safe=True)
    async def where(ctx: ToolContext) -> str:
        seen.append(trio.lowlevel.current_task())
        return "there"

    await drive(_registry(where), agent, [call("a", "where"), call("b", "where")])
    assert len(seen) == 2
    assert trio.lowlevel.current_task() not in seen


async def test_a_base_exception_from_the_one_body_answers_it_and_propagates(
    agent: FakeAgent,
) -> None:
    class Fatal(BaseException):
        pass

    @tool
    async def fatal(ctx: ToolContext) -> str:
        raise Fatal("stop") from OSError("cause")

    with pytest.raises(Fatal) as info:
        await drive(_registry(fatal), agent, [call("a", "fatal")])
    # As the single leaf of the pooled path's nursery: raised without its cause.
    assert info.value.__cause__ is None
    assert describe(agent) == ["call a", "result a TOOL_ERROR"]
    assert results(agent)["a"].error == ToolErrorInfo("Fatal", "TOOL_ERROR")


async def test_cancelling_the_one_body_records_it_aborted(agent: FakeAgent) -> None:
    started = trio.Event()

    @tool
    async def slow(ctx: ToolContext) -> str:
        started.set()
        await trio.sleep_forever()
        return "never"

    async with trio.open_nursery() as nursery:
        outcome_box: list[object] = []

        async def run() -> None:
            outcome_box.append(await drive(_registry(slow), agent, [call("a", "slow")]))

        nursery.start_soon(run)
        await started.wait()
        agent.cancel(UserCancel())
    out = outcome_box[0]
    assert getattr(out, "cancelled", None) is True
    assert describe(agent) == ["call a", "result a ABORTED"]


async def test_a_cancelled_step_skips_the_one_call(agent: FakeAgent) -> None:
    ran: list[str] = []

    @tool
    async def never(ctx: ToolContext) -> str:
        ran.append("ran")
        return ""

    agent.cancel(UserCancel())
    out = await drive(_registry(never), agent, [call("a", "never")])
    assert out.cancelled and not ran
    assert describe(agent) == ["call a", "result a ABORTED_BEFORE_DISPATCH"]


@pytest.mark.parametrize(
    ("call_id", "name"),
    [("c1", "echo"), ("caf\u00e9", "echo"), ("c1", "\u00e9cho")],
)
async def test_tool_call_events_log_the_same_for_any_text(
    agent: FakeAgent, call_id: str, name: str
) -> None:
    @tool(name="echo")
    async def echo(ctx: ToolContext, x: str) -> str:
        return x

    await drive(_registry(echo), agent, [call(call_id, name, '{"x": "\u00e9"}')])
    logged = [e.data for e in agent.session.events if e.type == "tool/call"]
    assert [(d.call_id, d.name, d.arguments) for d in logged] == [
        (call_id, name, '{"x": "\u00e9"}')
    ]
    error = results(agent)[call_id].error
    assert (error.code if error is not None else "ok") == (
        "ok" if name == "echo" else "UNKNOWN_TOOL"
    )


async def test_a_refused_tool_call_append_propagates_as_the_pooled_path_does(
    agent: FakeAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session refusing ``tool/call``: the plain failure propagates, not a group."""
    from dsh_trio.session import Session

    ran: list[str] = []

    @tool
    async def never(ctx: ToolContext) -> str:
        ran.append("ran")
        return ""

    class Refused(Exception):
        pass

    real = Session.append_trusted

    def refuse(self: Session, type: str, data: object, **kw: object) -> object:
        if type == "tool/call":
            raise Refused("log is full")
        return real(self, type, data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Session, "append_trusted", refuse)
    monkeypatch.setattr(Session, "append", refuse)
    with pytest.raises(Refused):
        await drive(_registry(never), agent, [call("a", "never")])
    assert not ran
