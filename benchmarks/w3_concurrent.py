"""W3: 100 agents at once, each running 10 follow-up turns.

Every agent gets its own task doing ``followup`` then ``await when_idle()`` ten
times; all 100 tasks run together in one nursery, so the runtime interleaves 100
model streams. Agents are created before the clock starts and disposed after it
stops; the figure is CPU (and wall) time per turn over all 1,000 turns.

The "live" rows give every agent an agent-scoped ``agent/assistant-stream``
listener counting its text chunks (what ``bench-peers/bench_ratio.py`` measures),
next to a floor of 100 bare-trio tasks running the same turns (per chunk one
checkpoint and a list append), alternating in one ``trio.run``. The "listeners"
row compares one agent's turns while it is the only agent with a scoped listener
and while 999 idle agents have one each: a frame's cost must not grow with them.
"""

from __future__ import annotations

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap, live_rows, timed
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

NAME = "W3"
REF = "ref: TS 1,125; pi-agent-core 137"


def _measure(agents: int, turns_each: int) -> tuple[int, int]:
    out: list[int] = []

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handles = [
                await runtime.agents.create(options=OPTIONS) for _ in range(agents)
            ]
            clean_heap()
            with timed() as t:
                async with trio.open_nursery() as nursery:
                    for handle in handles:
                        nursery.start_soon(runtime_turns, handle.agent, turns_each)
            assert len(model.requests) == agents * turns_each
            assert all(a.status is dsh.AgentStatus.IDLE for a in runtime.agents.list())
            out.extend((t.cpu_ns, t.wall_ns))

    trio.run(main)
    return out[0], out[1]


def _measure_live(agents: int, turns_each: int, reps: int) -> list[tuple[float, float]]:
    """(floor, runtime) CPU µs/turn per repetition, alternating in one ``trio.run``."""
    out: list[tuple[float, float]] = []
    texts = reply_texts()
    total = agents * turns_each

    async def floor_task(k: int) -> None:
        log: list[dict[str, str]] = []
        for t in range(turns_each):
            await bare_text_turn(log, f"agent {k} turn {t}", texts)

    async def concurrently(fn: object, items: list[object]) -> None:
        async with trio.open_nursery() as nursery:
            for item in items:
                nursery.start_soon(fn, item)  # type: ignore[arg-type]

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handles = [
                await runtime.agents.create(options=OPTIONS) for _ in range(agents)
            ]
            counter = LiveCounter()
            for handle in handles:
                handle.agent.scope.on("agent/assistant-stream", counter)

            async def agent_task(agent: dsh.Agent) -> None:
                await runtime_turns(agent, turns_each)

            agent_list: list[object] = [h.agent for h in handles]
            await concurrently(floor_task, list(range(agents)))  # warm-up
            await concurrently(agent_task, agent_list)
            for _ in range(reps):
                clean_heap()
                with timed() as f:
                    await concurrently(floor_task, list(range(agents)))
                counter.n = 0
                clean_heap()
                with timed() as r:
                    await concurrently(agent_task, agent_list)
                assert counter.n == total * len(texts), counter.n
                out.append((f.cpu_ns / total / 1000, r.cpu_ns / total / 1000))
            for handle in handles:
                await handle.dispose()

    trio.run(main)
    return out


def _measure_listeners(others: int, turns: int, reps: int) -> list[tuple[float, float]]:
    """One agent's live turns (CPU µs/turn) with no other scoped listener, then with
    ``others`` idle agents holding one each; alternating runtimes in one ``trio.run``."""
    out: list[tuple[float, float]] = []

    async def main() -> None:
        async with (
            bench_runtime(ScriptedModel(default=scripted_reply())) as alone,
            bench_runtime(ScriptedModel(default=scripted_reply())) as crowded,
        ):
            subjects = []
            for runtime, idle in ((alone, 0), (crowded, others)):
                for _ in range(idle):
                    handle = await runtime.agents.create(options=OPTIONS)
                    handle.agent.scope.on("agent/assistant-stream", LiveCounter())
                handle = await runtime.agents.create(options=OPTIONS)
                handle.agent.scope.on("agent/assistant-stream", LiveCounter())
                subjects.append(handle.agent)
            for agent in subjects:  # warm-up
                await runtime_turns(agent, turns // 5)
            for _ in range(reps):
                pair = []
                for agent in subjects:
                    clean_heap()
                    with timed() as t:
                        await runtime_turns(agent, turns)
                    pair.append(t.cpu_ns / turns / 1000)
                out.append((pair[0], pair[1]))

    trio.run(main)
    return out


def _live_rows(
    live: list[tuple[float, float]], crowd: list[tuple[float, float]], others: int
) -> list[Row]:
    return [
        *live_rows(
            NAME,
            live,
            note="every agent's scoped agent/assistant-stream listener counts its chunks",
            floor_note="as many bare tasks, per chunk one checkpoint + list append",
            target=Target(bar=3),
        ),
        Row(
            workload=NAME,
            metric=f"listeners: 1 vs {others + 1:,} scoped (CPU ratio)",
            unit="x",
            samples=tuple(c / a for a, c in crowd),
            target=Target(bar=1.1),
            note=f"one agent's live turns, alone vs beside {others:,} idle subscribed agents",
        ),
    ]


def run(ctx: Context) -> list[Row]:
    """Run W3; CPU and wall µs per turn, and turns per second."""
    agents = ctx.size(100, 20)
    turns_each = ctx.size(10, 5)
    total = agents * turns_each
    _measure(10, 2)  # warm-up
    cpu: list[float] = []
    wall: list[float] = []
    for k in range(ctx.repetitions):
        c, w = _measure(agents, turns_each)
        cpu.append(c / total / 1000)
        wall.append(w / total / 1000)
        ctx.log(f"W3 rep {k + 1}: {cpu[-1]:.1f} µs/turn CPU")
    live = _measure_live(agents, turns_each, ctx.repetitions)
    ctx.log(
        "W3 live: " + ", ".join(f"{r:.1f} µs/turn (floor {f:.1f})" for f, r in live)
    )
    others = ctx.size(999, 199)
    crowd = _measure_listeners(others, ctx.size(500, 100), ctx.repetitions)
    ctx.log(
        "W3 listeners: " + ", ".join(f"{a:.1f} vs {c:.1f} µs/turn" for a, c in crowd)
    )
    return [
        Row(
            workload=NAME,
            metric="CPU µs/turn",
            unit="µs",
            samples=tuple(cpu),
            target=Target(goal=135),
            ref=REF,
        ),
        Row(workload=NAME, metric="wall µs/turn", unit="µs", samples=tuple(wall)),
        Row(
            workload=NAME,
            metric="turns/s (wall)",
            unit="turns/s",
            samples=tuple(1e6 / w for w in wall),
            note=f"{agents} agents x {turns_each} turns, concurrently",
        ),
        *_live_rows(live, crowd, others),
    ]
