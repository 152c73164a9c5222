"""W1: sequential single-step turns of one agent, next to a bare-trio floor.

Each turn is ``followup(user_message)`` then ``await when_idle()``; the scripted
model answers with a 100-character text streamed as 20 deltas (24 chunks in all,
a checkpoint before each). The floor does the same chunk iteration in one trio
task with no runtime: an async generator yielding the same 24 chunk objects with a
checkpoint before each, every chunk appended to the turn's list, one result list
per turn. Both run in the same process, repetition after repetition, so the ratio
compares like with like.

The "live" rows measure what a UI does and what ``bench-peers/bench_ratio.py`` reports:
the caller consumes the 20 text chunks as they stream, through an agent-scoped
``agent/assistant-stream`` listener, and the floor is the plain bare-trio loop (per
chunk one ``trio.lowlevel.checkpoint()`` and a list append; per turn the reply is
appended). Floor and runtime alternate inside one ``trio.run`` per repetition.
"""

from __future__ import annotations

from contextlib import aclosing

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap, live_rows, timed
from ._scenario import (
    OPTIONS,
    LiveCounter,
    bench_runtime,
    floor_stream,
    reply_chunks,
    scripted_reply,
)

__all__ = [
    "REF_CPU_US",
    "bare_turns",
    "floor_turns",
    "live_turns",
    "run",
    "runtime_turns",
]

NAME = "W1"
#: CPU µs per turn of other implementations on this kind of machine.
REF_CPU_US = "ref: TS 1,890; pi-agent-core 130; langgraph 3,605; pydantic-ai 19,447; openai-agents 30,569"
FLOOR_REF = "ref floor 71"


async def floor_turns(
    turns: int, chunks: tuple[dsh.StreamChunk, ...]
) -> list[list[dsh.StreamChunk]]:
    """The bare-trio floor: ``turns`` iterations of the chunk stream, no runtime."""
    results: list[list[dsh.StreamChunk]] = []
    for _ in range(turns):
        received: list[dsh.StreamChunk] = []
        async with aclosing(floor_stream(chunks)) as stream:
            async for chunk in stream:
                received.append(chunk)
        results.append(received)
    return results


async def runtime_turns(agent: dsh.Agent, turns: int) -> None:
    """``turns`` sequential turns: follow-up, then wait until the agent is idle."""
    followup, when_idle, message = agent.followup, agent.when_idle, dsh.user_message
    for i in range(turns):
        followup(message(f"q{i}"))
        await when_idle()


async def bare_turns(turns: int, texts: tuple[str, ...]) -> list[dict[str, str]]:
    """The plain bare-trio floor: per chunk one checkpoint and a list append."""
    checkpoint = trio.lowlevel.checkpoint
    full = "".join(texts)
    log: list[dict[str, str]] = []
    for i in range(turns):
        log.append({"type": "user", "text": f"q{i}"})
        for text in texts:
            await checkpoint()
            log.append({"type": "delta", "text": text})
        log.append({"type": "assistant", "text": full})
    return log


async def live_turns(agent: dsh.Agent, counter: LiveCounter, turns: int) -> None:
    """``turns`` sequential turns, each consumed live by ``counter``."""
    followup, when_idle, message = agent.followup, agent.when_idle, dsh.user_message
    for i in range(turns):
        followup(message(f"q{i}"))
        await when_idle()


