"""W1-skeleton: how much of a live W1 turn is the library's own work.

A turn of dsh_trio has a shape its public contract fixes: it runs in its own task
under the agent's nursery and cancel scope, the caller waits for it on an event,
the model is an async iterator of chunks, and every chunk reaches a live listener
as an ``AssistantStream`` frame. The *skeleton* is that shape with nothing else: a
task per turn, a cancel scope, a ``trio.Event``, an async generator of the same 24
chunks (a checkpoint before each of the 20 text deltas) read with ``async for``,
and one two-object frame handed to a listener per text delta. No inbox, log,
settlement, request or hooks.

Measured alternating in one process, CPU time per turn, against the plain floor
(per delta one checkpoint and a list append) and against the skeleton itself;
dsh_trio runs with the same minimal adapter (not the heavier ``ScriptedModel``).
The rows say how far any design with this shape stays from the floor, and what
the library adds on top of it. No targets.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import trio

import dsh_trio as dsh

from ._harness import Context, Row, clean_heap, timed
from ._scenario import OPTIONS, PROVIDER, LiveCounter, reply_chunks
from .w1_turns import bare_turns

__all__ = ["FrameCounter", "PlainModel", "run", "skeleton_turns"]

NAME = "W1-skeleton"


class PlainModel:
    """A minimal adapter: the W1 reply's chunks, a checkpoint before each text delta."""

    def __init__(self, chunks: tuple[dsh.StreamChunk, ...]) -> None:
        self._chunks = chunks

    def stream(self, request: object) -> AsyncIterator[dsh.StreamChunk]:
        return self._stream()

    async def _stream(self) -> AsyncIterator[dsh.StreamChunk]:
        checkpoint = trio.lowlevel.checkpoint
        for chunk in self._chunks:
            if type(chunk) is dsh.TextDelta:
                await checkpoint()
            yield chunk


class _Frame:
    __slots__ = ("attempt_id", "chunk", "index", "revision", "time")
    attempt_id: str
    chunk: dsh.StreamChunk
    index: int
    revision: int
    time: int


class _Payload:
    __slots__ = ("agent", "frame")
    agent: object
    frame: _Frame


async def _skeleton_turn(
    model: PlainModel,
    log: list[tuple[str, str]],
    listener: Callable[[_Payload], None] | None,
    done: trio.Event,
) -> None:
    text_delta = dsh.TextDelta
    with trio.CancelScope():
        texts: list[str] = []
        index = 0
        async for chunk in model.stream(None):
            if type(chunk) is text_delta:
                texts.append(chunk.text)
                if listener is not None:
                    frame = _Frame()
                    frame.attempt_id, frame.revision, frame.index = "a", index, index
                    frame.time, frame.chunk = 0, chunk
                    payload = _Payload()
                    payload.agent, payload.frame = model, frame
                    listener(payload)
            index += 1
        log.append(("assistant", "".join(texts)))
    done.set()


async def skeleton_turns(
    nursery: trio.Nursery,
    model: PlainModel,
    turns: int,
    listener: Callable[[_Payload], None] | None,
) -> list[tuple[str, str]]:
    """``turns`` skeleton turns, each in its own task, the caller waiting on an event."""
    log: list[tuple[str, str]] = []
    for i in range(turns):
        log.append(("user", f"q{i}"))
        done = trio.Event()
        nursery.start_soon(_skeleton_turn, model, log, listener, done)
        await done.wait()
    return log


class FrameCounter:
    """The skeleton's live consumer: counts the frames of text deltas."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, payload: _Payload) -> None:
        if type(payload.frame.chunk) is dsh.TextDelta:
            self.n += 1


async def _dsh_turns(agent: dsh.Agent, turns: int) -> None:
    followup, when_idle, message = agent.followup, agent.when_idle, dsh.user_message
    for i in range(turns):
        followup(message(f"q{i}"))
        await when_idle()


def _measure(turns: int, reps: int) -> list[dict[str, float]]:
    """Per repetition: what -> CPU µs/turn (floor, skeleton, dsh_trio; live and not)."""
    chunks = reply_chunks()
    texts = tuple(c.text for c in chunks if isinstance(c, dsh.TextDelta))
    out: list[dict[str, float]] = []

    async def main() -> None:
        model = PlainModel(chunks)
        async with (
            dsh.open_runtime(models={PROVIDER: model}) as runtime,
            trio.open_nursery() as nursery,
        ):
            live = (await runtime.agents.create(options=OPTIONS)).agent
            counter = LiveCounter()
            live.scope.on("agent/assistant-stream", counter)
            quiet = (await runtime.agents.create(options=OPTIONS)).agent
            count = FrameCounter()
            runs: dict[str, Callable[[], Any]] = {
                "floor": lambda: bare_turns(turns, texts),
                "skeleton": lambda: skeleton_turns(nursery, model, turns, count),
                "skeleton, no frames": lambda: skeleton_turns(
                    nursery, model, turns, None
                ),
                "dsh_trio": lambda: _dsh_turns(live, turns),
                "dsh_trio, no subscriber": lambda: _dsh_turns(quiet, turns),
            }
            for run in runs.values():  # warm-up
                await run()
            for _ in range(reps):
                rep: dict[str, float] = {}
                for what, run in runs.items():
                    clean_heap()
                    with timed() as timer:
                        await run()
                    rep[what] = timer.cpu_ns / turns / 1000
                out.append(rep)
            assert counter.n == count.n == (reps + 1) * turns * len(texts)

    trio.run(main)
    return out


def run(ctx: Context) -> list[Row]:
    """Run W1-skeleton: ratios of the skeleton and of dsh_trio to the floor and to
    each other."""
    reps = _measure(ctx.size(1000, 100), ctx.repetitions)

    def ratios(num: str, den: str) -> tuple[float, ...]:
        return tuple(rep[num] / rep[den] for rep in reps)

    shown = (
        (
            "skeleton / floor (live frames)",
            ratios("skeleton", "floor"),
            "task + cancel scope + event + async-generator adapter + frame per delta",
        ),
        ("skeleton, no frames / floor", ratios("skeleton, no frames", "floor"), ""),
        (
            "dsh_trio / floor (live, minimal adapter)",
            ratios("dsh_trio", "floor"),
            "W1's ratio with the adapter above",
        ),
        (
            "dsh_trio / skeleton (live)",
            ratios("dsh_trio", "skeleton"),
            "what the library adds to the shape",
        ),
        (
            "dsh_trio, no subscriber / skeleton, no frames",
            ratios("dsh_trio, no subscriber", "skeleton, no frames"),
            "",
        ),
    )
    rows = [
        Row(workload=NAME, metric=metric, unit="x", samples=samples, note=note)
        for metric, samples, note in shown
    ]
    rows.append(
        Row(
            workload=NAME,
            metric="floor CPU µs/turn",
            unit="µs",
            samples=tuple(rep["floor"] for rep in reps),
        )
    )
    return rows
