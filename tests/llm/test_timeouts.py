"""The adapter's own deadlines: ``request_timeout_s`` per attempt and ``idle_timeout_s``.

Servers are ``httpx.MockTransport`` handlers whose bodies wait on trio (never on the
real clock); ``MockClock(autojump_threshold=0)`` moves time when everything waits.
"""

from __future__ import annotations

import functools
import gc
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.llm import OpenAICompatibleAdapter
from dsh_trio.values import (
    BlockStart,
    Finish,
    FinishReason,
    StreamChunk,
    TextDelta,
    TurnEnd,
)

from ..support import make_request

AsyncHandler = Callable[[httpx.Request], Awaitable[httpx.Response]]
URL = "https://llm.test/v1"


def event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def delta(finish: str | None = None, **fields: Any) -> bytes:
    return event({"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]})


async def attempt(
    handler: Callable[[httpx.Request], Any], **kwargs: Any
) -> tuple[list[StreamChunk], LlmError | None, float]:
    """Stream one attempt; the chunks, the error and how long it took (mock time)."""
    chunks: list[StreamChunk] = []
    start = trio.current_time()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client, **kwargs)
        try:
            async for chunk in adapter.stream(make_request()):
                chunks.append(chunk)
        except LlmError as exc:
            return chunks, exc, trio.current_time() - start
    return chunks, None, trio.current_time() - start


def streaming(body: Callable[[], AsyncIterator[bytes]]) -> AsyncHandler:
    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        return httpx.Response(200, content=body())

    return handler


async def silent_after_one_event() -> AsyncIterator[bytes]:
    yield delta(content="partial")
    await trio.sleep_forever()  # a stream that never sends again


async def trickling_keep_alives() -> AsyncIterator[bytes]:
    yield delta(content="partial")
    while True:  # a slow-loris: alive, but never done
        await trio.sleep(10)
        yield b": keep-alive\n\n"


async def test_a_silent_stream_ends_at_the_idle_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    chunks, error, took = await attempt(
        streaming(silent_after_one_event), idle_timeout_s=30
    )
    assert chunks == [BlockStart(0, "text"), TextDelta(0, "partial")]
    assert error is not None
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == (
        f"the stream from {URL}/chat/completions sent nothing for "
        "idle_timeout_s=30 seconds"
    )
    assert took == pytest.approx(30)


async def test_the_default_idle_timeout_is_five_minutes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, error, took = await attempt(streaming(silent_after_one_event))
    assert error is not None and error.failure.code == "TIMEOUT"
    assert took == pytest.approx(300)


async def test_keep_alives_hold_off_the_idle_timeout_not_the_request_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, error, took = await attempt(streaming(trickling_keep_alives), idle_timeout_s=30)
    assert error is not None
    assert error.failure.code == "TIMEOUT"
    assert error.failure.message == (
        f"the request to {URL}/chat/completions took longer than request_timeout_s=600"
    )
    assert took == pytest.approx(600)  # the default: ten minutes


async def test_a_server_that_never_answers_ends_at_the_request_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def never(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    _, error, took = await attempt(never, request_timeout_s=45)
    assert error is not None
    assert error.failure.code == "TIMEOUT"
    assert "request_timeout_s=45" in error.failure.message
    assert took == pytest.approx(45)


async def test_the_request_timeout_bounds_the_whole_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_headers(request: httpx.Request) -> httpx.Response:
        await trio.sleep(20)
        return httpx.Response(200, content=trickling_keep_alives())

    _, error, took = await attempt(
        slow_headers, request_timeout_s=100, idle_timeout_s=None
    )
    assert error is not None and error.failure.code == "TIMEOUT"
    assert took == pytest.approx(100)  # 20 s for the headers count too


async def test_timeouts_off(autojump_clock: trio.testing.MockClock) -> None:
    async def slow() -> AsyncIterator[bytes]:
        yield delta(content="x")
        await trio.sleep(5_000)
        yield delta("stop")

    chunks, error, took = await attempt(
        streaming(slow), request_timeout_s=None, idle_timeout_s=None
    )
    assert error is None
    assert chunks[-1] == Finish(FinishReason("stop"))
    assert took == pytest.approx(5_000)


async def test_a_stream_within_its_deadlines_is_untouched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def steady() -> AsyncIterator[bytes]:
        for n in range(5):
            await trio.sleep(29)
            yield delta(content=str(n))
        yield delta("stop")

    chunks, error, took = await attempt(
        streaming(steady), idle_timeout_s=30, request_timeout_s=146
    )
    assert error is None
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == "01234"
    assert took == pytest.approx(145)


async def test_the_caller_cancelling_is_not_a_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    with trio.move_on_after(10) as scope:
        await attempt(streaming(silent_after_one_event), idle_timeout_s=30)
    assert scope.cancelled_caught


@pytest.mark.parametrize("name", ["request_timeout_s", "idle_timeout_s"])
@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "10"])
def test_timeouts_are_validated(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        OpenAICompatibleAdapter(URL, **{name: value})  # type: ignore[arg-type]


async def test_a_timed_out_attempt_is_retried_and_the_turn_completes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    requests = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal requests
        requests += 1
        await trio.lowlevel.checkpoint()
        if requests == 1:
            return httpx.Response(200, content=silent_after_one_event())
        return httpx.Response(200, content=delta(content="done") + delta("stop"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client, idle_timeout_s=30)
        async with dsh.open_runtime(models={"p": adapter}) as runtime:
            async with runtime.agents.open(
                options=dsh.AgentOptions(provider="p", model="m")
            ) as agent:
                agent.followup(dsh.user_message("hi"))
                await agent.when_idle()
                events = list(agent.session.events)
    assert requests == 2
    retries = [e.data for e in events if e.type == "llm/retry"]
    assert len(retries) == 1
    assert isinstance(retries[0], dict)
    failure = retries[0]["failure"]
    assert isinstance(failure, dict) and failure["code"] == "TIMEOUT"
    ends = [e.data for e in events if isinstance(e.data, TurnEnd)]
    assert ends == [TurnEnd(1, dsh.Completed())]


async def test_idle_timeout_over_loopback_closes_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The real transport (httpx's own client) cancelled by the idle deadline."""
    first = delta(content="partial")
    closed = trio.Event()

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
        # Stall; the client's giving up closes the connection.
        while await stream.receive_some(65536):
            pass
        closed.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        chunks: list[StreamChunk] = []
        start = trio.current_time()
        async with OpenAICompatibleAdapter(
            f"http://127.0.0.1:{port}/v1",
            idle_timeout_s=30,
            timeout=httpx.Timeout(None),
        ) as adapter:
            with pytest.raises(LlmError) as info:
                async for chunk in adapter.stream(make_request()):
                    chunks.append(chunk)
            took = trio.current_time() - start
        await closed.wait()
        nursery.cancel_scope.cancel()
    assert chunks == [BlockStart(0, "text"), TextDelta(0, "partial")]
    assert info.value.failure.code == "TIMEOUT"
    assert took == pytest.approx(30)
    gc.collect()
