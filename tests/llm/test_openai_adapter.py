"""OpenAICompatibleAdapter against httpx.MockTransport (and one real loopback server)."""

from __future__ import annotations

import functools
import gc
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from dsh_trio import user_message
from dsh_trio.errors import LlmError
from dsh_trio.llm._openai import OpenAICompatibleAdapter
from dsh_trio.llm._types import ModelRequest
from dsh_trio.values import (
    AssistantMessage,
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    ImageBlock,
    LlmFailure,
    MessageId,
    ModelSource,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    SystemMessage,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolResultBlock,
    ToolSource,
    Usage,
    UserMessage,
)

from ..support import make_request

Handler = Callable[[httpx.Request], httpx.Response]

SECRET = "sk-test-DO-NOT-LEAK-1234567890"


#: A request of this provider (``make_request`` with its names).
openai_request = functools.partial(make_request, provider="openai", model="gpt-test")


def sse(*events: object, done: bool = True) -> bytes:
    """Encode events as server-sent events (dicts become JSON)."""
    out = [
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    ]
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def ok(body: bytes) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=body
        )

    return handler


async def collect(
    handler: Handler, request: ModelRequest | None = None, **kwargs: Any
) -> list[StreamChunk]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(
            "https://llm.test/v1", client=client, **kwargs
        )
        return [c async for c in adapter.stream(request or openai_request())]


async def failure_of(handler: Handler, **kwargs: Any) -> LlmFailure:
    with pytest.raises(LlmError) as info:
        await collect(handler, **kwargs)
    return info.value.failure


def stop() -> Finish:
    return Finish(FinishReason("stop"))


# ------------------------------------------------------------------ streaming


async def test_text_stream() -> None:
    body = sse(
        delta(role="assistant", content=""),
        delta(content="Hel"),
        delta(content="lo"),
        delta("stop"),
    )
    assert await collect(ok(body)) == [
        BlockStart(0, "text"),
        TextDelta(0, "Hel"),
        TextDelta(0, "lo"),
        BlockEnd(0, TextBlock("Hello")),
        stop(),
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_then_text(field: str) -> None:
    body = sse(
        delta(**{field: ""}),  # an empty first reasoning delta opens no block
        delta(**{field: "think"}),
        delta(**{field: "ing", "content": None}),
        delta(content="answer"),
        delta("stop"),
    )
    assert await collect(ok(body)) == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "think"),
        ReasoningDelta(0, "ing"),
        BlockStart(1, "text"),
        TextDelta(1, "answer"),
        BlockEnd(0, ReasoningBlock("thinking")),
        BlockEnd(1, TextBlock("answer")),
        stop(),
    ]


async def test_tool_calls_split_across_fragments() -> None:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": index, **fields}

    body = sse(
        delta(content="Let me look."),
        delta(
            tool_calls=[
                call(
                    0,
                    id="call_a",
                    type="function",
                    function={"name": "read", "arguments": ""},
                )
            ]
        ),
        delta(tool_calls=[call(0, function={"arguments": '{"pa'})]),
        delta(
            tool_calls=[call(0, id="", function={"name": None, "arguments": 'th": 1}'})]
        ),
        delta(
            tool_calls=[
                call(1, id="call_b", function={"name": "grep", "arguments": "{}"}),
            ]
        ),
        delta("tool_calls"),
    )
    assert await collect(ok(body)) == [
        BlockStart(0, "text"),
        TextDelta(0, "Let me look."),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "call_a", "read", ""),
        ToolCallDelta(1, "call_a", "read", '{"pa'),
        ToolCallDelta(1, "call_a", "read", 'th": 1}'),
        BlockStart(2, "tool-call"),
        ToolCallDelta(2, "call_b", "grep", "{}"),
        BlockEnd(0, TextBlock("Let me look.")),
        BlockEnd(1, ToolCallBlock("call_a", "read", '{"path": 1}')),
        BlockEnd(2, ToolCallBlock("call_b", "grep", "{}")),
        Finish(FinishReason("tool-calls")),
    ]


