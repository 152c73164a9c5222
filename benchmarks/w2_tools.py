"""W2: one tool call, then the final answer, per turn.

Like W1, but each turn has two steps: the scripted model first calls the tool
``lookup`` (one ``ToolCallDelta``); the runtime validates the arguments, runs the
tool and commits its result; the second step streams the W1 20-delta text reply.
Runs only where :mod:`dsh_trio.tools` is available.

The "live" rows consume the reply through an agent-scoped ``agent/assistant-stream``
listener (what ``bench-peers/bench_ratio.py`` measures), next to a bare-trio floor
of the same turn (a checkpoint for the call, the call and its result appended, then
per chunk one checkpoint and a list append), alternating in one ``trio.run``.
"""

from __future__ import annotations

from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, tool_calls

from ._harness import Context, Row, Target, clean_heap, live_rows, skipped, timed
from ._scenario import (
    OPTIONS,
    PROVIDER,
    LiveCounter,
    bare_tool_turn,
    reply_texts,
    scripted_reply,
)

__all__ = ["run"]

NAME = "W2"
REF = "ref: TS 3,010; pi-agent-core 345"


try:
    from dsh_trio.tools import ToolContext
except ImportError:  # tools not built yet: run() reports W2 as skipped
    ToolContext = Any  # type: ignore[misc,assignment]


async def lookup(ctx: ToolContext, key: str) -> str:
    """Look a key up in the benchmark's table."""
    await trio.lowlevel.checkpoint()
    return f"value of {key}"


def _lookup_tool() -> Any:
    from dsh_trio.tools import tool

    return tool(lookup)


def _measure(turns: int) -> tuple[int, int]:
    out: list[int] = []
    lookup_tool = _lookup_tool()

    async def main() -> None:
        model = ScriptedModel()
        async with dsh.open_runtime(
            models={PROVIDER: model}, tools=[lookup_tool]
        ) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            agent = handle.agent
            for i in range(turns):
                model.push(
                    tool_calls((f"call-{i}", "lookup", '{"key": "k"}')),
                    scripted_reply(),
                )
            clean_heap()
            followup, when_idle, message = (
                agent.followup,
                agent.when_idle,
                dsh.user_message,
            )
            with timed() as t:
                for i in range(turns):
                    followup(message(f"q{i}"))
                    await when_idle()
            results = [e for e in agent.session.events if e.type == "tool/result"]
            if (
                len(results) != turns
                or model.remaining
                or any(getattr(e.data, "error", None) is not None for e in results)
            ):
                raise RuntimeError(
                    f"W2 turns did not run as scripted: {len(results)} tool results for {turns} turns"
                )
            out.extend((t.cpu_ns, t.wall_ns))
            await handle.dispose()

    trio.run(main)
    return out[0], out[1]


def _measure_live(turns: int, reps: int) -> list[tuple[float, float]]:
    """(floor, runtime) CPU µs/turn per repetition, alternating in one ``trio.run``;
    the caller consumes the reply live through an agent-scoped listener."""
    out: list[tuple[float, float]] = []
    lookup_tool = _lookup_tool()
    texts = reply_texts()

    async def floor(n: int) -> None:
        log: list[dict[str, str]] = []
        for i in range(n):
            await bare_tool_turn(log, f"q{i}", texts)
        assert len(log) == n * (len(texts) + 4)

    async def main() -> None:
        model = ScriptedModel()
        async with dsh.open_runtime(
            models={PROVIDER: model}, tools=[lookup_tool]
        ) as runtime:
            handle = await runtime.agents.create(options=OPTIONS)
            agent = handle.agent
            counter = LiveCounter()
            agent.scope.on("agent/assistant-stream", counter)

            def script(n: int) -> None:
                for i in range(n):
                    model.push(
                        tool_calls((f"call-{i}", "lookup", '{"key": "k"}')),
                        scripted_reply(),
                    )

            async def turns_of(n: int) -> None:
                followup, when_idle, message = (
                    agent.followup,
                    agent.when_idle,
                    dsh.user_message,
                )
                for i in range(n):
                    followup(message(f"q{i}"))
                    await when_idle()

            await floor(turns // 5)  # warm-up
            script(turns // 5)
            await turns_of(turns // 5)
            for _ in range(reps):
                clean_heap()
                with timed() as f:
                    await floor(turns)
                counter.n = 0
                script(turns)
                clean_heap()
                with timed() as r:
                    await turns_of(turns)
                assert counter.n == turns * len(texts), counter.n
                out.append((f.cpu_ns / turns / 1000, r.cpu_ns / turns / 1000))
            await handle.dispose()

    trio.run(main)
    return out


def _live_rows(live: list[tuple[float, float]]) -> list[Row]:
    return live_rows(
        NAME,
        live,
        note="agent-scoped agent/assistant-stream listener counts the chunks",
        floor_note="tool call + result appended, then per chunk one checkpoint + append",
        target=Target(bar=3),
    )


def run(ctx: Context) -> list[Row]:
    """Run W2 when tools exist; CPU and wall µs per turn."""
    try:
        import dsh_trio.tools as tools_module
    except ImportError:
        return [skipped(NAME, "dsh_trio.tools is not available")]
    if not hasattr(tools_module, "tool"):
        return [skipped(NAME, "dsh_trio.tools has no @tool yet")]
    turns = ctx.size(1_000, 200)
    _measure(ctx.size(100, 20))  # warm-up
    cpu: list[float] = []
    wall: list[float] = []
    for k in range(ctx.repetitions):
        c, w = _measure(turns)
        cpu.append(c / turns / 1000)
        wall.append(w / turns / 1000)
        ctx.log(f"W2 rep {k + 1}: {cpu[-1]:.1f} µs/turn CPU")
    live = _measure_live(ctx.size(200, 50), ctx.repetitions)
    ctx.log(
        "W2 live: " + ", ".join(f"{r:.1f} µs/turn (floor {f:.1f})" for f, r in live)
    )
    return [
        Row(
            workload=NAME,
            metric="CPU µs/turn",
            unit="µs",
            samples=tuple(cpu),
            target=Target(goal=340),
            ref=REF,
        ),
        Row(workload=NAME, metric="wall µs/turn", unit="µs", samples=tuple(wall)),
        Row(
            workload=NAME,
            metric="turns/s (wall)",
            unit="turns/s",
            samples=tuple(1e6 / w for w in wall),
            note=f"{turns:,} turns, 2 steps each (tool call, 20-delta reply)",
        ),
        *_live_rows(live),
    ]
