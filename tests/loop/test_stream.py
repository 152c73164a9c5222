"""``Agent.stream``: the live text deltas and frames of one turn, and its result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import attrs
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import (
    Gate,
    ScriptedModel,
    custom,
    gate,
    hang,
    reply,
    tool_calls,
)
from dsh_trio.values import TurnEnd

from .conftest import OPTIONS


def _without_ids(result: dsh.TurnResult) -> dsh.TurnResult:
    """The result with message ids blanked: two runs of one script mint different ids."""
    return attrs.evolve(
        result,
        messages=tuple(attrs.evolve(m, id=dsh.MessageId("")) for m in result.messages),
    )


async def test_stream_yields_the_deltas_in_order_and_the_result_run_returns(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    text = "Hello, trio!"
    model.push(reply(text), reply(text))
    ran = (await runtime.agents.create(options=OPTIONS)).agent
    streamed = (await runtime.agents.create(options=OPTIONS)).agent
    expected = await ran.run(dsh.user_message("hi"))
    async with streamed.stream(dsh.user_message("hi")) as turn:
        assert turn.turn == 1  # an idle agent claims the message on entry
        deltas = [delta async for delta in turn.text()]
        result = await turn.result()
    assert deltas == list(text)  # one delta per character, in order
    assert _without_ids(result) == _without_ids(expected)
    assert result.text == text
    assert await turn.result() == result  # idempotent, also after the block


async def test_frames_are_every_live_frame_of_that_turn_only(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("other"))
    model.push(g, reply("mine", chunks=2))
    agent.followup(dsh.user_message("first"))  # turn 1 streams before ours
    await g.wait_reached()
    async with agent.stream("second") as turn:
        assert turn.turn is None  # queued behind turn 1
        g.release()
        frames = [frame async for frame in turn.frames()]
        texts = [delta async for delta in turn.text()]  # each iterator starts over
        result = await turn.result()
    assert (turn.turn, result.text, texts) == (2, "mine", ["mi", "ne"])
    start, *middle, end = frames
    assert isinstance(start, dsh.StreamStartFrame) and start.turn == 2
    assert [type(f.chunk) for f in middle] == [
        dsh.BlockStart,
        dsh.TextDelta,
        dsh.TextDelta,
        dsh.BlockEnd,
        dsh.Usage,
        dsh.Finish,
    ]
    assert isinstance(end, dsh.StreamEndFrame)
    assert isinstance(end.outcome, dsh.Committed)
    assert {f.attempt_id for f in frames} == {start.attempt_id}


async def test_a_consumer_that_stops_reading_never_holds_the_turn_up(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    # The buffer is unbounded: 5,000 frames pile up unread while the turn runs on.
    text = "x" * 5000
    model.push(reply(text))
    async with agent.stream("long") as turn:
        await agent.when_idle()  # the whole turn ran; nothing was read
        assert agent.session.events[-1].type == "turn/end"
        deltas = [delta async for delta in turn.text()]
        result = await turn.result()
    assert "".join(deltas) == text
    assert result.reason == dsh.Completed()


async def test_an_aborted_streamed_turn_raises_from_result(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(hang("partial"))
    async with agent.stream("go") as turn:
        async for _ in turn.text():
            agent.cancel(dsh.HookCancel("enough"))
        with pytest.raises(dsh.TurnFailedError) as info:
            await turn.result()
        unchecked = await turn.result(check=False)
    assert info.value.result == unchecked
    assert unchecked.reason == dsh.Aborted(dsh.HookCancel("enough"))
    assert unchecked.text == "partial"


class Counted:
    """A scripted reply whose every chunk read by the turn is counted.

    ``gate`` holds the reply after its first three chunks (block start, "a", "b"):
    once it is reached, the turn has read "ab".
    """

    def __init__(self, text: str = "abcdef") -> None:
        self.pulled: list[dsh.StreamChunk] = []
        self.closed = False
        inner = reply(text)

        async def counting(request: dsh.ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
            try:
                async with aclosing(inner.stream(request)) as chunks:
                    async for chunk in chunks:
                        self.pulled.append(chunk)
                        yield chunk
            finally:
                self.closed = True

        self.gate: Gate = gate(custom(counting), after=3)


async def _assert_stopped(agent: dsh.Agent, counted: Counted) -> None:
    """The turn the block left is over: Aborted(UserCancel()), its partial reply kept,
    and the model's stream closed; releasing the gate reads nothing more."""
    events = agent.session.events
    ends = [e.data for e in events if e.type == "turn/end"]
    assert ends == [TurnEnd(1, dsh.Aborted(dsh.UserCancel()))]
    (kept,) = [e.data for e in events if e.type == "assistant/message"]
    assert (dsh.text_of(kept.message), kept.interrupted) == ("ab", True)
    assert counted.closed
    read = len(counted.pulled)
    assert read == 3
    counted.gate.release()  # a turn left running would now read the rest
    await trio.testing.wait_all_tasks_blocked()
    assert len(counted.pulled) == read
    assert agent.session.events == events
    assert agent.status is dsh.AgentStatus.IDLE