async def test_two_calls_in_one_delta_and_calls_without_index() -> None:
    body = sse(
        delta(
            tool_calls=[
                {"id": "c1", "function": {"name": "a", "arguments": "{"}},
                {"id": "c2", "function": {"name": "b", "arguments": "{}"}},
            ]
        ),
        delta(tool_calls=[{"function": {"arguments": "}"}}]),
        delta("tool_calls"),
    )
    chunks = await collect(ok(body))
    ends = [c for c in chunks if isinstance(c, BlockEnd)]
    assert ends == [
        BlockEnd(0, ToolCallBlock("c1", "a", "{")),
        BlockEnd(1, ToolCallBlock("c2", "b", "{}}")),
    ]


async def test_stop_with_tool_calls_reports_tool_calls() -> None:
    body = sse(
        delta(
            tool_calls=[
                {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
            ]
        ),
        delta("stop"),
    )
    assert (await collect(ok(body)))[-1] == Finish(FinishReason("tool-calls"))


async def test_usage_with_cache_and_reasoning_tokens() -> None:
    body = sse(
        delta(content="x"),
        delta("stop"),
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "total_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 60},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        },
    )
    chunks = await collect(ok(body))
    assert chunks[-2:] == [
        Usage(
            input_tokens=40, output_tokens=20, cache_read_tokens=60, reasoning_tokens=5
        ),
        stop(),
    ]


async def test_usage_deepseek_cache_hit_field_and_null_usage_chunks() -> None:
    body = sse(
        {**delta(content="x"), "usage": None},
        {
            **delta("stop"),
            "usage": {
                "prompt_tokens": 30,
                "completion_tokens": 3,
                "prompt_cache_hit_tokens": 10,
                "prompt_cache_miss_tokens": 20,
            },
        },
    )
    chunks = await collect(ok(body))
    assert chunks[-2] == Usage(input_tokens=20, output_tokens=3, cache_read_tokens=10)


async def test_no_usage_chunk_when_server_sends_none() -> None:
    chunks = await collect(ok(sse(delta(content="x"), delta("stop"))))
    assert not any(isinstance(c, Usage) for c in chunks)


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("stop", FinishReason("stop")),
        ("length", FinishReason("max-tokens")),
        ("tool_calls", FinishReason("tool-calls")),
        ("function_call", FinishReason("tool-calls")),
        (
            "content_filter",
            FinishReason(
                "error", LlmFailure("model stopped: content_filter", "CONTENT_FILTER")
            ),
        ),
        (
            "insufficient_system_resource",
            FinishReason(
                "error",
                LlmFailure(
                    "model stopped: insufficient_system_resource",
                    "INSUFFICIENT_SYSTEM_RESOURCE",
                ),
            ),
        ),
    ],
)
async def test_finish_reason_mapping(wire: str, expected: FinishReason) -> None:
    chunks = await collect(ok(sse(delta(content="x"), delta(wire))))
    assert chunks[-1] == Finish(expected)


async def test_empty_response_is_an_error() -> None:
    chunks = await collect(ok(sse(delta(role="assistant", content=""), delta("stop"))))
    assert len(chunks) == 1
    finish = chunks[0]
    assert isinstance(finish, Finish)
    assert finish.reason.kind == "error"
    assert finish.reason.failure is not None
    assert finish.reason.failure.code == "EMPTY_RESPONSE"


async def test_empty_response_cut_by_length_is_max_tokens() -> None:
    chunks = await collect(ok(sse(delta("length"))))
    assert chunks == [Finish(FinishReason("max-tokens"))]


async def test_finish_without_done_marker_and_last_event_without_blank_line() -> None:
    body = sse(delta(content="x"), delta("stop"), done=False) + b"data: [DONE]\n"
    assert (await collect(ok(body)))[-1] == stop()
    body = sse(delta(content="x"), delta("stop"), done=False)
    assert (await collect(ok(body)))[-1] == stop()


