"""W5: how fast a cancelled turn winds down.

Each trial starts a turn whose stream delivers 5 chunks (the block start and four
text deltas of the W1 reply) and then hangs at a :class:`~dsh_trio.testing.Gate`.
Once the stream is parked there, the clock starts just before
``agent.cancel(UserCancel())`` and stops when ``await agent.when_idle()`` returns:
the turn has been aborted, the partial reply settled as an interrupted
``assistant/message``, ``step/end`` and ``turn/end`` appended, and the driver task
is gone. A trial counts as keeping the partial reply when that interrupted message
carries the 20 characters streamed before the hang.

The "live" row repeats the trials with an agent-scoped ``agent/assistant-stream``
listener consuming the stream, as a UI does.
"""

from __future__ import annotations

import statistics
import time

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, gate

from ._harness import Context, Row, Target, clean_heap
from ._scenario import (
    OPTIONS,
    REPLY_CHUNKS,
    REPLY_TEXT,
    LiveCounter,
    bench_runtime,
    scripted_reply,
)

__all__ = ["cancel_trials", "partial_kept", "run"]

NAME = "W5"
REF = "ref: TS 158 µs; pi-agent-core 16 µs"
CHUNKS_BEFORE_HANG = 5
#: Text streamed before the hang: four of the twenty equal deltas.
PARTIAL = REPLY_TEXT[: (CHUNKS_BEFORE_HANG - 1) * (len(REPLY_TEXT) // REPLY_CHUNKS)]


def partial_kept(agent: dsh.Agent, partial: str = PARTIAL) -> bool:
    """Whether the agent's last ``assistant/message`` is interrupted and its text is
    ``partial``."""
    for event in reversed(agent.session.events):
        if event.type == "assistant/message":
            data = event.data
            message = getattr(data, "message", None)
            text = "".join(
                getattr(block, "text", "") for block in getattr(message, "content", ())
            )
            return bool(getattr(data, "interrupted", False)) and text == partial
    return False


async def cancel_trials(
    agent: dsh.Agent, model: ScriptedModel, trials: int
) -> tuple[list[int], list[int], int]:
    """Run ``trials`` cancels; wall and CPU ns of each, and how many kept the partial reply."""
    wall, cpu = time.perf_counter_ns, time.process_time_ns
    walls: list[int] = []
    cpus: list[int] = []
    kept = 0
    for i in range(trials):
        hold = gate(scripted_reply(), after=CHUNKS_BEFORE_HANG)
        model.push(hold)
        agent.followup(dsh.user_message(f"q{i}"))
        await hold.wait_reached()
        c0, w0 = cpu(), wall()
        agent.cancel(dsh.UserCancel())
        await agent.when_idle()
        w1, c1 = wall(), cpu()
        walls.append(w1 - w0)
        cpus.append(c1 - c0)
        kept += partial_kept(agent)
        model.requests.clear()
    return walls, cpus, kept


def _measure(trials: int, *, live: bool = False) -> tuple[list[int], list[int], int]:
    out: list[tuple[list[int], list[int], int]] = []

    async def main() -> None:
        model = ScriptedModel()
        async with bench_runtime(model) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            if live:
                handle.agent.scope.on("agent/assistant-stream", LiveCounter())
            clean_heap()
            out.append(await cancel_trials(handle.agent, model, trials))
            await handle.dispose()

    trio.run(main)
    return out[0]


def run(ctx: Context) -> list[Row]:
    """Run W5; the median cancel → idle latency of each repetition."""
    trials = ctx.size(200, 40)
    _measure(20)  # warm-up
    wall_medians: list[float] = []
    cpu_medians: list[float] = []
    p90: list[float] = []
    kept_total = 0
    for k in range(ctx.repetitions):
        walls, cpus, kept = _measure(trials)
        wall_medians.append(statistics.median(walls) / 1000)
        cpu_medians.append(statistics.median(cpus) / 1000)
        p90.append(statistics.quantiles(walls, n=10)[-1] / 1000)
        kept_total += kept
        ctx.log(
            f"W5 rep {k + 1}: {wall_medians[-1]:.1f} µs wall, partial kept {kept}/{trials}"
        )
    all_trials = trials * ctx.repetitions
    live_medians: list[float] = []
    live_kept = 0
    for _ in range(ctx.repetitions):
        walls, _cpus, kept = _measure(trials, live=True)
        live_medians.append(statistics.median(walls) / 1000)
        live_kept += kept
    return [
        Row(
            workload=NAME,
            metric="cancel -> when_idle() wall µs",
            unit="µs",
            samples=tuple(wall_medians),
            target=Target(bar=100, goal=60, condition="partial reply kept"),
            ref=REF,
            note=f"median of {trials} trials per repetition; partial reply kept {kept_total}/{all_trials}",
            condition_met=kept_total == all_trials,
            detail={"partial_kept": kept_total, "trials": all_trials},
        ),
        Row(
            workload=NAME,
            metric="cancel -> when_idle() CPU µs",
            unit="µs",
            samples=tuple(cpu_medians),
        ),
        Row(
            workload=NAME,
            metric="cancel -> when_idle() wall µs, p90",
            unit="µs",
            samples=tuple(p90),
        ),
        Row(
            workload=NAME,
            metric="live: cancel -> when_idle() wall µs",
            unit="µs",
            samples=tuple(live_medians),
            target=Target(bar=100, goal=60, condition="partial reply kept"),
            note=f"an agent-scoped agent/assistant-stream listener consumes the stream; "
            f"partial reply kept {live_kept}/{all_trials}",
            condition_met=live_kept == all_trials,
            detail={"partial_kept": live_kept, "trials": all_trials},
        ),
    ]
