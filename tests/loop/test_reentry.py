"""``run()`` / ``stream()`` awaited from inside the agent's own activity raise at once.

Each test runs under ``trio.fail_after`` on the autojump clock (``autojump_clock``): a
call that waited for its own turn would show as ``TooSlowError`` rather than hang.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.values import TurnEnd

from .conftest import OPTIONS

#: Calls of the agent under test, as a tool or hook makes them.
CALLS: dict[str, Callable[[dsh.Agent], Awaitable[object]]] = {}


def _call(name: str) -> Callable[[Callable[[dsh.Agent], Awaitable[object]]], None]:
    def register(fn: Callable[[dsh.Agent], Awaitable[object]]) -> None:
        CALLS[name] = fn

    return register


@_call("run")
async def _run(agent: dsh.Agent) -> object:
    return await agent.run("inner")


@_call("stream")
async def _stream(agent: dsh.Agent) -> object:
    async with agent.stream("inner") as turn:
        return await turn.result()  # pragma: no cover  # entry raises


@_call("run from a child task")
async def _run_in_child(agent: dsh.Agent) -> object:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.run, "inner")
    return None  # pragma: no cover


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@pytest.fixture
def caught() -> list[BaseException]:
    return []


def _attempt(
    call: str, caught: list[BaseException]
) -> Callable[[dsh.Agent], Awaitable[None]]:
    async def attempt(agent: dsh.Agent) -> None:
        try:
            await CALLS[call](agent)
        except BaseException as exc:  # recorded for the test
            caught.append(_unwrap(exc))

    return attempt


def _check_refused(agent: dsh.Agent, caught: list[BaseException], where: str) -> None:
    (exc,) = caught
    assert isinstance(exc, dsh.AgentReentrancyError)
    assert (
        f'of agent "{agent.id}" was called from inside that agent\'s own {where}'
        in str(exc)
    )
    assert "inner" not in [dsh.text_of(m) for m in agent.inbox.next_turn]
    user_texts = [
        dsh.text_of(e.data)
        for e in agent.session.events
        if isinstance(e.data, dsh.UserMessage)
    ]
    assert "inner" not in user_texts  # nothing was queued, no turn ran for it


@pytest.mark.parametrize("call", list(CALLS))
async def test_a_tool_of_the_agent_cannot_wait_for_that_agent(
    model: ScriptedModel,
    call: str,
    caught: list[BaseException],
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempt = _attempt(call, caught)

    @dsh.tool
    async def ask_myself(ctx: dsh.ToolContext) -> str:
        """Ask the agent running this tool."""
        await attempt(ctx.agent)
        return "asked"

    model.push(tool_calls(("c1", "ask_myself", "{}")), reply("done"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[ask_myself]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            with trio.fail_after(60):
                result = await agent.run("go")
            assert (result.reason, result.text) == (dsh.Completed(), "done")
            _check_refused(agent, caught, "turn (one of its tools or hooks)")
            assert agent.session.last_turn == 1


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("hook", ["agent/pre-step", "agent/turn-stopping"])
async def test_a_hook_of_the_agent_cannot_wait_for_that_agent(
    agent: dsh.Agent,
    model: ScriptedModel,
    call: str,
    hook: str,
    caught: list[BaseException],
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempt = _attempt(call, caught)

    async def pre_step(event: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        await attempt(event.agent)
        return await next()

    async def turn_stopping(event: Any) -> None:
        await attempt(event.agent)

    agent.scope.on(hook, pre_step if hook == "agent/pre-step" else turn_stopping)
    model.push(reply("done"))
    with trio.fail_after(60):
        result = await agent.run("go")
    assert result.reason == dsh.Completed()
    _check_refused(agent, caught, "turn (one of its tools or hooks)")


async def test_a_maintenance_task_cannot_wait_for_a_turn_of_its_agent(
    agent: dsh.Agent,
    caught: list[BaseException],
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempt = _attempt("run", caught)

    async def task(_signal: dsh.CancelSignal) -> None:
        await attempt(agent)

    with trio.fail_after(60):
        await agent.run_maintenance(task)
    _check_refused(agent, caught, "maintenance task (its setup, say)")
    assert agent.session.last_turn == 0


async def test_a_task_outside_the_turn_may_wait_for_the_agent(
    agent: dsh.Agent, model: ScriptedModel, autojump_clock: trio.testing.MockClock
) -> None:
    # Only the agent's own activity is refused: another agent's tool, or a task the
    # caller runs beside the turn, waits as usual.
    model.push(reply("first"), reply("second"))
    results: list[dsh.TurnResult] = []

    async def also_run() -> None:
        results.append(await agent.run("second"))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            async with agent.stream("first") as turn:
                nursery.start_soon(also_run)  # runs while turn 1 streams
                first = await turn.result()
    assert (first.text, [r.text for r in results]) == ("first", ["second"])
    ends = [e.data for e in agent.session.events if e.type == "turn/end"]
    assert ends == [TurnEnd(1, dsh.Completed()), TurnEnd(2, dsh.Completed())]