async def test_sse_comments_other_fields_and_compact_data_prefix() -> None:
    body = (
        b": keep-alive\n\n"
        b"event: message\nid: 1\n"
        b'data:{"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}\r\n\r\n'
        b"data: [DONE]\n\n"
    )
    chunks = await collect(ok(body))
    assert chunks[:3] == [BlockStart(0, "text"), TextDelta(0, "a"), TextDelta(0, "b")]
    assert chunks[-1] == stop()


async def test_stream_cut_short_is_a_transport_error() -> None:
    failure = await failure_of(ok(sse(delta(content="x"), done=False)))
    assert failure.code == "TRANSPORT"


async def test_malformed_event() -> None:
    failure = await failure_of(ok(sse(b"{not json")))
    assert failure.code == "MALFORMED_RESPONSE"


async def test_in_band_error_event() -> None:
    body = sse(
        delta(content="x"), {"error": {"message": "overloaded", "type": "server_error"}}
    )
    failure = await failure_of(ok(body))
    assert (failure.code, failure.message) == ("SERVER", "overloaded")
    body = sse(
        {"error": {"message": "This model's maximum context length is 8192 tokens"}}
    )
    assert (await failure_of(ok(body))).code == "CONTEXT_WINDOW_EXCEEDED"


# ------------------------------------------------------------------ HTTP failures


def error_response(
    status: int, body: object = None, headers: dict[str, str] | None = None
) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.Response(status, headers=headers or {}, content=content)

    return handler


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (401, "Invalid API key", "AUTH"),
        (403, "forbidden", "AUTH"),
        (402, "Insufficient Balance", "QUOTA"),
        (429, "slow down", "RATE_LIMIT"),
        (
            400,
            "This model's maximum context length is 4096 tokens.",
            "CONTEXT_WINDOW_EXCEEDED",
        ),
        (400, "Prompt is too long", "CONTEXT_WINDOW_EXCEEDED"),
        (400, "bad temperature", "INVALID_REQUEST"),
        (404, "no such model", "INVALID_REQUEST"),
        (422, "unprocessable", "INVALID_REQUEST"),
        (500, "boom", "SERVER"),
        (503, "overloaded", "SERVER"),
    ],
)
async def test_http_error_codes(status: int, message: str, code: str) -> None:
    handler = error_response(
        status,
        {"error": {"message": message, "type": "x"}},
        headers={"x-request-id": "req-42"},
    )
    failure = await failure_of(handler)
    assert failure.code == code
    assert failure.status == status
    assert failure.request_id == "req-42"
    assert message in failure.message
    assert failure.retry_after_ms is None


async def test_context_overflow_from_provider_code() -> None:
    body = {"error": {"message": "too long", "code": "context_length_exceeded"}}
    assert (
        await failure_of(error_response(400, body))
    ).code == "CONTEXT_WINDOW_EXCEEDED"


async def test_quota_429() -> None:
    body = {
        "error": {
            "message": "You exceeded your current quota",
            "code": "insufficient_quota",
        }
    }
    assert (await failure_of(error_response(429, body))).code == "QUOTA"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2"}, 2000),
        ({"retry-after": "0.25"}, 250),
        ({"retry-after-ms": "1500"}, 1500),
        ({"retry-after-ms": "12.5", "retry-after": "9"}, 12.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, None),
        ({"retry-after": "-1"}, None),
        ({}, None),
    ],
)
async def test_rate_limit_retry_after(
    headers: dict[str, str], expected: float | None
) -> None:
    failure = await failure_of(
        error_response(429, {"error": {"message": "x"}}, headers)
    )
    assert failure.code == "RATE_LIMIT"
    assert failure.retry_after_ms == expected


async def test_http_error_with_plain_text_body() -> None:
    failure = await failure_of(error_response(502, b"Bad Gateway from proxy"))
    assert failure.code == "SERVER"
    assert "Bad Gateway from proxy" in failure.message
    assert failure.request_id is None


async def test_timeout_and_transport_errors() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def connect_timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    assert (await failure_of(timeout)).code == "TIMEOUT"
    assert (await failure_of(connect_timeout)).code == "TIMEOUT"
    failure = await failure_of(refused)
    assert failure.code == "TRANSPORT"
    assert "connection refused" in failure.message


