from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import pytest
import trio
import trio.testing

from dsh_trio.errors import LlmError
from dsh_trio.llm import ModelAdapter, ModelRequest, error_chain, stream_model
from dsh_trio.values import (
    Finish,
    FinishReason,
    LlmFailure,
    SessionId,
    StreamChunk,
    TextDelta,
    Usage,
)

REQUEST = ModelRequest(
    provider="prov", model="m", messages=(), session_id=SessionId("s")
)


class GenAdapter:
    """An adapter whose stream is an async generator built by ``body``."""

    def __init__(self, body: Callable[[], AsyncIterator[StreamChunk]]) -> None:
        self.body = body
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        return self.body()


class RecordingIterator:
    """An iterator object that records whether it was closed."""

    def __init__(self, chunks: list[StreamChunk], *, hang: bool = False) -> None:
        self.chunks = list(chunks)
        self.hang = hang
        self.closed = False
        self.waiting = trio.Event()

    def __aiter__(self) -> RecordingIterator:
        return self

    async def __anext__(self) -> StreamChunk:
        if self.chunks:
            await trio.lowlevel.checkpoint()
            return self.chunks.pop(0)
        if self.hang:
            self.waiting.set()
            await trio.sleep_forever()
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed = True


class IteratorAdapter:
    def __init__(self, iterator: RecordingIterator) -> None:
        self.iterator = iterator

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        return self.iterator


async def collect(adapter: ModelAdapter | None) -> list[StreamChunk]:
    async with contextlib.aclosing(stream_model(adapter, REQUEST)) as stream:
        return [chunk async for chunk in stream]


def only_failure(chunks: list[StreamChunk]) -> LlmFailure:
    last = chunks[-1]
    assert isinstance(last, Finish)
    assert last.reason.failure is not None
    return last.reason.failure


async def test_passes_chunks_through() -> None:
    chunks: list[StreamChunk] = [
        TextDelta(0, "hi"),
        Usage(1, 1),
        Finish(FinishReason("stop")),
    ]

    async def body() -> AsyncIterator[StreamChunk]:
        for c in chunks:
            await trio.lowlevel.checkpoint()
            yield c

    adapter = GenAdapter(body)
    assert await collect(adapter) == chunks
    assert adapter.requests == [REQUEST]


async def test_nothing_after_finish_and_adapter_closed() -> None:
    iterator = RecordingIterator(
        [TextDelta(0, "a"), Finish(FinishReason("stop")), TextDelta(0, "late")]
    )
    assert await collect(IteratorAdapter(iterator)) == [
        TextDelta(0, "a"),
        Finish(FinishReason("stop")),
    ]
    assert iterator.closed
    assert iterator.chunks == [TextDelta(0, "late")]  # never pulled


async def test_stream_without_finish_just_ends() -> None:
    iterator = RecordingIterator([TextDelta(0, "a")])
    assert await collect(IteratorAdapter(iterator)) == [TextDelta(0, "a")]


async def test_no_adapter() -> None:
    with trio.testing.assert_checkpoints():
        chunks = await collect(None)
    assert len(chunks) == 1
    failure = only_failure(chunks)
    assert failure.code == "NO_ADAPTER"
    assert '"prov"' in failure.message
    assert isinstance(chunks[0], Finish)
    assert chunks[0].reason.kind == "error"


async def test_exception_creating_the_stream_becomes_one_finish() -> None:
    class Broken:
        def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
            raise RuntimeError("bad config") from KeyError("api_base")

    chunks = await collect(Broken())
    assert len(chunks) == 1
    failure = only_failure(chunks)
    assert failure.code == "UNKNOWN"
    assert failure.message == "bad config: 'api_base'"


async def test_non_iterable_stream_becomes_one_finish() -> None:
    class NotIterable:
        def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
            return 42  # type: ignore[return-value]

    chunks = await collect(NotIterable())
    assert len(chunks) == 1
    assert only_failure(chunks).code == "UNKNOWN"


async def test_exception_at_first_iteration_becomes_one_finish() -> None:
    async def body() -> AsyncIterator[StreamChunk]:
        await trio.lowlevel.checkpoint()
        raise LlmError(
            LlmFailure("slow down", "RATE_LIMIT", status=429, retry_after_ms=5)
        )
        yield TextDelta(0, "never")  # pragma: no cover

    chunks = await collect(GenAdapter(body))
    assert chunks == [
        Finish(
            FinishReason(
                "error",
                LlmFailure("slow down", "RATE_LIMIT", status=429, retry_after_ms=5),
            )
        )
    ]


async def test_exception_mid_stream_ends_with_one_finish() -> None:
    async def body() -> AsyncIterator[StreamChunk]:
        yield TextDelta(0, "par")
        await trio.lowlevel.checkpoint()
        yield TextDelta(0, "tial")
        raise ConnectionResetError("peer hung up")

    chunks = await collect(GenAdapter(body))
    assert chunks[:2] == [TextDelta(0, "par"), TextDelta(0, "tial")]
    assert len(chunks) == 3
    failure = only_failure(chunks)
    assert (failure.code, failure.message) == ("UNKNOWN", "peer hung up")


async def test_aborted_code_gives_an_aborted_finish() -> None:
    async def body() -> AsyncIterator[StreamChunk]:
        await trio.lowlevel.checkpoint()
        raise LlmError(LlmFailure("stopped", "ABORTED"))
        yield TextDelta(0, "never")  # pragma: no cover

    chunks = await collect(GenAdapter(body))
    assert isinstance(chunks[0], Finish)
    assert chunks[0].reason.kind == "aborted"


async def test_in_band_error_finish_passes_through() -> None:
    finish = Finish(FinishReason("error", LlmFailure("empty", "EMPTY_RESPONSE")))
    iterator = RecordingIterator([finish])
    assert await collect(IteratorAdapter(iterator)) == [finish]


