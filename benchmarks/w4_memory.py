"""W4: memory per idle agent, and the tasks an idle agent holds.

1,000 agents are created and left idle (no turn). Each carries one agent-scoped
``agent/assistant-stream`` listener (``agent.scope.on``, a :class:`LiveCounter` of its
own), the way a UI consumes a live reply and the shared harness's agents do. Each
repetition runs in a fresh Python process, so the resident-set growth is memory the
agents took, not memory an earlier workload freed. The child process:

1. warms up (creates and disposes a few agents, keeps ten idle ones),
2. counts the trio tasks and reads the RSS, creates 1,000 agents, reads both again,
3. starts ``tracemalloc`` and creates another 1,000 agents: the traced growth over
   1,000 is the Python-heap bytes per idle agent (``tracemalloc`` inflates RSS, so
   the RSS figure comes from step 2, without it),
4. creates 1,000 more without the listener: the bytes of a bare idle agent.

It prints one JSON object; the parent turns the repetitions into rows.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target
from ._scenario import (
    OPTIONS,
    LiveCounter,
    bench_runtime,
    count_tasks,
    rss_bytes,
    scripted_reply,
)

__all__ = ["measure_idle_agents", "run"]

NAME = "W4"
REF = "ref: TS 62 KB; pi-agent-core 1.75 KB"
KB = 1024
TOP_SITES = 8


def measure_idle_agents(agents: int) -> dict[str, Any]:
    """Create ``agents`` idle agents, each with its scoped listener, twice over (RSS
    pass, tracemalloc pass), then ``agents`` bare ones traced; the figures."""
    out: dict[str, Any] = {}

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            create = runtime.agents.create

            async def listened() -> dsh.AgentHandle:
                handle = await create(options=OPTIONS)
                handle.agent.scope.on("agent/assistant-stream", LiveCounter())
                return handle

            for _ in range(5):
                await (await listened()).dispose()
                await (await create(options=OPTIONS)).dispose()
            handles = [await listened() for _ in range(10)]
            gc.collect()
            tasks_before = count_tasks()
            rss_before = rss_bytes()
            c0 = time.process_time_ns()
            handles += [await listened() for _ in range(agents)]
            create_ns = time.process_time_ns() - c0
            gc.collect()
            rss_after = rss_bytes()
            tasks_after = count_tasks()

            tracemalloc.start()
            gc.collect()
            traced_before = tracemalloc.get_traced_memory()[0]
            handles += [await listened() for _ in range(agents)]
            gc.collect()
            traced_after = tracemalloc.get_traced_memory()[0]
            snapshot = tracemalloc.take_snapshot()
            handles += [await create(options=OPTIONS) for _ in range(agents)]
            gc.collect()
            bare_after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            sites = [
                {
                    "site": str(stat.traceback[0]),
                    "bytes_per_agent": stat.size / agents,
                    "count": stat.count,
                }
                for stat in snapshot.statistics("lineno")[:TOP_SITES]
            ]
            out.update(
                agents=agents,
                traced_bytes_per_agent=(traced_after - traced_before) / agents,
                bare_bytes_per_agent=(bare_after - traced_after) / agents,
                rss_bytes_per_agent=(rss_after - rss_before) / agents,
                create_us_per_agent=create_ns / agents / 1000,
                tasks_before=tasks_before,
                tasks_after=tasks_after,
                live_agents=len(runtime.agents.list()),
                top_sites=sites,
            )
            del handles

    trio.run(main)
    return out


def _child(agents: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.w4_memory", str(agents)],
        capture_output=True,
        text=True,
        check=False,
        cwd=_project_root(),
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"W4 child process failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _project_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent)


def run(ctx: Context) -> list[Row]:
    """Run W4 in fresh child processes; bytes per idle agent and idle task count."""
    agents = ctx.size(1_000, 200)
    results = []
    for k in range(ctx.repetitions):
        results.append(_child(agents))
        ctx.log(
            f"W4 rep {k + 1}: {results[-1]['traced_bytes_per_agent']:.0f} B/agent traced"
        )
    traced = tuple(r["traced_bytes_per_agent"] / KB for r in results)
    bare = tuple(r["bare_bytes_per_agent"] / KB for r in results)
    rss = tuple(r["rss_bytes_per_agent"] / KB for r in results)
    extra_tasks = tuple(float(r["tasks_after"] - r["tasks_before"]) for r in results)
    create = tuple(r["create_us_per_agent"] for r in results)
    return [
        Row(
            workload=NAME,
            metric="tracemalloc KB/idle agent",
            unit="KB",
            samples=traced,
            target=Target(bar=8, goal=1.7),
            ref=REF,
            note=f"{agents:,} idle agents, one scoped listener each; KB = 1,024 B",
            detail={"top_sites_last_repetition": results[-1]["top_sites"]},
        ),
        Row(
            workload=NAME,
            metric="tracemalloc KB/idle agent, no listener",
            unit="KB",
            samples=bare,
            note="the same agents without their scoped listener",
        ),
        Row(
            workload=NAME,
            metric="RSS KB/idle agent",
            unit="KB",
            samples=rss,
            note="fresh process per repetition",
        ),
        Row(
            workload=NAME,
            metric="extra trio tasks while idle",
            unit="tasks",
            samples=extra_tasks,
            note=f"{results[-1]['tasks_before']} tasks before, {results[-1]['tasks_after']} after",
        ),
        Row(workload=NAME, metric="create CPU µs/agent", unit="µs", samples=create),
    ]


if __name__ == "__main__":
    print(json.dumps(measure_idle_agents(int(sys.argv[1]))))
