"""What the dsh_trio workloads share: the scripted reply, the runtime, task counting."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager

import trio

import dsh_trio as dsh
from dsh_trio.events import AssistantStream, StreamChunkFrame
from dsh_trio.testing import Script, ScriptedModel, reply

__all__ = [
    "OPTIONS",
    "PROVIDER",
    "REPLY_CHUNKS",
    "REPLY_TEXT",
    "LiveCounter",
    "bare_cancel_turn",
    "bare_text_turn",
    "bare_tool_turn",
    "bench_runtime",
    "count_tasks",
    "reply_texts",
    "reply_chunks",
    "rss_bytes",
    "scripted_reply",
]

PROVIDER = "scripted"
OPTIONS = dsh.AgentOptions(provider=PROVIDER, model="bench")
#: The W1 reply: 100 characters streamed as 20 text deltas (24 chunks with the
#: block start/end, usage and finish chunks).
REPLY_TEXT = "x" * 100
REPLY_CHUNKS = 20


def scripted_reply() -> Script:
    """The scripted 20-chunk text reply every turn-based workload streams."""
    return reply(REPLY_TEXT, chunks=REPLY_CHUNKS)


def reply_chunks() -> tuple[dsh.StreamChunk, ...]:
    """The exact chunk objects :func:`scripted_reply` streams (read through the model)."""

    async def collect() -> tuple[dsh.StreamChunk, ...]:
        model = ScriptedModel(scripted_reply())
        request = dsh.ModelRequest(
            provider=PROVIDER,
            model="bench",
            messages=(),
            session_id=dsh.SessionId("floor"),
        )
        async with aclosing(model.stream(request)) as stream:
            return tuple([chunk async for chunk in stream])

    return trio.run(collect)


@asynccontextmanager
async def bench_runtime(model: ScriptedModel) -> AsyncIterator[dsh.Runtime]:
    """A runtime with ``model`` registered as the ``scripted`` provider, no persistence."""
    async with dsh.open_runtime(models={PROVIDER: model}) as runtime:
        yield runtime


def count_tasks() -> int:
    """How many trio tasks exist in the current run (the root task included)."""
    root = trio.lowlevel.current_root_task()
    assert root is not None, "count_tasks() runs inside trio.run"
    stack = [root]
    count = 0
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


def rss_bytes() -> int:
    """The resident set size of this process (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            resident_pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


async def floor_stream(
    chunks: tuple[dsh.StreamChunk, ...],
) -> AsyncGenerator[dsh.StreamChunk, None]:
    """The bare-trio stand-in for a model stream: a checkpoint before every chunk."""
    checkpoint = trio.lowlevel.checkpoint
    for chunk in chunks:
        await checkpoint()
        yield chunk
    await checkpoint()


class LiveCounter:
    """The caller's live consumer, as a UI has one: an ``agent/assistant-stream``
    listener counting the text chunks of the stream."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, payload: AssistantStream) -> None:
        frame = payload.frame
        if type(frame) is StreamChunkFrame and type(frame.chunk) is dsh.TextDelta:
            self.n += 1


def reply_texts() -> tuple[str, ...]:
    """The text of each of the W1 reply's 20 deltas."""
    return tuple(c.text for c in reply_chunks() if isinstance(c, dsh.TextDelta))


async def bare_text_turn(
    log: list[dict[str, str]], prompt: str, texts: tuple[str, ...]
) -> None:
    """The plain bare-trio floor of one text turn: per chunk one checkpoint and a list
    append; the prompt and the reply appended around them."""
    checkpoint = trio.lowlevel.checkpoint
    log.append({"type": "user", "text": prompt})
    for text in texts:
        await checkpoint()
        log.append({"type": "delta", "text": text})
    log.append({"type": "assistant", "text": "".join(texts)})


async def bare_tool_turn(
    log: list[dict[str, str]], prompt: str, texts: tuple[str, ...]
) -> None:
    """The floor of one tool turn: one checkpoint for the call, the call and its
    result appended, then a text turn's stream."""
    checkpoint = trio.lowlevel.checkpoint
    log.append({"type": "user", "text": prompt})
    await checkpoint()
    log.append({"type": "tool_call", "name": "lookup", "id": "c1"})
    await checkpoint()  # the tool body's own checkpoint
    log.append({"type": "tool_result", "id": "c1", "value": "value of k"})
    for text in texts:
        await checkpoint()
        log.append({"type": "delta", "text": text})
    log.append({"type": "assistant", "text": "".join(texts)})


async def bare_cancel_turn(
    log: list[dict[str, str]], prompt: str, texts: tuple[str, ...], after: int
) -> None:
    """The floor of a turn cancelled while it streams: a text turn's stream in a
    cancel scope, cancelled by the consumer of its ``after``-th delta; the partial
    reply appended once the scope has exited."""
    checkpoint = trio.lowlevel.checkpoint
    log.append({"type": "user", "text": prompt})
    kept: list[str] = []
    with trio.CancelScope() as scope:
        for text in texts:
            await checkpoint()
            log.append({"type": "delta", "text": text})
            kept.append(text)
            if len(kept) == after:
                scope.cancel()
    log.append({"type": "assistant", "text": "".join(kept), "stop": "cancelled"})