async def test_error_while_reading_the_stream() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield sse(delta(content="partial"), done=False)
        raise httpx.ReadError("connection reset")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    received: list[StreamChunk] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter("https://llm.test/v1", client=client)
        with pytest.raises(LlmError) as info:
            async for chunk in adapter.stream(openai_request()):
                received.append(chunk)
    assert received == [BlockStart(0, "text"), TextDelta(0, "partial")]
    assert info.value.failure.code == "TRANSPORT"
    assert isinstance(info.value.__cause__, httpx.ReadError)


# ------------------------------------------------------------------ the API key


async def test_api_key_only_in_authorization_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {"error": {"message": f"Incorrect API key provided: {SECRET}"}}
        return httpx.Response(401, json=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(
            "https://llm.test/v1", api_key=SECRET, client=client
        )
        assert SECRET not in repr(adapter)
        assert SECRET not in str(adapter)
        assert "***" in repr(adapter)
        with pytest.raises(LlmError) as info:
            async for _ in adapter.stream(openai_request()):
                pass
    assert seen[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in seen[0].content.decode()
    assert SECRET not in str(seen[0].url)
    error = info.value
    assert error.failure.code == "AUTH"
    assert SECRET not in str(error)
    assert SECRET not in repr(error)
    assert SECRET not in repr(error.failure)
    assert "Incorrect API key provided: ***" in error.failure.message


async def test_api_key_not_in_transport_error_or_stream_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"proxy said {SECRET}", request=request)

    failure = await failure_of(handler, api_key=SECRET)
    assert SECRET not in repr(failure)
    body = sse({"error": {"message": f"bad key {SECRET}"}})
    failure = await failure_of(ok(body), api_key=SECRET)
    assert SECRET not in repr(failure)


def test_constructor_validation_never_echoes_the_key() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleAdapter("  ")
    with pytest.raises(ValueError, match="api_key") as info:
        OpenAICompatibleAdapter("https://x", api_key="")
    assert repr(OpenAICompatibleAdapter("https://x/", api_key=None)) == (
        "OpenAICompatibleAdapter(base_url='https://x', api_key=None)"
    )
    assert SECRET not in str(info.value)


# ------------------------------------------------------------------ the request


async def test_request_body_shape() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=sse(delta(content="ok"), delta("stop")))

    model = ModelSource("openai", "gpt-test")
    messages = (
        SystemMessage(
            id=MessageId("m0"), content=(TextBlock("You are "), TextBlock("terse."))
        ),
        user_message("list files"),
        AssistantMessage(
            id=MessageId("m2"),
            content=(
                ReasoningBlock("I should call ls"),
                TextBlock("Calling."),
                ToolCallBlock("call_1", "ls", '{"path": "."}'),
                ToolCallBlock("call_2", "pwd", "{}"),
            ),
            source=model,
        ),
        UserMessage(
            id=MessageId("m3"),
            content=(ToolResultBlock("call_1", (TextBlock("a.txt\nb.txt"),)),),
            source=ToolSource("call_1"),
        ),
        UserMessage(
            id=MessageId("m4"),
            content=(TextBlock("/home"),),
            source=ToolSource("call_2"),
        ),
        AssistantMessage(
            id=MessageId("m5"),
            content=(ReasoningBlock("only thoughts"),),
            source=model,
        ),
        UserMessage(
            id=MessageId("m6"),
            content=(ToolResultBlock("call_9", (), is_error=True),),
            source=ToolSource("call_9"),
        ),
        UserMessage(
            id=MessageId("m7"),
            content=(
                TextBlock("look:"),
                ImageBlock({"url": "https://img.test/a.png"}),
                ImageBlock({"data": "AAAA", "mediaType": "image/png"}),
                ImageBlock({"attachmentId": "opaque"}),
            ),
        ),
    )
    tools = (
        {
            "name": "ls",
            "description": "List a directory.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
            },
        },
        {"name": "pwd"},
    )
    request = openai_request(
        messages=messages,
        tools=tools,
        max_tokens=256,
        temperature=0.5,
        stop=("END",),
        reasoning_effort="high",
    )
    await collect(handler, request, default_headers={"X-Trace": "t1"})
    sent = seen[0]
    assert sent.method == "POST"
    assert str(sent.url) == "https://llm.test/v1/chat/completions"
    assert sent.headers["x-trace"] == "t1"
    assert sent.headers["accept"] == "text/event-stream"
    assert "authorization" not in sent.headers
    assert json.loads(sent.content) == {
        "model": "gpt-test",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 256,
        "temperature": 0.5,
        "stop": ["END"],
        "reasoning_effort": "high",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": "Calling.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "ls", "arguments": '{"path": "."}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "pwd", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"},
            {"role": "tool", "tool_call_id": "call_2", "content": "/home"},
            {"role": "assistant", "content": ""},
            {"role": "tool", "tool_call_id": "call_9", "content": "(no output)"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look:"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://img.test/a.png"},
                    },
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,AAAA"},
                    },
                    {"type": "text", "text": "[image omitted]"},
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "ls",
                    "description": "List a directory.",
                    "parameters": {
                        "type": "object",
                        "properties": {"path": {"type": "string"}},
                    },
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "pwd",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
    }


