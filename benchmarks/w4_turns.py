"""W4-turns: what a live session costs per turn it has run, with its past settled or not.

In a fresh child process per setting, ``AGENTS`` agents with a JSONL store
(durability ``"none"``: no fsync) each run ``TURNS`` W1 turns (a 100-character
reply in 20 deltas), one after the other. Python-heap bytes (``tracemalloc``) are
read after the first turn of every agent and after the last, the collector run
first each time (in a second child, the RSS): the growth per turn between them is
what one more turn of a long live session retains, and the heap per agent after
``TURNS`` turns is what such a session costs while idle (its agent alive, nothing
pending). The child runs once with
settling as it ships (the session keeps its settled events as the lines its log
writer wrote, compressed) and once with it off (every event kept as a value).

    python -m benchmarks --only W4-turns
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.persistence import JsonlPersistence

from ._harness import Context, Row, Target
from ._scenario import OPTIONS, PROVIDER, scripted_reply

__all__ = ["measure", "run"]

NAME = "W4-turns"
KB = 1024


def _off(self: object) -> None:
    return None


def _rss() -> int:
    """This process's resident set in bytes (0 where ``/proc`` is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def measure(
    agents: int, turns: int, *, settling: bool, traced: bool = True
) -> dict[str, float]:
    """Heap bytes per turn and per agent of ``agents`` agents of ``turns`` turns
    (``traced``: ``tracemalloc``'s count; else the RSS, which it would inflate)."""
    if not settling:
        from dsh_trio.persistence._recorder import SessionRecorder

        SessionRecorder._hand_lines = _off  # type: ignore[method-assign]
    out: dict[str, float] = {}

    def heap() -> int:
        return tracemalloc.get_traced_memory()[0] if traced else _rss()

    async def main() -> None:
        model = dsh.testing.ScriptedModel(default=scripted_reply())
        with tempfile.TemporaryDirectory(prefix="dsh-w4-turns-") as root:
            store = JsonlPersistence(root, durability="none")
            async with dsh.open_runtime(
                models={PROVIDER: model}, persistence=store
            ) as runtime:
                gc.collect()
                if traced:
                    tracemalloc.start()
                empty = heap()
                handles = [
                    await runtime.agents.create(options=OPTIONS) for _ in range(agents)
                ]

                async def turn(agent: dsh.Agent, i: int) -> None:
                    agent.followup(dsh.user_message(f"turn {i}"))
                    await agent.when_idle()
                    model.requests.clear()

                for handle in handles:
                    await turn(handle.agent, 0)
                    await handle.agent.flush()
                gc.collect()
                first = heap()
                for handle in handles:
                    for i in range(1, turns):
                        await turn(handle.agent, i)
                    await handle.agent.flush()
                await trio.testing.wait_all_tasks_blocked()
                gc.collect()
                last = heap()
                tracemalloc.stop()
                out.update(
                    after_one_turn=(first - empty) / agents,
                    after_all_turns=(last - empty) / agents,
                    per_turn=(last - first) / agents / (turns - 1),
                )
                for handle in handles:
                    await handle.dispose()

    trio.run(main)
    return out


def _child(
    agents: int, turns: int, settling: bool, *, traced: bool = True
) -> dict[str, float]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.w4_turns",
            str(agents),
            str(turns),
            "on" if settling else "off",
            "traced" if traced else "rss",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"W4-turns child failed: {proc.stderr.strip()[-2000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run(ctx: Context) -> list[Row]:
    """Run W4-turns with settling on and off; bytes per turn and per agent."""
    agents, turns = ctx.size(20, 4), ctx.size(512, 64)
    rows: list[Row] = []
    for settling in (True, False):
        results = [_child(agents, turns, settling) for _ in range(ctx.repetitions)]
        rss = [
            _child(agents, turns, settling, traced=False)
            for _ in range(ctx.repetitions)
        ]
        label = "settled past" if settling else "every event a value"
        ctx.log(f"W4-turns {label}: {results[-1]['per_turn']:.0f} B/turn")
        note = f"{agents} agents x {turns} turns, JSONL store; KB = 1,024 B"
        rows += [
            Row(
                workload=NAME,
                metric=f"tracemalloc B/turn, {label}",
                unit="B",
                samples=tuple(r["per_turn"] for r in results),
                target=Target(bar=2048, goal=1024) if settling else None,
                note=note,
            ),
            Row(
                workload=NAME,
                metric=f"RSS B/turn, {label}",
                unit="B",
                samples=tuple(r["per_turn"] for r in rss),
                note="the same run without tracemalloc",
            ),
            Row(
                workload=NAME,
                metric=f"tracemalloc KB/agent after 1 turn, {label}",
                unit="KB",
                samples=tuple(r["after_one_turn"] / KB for r in results),
            ),
            Row(
                workload=NAME,
                metric=f"tracemalloc KB/idle agent after {turns} turns, {label}",
                unit="KB",
                samples=tuple(r["after_all_turns"] / KB for r in results),
            ),
        ]
    return rows


if __name__ == "__main__":
    args: Any = sys.argv[1:]
    print(
        json.dumps(
            measure(
                int(args[0]),
                int(args[1]),
                settling=args[2] == "on",
                traced=args[3:] != ["rss"],
            )
        )
    )
