"""W3-10k: 10,000 agents alive, every one running follow-up turns at once.

Per repetition, in one ``trio.run``: the floor (as many bare-trio tasks running the
same text turns, per chunk one checkpoint and a list append) is timed first, with no
agent alive; then 10,000 agents are created in a fresh runtime, each with its
agent-scoped ``agent/assistant-stream`` listener, run one untimed turn each, and the
next turns of all of them run concurrently, timed. The runtime's turns are timed
three ways, alternating: with the collector as the runtime leaves it (holding 10,000
agents, it raises the generation thresholds itself), inside
:func:`dsh_trio.nursery.agent_collector` (the agents frozen once created, too), and
with the collector off (what the collector's walks cost). The figures are CPU µs per
turn and the ratio to the floor of the same repetition; with them, the objects the
collector tracks per agent once its turns are done (what every full walk visits).
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.nursery import agent_collector
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap, timed
from ._scenario import (
    OPTIONS,
    LiveCounter,
    bare_text_turn,
    bench_runtime,
    reply_texts,
    scripted_reply,
)
from .w1_turns import runtime_turns

__all__ = ["run"]

NAME = "W3-10k"
MODES = ("default", "agent_collector", "collector off")


async def _together(fn: Callable[[Any], Awaitable[None]], items: Iterable[Any]) -> None:
    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(fn, item)


async def _floor(agents: int, turns: int, texts: tuple[str, ...]) -> float:
    async def task(k: int) -> None:
        log: list[dict[str, str]] = []
        for t in range(turns):
            await bare_text_turn(log, f"agent {k} turn {t}", texts)

    clean_heap()
    with timed() as t:
        await _together(task, range(agents))
    return t.cpu_ns / (agents * turns) / 1000


def _tracked() -> int:
    """The objects the collector tracks now, after a full collection."""
    gc.collect()
    return len(gc.get_objects())


async def _runtime(
    agents: int, turns: int, mode: str, deltas: int, objects: list[float]
) -> float:
    """CPU µs per turn; in the default mode, appends the collector-tracked objects
    per agent (after its turns) to ``objects``."""
    model = ScriptedModel(default=scripted_reply())
    before = _tracked() if mode == "default" else 0
    async with bench_runtime(model) as runtime:
        counter = LiveCounter()
        handles = []
        for _ in range(agents):
            handle = await runtime.agents.create(options=OPTIONS)
            handle.agent.scope.on("agent/assistant-stream", counter)
            handles.append(handle)
        group = [h.agent for h in handles]

        async def one(agent: dsh.Agent) -> None:
            await runtime_turns(agent, 1)

        async def many(agent: dsh.Agent) -> None:
            await runtime_turns(agent, turns)

        await _together(one, group)
        model.requests.clear()  # the scripted model's record, not the agents'
        clean_heap()
        counter.n = 0
        if mode == "agent_collector":
            with agent_collector(), timed() as t:
                await _together(many, group)
        elif mode == "collector off":
            gc.disable()
            try:
                with timed() as t:
                    await _together(many, group)
            finally:
                gc.enable()
        else:
            with timed() as t:
                await _together(many, group)
        assert counter.n == agents * turns * deltas, counter.n
        if mode == "default":
            model.requests.clear()
            objects.append((_tracked() - before) / agents)
    return t.cpu_ns / (agents * turns) / 1000


def _measure(
    agents: int, turns: int, reps: int
) -> tuple[dict[str, list[tuple[float, float]]], list[float]]:
    """(floor, runtime) CPU µs/turn per repetition and mode; tracked objects per
    agent after its turns, per repetition."""
    out: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    objects: list[float] = []
    texts = reply_texts()

    async def main() -> None:
        await _floor(agents // 10, 1, texts)  # warm-up
        await _runtime(agents // 10, 1, "default", len(texts), [])
        for _ in range(reps):
            for mode in MODES:
                floor = await _floor(agents, turns, texts)
                runtime = await _runtime(agents, turns, mode, len(texts), objects)
                out[mode].append((floor, runtime))

    trio.run(main)
    return out, objects


def run(ctx: Context) -> list[Row]:
    """Run W3-10k; per mode the runtime's CPU µs/turn and its ratio to the floor."""
    agents = ctx.size(10_000, 1_000)
    turns = 2
    results, objects = _measure(agents, turns, ctx.repetitions)
    for mode, pairs in results.items():
        ctx.log(
            f"W3-10k {mode}: "
            + ", ".join(f"{r:.1f} µs/turn (floor {f:.1f})" for f, r in pairs)
        )
    shape = f"{agents:,} agents x {turns} turns, concurrently"
    rows = [
        Row(
            workload=NAME,
            metric="bare-trio floor CPU µs/turn",
            unit="µs",
            samples=tuple(f for f, _ in results["default"]),
            note=f"{shape}; as many bare tasks, no agent alive",
        )
    ]
    for mode in MODES:
        pairs = results[mode]
        rows += [
            Row(
                workload=NAME,
                metric=f"{mode}: dsh_trio CPU µs/turn",
                unit="µs",
                samples=tuple(r for _, r in pairs),
            ),
            Row(
                workload=NAME,
                metric=f"{mode}: ratio dsh_trio / floor (CPU)",
                unit="x",
                samples=tuple(r / f for f, r in pairs),
                target=Target(bar=4) if mode != "collector off" else None,
                note="floor measured just before, same process",
            ),
        ]
    rows.append(
        Row(
            workload=NAME,
            metric="objects the collector tracks per agent",
            unit="",
            samples=tuple(objects),
            note=f"after {turns + 1} turns each, collected; what every full walk visits",
        )
    )
    return rows
