"""A cancel issued by a stream listener ends the attempt before the adapter is asked
for more, with the same events as a cancel that reaches a parked stream.

A listener of ``agent/assistant-stream`` runs inside the turn, between two chunks. When
it cancels the agent, the turn settles its interrupted prefix and ends ``Aborted`` at
once: the adapter is closed where it stopped (``GeneratorExit`` at its ``yield``) and
is never resumed into the cancelled scope, and no ``trio.Cancelled`` has to unwind the
driver's stack. The durable and live events are exactly those of a cancel that
arrives from another task while the stream waits after the same chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, StreamChunkFrame
from dsh_trio.llm import ModelRequest
from dsh_trio.loop._attempt import Attempts
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.values import TextChunksRecord

from .conftest import Tracer

TEXT = tuple("hello world")
REPLY: tuple[dsh.StreamChunk, ...] = (
    dsh.BlockStart(0, "text"),
    *(dsh.TextDelta(0, t) for t in TEXT),
    dsh.BlockEnd(0, dsh.TextBlock("".join(TEXT))),
    dsh.Usage(1, len(TEXT)),
    dsh.Finish(dsh.FinishReason("stop")),
)
OPTIONS = dsh.AgentOptions(provider="p", model="m")


class Adapter:
    """Streams :data:`REPLY` (a checkpoint before each chunk) and records how each
    stream ended; with ``park_after`` set, it waits for ever after that many chunks."""

    def __init__(self, park_after: int | None = None) -> None:
        self.park_after = park_after
        self.yielded = 0
        self.exits: list[type[BaseException] | None] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
        async def gen() -> AsyncIterator[dsh.StreamChunk]:
            try:
                for chunk in REPLY:
                    if self.yielded == self.park_after:
                        await trio.sleep_forever()
                    await trio.lowlevel.checkpoint()
                    self.yielded += 1
                    yield chunk
            except BaseException as exc:
                self.exits.append(type(exc))
                raise
            self.exits.append(None)

        return gen()


def _cancel_on(agent: dsh.Agent, chunk_index: int) -> Any:
    """A listener that cancels ``agent`` while showing the frame of chunk ``chunk_index``."""

    def on_frame(payload: AssistantStream) -> None:
        frame = payload.frame
        if isinstance(frame, StreamChunkFrame) and frame.index == chunk_index:
            agent.cancel(dsh.UserCancel())

    return on_frame


async def _listener_cancel(chunk_index: int) -> tuple[list[str], Adapter]:
    adapter = Adapter()
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent
        agent.scope.on("agent/assistant-stream", _cancel_on(agent, chunk_index))
        tracer = Tracer(runtime, frames=True)
        agent.followup(dsh.user_message("hi"))
        await agent.when_idle()
        lines = list(tracer.lines)
        await handle.dispose()
    return lines, adapter


async def _parked_cancel(chunk_index: int) -> tuple[list[str], Adapter]:
    adapter = Adapter(park_after=chunk_index + 1)
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent
        tracer = Tracer(runtime, frames=True)
        agent.followup(dsh.user_message("hi"))
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel(dsh.UserCancel())
        await agent.when_idle()
        lines = list(tracer.lines)
        await handle.dispose()
    return lines, adapter


@pytest.mark.parametrize(
    "chunk_index",
    [
        0,  # the block start (through the general chunk path)
        1,  # the first delta (it opens the text run)
        5,  # a delta the reader keeps itself (the common chunk)
        len(TEXT),  # the last delta
        len(TEXT) + 1,  # the block end
        len(TEXT) + 2,  # the usage
    ],
)
async def test_a_listener_cancel_ends_the_turn_as_a_parked_cancel_does(
    chunk_index: int,
) -> None:
    heard, adapter = await _listener_cancel(chunk_index)
    parked, _ = await _parked_cancel(chunk_index)
    assert heard == parked
    assert heard[-1] == "~status idle"
    assert any(line.endswith("turn/end 1 aborted user") for line in heard)
    # The adapter was not resumed after the chunk whose frame cancelled.
    assert adapter.yielded == chunk_index + 1
    assert adapter.exits == [GeneratorExit]


async def test_the_partial_reply_is_kept_and_no_cancelled_unwinds() -> None:
    adapter = Adapter()
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent
        agent.scope.on("agent/assistant-stream", _cancel_on(agent, 5))
        agent.followup(dsh.user_message("hi"))
        phase = agent._work.phase
        scope = phase.signal.scope
        await agent.when_idle()
        events = list(agent.session.events)
        await handle.dispose()
    # The turn's scope was cancelled, but nothing raised Cancelled inside it.
    assert scope.cancel_called
    assert not scope.cancelled_caught
    replies = [e.data for e in events if e.type == "assistant/message"]
    (data,) = replies
    assert data.interrupted is True
    assert data.message.content == (dsh.TextBlock("hello"),)
    # The deltas the reader kept before the cancel are recorded, as one run.
    runs = [r for r in data.stream if isinstance(r, TextChunksRecord)]
    assert [r.texts for r in runs] == [tuple("hello")]
    assert [e.type for e in events][-3:] == [
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    end = events[-1].data
    assert end.reason == dsh.Aborted(dsh.UserCancel())


async def test_a_tool_that_cancels_its_agent_ends_the_turn_after_its_result() -> None:
    @dsh.tool
    async def stop(ctx: dsh.ToolContext) -> str:
        """Cancel the agent and return."""
        ctx.agent.cancel(dsh.UserCancel())
        return "stopping"

    model = ScriptedModel(tool_calls(("c1", "stop", "{}")), reply("never"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[stop]) as runtime:
        handle = await runtime.agents.create(
            "a", options=dsh.AgentOptions(provider="scripted", model="m")
        )
        agent = handle.agent
        agent.followup(dsh.user_message("hi"))
        await agent.when_idle()
        events = list(agent.session.events)
        await handle.dispose()
    types = [e.type for e in events]
    assert types.count("step/start") == 1  # no second step after the cancel
    assert types[-3:] == ["tool/result", "step/end", "turn/end"]
    assert events[-1].data.reason == dsh.Aborted(dsh.UserCancel())
    assert len(model.requests) == 1


class _MyCancel(dsh.UserCancel):
    """A user's own cause: a subclass with nothing to add."""


