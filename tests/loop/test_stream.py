"""``Agent.stream``: the live text deltas and frames of one turn, and its result."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, gate, hang, reply

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


async def test_cancelling_the_stream_consumer_aborts_the_turn_with_user_cancel(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("partial"), after=2)  # block-start, the first delta, then hold
    model.push(g)
    seen: list[str] = []
    with trio.CancelScope() as scope:
        async with agent.stream("go") as turn:
            async for delta in turn.text():
                seen.append(delta)
                scope.cancel()
    assert scope.cancelled_caught
    g.release()  # a turn left running would now complete
    await agent.when_idle()
    assert seen == ["p"]
    assert agent.session.events[-1].data.reason == dsh.Aborted(dsh.UserCancel())


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


async def test_leaving_the_block_normally_lets_the_turn_run_on(
    agent: dsh.Agent, model: ScriptedModel
) -> None:
    g = gate(reply("done"))
    model.push(g)
    async with agent.stream("go") as turn:
        await g.wait_reached()
    g.release()
    await agent.when_idle()
    assert agent.session.events[-1].data.reason == dsh.Completed()
    with pytest.raises(RuntimeError, match="closed before the turn"):
        await turn.result()
    assert [d async for d in turn.text()] == []  # nothing was buffered after the block


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
