"""A model attempt reads the adapter directly, by the rules of ``stream_model``.

For each adapter shape, the chunks the attempt records (and shows live) are exactly
the chunks ``stream_model`` yields for the same adapter, with the same warnings.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing

import attrs
import pytest
import trio

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, StreamChunkFrame
from dsh_trio.llm import ModelRequest, stream_model
from dsh_trio.session import expand_stream

from ..support import ChunkAdapter

Body = Callable[[], AsyncIterator[dsh.StreamChunk]]
STOP = dsh.Finish(dsh.FinishReason("stop"))


class Adapter:
    """Runs ``body`` for every request; remembers what ran after the finish."""

    def __init__(self, body: Body, *, fail_to_start: bool = False) -> None:
        self.body = body
        self.fail_to_start = fail_to_start
        self.after_finish = 0
        self.closed = 0

    def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
        if self.fail_to_start:
            raise ConnectionError("no route to host")
        return self.body()


def text(*parts: str) -> list[dsh.StreamChunk]:
    return [
        dsh.BlockStart(0, "text"),
        *(dsh.TextDelta(0, p) for p in parts),
        dsh.BlockEnd(0, dsh.TextBlock("".join(parts))),
        dsh.Usage(1, len(parts)),
    ]


def plain(holder: list[Adapter]) -> AsyncIterator[dsh.StreamChunk]:
    async def gen() -> AsyncIterator[dsh.StreamChunk]:
        try:
            for chunk in [*text("Hel", "lo"), STOP]:
                await trio.lowlevel.checkpoint()
                yield chunk
            holder[0].after_finish += 1
            yield dsh.TextDelta(0, "never read")
        finally:
            holder[0].closed += 1

    return gen()


def failing(holder: list[Adapter]) -> AsyncIterator[dsh.StreamChunk]:
    async def gen() -> AsyncIterator[dsh.StreamChunk]:
        for chunk in text("par", "tial")[:3]:
            await trio.lowlevel.checkpoint()
            yield chunk
        raise RuntimeError("connection reset") from OSError("peer gone")

    return gen()


def surrogates(holder: list[Adapter]) -> AsyncIterator[dsh.StreamChunk]:
    async def gen() -> AsyncIterator[dsh.StreamChunk]:
        for chunk in [*text("ok ", "bad \ud800", " caf\u00e9"), STOP]:
            await trio.lowlevel.checkpoint()
            yield chunk

    return gen()


def unfinished(holder: list[Adapter]) -> AsyncIterator[dsh.StreamChunk]:
    async def gen() -> AsyncIterator[dsh.StreamChunk]:
        for chunk in text("no", " finish"):
            await trio.lowlevel.checkpoint()
            yield chunk

    return gen()


SHAPES: dict[
    str, tuple[Callable[[list[Adapter]], AsyncIterator[dsh.StreamChunk]], bool]
] = {
    "plain, code after the finish": (plain, False),
    "fails mid-stream": (failing, False),
    "fails to start": (plain, True),
    "lone surrogates": (surrogates, False),
    "ends without a finish": (unfinished, False),
}


async def _via_stream_model(adapter: Adapter | None) -> list[dsh.StreamChunk]:
    request = ModelRequest(
        provider="p", model="m", messages=(), session_id=dsh.SessionId("s")
    )
    async with aclosing(stream_model(adapter, request)) as stream:
        return [chunk async for chunk in stream]


async def _via_attempt(
    adapter: Adapter | None,
) -> tuple[list[dsh.StreamChunk], list[dsh.StreamChunk]]:
    models = {} if adapter is None else {"p": adapter}
    async with dsh.open_runtime(models=models) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        agent = handle.agent
        live: list[dsh.StreamChunk] = []

        def on_frame(payload: AssistantStream) -> None:
            if isinstance(payload.frame, StreamChunkFrame):
                live.append(payload.frame.chunk)

        agent.scope.on("agent/assistant-stream", on_frame)
        await agent.run("hi", check=False)
        settled = [
            e
            for e in agent.session.events
            if e.type in ("assistant/message", "assistant/attempt")
        ]
        assert len(settled) == 1
        recorded = [chunk for _, chunk in expand_stream(settled[0].data.stream)]
        await handle.dispose()
    return recorded, live


@pytest.mark.parametrize("shape", list(SHAPES))
async def test_the_attempt_records_what_stream_model_yields(
    shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    make, fail_to_start = SHAPES[shape]
    runs: list[tuple[list[dsh.StreamChunk], int, int, list[str]]] = []
    for via in ("stream_model", "attempt"):
        holder: list[Adapter] = []
        adapter = Adapter(functools.partial(make, holder), fail_to_start=fail_to_start)
        holder.append(adapter)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="dsh_trio"):
            if via == "stream_model":
                chunks = await _via_stream_model(adapter)
            else:
                chunks, live = await _via_attempt(adapter)
                assert live == chunks
        warnings = [
            r.getMessage() for r in caplog.records if "repaired" in r.getMessage()
        ]
        runs.append((chunks, adapter.after_finish, adapter.closed, warnings))
    assert runs[0] == runs[1]
    chunks = runs[0][0]
    if shape == "plain, code after the finish":
        # Read up to the finish; the adapter's own cleanup ran once, nothing after it.
        assert chunks[-1] == STOP and runs[0][1:3] == (0, 1)
    if shape in ("fails mid-stream", "fails to start"):
        assert isinstance(chunks[-1], dsh.Finish)
        assert chunks[-1].reason.kind == "error"
    if shape == "lone surrogates":
        assert len(runs[0][3]) == 1


async def test_no_adapter_is_one_error_finish() -> None:
    expected = await _via_stream_model(None)
    recorded, live = await _via_attempt(None)
    assert recorded == live == expected
    assert isinstance(expected[0], dsh.Finish)
    assert expected[0].reason.failure is not None
    assert expected[0].reason.failure.code == "NO_ADAPTER"


async def test_chunk_frames_are_the_values_their_classes_build() -> None:
    """The attempt builds chunk frames without their ``__init__``: same values."""
    holder: list[Adapter] = []
    adapter = Adapter(functools.partial(plain, holder))
    holder.append(adapter)
    payloads: list[AssistantStream] = []
    async with dsh.open_runtime(models={"p": adapter}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        handle.agent.scope.on("agent/assistant-stream", payloads.append)
        await handle.agent.run("hi")
        agent = handle.agent
        await handle.dispose()
    chunk_payloads = [p for p in payloads if isinstance(p.frame, StreamChunkFrame)]
    assert len(chunk_payloads) == 6
    for k, payload in enumerate(chunk_payloads):
        frame = payload.frame
        assert isinstance(frame, StreamChunkFrame)
        rebuilt = StreamChunkFrame(
            frame.attempt_id, frame.revision, frame.index, frame.time, frame.chunk
        )
        assert frame == rebuilt and hash(frame) == hash(rebuilt)
        assert repr(frame) == repr(rebuilt)
        assert frame.index == k and payload.agent is agent
        assert attrs.asdict(payload, recurse=False) == {"agent": agent, "frame": frame}
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            frame.index = 99  # type: ignore[misc]


async def test_every_adapter_generator_is_left_finished_after_its_attempt() -> None:
    """A generator stopped at its final ``yield`` (the finish) is closed as the attempt
    settles, its cleanup run once, whether or not it has a handler."""
    reply = (*text("hi"), STOP)
    plain_adapter = ChunkAdapter(reply)
    closed: list[str] = []

    async def guarded() -> AsyncIterator[dsh.StreamChunk]:
        try:
            for chunk in reply:
                await trio.lowlevel.checkpoint()
                yield chunk
        finally:
            closed.append("finally")

    guarded_adapter = Adapter(guarded)
    for adapter in (plain_adapter, guarded_adapter):
        async with dsh.open_runtime(models={"p": adapter}) as runtime:
            handle = await runtime.agents.create(
                options=dsh.AgentOptions(provider="p", model="m")
            )
            for prompt in ("a", "b"):
                result = await handle.agent.run(prompt)
                assert result.text == "hi"
            await handle.dispose()
    assert [s.ag_frame for s in plain_adapter.streams] == [None, None]
    assert closed == ["finally", "finally"]