class _WhyCancel(dsh.HookCancel):
    """A user's own hook cause: a subclass with a field of its own."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        object.__setattr__(self, "_detail", detail)


@pytest.mark.parametrize(
    ("cause", "recorded"),
    [
        (dsh.UserCancel(), dsh.UserCancel()),
        (dsh.HookCancel("budget"), dsh.HookCancel("budget")),
        (dsh.ParentCancel(), dsh.ParentCancel()),
        (_MyCancel(), dsh.UserCancel()),
        (_WhyCancel("budget", "over by 3"), dsh.HookCancel("budget")),
    ],
)
async def test_turn_end_records_the_cause_as_a_plain_library_value(
    cause: dsh.CancelCause, recorded: dsh.CancelCause
) -> None:
    """A library cause is recorded as given; a subclass as its library class."""
    adapter = Adapter()
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent

        def on_frame(payload: AssistantStream) -> None:
            frame = payload.frame
            if isinstance(frame, StreamChunkFrame) and frame.index == 3:
                # Something queued for the next turn is discarded by the cancel.
                agent.followup(dsh.user_message("later"))
                agent.cancel(cause)

        agent.scope.on("agent/assistant-stream", on_frame)
        agent.followup(dsh.user_message("hi"))
        await agent.when_idle()
        events = list(agent.session.events)
        pending = agent.inbox.has_pending
        await handle.dispose()
    reason = events[-1].data.reason
    assert reason == dsh.Aborted(recorded)
    assert type(reason.reason) is type(recorded)
    assert not pending
    # The discard is durable: the last splice removes "later" as canceled.
    splice = [e.data for e in events if e.type == "agent/inbox/spliced"][-1]
    assert (splice.target, splice.start, splice.removed_count, splice.outcome) == (
        dsh.InboxTarget.NEXT_TURN,
        0,
        1,
        "canceled",
    )


async def test_a_parked_cancel_ends_at_the_attempt_without_unwinding_the_driver() -> (
    None
):
    """``Cancelled`` from the turn's own cancel stops at the attempt that awaited the
    stream: the adapter sees it, the prefix is kept, the turn's scope catches nothing."""
    adapter = Adapter(park_after=4)
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent
        agent.followup(dsh.user_message("hi"))
        scope = agent._work.phase.signal.scope
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel(dsh.UserCancel())
        await agent.when_idle()
        events = list(agent.session.events)
        await handle.dispose()
    assert adapter.exits == [trio.Cancelled]
    assert scope.cancel_called
    assert not scope.cancelled_caught
    (data,) = [e.data for e in events if e.type == "assistant/message"]
    assert data.interrupted is True
    assert data.message.content == (dsh.TextBlock("hel"),)
    assert [e.type for e in events][-2:] == ["step/end", "turn/end"]
    assert events[-1].data.reason == dsh.Aborted(dsh.UserCancel())


