"""The live frames of model attempts: who hears each, and how they are numbered.

Every frame goes to the listeners registered when it is emitted, even when the set
changes while an attempt streams or between attempts; an agent's frames carry one
revision sequence across all its attempts, and each chunk frame the index of its
chunk in the attempt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, StreamChunkFrame, StreamEndFrame

from ..support import ChunkAdapter

STOP = dsh.Finish(dsh.FinishReason("stop"))
TEXT = tuple("hello world")
REPLY: tuple[dsh.StreamChunk, ...] = (
    dsh.BlockStart(0, "text"),
    *(dsh.TextDelta(0, t) for t in TEXT),
    dsh.BlockEnd(0, dsh.TextBlock("".join(TEXT))),
    dsh.Usage(1, len(TEXT)),
    STOP,
)
OPTIONS = dsh.AgentOptions(provider="p", model="m")


async def _frames_of_turns(prompts: Sequence[str]) -> list[AssistantStream]:
    """Every frame one listener hears over the turns of ``prompts``."""
    async with dsh.open_runtime(models={"p": ChunkAdapter(REPLY)}) as runtime:
        handle = await runtime.agents.create(options=OPTIONS)
        heard: list[AssistantStream] = []
        handle.agent.scope.on("agent/assistant-stream", heard.append)
        for prompt in prompts:
            await handle.agent.run(prompt)
        await handle.dispose()
    return heard


async def test_each_chunk_is_shown_once_in_order_with_its_index() -> None:
    heard = await _frames_of_turns(["hi"])
    frames = [p.frame for p in heard if isinstance(p.frame, StreamChunkFrame)]
    assert [f.chunk for f in frames] == list(REPLY)
    assert [f.index for f in frames] == list(range(len(REPLY)))


async def test_the_revisions_run_on_across_the_attempts_of_an_agent() -> None:
    heard = await _frames_of_turns(["a", "b", "c"])
    # Each attempt: a start frame, one frame per chunk, an end frame.
    assert [p.frame.revision for p in heard] == list(range(1, 3 * (len(REPLY) + 2) + 1))
    assert len({p.frame.attempt_id for p in heard}) == 3


async def test_a_listener_added_between_attempts_hears_the_next_one() -> None:
    async with dsh.open_runtime(models={"p": ChunkAdapter(REPLY)}) as runtime:
        handle = await runtime.agents.create(options=OPTIONS)
        agent = handle.agent
        first: list[AssistantStream] = []
        second: list[AssistantStream] = []
        dispose = agent.scope.on("agent/assistant-stream", first.append)
        await agent.run("a")
        agent.scope.on("agent/assistant-stream", second.append)
        dispose()
        await agent.run("b")
        await handle.dispose()
    assert len(first) == len(second) == len(REPLY) + 2
    assert first[0].frame.attempt_id != second[0].frame.attempt_id


async def test_the_end_frame_goes_to_the_listeners_registered_then() -> None:
    first: list[AssistantStream] = []
    second: list[AssistantStream] = []
    async with dsh.open_runtime(models={"p": ChunkAdapter(REPLY[-4:])}) as runtime:
        handle = await runtime.agents.create(options=OPTIONS)
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
