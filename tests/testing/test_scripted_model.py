"""ScriptedModel and its script helpers."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import aclosing

import pytest
import trio
import trio.testing

from dsh_trio import user_message
from dsh_trio.errors import LlmError
from dsh_trio.llm._types import ModelRequest
from dsh_trio.testing import (
    Gate,
    Script,
    ScriptedModel,
    chunks,
    custom,
    fail,
    gate,
    hang,
    max_tokens,
    reply,
    tool_calls,
)
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    SessionId,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
)


def request(text: str = "hi") -> ModelRequest:
    return ModelRequest(
        provider="scripted",
        model="m",
        messages=(user_message(text),),
        session_id=SessionId("s"),
    )


async def play(
    model: ScriptedModel, req: ModelRequest | None = None
) -> list[StreamChunk]:
    async with aclosing(model.stream(req or request())) as stream:
        return [chunk async for chunk in stream]


def stop() -> Finish:
    return Finish(FinishReason("stop"))


# ------------------------------------------------------------------ entries


async def test_reply_streams_one_delta_per_character() -> None:
    assert await play(ScriptedModel(reply("abc"))) == [
        BlockStart(0, "text"),
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        TextDelta(0, "c"),
        BlockEnd(0, TextBlock("abc")),
        Usage(10, 3),
        stop(),
    ]


@pytest.mark.parametrize(
    ("text", "pieces", "expected"),
    [
        ("hello", 2, ["hel", "lo"]),
        ("hello", 1, ["hello"]),
        ("abcdefgh", 3, ["abc", "def", "gh"]),
        ("ab", 20, ["a", "b"]),
        ("x" * 40, 20, ["xx"] * 20),
        ("", 5, []),
    ],
)
async def test_reply_chunks(text: str, pieces: int, expected: list[str]) -> None:
    out = await play(ScriptedModel(reply(text, chunks=pieces)))
    assert [c.text for c in out if isinstance(c, TextDelta)] == expected
    assert out[0] == BlockStart(0, "text")
    assert out[-3:] == [BlockEnd(0, TextBlock(text)), Usage(10, len(text)), stop()]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_reply_rejects_bad_chunks(bad: object) -> None:
    with pytest.raises(ValueError, match="chunks"):
        reply("abc", chunks=bad)  # type: ignore[arg-type]


async def test_reply_with_reasoning_and_usage() -> None:
    usage = Usage(5, 7, cache_read_tokens=2)
    assert await play(ScriptedModel(reply("ok", reasoning="hm", usage=usage))) == [
        BlockStart(0, "reasoning"),
        ReasoningDelta(0, "h"),
        ReasoningDelta(0, "m"),
        BlockEnd(0, ReasoningBlock("hm")),
        BlockStart(1, "text"),
        TextDelta(1, "o"),
        TextDelta(1, "k"),
        BlockEnd(1, TextBlock("ok")),
        usage,
        stop(),
    ]


async def test_tool_calls() -> None:
    block = ToolCallBlock("c2", "write", '{"x":1}')
    out = await play(ScriptedModel(tool_calls(("c1", "read", "{}"), block, text="ok")))
    assert out == [
        BlockStart(0, "text"),
        TextDelta(0, "o"),
        TextDelta(0, "k"),
        BlockEnd(0, TextBlock("ok")),
        BlockStart(1, "tool-call"),
        ToolCallDelta(1, "c1", "read", "{}"),
        BlockEnd(1, ToolCallBlock("c1", "read", "{}")),
        BlockStart(2, "tool-call"),
        ToolCallDelta(2, "c2", "write", '{"x":1}'),
        BlockEnd(2, block),
        Usage(10, 2 + 2 + 7),
        Finish(FinishReason("tool-calls")),
    ]


async def test_tool_calls_without_text_start_at_index_0() -> None:
    out = await play(ScriptedModel(tool_calls(("c1", "f", "{}"))))
    assert out[:3] == [
        BlockStart(0, "tool-call"),
        ToolCallDelta(0, "c1", "f", "{}"),
        BlockEnd(0, ToolCallBlock("c1", "f", "{}")),
    ]


def test_tool_calls_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        tool_calls()
    with pytest.raises(TypeError, match="#1"):
        tool_calls(("a", "b", "{}"), ("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="#0"):
        tool_calls(("a", "b", 3))  # type: ignore[arg-type]


async def test_max_tokens() -> None:
    assert await play(ScriptedModel(max_tokens("ab"))) == [
        BlockStart(0, "text"),
        TextDelta(0, "a"),
        TextDelta(0, "b"),
        BlockEnd(0, TextBlock("ab")),
        Usage(10, 2),
        Finish(FinishReason("max-tokens")),
    ]


async def test_fail_raises() -> None:
    model = ScriptedModel(fail("RATE_LIMIT", "busy", retry_after_ms=250, status=429))
    with pytest.raises(LlmError) as info:
        await play(model)
    assert info.value.failure == LlmFailure(
        "busy", "RATE_LIMIT", status=429, retry_after_ms=250
    )


async def test_fail_in_band() -> None:
    out = await play(ScriptedModel(fail("SERVER", "boom", in_band=True)))
    assert out == [Finish(FinishReason("error", LlmFailure("boom", "SERVER")))]
    out = await play(ScriptedModel(fail("ABORTED", in_band=True)))
    assert out == [
        Finish(FinishReason("aborted", LlmFailure("scripted failure", "ABORTED")))
    ]


async def test_raw_chunks() -> None:
    raw = (TextDelta(3, "x"), Finish(FinishReason("stop")))
    assert await play(ScriptedModel(chunks(*raw))) == list(raw)


async def test_custom_sees_the_request() -> None:
    async def echo(req: ModelRequest) -> AsyncIterator[StreamChunk]:
        text = "".join(
            b.text for m in req.messages for b in m.content if isinstance(b, TextBlock)
        )
        yield BlockStart(0, "text")
        yield TextDelta(0, text.upper())
        yield Finish(FinishReason("stop"))

    out = await play(ScriptedModel(custom(echo)), request("shout"))
    assert out[1] == TextDelta(0, "SHOUT")


async def test_custom_may_raise() -> None:
    async def broken(req: ModelRequest) -> AsyncIterator[StreamChunk]:
        yield BlockStart(0, "text")
        raise LlmError(LlmFailure("nope", "SERVER"))

    received: list[StreamChunk] = []
    with pytest.raises(LlmError, match="nope"):
        async with aclosing(ScriptedModel(custom(broken)).stream(request())) as s:
            async for chunk in s:
                received.append(chunk)
    assert received == [BlockStart(0, "text")]


def test_entries_must_be_scripts() -> None:
    with pytest.raises(TypeError, match="entry #1"):
        ScriptedModel(reply("a"), "b")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="default"):
        ScriptedModel(default="b")  # type: ignore[arg-type]
    model = ScriptedModel()
    with pytest.raises(TypeError, match="push"):
        model.push(reply("a"), object())  # type: ignore[arg-type]
    assert model.remaining == 0
    with pytest.raises(TypeError, match="gate"):
        gate("x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="after"):
        gate(after=-1)
    with pytest.raises(TypeError, match="callable"):
        custom(3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the model


async def test_requests_recorded_in_order_and_script_consumed() -> None:
    model = ScriptedModel(reply("a"))
    model.push(reply("b"), reply("c"))
    assert model.remaining == 3
    requests = [request(str(i)) for i in range(3)]
    texts = []
    for req in requests:
        out = await play(model, req)
        texts.append(next(c for c in out if isinstance(c, BlockEnd)).block)
    assert texts == [TextBlock("a"), TextBlock("b"), TextBlock("c")]
    assert model.requests == requests
    assert model.remaining == 0


async def test_exhausted_script_records_then_fails() -> None:
    model = ScriptedModel(reply("a"))
    await play(model)
    with pytest.raises(LlmError) as info:
        await play(model, request("extra"))
    assert info.value.failure == LlmFailure(
        "ScriptedModel: script exhausted", "UNKNOWN"
    )
    assert len(model.requests) == 2
    assert model.requests[1].messages[0].content == (TextBlock("extra"),)


async def test_default_entry_when_script_is_empty() -> None:
    model = ScriptedModel(reply("first"), default=reply("ok"))
    outs = [await play(model) for _ in range(3)]
    ends = [next(c for c in out if isinstance(c, BlockEnd)).block for out in outs]
    assert ends == [TextBlock("first"), TextBlock("ok"), TextBlock("ok")]
    assert model.remaining == 0
    assert len(model.requests) == 3


async def test_checkpoint_before_every_chunk() -> None:
    model = ScriptedModel(reply("abc"))
    received: list[StreamChunk] = []
    with trio.CancelScope() as scope:
        async with aclosing(model.stream(request())) as stream:
            async for chunk in stream:
                received.append(chunk)
                scope.cancel()
    assert scope.cancelled_caught
    assert received == [BlockStart(0, "text")]


async def test_failures_checkpoint_too() -> None:
    for entry in (fail("SERVER"), None):
        model = ScriptedModel() if entry is None else ScriptedModel(entry)
        with trio.CancelScope() as scope:
            scope.cancel()
            await play(model)
        assert scope.cancelled_caught


async def test_stream_cancelled_before_first_chunk_still_records() -> None:
    model = ScriptedModel(reply("a"), reply("b"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await play(model)
    assert scope.cancelled_caught
    assert len(model.requests) == 1
    assert model.remaining == 1


async def test_other_tasks_run_between_chunks() -> None:
    ticks = 0
    seen: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        async with aclosing(ScriptedModel(reply("x" * 10)).stream(request())) as s:
            async for _ in s:
                seen.append(ticks)
        nursery.cancel_scope.cancel()
    assert seen == sorted(seen)
    assert seen[-1] > seen[0]


# ------------------------------------------------------------------ hang


async def test_hang_until_cancelled() -> None:
    model = ScriptedModel(hang())
    received: list[StreamChunk] = []

    async def consume(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            async with aclosing(model.stream(request())) as stream:
                async for chunk in stream:
                    received.append(chunk)
        assert scope.cancelled_caught

    async with trio.open_nursery() as nursery:
        scope = await nursery.start(consume)
        await trio.testing.wait_all_tasks_blocked()
        assert received == [BlockStart(0, "text"), TextDelta(0, "partial")]
        scope.cancel()


async def test_hang_without_prefix(autojump_clock: trio.testing.MockClock) -> None:
    received: list[StreamChunk] = []
    with trio.move_on_after(1000) as scope:
        async with aclosing(ScriptedModel(hang(None)).stream(request())) as stream:
            async for chunk in stream:
                received.append(chunk)
    assert scope.cancelled_caught
    assert received == []


# ------------------------------------------------------------------ gate


async def consume_into(
    model: ScriptedModel,
    received: list[StreamChunk],
    errors: list[LlmError],
    done: trio.Event,
) -> None:
    try:
        async with aclosing(model.stream(request())) as stream:
            async for chunk in stream:
                received.append(chunk)
    except LlmError as exc:
        errors.append(exc)
    finally:
        done.set()


async def test_gate_blocks_until_released() -> None:
    g = gate()
    assert isinstance(g, Gate)
    assert isinstance(g, Script)
    model = ScriptedModel(g)
    received: list[StreamChunk] = []
    errors: list[LlmError] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume_into, model, received, errors, done)
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        assert g.reached.is_set()
        assert received == []
        assert len(model.requests) == 1
        g.release()
        await done.wait()
    assert received == await play(ScriptedModel(reply("ok")))
    assert errors == []


async def test_gate_with_entry_and_after() -> None:
    g = gate(reply("abcd"), after=3)
    model = ScriptedModel(g)
    received: list[StreamChunk] = []
    errors: list[LlmError] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume_into, model, received, errors, done)
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        assert received == [BlockStart(0, "text"), TextDelta(0, "a"), TextDelta(0, "b")]
        g.release()
        await done.wait()
    assert received == await play(ScriptedModel(reply("abcd")))


async def test_gate_fail() -> None:
    g = gate(reply("abcd"), after=1)
    model = ScriptedModel(g)
    received: list[StreamChunk] = []
    errors: list[LlmError] = []
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume_into, model, received, errors, done)
        await g.wait_reached()
        g.fail("SERVER", "gate says no", retry_after_ms=5)
        g.release()  # no effect: the gate already failed
        await done.wait()
    assert received == [BlockStart(0, "text")]
    assert [e.failure for e in errors] == [
        LlmFailure("gate says no", "SERVER", retry_after_ms=5)
    ]


async def test_gate_released_early_does_not_block() -> None:
    g = gate(reply("x"))
    g.release()
    g.fail("SERVER")  # no effect once released
    assert (await play(ScriptedModel(g)))[-1] == stop()
    assert g.reached.is_set()


async def test_gate_after_beyond_the_entry_stops_at_its_end() -> None:
    g = gate(reply("x"), after=100)
    g.fail("TIMEOUT")
    received: list[StreamChunk] = []
    with pytest.raises(LlmError) as info:
        async with aclosing(ScriptedModel(g).stream(request())) as stream:
            async for chunk in stream:
                received.append(chunk)
    assert info.value.failure.code == "TIMEOUT"
    assert received[-1] == stop()


async def test_gate_wait_is_cancellable_and_closing_leaves_nothing_behind() -> None:
    # Cancelling a consumer held at the gate, and closing a stream early, must not
    # leave generators for trio to finalize (filterwarnings=error turns that
    # warning into a failure).
    g = gate(reply("abc"), after=1)
    received: list[StreamChunk] = []

    async def consume(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            async with aclosing(ScriptedModel(g).stream(request())) as stream:
                async for chunk in stream:
                    received.append(chunk)
        assert scope.cancelled_caught

    async with trio.open_nursery() as nursery:
        scope = await nursery.start(consume)
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
    assert received == [BlockStart(0, "text")]

    stream = ScriptedModel(gate(reply("abc"), after=2)).stream(request())
    assert await stream.__anext__() == BlockStart(0, "text")
    await stream.aclose()
    gc.collect()
