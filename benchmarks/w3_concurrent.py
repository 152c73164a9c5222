"""W3: 100 agents at once, each running 10 follow-up turns.

Every agent gets its own task doing ``followup`` then ``await when_idle()`` ten
times; all 100 tasks run together in one nursery, so the runtime interleaves 100
model streams. Agents are created before the clock starts and disposed after it
stops; the figure is CPU (and wall) time per turn over all 1,000 turns.
"""

from __future__ import annotations

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap, timed
from ._scenario import OPTIONS, bench_runtime, scripted_reply
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
    ]
