"""The shortcuts of one model attempt are taken in the common case and change nothing.

A text delta that continues the open text run is kept by the reader and recorded in
one go; an agent keeps one emit target for the frames of all its attempts, renewed
as each opens; an adapter's async generator stopped at its final ``yield`` is closed
without a coroutine of its own; a reply of one closed block is that block.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, EventBus, StreamChunkFrame
from dsh_trio.llm import ModelRequest, _runtime
from dsh_trio.loop import _attempt
from dsh_trio.values import AssistantMessageData, TextChunksRecord

STOP = dsh.Finish(dsh.FinishReason("stop"))
TEXT = tuple("hello world")
REPLY: tuple[dsh.StreamChunk, ...] = (
    dsh.BlockStart(0, "text"),
    *(dsh.TextDelta(0, t) for t in TEXT),
    dsh.BlockEnd(0, dsh.TextBlock("".join(TEXT))),
    dsh.Usage(1, len(TEXT)),
    STOP,
)


class Adapter:
    """Streams ``chunks`` (a checkpoint before each) from a plain async generator."""

    def __init__(self, chunks: Sequence[dsh.StreamChunk] = REPLY) -> None:
        self.chunks = chunks
        self.streams: list[Any] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
        async def gen() -> AsyncIterator[dsh.StreamChunk]:
            for chunk in self.chunks:
                await trio.lowlevel.checkpoint()
                yield chunk

        stream = gen()
        self.streams.append(stream)
        return stream


async def _run_turns(
    adapter: Adapter, prompts: Sequence[str], *, listen: bool = True
) -> tuple[list[dsh.SessionEvent], list[AssistantStream]]:
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        heard: list[AssistantStream] = []
        if listen:
            handle.agent.scope.on("agent/assistant-stream", heard.append)
        for prompt in prompts:
            await handle.agent.run(prompt)
        events = list(handle.agent.session.events)
        await handle.dispose()
    return events, heard


def _replies(events: Sequence[dsh.SessionEvent]) -> list[AssistantMessageData]:
    return [e.data for e in events if isinstance(e.data, AssistantMessageData)]


async def test_text_deltas_of_the_open_run_skip_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[dsh.StreamChunk] = []
    take = _attempt._Attempt.take

    def counting(self: Any, chunk: dsh.StreamChunk) -> bool:
        taken.append(chunk)
        return take(self, chunk)

    monkeypatch.setattr(_attempt._Attempt, "take", counting)
    events, heard = await _run_turns(Adapter(), ["hi"])
    # The first delta opens the run; every later one is kept by the reader.
    assert taken == [REPLY[0], REPLY[1], *REPLY[-3:]]
    (data,) = _replies(events)
    runs = [r for r in data.stream if isinstance(r, TextChunksRecord)]
    assert [r.texts for r in runs] == [TEXT]
    chunks = [p.frame.chunk for p in heard if isinstance(p.frame, StreamChunkFrame)]
    assert chunks == list(REPLY)
    assert [p.frame.index for p in heard if isinstance(p.frame, StreamChunkFrame)] == [
        *range(len(REPLY))
    ]


async def test_a_cancel_from_a_chunk_listener_keeps_the_kept_texts() -> None:
    adapter = Adapter()
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        agent = handle.agent
        seen: list[str] = []

        def on_frame(payload: AssistantStream) -> None:
            frame = payload.frame
            if isinstance(frame, StreamChunkFrame) and isinstance(
                frame.chunk, dsh.TextDelta
            ):
                seen.append(frame.chunk.text)
                if len(seen) == 5:
                    agent.cancel(dsh.UserCancel())

        agent.scope.on("agent/assistant-stream", on_frame)
        agent.followup(dsh.user_message("hi"))
        await agent.when_idle()
        (data,) = _replies(agent.session.events)
        await handle.dispose()
    assert data.interrupted is True
    assert data.message.content == (dsh.TextBlock("hello"),)
    runs = [r for r in data.stream if isinstance(r, TextChunksRecord)]
    assert [r.texts for r in runs] == [tuple("hello")]


async def test_one_emit_target_serves_every_attempt_of_an_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[object] = []
    target = EventBus._target

    def counting(self: EventBus, name: str, scope: object) -> Any:
        made.append(scope)
        return target(self, name, scope)

    monkeypatch.setattr(EventBus, "_target", counting)
    events, heard = await _run_turns(Adapter(), ["a", "b", "c"])
    assert len(made) == 1
    assert len(_replies(events)) == 3
    revisions = [p.frame.revision for p in heard]
    assert revisions == list(range(1, 3 * (len(REPLY) + 2) + 1))


async def test_a_renewed_target_hears_listeners_added_between_attempts() -> None:
    adapter = Adapter()
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        agent = handle.agent
        first: list[AssistantStream] = []
        second: list[AssistantStream] = []
        dispose = agent.scope.on("agent/assistant-stream", first.append)
        await agent.run("a")
        agent.scope.on("agent/assistant-stream", second.append)
        dispose()
        await agent.run("b")
        await handle.dispose()
    assert len(first) == len(second) == len(REPLY) + 2
    assert first[0].frame.attempt_id != second[0].frame.attempt_id


class Node:
    def __init__(self, parent: Node | None = None) -> None:
        self.parent = parent


def test_renew_reads_the_owner_chain_again() -> None:
    bus = EventBus(parent_of=lambda s: s.parent if isinstance(s, Node) else None)
    old, new = Node(), Node()
    scope = Node(old)
    bus.on("agent/assistant-stream", lambda p: None, scope=old)
    target = bus._target("agent/assistant-stream", scope)
    assert len(target.current()) == 1
    assert len(target.renew()) == 1
    scope.parent = new
    assert len(target.current()) == 1  # within a span the chain is not read
    assert target.renew() == ()
    scope.parent = old
    assert len(target.renew()) == 1


async def test_a_generator_at_its_final_yield_closes_without_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def refuse(*args: object) -> None:
        raise AssertionError("the general close ran")

    monkeypatch.setattr(_runtime, "_close", refuse)
    adapter = Adapter()
    events, _ = await _run_turns(adapter, ["a", "b"])
    assert len(_replies(events)) == 2
    assert [s.ag_frame for s in adapter.streams] == [None, None]


async def test_a_generator_with_a_handler_still_runs_it_when_closed() -> None:
    closed: list[str] = []

    class Guarded(Adapter):
        def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
            async def gen() -> AsyncIterator[dsh.StreamChunk]:
                try:
                    for chunk in self.chunks:
                        await trio.lowlevel.checkpoint()
                        yield chunk
                finally:
                    closed.append("finally")

            return gen()

    events, _ = await _run_turns(Guarded(), ["a"])
    assert closed == ["finally"]
    assert len(_replies(events)) == 1


async def test_a_reply_of_one_closed_block_is_that_block() -> None:
    adapter = Adapter()
    events, _ = await _run_turns(adapter, ["a"], listen=False)
    (data,) = _replies(events)
    assert data.message.content == (REPLY[-3].block,)
    assert data.message.content[0] is REPLY[-3].block
