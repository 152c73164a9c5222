"""Cancellation with every cause at every await point of a turn, and in maintenance.

No test sleeps on the wall clock: each waits until every task is blocked at the
point under test, then cancels.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, fail, gate, hang, reply

from .conftest import OPTIONS

CAUSES = [
    dsh.UserCancel(),
    dsh.ParentCancel(),
    dsh.HookCancel("stop it"),
    dsh.DisposedCancel(),
]
POINTS = [
    "pre-step",
    "request",
    "stream-before-first-chunk",
    "stream-after-first-chunk",
    "request-error",
    "turn-stopping",
]


async def _block_forever(*_args: Any) -> Any:
    await trio.sleep_forever()


def _arrange(point: str, agent: dsh.Agent, model: ScriptedModel) -> None:
    if point == "pre-step":
        agent.scope.on("agent/pre-step", _block_forever)
    elif point == "request":
        agent.scope.on("agent/request", _block_forever)
    elif point == "stream-before-first-chunk":
        model.push(gate())
    elif point == "stream-after-first-chunk":
        model.push(hang("partial"))
    elif point == "request-error":
        model.push(fail("AUTH", "denied"))
        agent.scope.on("agent/request-error", _block_forever)
    elif point == "turn-stopping":
        model.push(reply("done"))
        agent.scope.on("agent/turn-stopping", _block_forever)


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: c.kind)
@pytest.mark.parametrize("point", POINTS)
async def test_cancel_at_each_await_point_records_the_cause(
    runtime: dsh.Runtime, model: ScriptedModel, point: str, cause: dsh.CancelCause
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    _arrange(point, agent, model)
    agent.followup(dsh.user_message("go"))
    await trio.testing.wait_all_tasks_blocked()
    assert agent.status is dsh.AgentStatus.RUNNING
    agent.cancel(cause)
    agent.cancel(
        dsh.UserCancel() if cause != dsh.UserCancel() else dsh.HookCancel("late")
    )  # first cause wins
    await agent.when_idle()
    assert agent.status is dsh.AgentStatus.IDLE
    events = agent.session.events
    end = events[-1]
    assert end.type == "turn/end"
    assert end.data.reason == dsh.Aborted(cause)
    types = [e.type for e in events]
    if point == "pre-step":
        assert "step/start" not in types
    else:
        assert types.count("step/start") == types.count("step/end") == 1
    if point == "stream-after-first-chunk":
        settled = events[-3]
        assert settled.type == "assistant/message" and settled.data.interrupted is True
    if point == "stream-before-first-chunk":
        assert events[-3].type == "assistant/attempt"
    await handle.dispose()


async def test_followup_then_cancel_ends_the_turn_with_no_step(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.followup(dsh.user_message("A"))
    agent.followup(dsh.user_message("B"))
    agent.cancel(dsh.UserCancel(), keep_inbox=True)
    await agent.when_idle()
    types = [e.type for e in agent.session.events]
    assert types == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "agent/inbox/spliced",
        "turn/end",
    ]
    assert agent.session.events[-1].data.reason == dsh.Aborted(dsh.UserCancel())
    assert [x.content[0].text for x in agent.inbox.next_turn] == [
        "B"
    ]  # parked, not run
    await handle.dispose()


async def test_a_status_listener_that_cancels_prevents_the_turn(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent

    def on_status(e: Any) -> None:
        if e.status is dsh.AgentStatus.RUNNING:
            agent.cancel(dsh.HookCancel("no"), keep_inbox=True)

    agent.scope.on("agent/status", on_status)
    agent.followup(dsh.user_message("A"))
    await agent.when_idle()
    assert [e.type for e in agent.session.events] == ["agent/inbox/spliced"]
    assert len(agent.inbox.next_turn) == 1
    await handle.dispose()


async def test_hook_that_never_looks_at_the_signal_is_still_cancelled(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    reached = trio.Event()

    async def stubborn(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        reached.set()
        await trio.Event().wait()  # ignores e.signal entirely
        return await next()

    agent.scope.on("agent/pre-step", stubborn)
    agent.followup(dsh.user_message("A"))
    await reached.wait()
    agent.cancel(dsh.UserCancel())
    await agent.when_idle()
    assert agent.session.events[-1].data.reason == dsh.Aborted(dsh.UserCancel())
    await handle.dispose()


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: c.kind)
async def test_cancel_interrupts_maintenance(
    runtime: dsh.Runtime, cause: dsh.CancelCause
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    result: list[BaseException] = []

    async def run() -> None:
        try:
            await agent.run_maintenance(_block_forever)
        except dsh.AgentCancelled as exc:
            result.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(dsh.AgentBusyError):
            await agent.run_maintenance(_block_forever)
        agent.cancel(cause)
    assert len(result) == 1
    assert result[0].cause == cause  # type: ignore[attr-defined]
    await agent.when_idle()
    await handle.dispose()


async def test_maintenance_returns_and_raises_what_the_task_did(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent

    async def ok(signal: dsh.CancelSignal) -> int:
        await trio.lowlevel.checkpoint()
        return 42

    async def bad(signal: dsh.CancelSignal) -> int:
        raise KeyError("x")

    assert await agent.run_maintenance(ok) == 42
    with pytest.raises(KeyError):
        await agent.run_maintenance(bad)
    assert agent.status is dsh.AgentStatus.IDLE
    await handle.dispose()


async def test_when_idle_follows_the_latched_replacement_driver(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(hang("p"), reply("second"))
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.followup(dsh.user_message("first"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.UserCancel())
    agent.followup(dsh.user_message("after"))  # latched
    await agent.when_idle()
    ends = [e.data.reason for e in agent.session.events if e.type == "turn/end"]
    assert ends == [dsh.Aborted(dsh.UserCancel()), dsh.Completed()]
    await handle.dispose()


async def test_disposed_cause_never_latches(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(hang("p"))
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.followup(dsh.user_message("first"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.DisposedCancel())
    agent.followup(dsh.user_message("after"))
    await agent.when_idle()
    assert sum(1 for e in agent.session.events if e.type == "turn/start") == 1
    assert len(agent.inbox.next_turn) == 1  # parked
    await handle.dispose()


async def test_idle_cancel_clears_the_inbox_unless_keep_inbox(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.inject(dsh.user_message("x"))
    agent.cancel(dsh.UserCancel(), keep_inbox=True)
    assert len(agent.inbox.next_step) == 1
    agent.cancel(dsh.UserCancel())
    assert agent.inbox.next_step == ()
    await handle.dispose()
