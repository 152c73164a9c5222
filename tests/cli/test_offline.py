"""The offline demo model on its own and inside a runtime."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli import OfflineModel
from dsh_trio.cli._offline import OFFLINE_MODEL, OFFLINE_PROVIDER, offline_reply
from dsh_trio.llm import ModelRequest


def _request(*texts: str) -> ModelRequest:
    return ModelRequest(
        provider=OFFLINE_PROVIDER,
        model=OFFLINE_MODEL,
        messages=tuple(dsh.user_message(t) for t in texts),
        session_id=dsh.SessionId("s"),
    )


async def _collect(model: OfflineModel, request: ModelRequest) -> list[dsh.StreamChunk]:
    return [chunk async for chunk in model.stream(request)]


def test_reply_quotes_the_last_message_and_explains_configuration() -> None:
    text = offline_reply(_request("hello there").messages)
    assert text.startswith('Hello! You said: "hello there" (your message #1')
    assert "offline demo model" in text
    assert "--provider" in text
    assert "--base-url" in text


def test_later_replies_count_messages_and_stay_short() -> None:
    text = offline_reply(_request("first", "is trio nice?").messages)
    assert '"is trio nice?"' in text
    assert "#2" in text
    assert "a question" in text
    assert "--base-url" not in text  # the long explanation comes once


def test_reply_is_deterministic_and_quotes_are_bounded() -> None:
    long = "word " * 200
    a = offline_reply(_request(long).messages)
    assert a == offline_reply(_request(long).messages)
    quoted = a.split('"')[1]
    assert len(quoted) <= 160
    assert quoted.endswith("...")


def test_empty_history_gets_a_reply() -> None:
    assert offline_reply([]).startswith("I did not receive any text.")


async def test_stream_shape() -> None:
    request = _request("hello")
    chunks = await _collect(OfflineModel(), request)
    assert chunks[0] == dsh.BlockStart(0, "text")
    deltas = [c for c in chunks if isinstance(c, dsh.TextDelta)]
    assert len(deltas) >= 3  # streamed in several pieces
    full = offline_reply(request.messages)
    assert "".join(d.text for d in deltas) == full
    assert chunks[-3] == dsh.BlockEnd(0, dsh.TextBlock(full))
    assert isinstance(chunks[-2], dsh.Usage)
    assert chunks[-2].output_tokens == len(full.split())
    assert chunks[-1] == dsh.Finish(dsh.FinishReason("stop"))


async def test_stream_checkpoints_between_chunks() -> None:
    model = OfflineModel()
    seen: list[dsh.StreamChunk] = []
    with trio.CancelScope() as scope:
        async for chunk in model.stream(_request("hello")):
            seen.append(chunk)
            if len(seen) == 2:
                scope.cancel()
    assert scope.cancelled_caught
    assert len(seen) == 2  # the next chunk's checkpoint saw the cancellation


async def test_chunk_delay_sleeps_on_the_trio_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    chunks = await _collect(OfflineModel(chunk_delay=0.5), _request("hello"))
    deltas = sum(isinstance(c, dsh.TextDelta) for c in chunks)
    assert trio.current_time() - start == pytest.approx(0.5 * deltas)


def test_negative_delay_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk_delay"):
        OfflineModel(chunk_delay=-1)


async def test_serves_an_agent() -> None:
    async with dsh.open_runtime(models={OFFLINE_PROVIDER: OfflineModel()}) as runtime:
        options = dsh.AgentOptions(provider=OFFLINE_PROVIDER, model=OFFLINE_MODEL)
        async with runtime.agents.open(options=options) as agent:
            agent.followup(dsh.user_message("ping"))
            await agent.when_idle()
            agent.followup(dsh.user_message("pong"))
            await agent.when_idle()
            replies = [
                m
                for m in agent.session.derive_messages()
                if isinstance(m, dsh.AssistantMessage)
            ]
    assert len(replies) == 2
    last = replies[-1].content[0]
    assert isinstance(last, dsh.TextBlock)
    assert '"pong" (your message #2' in last.text