async def _cancel_around_runtime(
    adapter: Adapter, cause: dsh.CancelCause | None
) -> list[dsh.SessionEvent]:
    """Park a turn's stream, cancel a scope around the runtime (after cancelling the
    agent with ``cause``, if given) and return the agent's events once it unwound."""
    sessions: list[dsh.Session] = []
    with trio.CancelScope() as outer:
        async with dsh.open_runtime(models={"p": adapter}) as runtime:
            handle = await runtime.agents.create("a", options=OPTIONS)
            agent = handle.agent
            sessions.append(agent.session)
            agent.followup(dsh.user_message("hi"))
            await trio.testing.wait_all_tasks_blocked()
            if cause is not None:
                agent.cancel(cause)
            outer.cancel()
            await trio.sleep_forever()  # the outer cancel arrives here
    assert outer.cancelled_caught
    return list(sessions[0].events)


async def test_an_outer_cancel_issued_with_the_agents_own_still_reaches_its_scope() -> (
    None
):
    """Ending the attempt on the turn's own cancel does not swallow a cancel of a scope
    around the runtime issued at the same time."""
    adapter = Adapter(park_after=4)
    events = await _cancel_around_runtime(adapter, dsh.UserCancel())
    assert adapter.exits == [trio.Cancelled]
    # The turn ended once, with the first cause, its prefix kept.
    ends = [e.data for e in events if e.type == "turn/end"]
    assert [(e.turn, e.reason) for e in ends] == [(1, dsh.Aborted(dsh.UserCancel()))]
    (data,) = [e.data for e in events if e.type == "assistant/message"]
    assert data.message.content == (dsh.TextBlock("hel"),)


@pytest.fixture
def attempt_outcomes(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What each attempt of the test returned, or the type it raised: every attempt
    ends in ``Attempts.finish``, on the fast lane as on the general path."""
    outcomes: list[object] = []
    run = Attempts.finish

    async def recorded(self: Attempts, *args: Any) -> Any:
        try:
            outcome = await run(self, *args)
        except BaseException as exc:
            outcomes.append(type(exc))
            raise
        outcomes.append(outcome)
        return outcome

    monkeypatch.setattr(Attempts, "finish", recorded)
    return outcomes


async def test_an_outer_cancel_alone_unwinds_through_the_attempt(
    attempt_outcomes: list[object],
) -> None:
    """A ``Cancelled`` that reaches a parked stream while the turn itself was not
    cancelled (a scope around the runtime) is not the turn's to end: the attempt
    raises it instead of returning as a cancelled attempt does, and the turn ends
    once, as a disposal, with the prefix kept."""
    adapter = Adapter(park_after=4)
    events = await _cancel_around_runtime(adapter, None)
    assert adapter.exits == [trio.Cancelled]
    assert attempt_outcomes == [trio.Cancelled]
    assert [e.type for e in events].count("step/start") == 1
    ends = [e.data for e in events if e.type == "turn/end"]
    assert [(e.turn, e.reason) for e in ends] == [
        (1, dsh.Aborted(dsh.DisposedCancel()))
    ]
    (data,) = [e.data for e in events if e.type == "assistant/message"]
    assert data.message.content == (dsh.TextBlock("hel"),)


async def test_the_turns_own_cancel_ends_the_attempt_without_raising(
    attempt_outcomes: list[object],
) -> None:
    """The counterpart: the turn's own cancel at a parked stream ends the attempt
    with ``None`` (its prefix settled), so no ``Cancelled`` leaves it."""
    adapter = Adapter(park_after=4)
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create("a", options=OPTIONS)
        agent = handle.agent
        agent.followup(dsh.user_message("hi"))
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel(dsh.UserCancel())
        await agent.when_idle()
        await handle.dispose()
    assert adapter.exits == [trio.Cancelled]
    assert attempt_outcomes == [None]
