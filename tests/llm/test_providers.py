"""Recorded stream shapes of real providers, replayed through OpenAICompatibleAdapter.

Each fixture in ``fixtures/`` is the SSE body one provider sends for one case, written
from the shapes its documentation shows. Every fixture is replayed whole, split in two
at every byte offset, and one byte at a time; the adapter must yield the same chunks
(and fail the same way) whichever way the bytes arrive.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.llm import OpenAICompatibleAdapter
from dsh_trio.llm._openai_errors import stream_failure
from dsh_trio.llm._openai_request import request_body
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
    Usage,
)

from ..support import make_request

FIXTURES = Path(__file__).parent / "fixtures"
SECRET = "sk-provider-DO-NOT-LEAK-0123456789"
OTHER = "https://llm.test/v1"


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


class Pieces(httpx.AsyncByteStream):
    """A response body that arrives in the given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


def splits(body: bytes, around: bytes | None = None) -> Iterator[list[bytes]]:
    """``body`` whole, cut in two at every offset, then one byte at a time.

    With ``around``, only the cuts inside (and next to) each occurrence of it.
    """
    yield [body]
    cuts: Iterable[int] = range(1, len(body))
    if around is not None:
        near: set[int] = set()
        at = body.find(around)
        while at != -1:
            near.update(range(max(at - 2, 1), min(at + len(around) + 3, len(body))))
            at = body.find(around, at + 1)
        cuts = sorted(near)
    for cut in cuts:
        yield [body[:cut], body[cut:]]
    yield [body[n : n + 1] for n in range(len(body))]


Outcome = tuple[list[StreamChunk], LlmFailure | None]


async def replay_all(
    body: bytes, *, around: bytes | None = None, **kwargs: Any
) -> Outcome:
    """The outcome of ``body``, checked to be the same however its bytes are cut."""
    plan: list[list[bytes]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=Pieces(plan.pop()),
        )

    first: Outcome | None = None
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(OTHER, client=client, **kwargs)
        for pieces in splits(body, around):
            plan.append(pieces)
            got: list[StreamChunk] = []
            failure: LlmFailure | None = None
            try:
                async for chunk in adapter.stream(make_request()):
                    got.append(chunk)
            except LlmError as exc:
                failure = exc.failure
            if first is None:
                first = (got, failure)
            else:
                assert (got, failure) == first, f"differs when cut as {pieces[:2]!r}"
    assert first is not None
    return first


# ------------------------------------------------------------------ DeepSeek


async def test_deepseek_reasoner_tool_call_stream() -> None:
    chunks, failure = await replay_all(fixture("deepseek_reasoner_tool_call"))
    assert failure is None
    reasoning = "The user wants the weather. I should call get_weather."
    args = '{"city": "Hangzhou"}'
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "The user wants the weather. "),
        ReasoningDelta(0, "I should call get_weather."),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "call_00_w1", "get_weather", ""),
        ToolCallDelta(1, "call_00_w1", "get_weather", args),
        BlockEnd(0, ReasoningBlock(reasoning)),
        BlockEnd(1, ToolCallBlock("call_00_w1", "get_weather", args)),
        Usage(
            input_tokens=56,
            output_tokens=40,
            cache_read_tokens=64,
            reasoning_tokens=28,
        ),
        Finish(FinishReason("tool-calls")),
    ]


# ------------------------------------------------------------------ max_tokens_field


