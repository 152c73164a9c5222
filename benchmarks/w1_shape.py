"""W1-shape: where a live W1 turn's cost goes, as ``cost = fixed + per_chunk · chunks``.

The live W1 turn (``followup`` + ``when_idle``, the text consumed through an
agent-scoped ``agent/assistant-stream`` listener) is run with replies of 1, 20 and
80 text deltas, next to the plain bare-trio floor (per delta one checkpoint and a
list append) with the same deltas, alternating in one process. A least-squares
line through the three points of each gives the fixed cost of a turn and the cost
of one more chunk; their difference is what the runtime adds per turn and per
chunk (the floor's own fixed cost is a fitted intercept near zero, used only for
that difference). No targets: these rows say which of the two a change moved.
"""

from __future__ import annotations

import trio

from dsh_trio.testing import ScriptedModel, reply

from ._harness import Context, Row, clean_heap, timed
from ._scenario import OPTIONS, LiveCounter, bench_runtime
from .w1_turns import bare_turns, live_turns

__all__ = ["CHUNK_COUNTS", "fit", "run"]

NAME = "W1-shape"
#: The reply lengths (text deltas) the line is fitted through.
CHUNK_COUNTS = (1, 20, 80)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """The least-squares ``(intercept, slope)`` of ``points`` (x, y).

    Example::

        fit([(1, 3.0), (2, 5.0)])  # (1.0, 2.0)
    """
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def _measure(turns: int, reps: int) -> list[dict[int, tuple[float, float]]]:
    """Per repetition: chunk count -> (floor, runtime) CPU µs/turn."""
    out: list[dict[int, tuple[float, float]]] = []

    async def main() -> None:
        for _ in range(reps):
            out.append({})
        for k in CHUNK_COUNTS:
            text = "x" * (5 * k)
            texts = tuple("x" * 5 for _ in range(k))
            model = ScriptedModel(default=reply(text, chunks=k))
            async with bench_runtime(model) as runtime:
                handle = await runtime.agents.create(options=OPTIONS)
                counter = LiveCounter()
                handle.agent.scope.on("agent/assistant-stream", counter)
                await bare_turns(turns // 5, texts)  # warm-up
                await live_turns(handle.agent, counter, turns // 5)
                for rep in range(reps):
                    clean_heap()
                    with timed() as floor:
                        log = await bare_turns(turns, texts)
                    del log
                    counter.n = 0
                    clean_heap()
                    with timed() as rt:
                        await live_turns(handle.agent, counter, turns)
                    assert counter.n == turns * k, (counter.n, k)
                    out[rep][k] = (
                        floor.cpu_ns / turns / 1000,
                        rt.cpu_ns / turns / 1000,
                    )
                await handle.dispose()

    trio.run(main)
    return out


def run(ctx: Context) -> list[Row]:
    """Run W1-shape; fixed and per-chunk CPU µs of dsh_trio, the floor, the difference."""
    reps = _measure(ctx.size(500, 50), ctx.repetitions)
    lines = {
        who: [fit([(k, rep[k][who]) for k in CHUNK_COUNTS]) for rep in reps]
        for who in (0, 1)
    }
    floor, runtime = lines[0], lines[1]
    ctx.log(
        "W1-shape: "
        + ", ".join(
            f"dsh_trio {a:.1f} + {b:.2f}/chunk, floor {fa:.1f} + {fb:.2f}/chunk"
            for (a, b), (fa, fb) in zip(runtime, floor, strict=True)
        )
    )
    note = f"live listener; fitted over {', '.join(map(str, CHUNK_COUNTS))} text deltas"
    added = [(a - fa, b - fb) for (a, b), (fa, fb) in zip(runtime, floor, strict=True)]
    shown = (
        ("dsh_trio fixed CPU µs/turn", [a for a, _ in runtime], note),
        ("dsh_trio CPU µs per chunk", [b for _, b in runtime], ""),
        (
            "floor CPU µs per chunk",
            [b for _, b in floor],
            "per delta one checkpoint + list append",
        ),
        ("added per turn (fixed, CPU µs)", [a for a, _ in added], ""),
        ("added per chunk (CPU µs)", [b for _, b in added], ""),
    )
    # Fitted coefficients and their differences: a noisy machine may make any of
    # them zero or negative, so they are marked as fitted (no sign is implied).
    return [
        Row(
            workload=NAME,
            metric=metric,
            unit="µs",
            samples=tuple(samples),
            note=text,
            detail={"fitted": True},
        )
        for metric, samples, text in shown
    ]
