"""W1-growth: does a turn get dearer as one agent's history grows?

One agent runs 10,000 W1 turns (1,000 in a quick run); each turn's CPU time is
taken on its own, and the medians of three windows are compared: turns 1-100,
901-1,000 and 9,901-10,000. The scripted model keeps every request it receives
(each holding the whole derived history), which would make the test double, not
the runtime, grow: the list is cleared after every turn, outside the timed part.
"""

from __future__ import annotations

import statistics
import time

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap
from ._scenario import OPTIONS, bench_runtime, scripted_reply

__all__ = ["run", "turn_costs"]

NAME = "W1-growth"
WINDOW = 100


async def turn_costs(agent: dsh.Agent, model: ScriptedModel, turns: int) -> list[int]:
    """CPU nanoseconds of each of ``turns`` sequential turns."""
    cpu = time.process_time_ns
    followup, when_idle, message = agent.followup, agent.when_idle, dsh.user_message
    requests = model.requests
    costs: list[int] = []
    for i in range(turns):
        m = message(f"q{i}")
        t0 = cpu()
        followup(m)
        await when_idle()
        costs.append(cpu() - t0)
        requests.clear()
    return costs


def _measure(turns: int) -> list[int]:
    costs: list[int] = []

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            clean_heap()
            costs.extend(await turn_costs(handle.agent, model, turns))
            await handle.dispose()

    trio.run(main)
    return costs


def _windows(turns: int) -> list[tuple[int, int]]:
    """1-based inclusive turn windows: the first 100, 901-1,000, and the last 100."""
    out = [(1, WINDOW)]
    for end in (1_000, turns):
        if end > WINDOW and (end - WINDOW + 1, end) not in out:
            out.append((end - WINDOW + 1, end))
    return out


def run(ctx: Context) -> list[Row]:
    """Run W1-growth; one row per window and the ratios to the first window."""
    turns = ctx.size(10_000, 1_000)
    windows = _windows(turns)
    per_window: list[list[float]] = [[] for _ in windows]
    for k in range(ctx.repetitions):
        costs = _measure(turns)
        for w, (start, end) in enumerate(windows):
            per_window[w].append(statistics.median(costs[start - 1 : end]) / 1000)
        ctx.log(
            f"W1-growth rep {k + 1}: "
            + ", ".join(f"{s[-1]:.1f}" for s in per_window)
            + " µs/turn"
        )
    rows = [
        Row(
            workload=NAME,
            metric=f"CPU µs/turn, turns {start:,}-{end:,}",
            unit="µs",
            samples=tuple(samples),
            note="median of the window" if w == 0 else "",
        )
        for w, ((start, end), samples) in enumerate(
            zip(windows, per_window, strict=True)
        )
    ]
    first = per_window[0]
    for w, (start, end) in enumerate(windows[1:], start=1):
        last = w == len(windows) - 1
        rows.append(
            Row(
                workload=NAME,
                metric=f"ratio turns {start:,}-{end:,} / 1-{WINDOW}",
                unit="x",
                samples=tuple(b / a for a, b in zip(first, per_window[w], strict=True)),
                target=Target(bar=1.2, goal=1.1) if last else None,
                note="model.requests cleared after every turn" if last else "",
            )
        )
    return rows
