"""Invalid Unicode from a model stream is repaired (U+FFFD) and noted, never an error.

JSON lets a server send a lone surrogate (``"\\ud800"``) or split an emoji's surrogate
pair across two events; UTF-8 can encode neither half alone, and the session only
stores valid text. The adapter joins split pairs and repairs the rest; ``stream_model``
repairs what any other adapter yields.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import given, strategies as st

import dsh_trio as dsh
from dsh_trio.llm import OpenAICompatibleAdapter, stream_model
from dsh_trio.llm._runtime import ModelStream
from dsh_trio.testing import ScriptedModel, chunks
from dsh_trio.values import (
    AssistantMessageData,
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    TurnEnd,
)

from ..support import ChunkAdapter, make_request

URL = "https://llm.test/v1"
EMOJI = "\U0001f600"
HIGH, LOW = "\ud83d", "\ude00"  # EMOJI's two UTF-16 halves


def raw_event(payload: str) -> bytes:
    """One SSE event whose JSON is written as is (``\\ud800`` escapes stay escapes)."""
    return b"data: " + payload.encode() + b"\n\n"


def content(text_json: str, field: str = "content") -> bytes:
    return raw_event(
        '{"choices":[{"index":0,"delta":{"' + field + '":"' + text_json + '"}}]}'
    )


STOP = raw_event('{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
DONE = b"data: [DONE]\n\n"

# An emoji split across two events, as its two JSON escapes.
SPLIT_EMOJI = content("hi \\ud83d") + content("\\ude00 there") + STOP + DONE
# A lone surrogate escape, valid JSON, invalid Unicode.
LONE = content("a\\ud800b") + STOP + DONE


def serve(
    *bodies: bytes,
) -> tuple[Callable[[httpx.Request], httpx.Response], list[bytes]]:
    """A server answering with ``bodies`` in turn; it records every request body."""
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, content=bodies[min(len(seen), len(bodies)) - 1])

    return handler, seen


async def collect(body: bytes) -> list[StreamChunk]:
    handler, _ = serve(body)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client)
        return [c async for c in adapter.stream(make_request())]


async def test_an_emoji_split_across_two_events_is_joined(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    assert await collect(SPLIT_EMOJI) == [
        BlockStart(0, "text"),
        TextDelta(0, "hi "),  # the high half waits for its partner
        TextDelta(0, f"{EMOJI} there"),
        BlockEnd(0, TextBlock(f"hi {EMOJI} there")),
        Finish(FinishReason("stop")),
    ]
    assert caplog.records == []  # nothing needed repair


async def test_a_lone_surrogate_is_replaced_and_noted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    got = await collect(LONE)
    assert got == [
        BlockStart(0, "text"),
        TextDelta(0, "a\ufffdb"),
        BlockEnd(0, TextBlock("a\ufffdb")),
        Finish(FinishReason("stop")),
    ]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "1 code point(s) that are not valid Unicode" in record.getMessage()
    assert f"{URL}/chat/completions" in record.getMessage()


async def test_a_high_half_at_the_end_of_the_stream_is_replaced() -> None:
    got = await collect(content("end \\ud83d", "reasoning_content") + STOP + DONE)
    assert got == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "end "),
        ReasoningDelta(0, "\ufffd"),  # decided when the stream ended
        BlockEnd(0, ReasoningBlock("end \ufffd")),
        Finish(FinishReason("stop")),
    ]


async def test_tool_calls_and_failures_are_repaired() -> None:
    call = (
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c\\udc00",'
        '"function":{"name":"f\\ud800","arguments":"{\\"k\\": \\"\\ud83d"}}]}}]}'
    )
    rest = (
        '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        '"function":{"arguments":"\\ude00\\"}"}}]},"finish_reason":"tool_calls"}]}'
    )
    got = await collect(raw_event(call) + raw_event(rest) + DONE)
    end = [c for c in got if isinstance(c, BlockEnd)]
    assert end == [
        BlockEnd(0, ToolCallBlock("c\ufffd", "f\ufffd", f'{{"k": "{EMOJI}"}}'))
    ]
    handler, _ = serve(raw_event('{"error": {"message": "bad \\udfff"}}'))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client)
        with pytest.raises(dsh.LlmError) as info:
            async for _ in adapter.stream(make_request()):
                pass
    assert info.value.failure.message == "bad \ufffd"


async def test_stream_model_repairs_any_adapter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    model = ScriptedModel(
        chunks(
            TextDelta(0, "x\ud800"),
            ReasoningDelta(1, "\udc00"),
            ToolCallDelta(2, "i\ud800", "n\ud800", "a\ud800"),
            BlockEnd(0, TextBlock("x\ud800")),
            BlockEnd(2, ToolCallBlock("i\ud800", "n\ud800", "a\ud800")),
            Finish(
                FinishReason(
                    "error", LlmFailure("m\ud800", "C\ud800", request_id="r\ud800")
                )
            ),
        )
    )
    got = [c async for c in stream_model(model, make_request())]
    r = "\ufffd"
    assert got == [
        TextDelta(0, f"x{r}"),
        ReasoningDelta(1, r),
        ToolCallDelta(2, f"i{r}", f"n{r}", f"a{r}"),
        BlockEnd(0, TextBlock(f"x{r}")),
        BlockEnd(2, ToolCallBlock(f"i{r}", f"n{r}", f"a{r}")),
        Finish(FinishReason("error", LlmFailure(f"m{r}", f"C{r}", request_id=f"r{r}"))),
    ]
    (record,) = caplog.records
    assert "6 chunk(s) were repaired" in record.getMessage()


async def test_valid_chunks_pass_stream_model_as_the_same_objects() -> None:
    items = (
        TextDelta(0, "h\u00e9"),
        BlockEnd(0, TextBlock("h\u00e9")),
        Finish(FinishReason("stop")),
    )
    got = [c async for c in stream_model(ScriptedModel(chunks(*items)), make_request())]
    assert all(a is b for a, b in zip(got, items, strict=True))


def assert_utf8_logs(root: Path) -> None:
    (log,) = root.rglob("session.v3.jsonl")
    log.read_bytes().decode("utf-8")  # strict: raises on anything UTF-8 cannot be


@pytest.mark.parametrize("body", [SPLIT_EMOJI, LONE], ids=["split-emoji", "lone"])
async def test_the_turn_completes_and_the_next_request_is_well_formed(
    body: bytes, tmp_path: Path
) -> None:
    second = content("fine") + STOP + DONE
    handler, seen = serve(body, second)
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client)
        persistence = dsh.JsonlPersistence(tmp_path)
        async with dsh.open_runtime(
            models={"p": adapter}, persistence=persistence
        ) as runtime:
            async with runtime.agents.open(
                options=dsh.AgentOptions(provider="p", model="m")
            ) as agent:
                for text in ("one", "two"):
                    agent.followup(dsh.user_message(text))
                    await agent.when_idle()
                ends = [
                    e.data for e in agent.session.events if isinstance(e.data, TurnEnd)
                ]
                session_id = agent.id
                await agent.flush()
    assert ends == [TurnEnd(1, dsh.Completed()), TurnEnd(2, dsh.Completed())]
    # The next request carries the repaired reply: valid UTF-8, valid JSON.
    wire = json.loads(seen[1].decode("utf-8"))
    replies = [m["content"] for m in wire["messages"] if m["role"] == "assistant"]
    expected = f"hi {EMOJI} there" if body is SPLIT_EMOJI else "a\ufffdb"
    assert replies == [expected]
    # The log on disk is valid UTF-8 and loads back with the same text.
    assert_utf8_logs(tmp_path)
    reader, events = await dsh.JsonlPersistence(tmp_path).open(session_id)
    await reader.close()
    stored = [
        block.text
        for e in events
        if e.type == "assistant/message"
        for block in e.data_as(AssistantMessageData).message.content
        if isinstance(block, TextBlock)
    ]
    assert stored[0] == expected


# --------------------------------------------------------------------------- the attempt's check


class Text(str):
    """A ``str`` subclass: never taken for a plain ``str``."""


def _texts() -> st.SearchStrategy[Any]:
    plain = st.text(st.characters(max_codepoint=127), max_size=4)
    wide = st.text(max_size=4)  # any code point but a lone surrogate
    # Text UTF-8 cannot encode (lone surrogates), which the repair replaces.
    broken = st.sampled_from(["\ud800", "x\udfffy", "caf\u00e9\udc80"])
    return st.one_of(plain, wide, broken, st.one_of(plain, broken).map(Text))


def _chunks() -> st.SearchStrategy[Any]:
    text = _texts()
    failure = st.builds(dsh.LlmFailure, text, text, st.none() | text)
    block = st.one_of(
        st.builds(dsh.TextBlock, text),
        st.builds(dsh.ReasoningBlock, text),
        st.builds(dsh.ToolCallBlock, text, text, text),
    )
    return st.one_of(
        st.builds(dsh.BlockStart, st.integers(0, 3), text),
        st.builds(dsh.TextDelta, st.integers(0, 3), text),
        st.builds(dsh.ReasoningDelta, st.integers(0, 3), text),
        st.builds(dsh.ToolCallDelta, st.integers(0, 3), text, st.none() | text, text),
        st.builds(dsh.BlockEnd, st.integers(0, 3), block),
        st.builds(dsh.Usage, st.integers(0, 9), st.integers(0, 9)),
        st.builds(dsh.Finish, st.builds(dsh.FinishReason, st.just("stop"))),
        st.builds(dsh.Finish, st.builds(dsh.FinishReason, st.just("error"), failure)),
    )


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def _read_both(chunk: StreamChunk) -> tuple[Any, ...]:
    """What ``stream_model`` yields for ``chunk`` and what ``ModelStream.checked``
    gives, each with the warnings its stream logs when it ends."""
    handler = _Warnings()
    logger = logging.getLogger("dsh_trio")
    logger.addHandler(handler)
    try:
        request = make_request()
        (expected,) = [c async for c in stream_model(ChunkAdapter([chunk]), request)]
        expected_warnings, handler.messages = handler.messages, []
        stream = ModelStream(ChunkAdapter([chunk]), request)
        got = stream.checked(chunk)
        await stream.aclose()
    finally:
        logger.removeHandler(handler)
    return expected, expected_warnings, got, handler.messages


@given(_chunks())
def test_the_attempt_checks_a_chunk_as_stream_model_does(chunk: Any) -> None:
    """The model attempt's own reading (``ModelStream.checked``) repairs exactly what
    ``stream_model`` repairs, keeps the same object otherwise, and warns the same."""
    expected, expected_warnings, got, warnings = trio.run(_read_both, chunk)
    assert got == expected
    assert (got is chunk) == (expected is chunk)
    assert warnings == expected_warnings
