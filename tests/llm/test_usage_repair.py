"""A usage count a session cannot record (a 400-digit integer, a negative one) is
clamped at the stream boundary and noted, never the end of the turn."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

import dsh_trio as dsh
from dsh_trio.llm import OpenAICompatibleAdapter, stream_model
from dsh_trio.llm._types import ModelRequest
from dsh_trio.testing import ScriptedModel, chunks
from dsh_trio.values import (
    MAX_SAFE_INTEGER,
    AssistantMessageData,
    Finish,
    FinishReason,
    SessionId,
    TurnEnd,
    Usage,
)

URL = "https://llm.test/v1"
HUGE = 10**400 - 1  # 400 digits


def event(payload: str) -> bytes:
    return b"data: " + payload.encode() + b"\n\n"


BODY = (
    event('{"choices":[{"index":0,"delta":{"content":"hi"}}]}')
    + event(
        '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
        f'"usage":{{"prompt_tokens":{HUGE},"completion_tokens":5,'
        '"completion_tokens_details":{"reasoning_tokens":-3}}}'
    )
    + b"data: [DONE]\n\n"
)


async def test_the_turn_completes_with_the_count_clamped_and_noted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=BODY)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, client=client)
        async with dsh.open_runtime(
            models={"p": adapter}, persistence=dsh.JsonlPersistence(tmp_path)
        ) as runtime:
            async with runtime.agents.open(
                options=dsh.AgentOptions(provider="p", model="m")
            ) as agent:
                result = await agent.run(dsh.user_message("one"))
                await agent.flush()
                events = list(agent.session.events)
    assert result.reason == dsh.Completed()
    assert result.text == "hi"
    (reply,) = [e.data for e in events if isinstance(e.data, AssistantMessageData)]
    assert reply.usage == Usage(
        input_tokens=MAX_SAFE_INTEGER, output_tokens=5, reasoning_tokens=0
    )
    assert [e.data for e in events if isinstance(e.data, TurnEnd)] == [
        TurnEnd(1, dsh.Completed())
    ]
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        (
            'the model stream of provider "p" reported usage input_tokens as a '
            f"400-digit number, outside 0..{MAX_SAFE_INTEGER}; it is recorded as "
            f"{MAX_SAFE_INTEGER}"
        ),
        (
            'the model stream of provider "p" reported usage reasoning_tokens as a '
            f"negative 1-digit number, outside 0..{MAX_SAFE_INTEGER}; it is recorded "
            "as 0"
        ),
    ]


async def test_stream_model_clamps_any_adapters_usage() -> None:
    usage = Usage(input_tokens=-(2**60), output_tokens=2**53, cache_read_tokens=7)
    fits = Usage(input_tokens=1, output_tokens=MAX_SAFE_INTEGER)
    model = ScriptedModel(chunks(usage, fits, Finish(FinishReason("stop"))))
    request = ModelRequest(
        provider="p",
        model="m",
        messages=(dsh.user_message("x"),),
        session_id=SessionId("s"),
    )
    got = [c async for c in stream_model(model, request)]
    assert got[0] == Usage(
        input_tokens=0, output_tokens=MAX_SAFE_INTEGER, cache_read_tokens=7
    )
    assert got[1] is fits  # a usage that fits passes as the same object