async def test_breaking_out_of_the_text_stops_the_turn_before_the_block_exits(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    counted = Counted()
    model.push(counted.gate)
    async with agent.stream("go") as turn:
        await counted.gate.wait_reached()
        async for delta in turn.text():
            assert delta == "a"
            break
    assert agent.status is dsh.AgentStatus.IDLE  # checked before any checkpoint
    await _assert_stopped(agent, counted)
    result = await turn.result(check=False)  # the block followed the turn to its end
    assert (result.reason, result.text) == (dsh.Aborted(dsh.UserCancel()), "ab")


async def test_an_exception_leaving_the_block_stops_the_turn_and_propagates_as_is(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    counted = Counted()
    model.push(counted.gate)
    raised = KeyError("the consumer failed")
    with pytest.raises(KeyError) as info:
        async with agent.stream("go") as turn:
            await counted.gate.wait_reached()
            async for _ in turn.text():
                raise raised
    assert agent.status is dsh.AgentStatus.IDLE
    assert info.value is raised
    assert raised.__context__ is None and raised.__cause__ is None
    await _assert_stopped(agent, counted)


async def test_cancelling_the_caller_stops_the_turn_and_the_cancel_propagates_as_is(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    counted = Counted()
    model.push(counted.gate)
    seen: list[str] = []
    inner: list[trio.Cancelled] = []
    with trio.CancelScope() as scope:
        try:
            async with agent.stream("go") as turn:
                await counted.gate.wait_reached()
                try:
                    async for delta in turn.text():
                        seen.append(delta)
                        scope.cancel()  # the next delta's checkpoint raises
                except trio.Cancelled as exc:
                    inner.append(exc)
                    raise
        except trio.Cancelled as exc:
            assert agent.status is dsh.AgentStatus.IDLE
            assert [exc] == inner  # the same Cancelled, unwrapped and unchained
            assert exc.__context__ is None and exc.__cause__ is None
            raise
    assert scope.cancelled_caught
    assert seen == ["a"]
    await _assert_stopped(agent, counted)


@pytest.mark.parametrize("call", ["run", "stream"])
async def test_a_cancelled_caller_waits_shielded_for_the_turn_to_wind_down(
    model: ScriptedModel, call: str
) -> None:
    # A tool that shields its cleanup keeps the cancelled turn going: the caller's
    # Cancelled still leaves only once the turn has ended, for run() as for stream().
    in_tool, released = trio.Event(), trio.Event()

    @dsh.tool
    async def stubborn(ctx: dsh.ToolContext) -> str:
        """Finish whatever happens."""
        in_tool.set()
        with trio.CancelScope(shield=True):
            await released.wait()
        return "finished"

    async def release_once_all_wait() -> None:
        await in_tool.wait()
        await trio.testing.wait_all_tasks_blocked()  # the caller waits, shielded
        released.set()

    model.push(tool_calls(("c1", "stubborn", "{}")), reply("never asked for"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[stubborn]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(release_once_all_wait)
                try:
                    with trio.CancelScope() as scope:
                        if call == "run":
                            nursery.start_soon(_cancel_when_set, in_tool, scope)
                            await agent.run("go")
                        else:
                            async with agent.stream("go"):
                                await in_tool.wait()
                                scope.cancel()
                                await trio.lowlevel.checkpoint()
                    assert scope.cancelled_caught
                    assert released.is_set()
                    assert agent.status is dsh.AgentStatus.IDLE
                finally:
                    released.set()  # a failed check must not leave the tool waiting
            events = agent.session.events
            assert events[-1].data == TurnEnd(1, dsh.Aborted(dsh.UserCancel()))
            assert "tool/result" in [e.type for e in events]
            assert model.remaining == 1  # no second request


async def _cancel_when_set(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def test_detach_lets_the_turn_run_on_after_the_block(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    counted = Counted()
    model.push(counted.gate)
    async with agent.stream("go", detach=True) as turn:
        await counted.gate.wait_reached()
        async for delta in turn.text():
            assert delta == "a"
            break
    assert agent.status is dsh.AgentStatus.RUNNING
    counted.gate.release()
    await agent.when_idle()
    ends = [e.data for e in agent.session.events if e.type == "turn/end"]
    assert ends == [TurnEnd(1, dsh.Completed())]
    (kept,) = [e.data for e in agent.session.events if e.type == "assistant/message"]
    assert dsh.text_of(kept.message) == "abcdef" and not kept.interrupted
    with pytest.raises(RuntimeError, match="closed before the turn"):
        await turn.result()
    assert [d async for d in turn.text()] == ["a", "b"]  # nothing buffered after


async def test_detach_lets_the_turn_run_on_after_an_exception_too(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("done"))
    with pytest.raises(KeyError):
        async with agent.stream("go", detach=True):
            raise KeyError("the consumer failed")
    await agent.when_idle()
    assert agent.session.events[-1].data == TurnEnd(1, dsh.Completed())


async def test_detach_must_be_a_bool(agent: dsh.Agent) -> None:
    with pytest.raises(TypeError, match="detach=True or detach=False, got 1"):
        agent.stream("go", detach=1)  # type: ignore[arg-type]


async def test_leaving_the_block_after_the_turn_ended_does_nothing(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("next"))
    model.push(reply("mine"), g)
    async with agent.stream("go") as turn:
        result = await turn.result()
        agent.followup(dsh.user_message("someone else's"))  # turn 2, not ours
        await g.wait_reached()
        before = list(agent.session.events)
    assert result.reason == dsh.Completed()
    assert agent.session.events == before  # nothing cancelled, nothing appended
    assert agent.status is dsh.AgentStatus.RUNNING
    g.release()
    await agent.when_idle()
    assert agent.session.events[-1].data == TurnEnd(2, dsh.Completed())


async def test_leaving_the_block_before_the_claim_removes_the_message(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate()
    model.push(g)
    agent.followup(dsh.user_message("first"))
    with pytest.raises(KeyError):
        async with agent.stream("mine"):
            assert [dsh.text_of(m) for m in agent.inbox.next_turn] == ["mine"]
            raise KeyError("consumer failed")
    assert agent.inbox.next_turn == ()
    g.release()
    await agent.when_idle()
    assert agent.session.last_turn == 1


async def test_a_stream_context_is_entered_once(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("a"))
    context = agent.stream("once")
    async with context:
        pass
    with pytest.raises(RuntimeError, match="entered only once"):
        async with context:
            pass  # pragma: no cover
    await agent.when_idle()


async def test_no_frame_listener_is_left_behind(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    model.push(reply("a"))
    async with agent.stream("x") as turn:
        await turn.result()
    assert not runtime.events.has_listeners("agent/assistant-stream")


async def test_frames_of_a_child_agent_are_not_the_parents(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("parent"))
    model.push(g, reply("child"))
    child = (await runtime.agents.create(options=OPTIONS, parent=agent)).agent
    async with agent.stream("p") as turn:
        await g.wait_reached()
        assert (await child.run("c")).text == "child"  # also turn 1, of another agent
        g.release()
        texts = [delta async for delta in turn.text()]
        frames = [frame async for frame in turn.frames()]
    assert "".join(texts) == "parent"
    assert {f.attempt_id for f in frames} == {f"{agent.id}:1"}
