"""``Agent.run``: queue a follow-up, wait for the turn that claims it, return its result."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, chunks, fail, gate, reply
from dsh_trio.values import TurnEnd

from .conftest import OPTIONS


async def test_run_returns_the_text_and_what_the_turn_appended(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("A nursery owns tasks.", chunks=3))
    prompt = dsh.user_message("What is a nursery?")
    result = await agent.run(prompt)
    assert result == dsh.TurnResult(
        turn=1,
        reason=dsh.Completed(),
        text="A nursery owns tasks.",
        messages=result.messages,
        usage=dsh.Usage(10, len("A nursery owns tasks.")),
    )
    kinds = [type(m) for m in result.messages]
    assert kinds == [dsh.SystemMessage, dsh.UserMessage, dsh.AssistantMessage]
    assert result.messages[1] is prompt
    assert result.messages == tuple(agent.session.derive_messages())
    assert not result.failed
    # A second run: its own turn, only what that turn appended.
    model.push(reply("Yes."))
    again = await agent.run("Sure?")  # plain text is a user message
    assert (again.turn, again.text) == (2, "Yes.")
    assert [dsh.text_of(m) for m in again.messages] == ["Sure?", "Yes."]


async def test_text_of_joins_the_text_blocks_only() -> None:
    message = dsh.AssistantMessage(
        id=dsh.new_message_id(),
        content=(
            dsh.ReasoningBlock("thinking"),
            dsh.TextBlock("Hello, "),
            dsh.ToolCallBlock("c1", "echo", "{}"),
            dsh.TextBlock("world"),
        ),
        source=dsh.ModelSource("p", "m"),
    )
    assert dsh.text_of(message) == "Hello, world"
    assert dsh.text_of(dsh.user_message("hi")) == "hi"


async def test_an_errored_turn_raises_turn_failed_with_the_failure(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(fail("AUTH", "denied"))
    with pytest.raises(
        dsh.TurnFailedError, match=r'turn 1 of agent "a1" errored: denied \(AUTH\)'
    ):
        await agent.run(dsh.user_message("hi"))
    model.push(fail("AUTH", "denied again"))
    with pytest.raises(dsh.TurnFailedError) as info:
        await agent.run(dsh.user_message("again"))
    failed = info.value.result
    assert info.value.agent_id == "a1"
    assert failed.turn == 2
    assert failed.reason == dsh.Errored(dsh.LlmFailure("denied again", "AUTH"))
    assert [dsh.text_of(m) for m in failed.messages] == ["again"]
    assert failed.failed


async def test_check_false_returns_the_failed_result(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(fail("AUTH", "denied"))
    result = await agent.run(dsh.user_message("hi"), check=False)
    assert result.reason == dsh.Errored(dsh.LlmFailure("denied", "AUTH"))
    assert result.text == ""
    assert result.failed


async def test_an_aborted_turn_raises_turn_failed_with_the_cause(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("never"), after=2)  # block-start and one delta, then hold
    model.push(g)
    failures: list[dsh.TurnFailedError] = []

    async def caller() -> None:
        with pytest.raises(dsh.TurnFailedError) as info:
            await agent.run(dsh.user_message("go"))
        failures.append(info.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await g.wait_reached()
        agent.cancel(dsh.HookCancel("budget spent"))
    (exc,) = failures
    assert exc.result.reason == dsh.Aborted(dsh.HookCancel("budget spent"))
    assert "aborted (hook: budget spent)" in str(exc)
    assert exc.result.text == "n"  # the interrupted prefix is kept
    assert exc.result.turn == 1


async def test_cancelling_the_caller_aborts_that_turn_with_user_cancel(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate()
    model.push(g)
    later = dsh.user_message("later")
    with trio.CancelScope() as scope:

        async def cancel_when_streaming() -> None:
            await g.wait_reached()
            agent.followup(later)  # someone else's input, queued behind
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_streaming)
            await agent.run(dsh.user_message("go"))
    assert scope.cancelled_caught
    # run() raised once the turn had wound down: ended, and the agent idle.
    assert agent.status is dsh.AgentStatus.IDLE
    (end,) = [e for e in agent.session.events if e.type == "turn/end"]
    assert end.data.reason == dsh.Aborted(dsh.UserCancel())
    g.release()  # a turn left running would now complete
    await agent.when_idle()
    assert [e.type for e in agent.session.events].count("turn/end") == 1
    assert agent.inbox.next_turn == (later,)  # only that turn was cancelled


async def test_cancelling_the_caller_before_the_claim_removes_the_message(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("first"))
    model.push(g)
    agent.followup(dsh.user_message("first"))
    mine = dsh.user_message("mine")
    with trio.CancelScope() as scope:

        async def cancel_when_queued() -> None:
            await trio.testing.wait_all_tasks_blocked()
            assert agent.inbox.next_turn == (mine,)
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_when_queued)
            await agent.run(mine)
    assert scope.cancelled_caught
    assert agent.inbox.next_turn == ()
    g.release()
    await agent.when_idle()
    ends = [e.data for e in agent.session.events if e.type == "turn/end"]
    assert ends == [TurnEnd(1, dsh.Completed())]


async def test_run_waits_for_its_own_turn_behind_queued_input(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("one"))
    model.push(g, reply("two"), reply("three"))
    agent.followup(dsh.user_message("first"))
    agent.followup(dsh.user_message("second"))  # queued before run's message
    results: list[dsh.TurnResult] = []

    async def caller() -> None:
        results.append(await agent.run(dsh.user_message("third")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        g.release()
    (result,) = results
    assert (result.turn, result.text) == (3, "three")
    assert [dsh.text_of(m) for m in result.messages] == ["third", "three"]


async def test_run_returns_when_its_turn_ends_not_when_the_agent_idles(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    first, g = gate(reply("mine")), gate(reply("later"))
    model.push(first, g)
    results: list[dsh.TurnResult] = []

    async def caller() -> None:
        results.append(await agent.run(dsh.user_message("mine")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await first.wait_reached()
        agent.followup(dsh.user_message("later"))  # runs after run's turn
        first.release()
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        assert [r.text for r in results] == ["mine"]  # turn 2 still streaming
        assert agent.status is dsh.AgentStatus.RUNNING
        g.release()


async def test_a_message_parked_behind_a_failed_turn_still_gets_its_turn(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(fail("AUTH", "denied"))
    model.push(g, reply("fine"))
    agent.followup(dsh.user_message("doomed"))
    results: list[dsh.TurnResult] = []

    async def caller() -> None:
        results.append(await agent.run(dsh.user_message("mine")))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        g.release()  # turn 1 errors: the queued work parks, run wakes it
        await trio.testing.wait_all_tasks_blocked()
        assert len(results) == 1  # (a parked message would leave run waiting)
    (result,) = results
    assert (result.turn, result.reason, result.text) == (2, dsh.Completed(), "fine")


@pytest.mark.parametrize(
    "cause", [dsh.UserCancel(), dsh.HookCancel("stop")], ids=lambda c: c.kind
)
async def test_a_message_discarded_before_its_claim_fails_with_the_cause(
    agent: dsh.Agent, model: ScriptedModel, cause: dsh.CancelCause
) -> None:
    g = gate()
    model.push(g)
    agent.followup(dsh.user_message("first"))
    failures: list[dsh.TurnFailedError] = []

    async def caller() -> None:
        with pytest.raises(dsh.TurnFailedError) as info:
            await agent.run(dsh.user_message("mine"))
        failures.append(info.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel(cause)  # clears the inbox: "mine" never gets a turn
    (exc,) = failures
    assert exc.result == dsh.TurnResult(
        turn=None, reason=dsh.Aborted(cause), text="", messages=(), usage=None
    )
    assert "removed from the inbox" in str(exc)


async def test_a_message_removed_from_the_inbox_fails_as_user_cancelled(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate()
    model.push(g)
    agent.followup(dsh.user_message("first"))
    mine = dsh.user_message("mine")
    results: list[dsh.TurnResult] = []

    async def caller() -> None:
        results.append(await agent.run(mine, check=False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        # Replaced in place under the same id: still followed.
        agent.inbox.replace(mine.id, dsh.user_message("mine, edited", id=mine.id))
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        assert agent.inbox.remove(mine.id)
        g.release()
    (result,) = results
    assert (result.turn, result.reason) == (None, dsh.Aborted(dsh.UserCancel()))


async def test_usage_is_summed_over_the_attempts_of_the_turn(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    failure = dsh.LlmFailure("busy", "SERVER")
    model.push(
        chunks(dsh.Usage(7, 1), dsh.Finish(dsh.FinishReason("error", failure))),
        reply("ok", usage=dsh.Usage(10, 2, cache_read_tokens=4)),
    )
    retried: list[int] = []

    async def retry_once(event: Any, next: Any) -> Any:
        if not retried:
            retried.append(event.step)
            return dsh.Retry()
        return await next()

    agent.scope.on("agent/request-error", retry_once, prepend=True)
    result = await agent.run(dsh.user_message("hi"))
    assert retried == [1]
    assert result.usage == dsh.Usage(17, 3, cache_read_tokens=4)
    assert result.text == "ok"


async def test_run_on_a_disposed_agent_raises(runtime: dsh.Runtime) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    await handle.dispose()
    with pytest.raises(dsh.AgentDisposedError):
        await handle.agent.run(dsh.user_message("hi"))
    with pytest.raises(dsh.AgentDisposedError):
        async with handle.agent.stream(dsh.user_message("hi")):
            pass  # pragma: no cover


async def test_run_during_disposal_fails_with_disposed_cancel(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    model.push(reply("ok"))
    held, release = trio.Event(), trio.Event()

    async def slow_to_stop(_event: Any) -> None:
        held.set()
        with trio.CancelScope(shield=True):  # keeps the drain waiting
            await release.wait()

    agent.scope.on("agent/turn-stopping", slow_to_stop)
    agent.followup(dsh.user_message("first"))
    async with trio.open_nursery() as nursery:
        await held.wait()
        nursery.start_soon(handle.dispose)
        await trio.testing.wait_all_tasks_blocked()  # draining: input parks
        with pytest.raises(dsh.TurnFailedError) as info:
            await agent.run(dsh.user_message("too late"))
        release.set()
    assert info.value.result.reason == dsh.Aborted(dsh.DisposedCancel())
    assert info.value.result.turn is None
    assert agent.disposed


async def test_run_checkpoints_and_queues_nothing_when_already_cancelled(
    agent: dsh.Agent,
) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await agent.run(dsh.user_message("hi"))
    assert scope.cancelled_caught
    assert not agent.inbox.has_pending
    assert agent.session.last_turn == 0


async def test_run_rejects_what_is_not_a_message(agent: dsh.Agent) -> None:
    with pytest.raises(TypeError, match="take a UserMessage or a str, got int"):
        await agent.run(42)  # type: ignore[arg-type]