async def test_minimal_body_omits_unset_knobs() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=sse(delta(content="ok"), delta("stop")))

    await collect(handler)
    assert set(json.loads(seen[0].content)) == {
        "model",
        "messages",
        "stream",
        "stream_options",
    }


async def test_user_message_with_text_and_tool_results() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=sse(delta(content="ok"), delta("stop")))

    message = user_message(
        [
            TextBlock("note"),
            ToolResultBlock("c1", (TextBlock("r1"),)),
            ToolResultBlock("c2", (TextBlock("r2"),)),
        ]
    )
    await collect(handler, openai_request(messages=(message,)))
    assert json.loads(seen[0].content)["messages"] == [
        {"role": "user", "content": "note"},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "tool", "tool_call_id": "c2", "content": "r2"},
    ]


async def test_bad_tool_schema_is_an_invalid_request() -> None:
    called = False

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal called
        called = True
        return httpx.Response(500)

    failure = await failure_of(
        handler, request=openai_request(tools=({"description": "x"},))
    )
    assert failure.code == "INVALID_REQUEST"
    assert "#0" in failure.message
    assert not called


# ------------------------------------------------------------------ trio behaviour


async def test_cancelled_before_start_sends_nothing() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=sse(delta(content="x"), delta("stop")))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter("https://llm.test/v1", client=client)
        with trio.CancelScope() as scope:
            scope.cancel()
            async for _ in adapter.stream(openai_request()):
                pytest.fail("no chunk expected")
        assert scope.cancelled_caught
    assert seen == []


async def test_checkpoints_between_events() -> None:
    body = sse(*(delta(content=str(i)) for i in range(5)), delta("stop"))
    received: list[StreamChunk] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(ok(body))) as client:
        adapter = OpenAICompatibleAdapter("https://llm.test/v1", client=client)
        with trio.CancelScope() as scope:
            async for chunk in adapter.stream(openai_request()):
                received.append(chunk)
                scope.cancel()
    # The first event's two chunks arrive together; the next event's checkpoint
    # sees the cancellation.
    assert received == [BlockStart(0, "text"), TextDelta(0, "0")]
    assert scope.cancelled_caught


async def test_other_tasks_run_while_streaming() -> None:
    body = sse(*(delta(content="x") for _ in range(20)), delta("stop"))
    ticks = 0
    seen_at: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with httpx.AsyncClient(transport=httpx.MockTransport(ok(body))) as client:
        adapter = OpenAICompatibleAdapter("https://llm.test/v1", client=client)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            async for chunk in adapter.stream(openai_request()):
                if isinstance(chunk, TextDelta):
                    seen_at.append(ticks)
            nursery.cancel_scope.cancel()
    assert seen_at[-1] > seen_at[0]


