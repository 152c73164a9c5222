"""A model attempt extends its stream record and its blocks directly for the common
text delta; whatever the chunk order, the settled event equals what the plain
``StreamAccumulator`` and ``BlockAssembler`` make of the same chunks."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, EventBus, StreamChunkFrame
from dsh_trio.llm import BlockAssembler
from dsh_trio.session import StreamAccumulator, expand_stream
from dsh_trio.values import AssistantMessageData, TextChunksRecord

from ..support import ChunkAdapter

STOP = dsh.Finish(dsh.FinishReason("stop"))
TEXTS = ("a", "bc", " ", "caf\u00e9", "")


def _chunk() -> st.SearchStrategy[dsh.StreamChunk]:
    index = st.sampled_from((0, 1, 300))
    text = st.sampled_from(TEXTS)
    return st.one_of(
        st.builds(dsh.TextDelta, index, text),
        st.builds(dsh.TextDelta, index, text),
        st.builds(dsh.ReasoningDelta, index, text),
        st.builds(dsh.BlockStart, index, st.sampled_from(("text", "reasoning"))),
        st.builds(
            dsh.BlockEnd,
            index,
            st.one_of(
                st.builds(dsh.TextBlock, text), st.builds(dsh.ReasoningBlock, text)
            ),
        ),
        st.builds(dsh.Usage, st.integers(0, 5), st.integers(0, 5)),
    )


async def _settle(
    chunks: Sequence[dsh.StreamChunk],
) -> tuple[dsh.SessionEvent, list[dsh.StreamChunk]]:
    async with dsh.open_runtime(models={"p": ChunkAdapter((*chunks, STOP))}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        live: list[dsh.StreamChunk] = []

        def on_frame(payload: AssistantStream) -> None:
            if isinstance(payload.frame, StreamChunkFrame):
                live.append(payload.frame.chunk)

        handle.agent.scope.on("agent/assistant-stream", on_frame)
        await handle.agent.run("hi", check=False)
        settled = [
            e
            for e in handle.agent.session.events
            if e.type in ("assistant/message", "assistant/attempt")
        ]
        await handle.dispose()
    assert len(settled) == 1
    return settled[0], live


def _check(chunks: Sequence[dsh.StreamChunk]) -> None:
    event, live = trio.run(_settle, chunks)
    data = event.data
    pairs = expand_stream(data.stream)
    assert [chunk for _, chunk in pairs] == live == [*chunks, STOP]
    records = StreamAccumulator()
    assembler = BlockAssembler()
    for time_ms, chunk in pairs:
        records.push(chunk, time_ms)
        assembler.push(chunk)
    assert data.stream == records.records()
    if isinstance(data, AssistantMessageData):
        assert data.message.content == assembler.blocks()
    else:
        assert not assembler.blocks()


def test_text_deltas_of_one_open_block_settle_as_one_run() -> None:
    chunks: list[dsh.StreamChunk] = [
        dsh.BlockStart(0, "text"),
        *(dsh.TextDelta(0, t) for t in "hello"),
    ]
    event, _ = trio.run(_settle, chunks)
    assert isinstance(event.data, AssistantMessageData)
    assert event.data.message.content == (dsh.TextBlock("hello"),)
    text_runs = [r for r in event.data.stream if isinstance(r, TextChunksRecord)]
    assert [r.texts for r in text_runs] == [tuple("hello")]


async def test_a_reply_of_one_closed_block_is_that_block() -> None:
    block = dsh.TextBlock("hello")
    chunks: list[dsh.StreamChunk] = [
        dsh.BlockStart(0, "text"),
        dsh.TextDelta(0, "hello"),
        dsh.BlockEnd(0, block),
    ]
    event, _ = await _settle(chunks)
    assert isinstance(event.data, AssistantMessageData)
    assert event.data.message.content == (block,)


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(_chunk(), max_size=12))
# A delta after its block's end is ignored by the blocks, kept by the record.
@example(
    [dsh.TextDelta(0, "a"), dsh.BlockEnd(0, dsh.TextBlock("x")), dsh.TextDelta(0, "b")]
)
# Runs of two blocks interleave; a reasoning delta of a text block is ignored.
@example([dsh.TextDelta(0, "a"), dsh.TextDelta(1, "b"), dsh.TextDelta(0, "c")])
@example([dsh.BlockStart(0, "reasoning"), dsh.TextDelta(0, "a"), dsh.TextDelta(0, "b")])
# A non-ASCII delta and one after a raw chunk continue the block, not the run.
@example([dsh.TextDelta(0, "a"), dsh.TextDelta(0, "caf\u00e9"), dsh.TextDelta(0, "b")])
@example([dsh.TextDelta(0, "a"), dsh.Usage(1, 1), dsh.TextDelta(0, "b")])
@example([dsh.TextDelta(300, "a"), dsh.TextDelta(300, "b")])
def test_any_chunk_order_settles_as_the_plain_accumulators_do(
    chunks: list[dsh.StreamChunk],
) -> None:
    _check(chunks)


async def test_a_failing_chunk_listener_is_logged_and_the_rest_still_hear(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[dsh.StreamChunk] = []

    def boom(payload: AssistantStream) -> None:
        if isinstance(payload.frame, StreamChunkFrame):
            raise RuntimeError("boom")

    def misfire(payload: AssistantStream) -> object:
        async def later() -> None:
            pass

        return later() if isinstance(payload.frame, StreamChunkFrame) else None

    def keep(payload: AssistantStream) -> None:
        if isinstance(payload.frame, StreamChunkFrame):
            heard.append(payload.frame.chunk)

    chunks = [dsh.TextDelta(0, "a"), dsh.TextDelta(0, "b")]
    async with dsh.open_runtime(models={"p": ChunkAdapter((*chunks, STOP))}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        for listener in (boom, misfire, keep):
            handle.agent.scope.on("agent/assistant-stream", listener)
        with caplog.at_level(logging.ERROR, logger="dsh_trio"):
            result = await handle.agent.run("hi")
        await handle.dispose()
    assert heard == [*chunks, STOP]
    assert result.text == "ab"
    raised = 'listener of event "agent/assistant-stream" raised'
    misfired = 'listener of emit event "agent/assistant-stream" returned an awaitable'
    assert caplog.text.count(raised) == 3
    assert caplog.text.count(misfired) == 3


def test_listened_is_a_live_read_only_view_of_the_names_heard() -> None:
    bus = EventBus()
    assert "x" not in bus.listened
    dispose = bus.on("x", lambda p: None)
    assert "x" in bus.listened and bus.has_listeners("x")
    dispose()
    assert "x" not in bus.listened
    with pytest.raises(TypeError):
        bus.listened["x"] = ()  # type: ignore[index]
