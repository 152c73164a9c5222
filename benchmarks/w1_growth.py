"""W1-growth: does a turn get dearer as one agent's history grows?

Each repetition runs in one ``trio.run``: one agent is grown to 9,900 turns and
another to 900 (990 and 90 in a quick run); a third starts fresh. Then
the three run their next 100 turns *interleaved*, one turn each per round in a
rotating order, each turn's CPU time taken on its own: turns 1-100 of the fresh
agent, 901-1,000 of the middle one and 9,901-10,000 of the long one (the quick
run: 1-10, 91-100, 991-1,000 with windows of 10). The verdict ratio is the median
of the late window over the median of the early one.

Interleaving is what makes the ratio mean something on a noisy machine: the windows
are measured in the same seconds, so a busy neighbour or a frequency change moves
them alike. (Run one after the other, 10,000 turns apart, the same code gave ratios
from 0.53 to 1.67.) All three run in the same heap, so the ratio is the runtime's
own history-dependent work, not the collector's on a larger heap; the sequential
figures of the long agent's growth are reported too, without a target.

The scripted model keeps every request it receives (each holding the whole derived
history), which would make the test double, not the runtime, grow: the list is
cleared after every turn, outside the timed part.
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


async def interleaved_costs(
    agents: list[dsh.Agent], model: ScriptedModel, rounds: int
) -> list[list[int]]:
    """CPU nanoseconds of ``rounds`` turns of each agent, one turn each per round.

    The order rotates every round, so no agent always runs first (or right after
    a given other one).
    """
    cpu = time.process_time_ns
    message = dsh.user_message
    requests = model.requests
    costs: list[list[int]] = [[] for _ in agents]
    n = len(agents)
    for r in range(rounds):
        for k in range(n):
            a = (r + k) % n
            agent = agents[a]
            m = message(f"r{r}")
            t0 = cpu()
            agent.followup(m)
            await agent.when_idle()
            costs[a].append(cpu() - t0)
            requests.clear()
    return costs


def windows(turns: int, window: int) -> list[tuple[int, int]]:
    """1-based inclusive turn windows: the first ``window`` turns, the ``window``
    turns ending at a tenth of ``turns``, and the last ``window``."""
    return [
        (1, window),
        (turns // 10 - window + 1, turns // 10),
        (turns - window + 1, turns),
    ]


def _measure(turns: int, window: int) -> tuple[list[list[int]], list[int]]:
    """One repetition: the interleaved windows' costs, and the long agent's growth."""
    spans = windows(turns, window)
    out: tuple[list[list[int]], list[int]] = ([], [])

    async def main() -> None:
        model = ScriptedModel(default=scripted_reply())
        async with bench_runtime(model) as runtime:
            handles = [await runtime.agents.create(options=OPTIONS) for _ in spans]
            clean_heap()
            # Grow the agents to the turn before their window (untimed for the
            # middle one; the long one's growth is the sequential figure).
            grown = await turn_costs(handles[2].agent, model, spans[2][0] - 1)
            await turn_costs(handles[1].agent, model, spans[1][0] - 1)
            clean_heap()
            costs = await interleaved_costs([h.agent for h in handles], model, window)
            for h in handles:
                await h.dispose()
            out[0].extend(costs)
            out[1].extend(grown)

    trio.run(main)
    return out


def run(ctx: Context) -> list[Row]:
    """Run W1-growth; a row per window, the ratios to the first, and the sequential view."""
    turns = ctx.size(10_000, 1_000)
    window = ctx.size(100, 10)
    spans = windows(turns, window)
    per_window: list[list[float]] = [[] for _ in spans]
    sequential: list[list[float]] = [[], []]
    for k in range(ctx.repetitions):
        costs, grown = _measure(turns, window)
        for w, c in enumerate(costs):
            per_window[w].append(statistics.median(c) / 1000)
        sequential[0].append(statistics.median(grown[:window]) / 1000)
        sequential[1].append(statistics.median(grown[-window:]) / 1000)
        ctx.log(
            f"W1-growth rep {k + 1}: "
            + ", ".join(f"{s[-1]:.1f}" for s in per_window)
            + " µs/turn interleaved"
        )
    rows = [
        Row(
            workload=NAME,
            metric=f"CPU µs/turn, turns {start:,}-{end:,}",
            unit="µs",
            samples=tuple(samples),
            note="median of the window; the windows interleaved" if w == 0 else "",
        )
        for w, ((start, end), samples) in enumerate(zip(spans, per_window, strict=True))
    ]
    first = per_window[0]
    for w, (start, end) in enumerate(spans[1:], start=1):
        last = w == len(spans) - 1
        rows.append(
            Row(
                workload=NAME,
                metric=f"ratio turns {start:,}-{end:,} / 1-{window}",
                unit="x",
                samples=tuple(b / a for a, b in zip(first, per_window[w], strict=True)),
                target=Target(bar=1.2, goal=1.1) if last else None,
                note="model.requests cleared after every turn" if last else "",
            )
        )
    late = spans[2][0] - 1
    rows.append(
        Row(
            workload=NAME,
            metric=f"ratio turns {late - window + 1:,}-{late:,} / 1-{window}, sequential",
            unit="x",
            samples=tuple(b / a for a, b in zip(*sequential, strict=True)),
            note="the long agent's growth, one turn after the other: the machine's "
            "drift over the run shows here",
        )
    )
    return rows