def is_closed(client: httpx.AsyncClient) -> bool:
    return client.is_closed


async def test_injected_client_stays_open_own_client_closes() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(ok(b""))) as client:
        async with OpenAICompatibleAdapter(
            "https://llm.test", client=client
        ) as adapter:
            assert adapter._endpoint.client is client
        assert not client.is_closed
        await adapter.aclose()
        assert not client.is_closed
    own = OpenAICompatibleAdapter("https://llm.test")
    own_client = own._endpoint.client
    async with own:
        assert not own_client.is_closed
    assert is_closed(own_client)
    await own.aclose()  # idempotent


async def test_timeout_applies_per_request() -> None:
    timeouts: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx.Response(200, content=sse(delta(content="x"), delta("stop")))

    await collect(handler, timeout=7.5)
    assert timeouts == [{"connect": 7.5, "read": 7.5, "write": 7.5, "pool": 7.5}]
    timeouts.clear()
    await collect(handler)
    assert timeouts == [{"connect": 10.0, "read": 60.0, "write": 60.0, "pool": 60.0}]


async def test_real_http_over_loopback_with_own_client() -> None:
    """httpx's own client (anyio on trio) against a tiny trio HTTP server."""
    requests: list[bytes] = []
    body = sse(delta(content="hi"), delta("stop"))

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":", 1)[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
        )
        while len(rest) < length:
            rest += await stream.receive_some(65536)
        requests.append(head + b"\r\n\r\n" + rest)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        async with OpenAICompatibleAdapter(
            f"http://127.0.0.1:{port}/v1", api_key=SECRET
        ) as adapter:
            chunks = [c async for c in adapter.stream(openai_request())]
        nursery.cancel_scope.cancel()
    assert chunks[-1] == stop()
    assert chunks[1] == TextDelta(0, "hi")
    assert requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1")
    head_lines = requests[0].partition(b"\r\n\r\n")[0].split(b"\r\n")
    assert b"authorization: Bearer " + SECRET.encode() in head_lines


async def test_consumer_closing_early_leaves_nothing_behind() -> None:
    # filterwarnings=error turns trio's warning about an abandoned async generator
    # (ours or httpx's) into a failure of this test.
    body = sse(*(delta(content=str(i)) for i in range(5)), delta("stop"))
    async with httpx.AsyncClient(transport=httpx.MockTransport(ok(body))) as client:
        adapter = OpenAICompatibleAdapter("https://llm.test/v1", client=client)
        stream = adapter.stream(openai_request())
        assert await stream.__anext__() == BlockStart(0, "text")
        await stream.aclose()
    gc.collect()


async def test_data_after_done_is_ignored() -> None:
    body = sse(delta(content="x"), delta("stop")) + sse(
        delta(content="late"), done=False
    )
    assert await collect(ok(body)) == [
        BlockStart(0, "text"),
        TextDelta(0, "x"),
        BlockEnd(0, TextBlock("x")),
        stop(),
    ]
    gc.collect()


async def test_cancel_mid_stream_over_loopback() -> None:
    """A server that stops sending: the caller's cancellation ends the stream promptly."""
    first = sse(delta(content="partial"), done=False)
    server_waiting = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            + b"%x\r\n" % len(first)
            + first
            + b"\r\n"
        )
        server_waiting.set()
        await trio.sleep_forever()

    received: list[StreamChunk] = []
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        async with OpenAICompatibleAdapter(f"http://127.0.0.1:{port}/v1") as adapter:
            with trio.CancelScope() as scope:
                async for chunk in adapter.stream(openai_request()):
                    received.append(chunk)
                    if isinstance(chunk, TextDelta):
                        await server_waiting.wait()
                        await trio.testing.wait_all_tasks_blocked()
                        scope.cancel()
            assert scope.cancelled_caught
        nursery.cancel_scope.cancel()
    assert received == [BlockStart(0, "text"), TextDelta(0, "partial")]
    gc.collect()