def _measure_live(
    turns: int, reps: int
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(floor, runtime) CPU µs/turn per repetition, alternating in one process: the
    agent consumed live, and an agent nobody listens to, each against the floor
    measured just before it."""
    out: list[tuple[float, float]] = []
    quiet: list[tuple[float, float]] = []
    texts = tuple(c.text for c in reply_chunks() if isinstance(c, dsh.TextDelta))

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            agent = handle.agent
            counter = LiveCounter()
            agent.scope.on("agent/assistant-stream", counter)
            unheard = await runtime.agents.create(options=OPTIONS)
            await bare_turns(turns // 5, texts)  # warm-up
            await live_turns(agent, counter, turns // 5)
            await runtime_turns(unheard.agent, turns // 5)
            for _ in range(reps):
                clean_heap()
                with timed() as floor:
                    log = await bare_turns(turns, texts)
                assert len(log) == turns * (len(texts) + 2)
                del log
                counter.n = 0
                clean_heap()
                with timed() as rt:
                    await live_turns(agent, counter, turns)
                assert counter.n == turns * len(texts), counter.n
                out.append((floor.cpu_ns / turns / 1000, rt.cpu_ns / turns / 1000))
                clean_heap()
                with timed() as floor:
                    log = await bare_turns(turns, texts)
                del log
                clean_heap()
                with timed() as rt:
                    await runtime_turns(unheard.agent, turns)
                quiet.append((floor.cpu_ns / turns / 1000, rt.cpu_ns / turns / 1000))
            await handle.dispose()
            await unheard.dispose()

    trio.run(main)
    return out, quiet


def _measure(
    turns: int, chunks: tuple[dsh.StreamChunk, ...]
) -> tuple[int, int, int, int, int]:
    """One repetition: (floor CPU, floor wall, runtime CPU, runtime wall) ns, and events."""
    out: list[int] = []

    async def main() -> None:
        clean_heap()
        with timed() as floor:
            results = await floor_turns(turns, chunks)
        assert len(results) == turns and all(len(r) == len(chunks) for r in results)
        del results
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            agent = handle.agent
            clean_heap()
            with timed() as rt:
                await runtime_turns(agent, turns)
            assert len(model.requests) == turns
            out.extend(
                (
                    floor.cpu_ns,
                    floor.wall_ns,
                    rt.cpu_ns,
                    rt.wall_ns,
                    len(agent.session.events),
                )
            )
            await handle.dispose()

    trio.run(main)
    return out[0], out[1], out[2], out[3], out[4]


def run(ctx: Context) -> list[Row]:
    """Run W1; rows for the runtime, the floor and their ratio."""
    turns = ctx.size(1_000, 200)
    chunks = reply_chunks()
    _measure(ctx.size(200, 20), chunks)  # warm-up: imports, caches, code paths
    floor_cpu: list[float] = []
    floor_wall: list[float] = []
    rt_cpu: list[float] = []
    rt_wall: list[float] = []
    events = 0
    for k in range(ctx.repetitions):
        f_cpu, f_wall, r_cpu, r_wall, events = _measure(turns, chunks)
        floor_cpu.append(f_cpu / turns / 1000)
        floor_wall.append(f_wall / turns / 1000)
        rt_cpu.append(r_cpu / turns / 1000)
        rt_wall.append(r_wall / turns / 1000)
        ctx.log(
            f"W1 rep {k + 1}: {rt_cpu[-1]:.1f} µs/turn CPU, floor {floor_cpu[-1]:.1f}"
        )
    ratio = [r / f for r, f in zip(rt_cpu, floor_cpu, strict=True)]
    shape = f"{turns:,} turns x {len(chunks)} chunks"
    live, quiet = _measure_live(turns, ctx.repetitions)
    ctx.log(
        "W1 live: " + ", ".join(f"{r:.1f} µs/turn (floor {f:.1f})" for f, r in live)
    )
    shown_live = live_rows(
        NAME,
        live,
        note="agent-scoped agent/assistant-stream listener counts the chunks",
        floor_note="per chunk one checkpoint + list append",
        target=Target(bar=2, goal=1.8),
    )
    return [
        Row(
            workload=NAME,
            metric="dsh_trio CPU µs/turn",
            unit="µs",
            samples=tuple(rt_cpu),
            ref=REF_CPU_US,
        ),
        Row(
            workload=NAME,
            metric="dsh_trio wall µs/turn",
            unit="µs",
            samples=tuple(rt_wall),
        ),
        Row(
            workload=NAME,
            metric="dsh_trio turns/s (wall)",
            unit="turns/s",
            samples=tuple(1e6 / w for w in rt_wall),
            note=f"{shape}; {events:,} session events",
        ),
        Row(
            workload=NAME,
            metric="bare-trio floor CPU µs/turn",
            unit="µs",
            samples=tuple(floor_cpu),
            ref=FLOOR_REF,
        ),
        Row(
            workload=NAME,
            metric="bare-trio floor wall µs/turn",
            unit="µs",
            samples=tuple(floor_wall),
        ),
        Row(
            workload=NAME,
            metric="ratio dsh_trio / floor (CPU)",
            unit="x",
            samples=tuple(ratio),
            target=Target(bar=5, goal=2),
            note="no subscriber; per repetition, same run",
        ),
        *shown_live,
        Row(
            workload=NAME,
            metric="no subscriber: ratio dsh_trio / plain floor (CPU)",
            unit="x",
            samples=tuple(r / f for f, r in quiet),
            target=Target(bar=1.5),
            note="nobody listens to the stream; the live rows' floor, measured beside it",
        ),
    ]