def test_max_tokens_field_names_the_request_field() -> None:
    request = make_request(max_tokens=100)
    assert request_body(request)["max_tokens"] == 100
    body = request_body(request, max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 100
    assert "max_tokens" not in body


async def test_max_tokens_field_reaches_the_wire() -> None:
    seen: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content=fixture("openai_refusal"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(
            OTHER, client=client, max_tokens_field="max_completion_tokens"
        )
        async for _ in adapter.stream(make_request(max_tokens=7)):
            pass
    assert seen[0]["max_completion_tokens"] == 7
    assert "max_tokens" not in seen[0]


@pytest.mark.parametrize("bad", ["", "  ", None, 3])
def test_max_tokens_field_must_be_a_field_name(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_tokens_field"):
        OpenAICompatibleAdapter(OTHER, max_tokens_field=bad)


# ------------------------------------------------------------------ OpenAI refusal

REFUSAL = "I'm sorry, I can't help with that."


async def test_openai_refusal_is_the_reply_text() -> None:
    chunks, failure = await replay_all(fixture("openai_refusal"))
    assert failure is None
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "I'm sorry, "),
        TextDelta(0, "I can't help with that."),
        BlockEnd(0, TextBlock(REFUSAL)),
        Usage(
            input_tokens=30, output_tokens=10, cache_read_tokens=0, reasoning_tokens=0
        ),
        Finish(FinishReason("stop")),
    ]


async def one_turn(body: bytes) -> tuple[int, list[Any], Any]:
    """Run one turn against a server that always answers ``body`` (default retries).

    Returns the number of requests, the session's assistant messages and the turn end.
    """
    requests = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal requests
        requests += 1
        return httpx.Response(200, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(OTHER, client=client)
        async with dsh.open_runtime(models={"p": adapter}) as runtime:
            async with runtime.agents.open(
                options=dsh.AgentOptions(provider="p", model="m")
            ) as agent:
                agent.followup(dsh.user_message("hi"))
                await agent.when_idle()
                events = list(agent.session.events)
    replies = [
        e.data_as(AssistantMessageData).message
        for e in events
        if e.type == "assistant/message"
    ]
    (end,) = [e.data for e in events if isinstance(e.data, TurnEnd)]
    return requests, replies, end


async def test_a_refusal_ends_the_step_with_its_text_and_no_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    requests, replies, end = await one_turn(fixture("openai_refusal"))
    assert requests == 1
    assert [m.content for m in replies] == [(TextBlock(REFUSAL),)]
    assert end == TurnEnd(1, dsh.Completed())


# ------------------------------------------------------------------ Mistral thinking parts


async def test_mistral_thinking_parts_become_a_reasoning_block() -> None:
    chunks, failure = await replay_all(fixture("mistral_magistral_thinking"))
    assert failure is None
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Two plus two "),
        ReasoningDelta(0, "is four."),
        BlockStart(1, "text"),
        TextDelta(1, "The answer"),
        TextDelta(1, " is 4."),
        BlockEnd(0, ReasoningBlock("Two plus two is four.")),
        BlockEnd(1, TextBlock("The answer is 4.")),
        Usage(input_tokens=15, output_tokens=28),
        Finish(FinishReason("stop")),
    ]


async def test_other_content_part_shapes() -> None:
    def event(content: object) -> bytes:
        return (
            b"data: "
            + json.dumps(
                {"choices": [{"index": 0, "delta": {"content": content}}]}
            ).encode()
            + b"\n\n"
        )

    body = (
        event([{"type": "reasoning", "reasoning": "a"}])
        + event([{"type": "thinking", "text": "b"}])
        + event(
            [{"type": "thinking", "thinking": [{"type": "text", "text": "c"}, "d"]}]
        )
        + event(
            ["plain", {"type": "image_url"}, 7, {"type": "refusal", "refusal": "!"}]
        )
        + event([{"type": "text", "text": ""}, {"type": "thinking", "thinking": None}])
        + b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    chunks, failure = await replay_all(body)
    assert failure is None
    ends = [c for c in chunks if isinstance(c, BlockEnd)]
    assert ends == [
        BlockEnd(0, ReasoningBlock("abcd")),
        BlockEnd(1, TextBlock("plain!")),
    ]


# ------------------------------------------------------------------ errors in the stream


async def test_length_then_error_keeps_the_usage_and_the_length_finish() -> None:
    chunks, failure = await replay_all(fixture("openrouter_length_then_error"))
    assert failure is None
    assert chunks == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "Counting up"),
        BlockStart(1, "text"),
        TextDelta(1, "1, 2, 3"),
        BlockEnd(0, ReasoningBlock("Counting up")),
        BlockEnd(1, TextBlock("1, 2, 3")),
        Usage(
            input_tokens=11, output_tokens=16, cache_read_tokens=0, reasoning_tokens=6
        ),
        Finish(FinishReason("max-tokens")),
    ]