async def test_base_exceptions_propagate() -> None:
    async def body() -> AsyncIterator[StreamChunk]:
        yield TextDelta(0, "a")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await collect(GenAdapter(body))


async def test_cancellation_propagates_and_closes_the_adapter() -> None:
    iterator = RecordingIterator([TextDelta(0, "a")], hang=True)
    received: list[StreamChunk] = []
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()

        async def consume() -> None:
            with scope:
                async with contextlib.aclosing(
                    stream_model(IteratorAdapter(iterator), REQUEST)
                ) as stream:
                    async for chunk in stream:
                        received.append(chunk)
                raise AssertionError("the stream must not end by itself")

        nursery.start_soon(consume)
        await iterator.waiting.wait()
        assert not iterator.closed
        scope.cancel()
    assert scope.cancelled_caught  # Cancelled came out of the stream, unchanged
    assert received == [TextDelta(0, "a")]  # no finish chunk was made up
    assert iterator.closed


async def test_early_consumer_exit_closes_the_adapter() -> None:
    iterator = RecordingIterator([TextDelta(0, "a"), TextDelta(0, "b")], hang=True)
    async with contextlib.aclosing(
        stream_model(IteratorAdapter(iterator), REQUEST)
    ) as stream:
        async for chunk in stream:
            assert chunk == TextDelta(0, "a")
            break
    assert iterator.closed


async def test_failing_close_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class BadClose(RecordingIterator):
        async def aclose(self) -> None:
            raise OSError("socket gone")

    iterator = BadClose([Finish(FinishReason("stop"))])
    with caplog.at_level(logging.WARNING, logger="dsh_trio"):
        assert await collect(IteratorAdapter(iterator)) == [
            Finish(FinishReason("stop"))
        ]
    assert any("prov" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- error_chain


def test_error_chain_follows_explicit_causes() -> None:
    try:
        try:
            raise OSError("connection reset")
        except OSError as inner:
            raise RuntimeError("request failed") from inner
    except RuntimeError as exc:
        assert error_chain(exc) == "request failed: connection reset"


def test_error_chain_ignores_implicit_context() -> None:
    try:
        try:
            raise OSError("context")
        except OSError:
            raise RuntimeError("outer") from None
    except RuntimeError as exc:
        assert error_chain(exc) == "outer"


def test_error_chain_empty_message_uses_type_name() -> None:
    assert error_chain(ValueError()) == "ValueError"


def test_error_chain_guards_cycles() -> None:
    a = RuntimeError("a")
    b = RuntimeError("b")
    a.__cause__ = b
    b.__cause__ = a
    assert error_chain(a) == "a: b: <circular cause>"


def test_error_chain_unrenderable() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert error_chain(RuntimeError("top").with_traceback(None)) == "top"
    exc = RuntimeError("top")
    exc.__cause__ = Hostile()
    assert error_chain(exc) == "top: <unrenderable value>"


def test_error_chain_groups_list_members() -> None:
    group = ExceptionGroup("several", [ValueError("one"), KeyError("two")])
    assert error_chain(group) == "several [one; 'two']"


# --------------------------------------------------------------------------- closing a generator


def finish_then(cleanup: Callable[[], object]) -> GenAdapter:
    """A generator adapter that stops at its Finish and runs ``cleanup`` when closed."""

    async def body() -> AsyncIterator[StreamChunk]:
        try:
            yield Finish(FinishReason("stop"))
        finally:
            result = cleanup()
            if result is not None:
                await result  # type: ignore[misc]

    return GenAdapter(body)


async def test_generator_close_without_waiting_runs_at_once() -> None:
    closed: list[bool] = []
    assert await collect(finish_then(lambda: closed.append(True))) == [
        Finish(FinishReason("stop"))
    ]
    assert closed == [True]


async def test_generator_close_that_waits_is_shielded_and_runs_to_its_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    released: list[float] = []
    start = trio.current_time()

    async def release() -> None:
        await trio.sleep(3)  # e.g. returning a connection
        released.append(trio.current_time() - start)

    with trio.move_on_after(1) as scope:  # expires while the close waits
        assert await collect(finish_then(release)) == [Finish(FinishReason("stop"))]
    assert not scope.cancelled_caught
    assert released == [3.0]


async def test_generator_close_that_hangs_is_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    chunks = await collect(finish_then(trio.sleep_forever))
    assert chunks == [Finish(FinishReason("stop"))]
    assert trio.current_time() - start == 5.0  # the close deadline


async def test_generator_close_while_cancelled_is_shielded() -> None:
    released: list[bool] = []

    async def release() -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        await trio.lowlevel.checkpoint()
        released.append(True)

    with trio.CancelScope() as scope:
        async with contextlib.aclosing(
            stream_model(finish_then(release), REQUEST)
        ) as stream:
            async for _chunk in stream:
                scope.cancel()
        await trio.lowlevel.checkpoint()
    assert scope.cancelled_caught
    assert released == [True]


async def test_generator_without_handlers_is_closed_after_its_finish() -> None:
    made: list[AsyncIterator[StreamChunk]] = []

    async def body() -> AsyncIterator[StreamChunk]:
        await trio.lowlevel.checkpoint()
        yield Finish(FinishReason("stop"))
        yield TextDelta(0, "never pulled")

    def stream(request: ModelRequest) -> AsyncIterator[StreamChunk]:
        made.append(body())
        return made[-1]

    adapter = GenAdapter(body)
    adapter.stream = stream  # type: ignore[method-assign]
    assert await collect(adapter) == [Finish(FinishReason("stop"))]
    assert made[0].ag_frame is None  # type: ignore[attr-defined]
