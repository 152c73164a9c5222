"""The live frames that open and close a model attempt follow the listener set as it
is when each frame is emitted, even when it changes while the attempt streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, StreamChunkFrame, StreamEndFrame
from dsh_trio.llm import ModelRequest

REPLY: tuple[dsh.StreamChunk, ...] = (
    dsh.BlockStart(0, "text"),
    dsh.TextDelta(0, "hi"),
    dsh.BlockEnd(0, dsh.TextBlock("hi")),
    dsh.Finish(dsh.FinishReason("stop")),
)


class Adapter:
    def stream(self, request: ModelRequest) -> AsyncIterator[dsh.StreamChunk]:
        async def gen() -> AsyncIterator[dsh.StreamChunk]:
            for chunk in REPLY:
                await trio.lowlevel.checkpoint()
                yield chunk

        return gen()


async def test_the_end_frame_goes_to_the_listeners_registered_then() -> None:
    first: list[AssistantStream] = []
    second: list[AssistantStream] = []
    async with dsh.open_runtime(models={"p": Adapter()}) as runtime:
        handle = await runtime.agents.create(
            options=dsh.AgentOptions(provider="p", model="m")
        )
        scope = handle.agent.scope
        dispose: Any = None

        def swap(payload: AssistantStream) -> None:
            first.append(payload)
            frame = payload.frame
            if type(frame) is StreamChunkFrame and type(frame.chunk) is dsh.Finish:
                dispose()  # the listener set changes after the last chunk frame
                scope.on("agent/assistant-stream", second.append)

        dispose = scope.on("agent/assistant-stream", swap)
        await handle.agent.run("hello")
        await handle.dispose()
    assert not any(type(p.frame) is StreamEndFrame for p in first)
    ends = [p for p in second if type(p.frame) is StreamEndFrame]
    assert len(ends) == 1