async def test_length_then_error_is_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    requests, replies, _ = await one_turn(fixture("openrouter_length_then_error"))
    assert requests == 1
    assert [m.content[-1] for m in replies] == [TextBlock("1, 2, 3")]


async def test_groq_invalid_request_error_event_is_not_server() -> None:
    chunks, failure = await replay_all(fixture("groq_invalid_request_error"))
    assert chunks == []
    assert failure is not None
    assert (failure.code, failure.status) == ("INVALID_REQUEST", 400)
    assert failure.message.startswith("Failed to call a function.")


async def test_a_400_coded_error_event_is_not_retried(
    autojump_clock: trio.testing.MockClock,
) -> None:
    requests, replies, end = await one_turn(fixture("groq_invalid_request_error"))
    assert requests == 1
    assert replies == []
    assert end.reason.TAG == "error"


async def test_usage_before_a_failure_is_still_yielded() -> None:
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
        b'data: {"choices":[],"error":{"message":"upstream died","code":502},'
        b'"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    )
    chunks, failure = await replay_all(body)
    assert chunks == [
        BlockStart(0, "text"),
        TextDelta(0, "x"),
        Usage(input_tokens=3, output_tokens=1),
    ]
    assert failure == LlmFailure("upstream died", "SERVER", status=502)


async def test_groq_usage_inside_x_groq() -> None:
    chunks, failure = await replay_all(fixture("groq_reasoning_usage"))
    assert failure is None
    assert chunks[-2:] == [
        Usage(input_tokens=9, output_tokens=5),
        Finish(FinishReason("stop")),
    ]
    assert BlockEnd(0, ReasoningBlock("Short.")) in chunks


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        ({"message": "m", "type": "invalid_request_error"}, "INVALID_REQUEST", 400),
        ({"message": "m", "code": 400}, "INVALID_REQUEST", 400),
        ({"message": "m", "code": "400"}, "INVALID_REQUEST", 400),
        ({"message": "m", "status": 404}, "INVALID_REQUEST", 404),
        ({"message": "m", "code": 408}, "TIMEOUT", 408),
        ({"message": "m", "code": 429}, "RATE_LIMIT", 429),
        ({"message": "m", "code": "rate_limit_exceeded"}, "RATE_LIMIT", 429),
        ({"message": "m", "type": "authentication_error"}, "AUTH", 401),
        ({"message": "m", "code": 403}, "AUTH", 403),
        ({"message": "m", "code": "insufficient_quota"}, "QUOTA", 402),
        ({"message": "m", "code": 502, "metadata": {}}, "SERVER", 502),
        ({"message": "m", "metadata": {"status": 503}}, "SERVER", 503),
        ({"message": "m", "type": "server_error"}, "SERVER", 500),
        ({"message": "m", "type": "something_new"}, "SERVER", None),
        ({"message": "m"}, "SERVER", None),
        ("plain text", "SERVER", None),
        (
            {"message": "maximum context length exceeded", "code": 400},
            "CONTEXT_WINDOW_EXCEEDED",
            400,
        ),
        ({"message": "maximum context length is 8k"}, "CONTEXT_WINDOW_EXCEEDED", None),
        ({"message": "m", "code": True}, "SERVER", None),
    ],
)
def test_in_stream_errors_are_classified_like_http_statuses(
    error: object, code: str, status: int | None
) -> None:
    failure = stream_failure(error, None)
    assert (failure.code, failure.status) == (code, status)


# ------------------------------------------------------------------ redaction


@pytest.mark.parametrize(
    ("name", "word"),
    [
        ("openai_refusal", b"sorry"),
        ("mistral_magistral_thinking", b"plus"),
        ("groq_invalid_request_error", b"function"),
        ("openrouter_length_then_error", b"Counting"),
    ],
)
async def test_the_key_never_comes_back_from_a_provider_string(
    name: str, word: bytes
) -> None:
    body = fixture(name).replace(word, SECRET.encode())
    chunks, failure = await replay_all(body, around=SECRET.encode(), api_key=SECRET)
    shown = repr(chunks) + repr(failure)
    assert SECRET not in shown
    assert "***" in shown
