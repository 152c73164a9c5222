"""How ``Session.append`` and ``Session.derive_messages`` scale with the log length.

Appends a realistic mix of events (per turn: ``turn/start``, ``step/start``,
``user/message``, ``assistant/message``, ``step/end``, ``turn/end``), calling
``derive_messages()`` after every append, and compares the median cost of the first
100 calls with the last 100. An incremental fold keeps the ratio near 1; a fold
that re-walks the log grows linearly with it.

``derive_messages()`` returns an O(1) immutable snapshot of the fold, so both rows
must stay flat.

Run: ``python benchmarks/derive_messages.py [--quick]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from dsh_trio import user_message
from dsh_trio.session import Session, StreamAccumulator
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    BlockEnd,
    BlockStart,
    Completed,
    EventData,
    Finish,
    FinishReason,
    MessageId,
    ModelSource,
    StepEnd,
    StepStart,
    StreamChunk,
    SurfaceOp,
    TextBlock,
    TextDelta,
    TurnEnd,
    TurnStart,
    Usage,
)

WINDOW = 100


def _turn(turn: int) -> list[tuple[str, EventData, SurfaceOp | None]]:
    acc = StreamAccumulator()
    chunks: list[StreamChunk] = [
        BlockStart(0, "text"),
        *(TextDelta(0, w) for w in ("Sure", ", ", "here ", "it ", "is.")),
        BlockEnd(0, TextBlock("Sure, here it is.")),
        Usage(120, 5),
        Finish(FinishReason("stop")),
    ]
    for k, chunk in enumerate(chunks):
        acc.push(chunk, 1_700_000_000_000 + k * 7)
    reply = AssistantMessage(
        id=MessageId(f"a{turn}"),
        content=(TextBlock("Sure, here it is."),),
        source=ModelSource("bench", "bench-model"),
    )
    return [
        ("turn/start", TurnStart(turn), None),
        ("step/start", StepStart(turn, 1), None),
        ("user/message", user_message(f"question {turn}", id=f"u{turn}"), "append"),
        (
            "assistant/message",
            AssistantMessageData(
                turn=turn,
                step=1,
                message=reply,
                stream=acc.records(),
                usage=Usage(120, 5),
            ),
            "append",
        ),
        ("step/end", StepEnd(turn, 1), None),
        ("turn/end", TurnEnd(turn, Completed()), None),
    ]


def _median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def main(quick: bool = False) -> dict[str, Any]:
    """Run the benchmark; return the medians (µs) and ratios. Prints a table."""
    n = 1_000 if quick else 10_000
    plan: list[tuple[str, EventData, SurfaceOp | None]] = []
    turn = 0
    while len(plan) < n:
        turn += 1
        plan.extend(_turn(turn))
    del plan[n:]

    session = Session.create("benchmark")
    append_ns: list[int] = []
    derive_ns: list[int] = []
    clock = time.perf_counter_ns
    messages: Any = ()
    for type_, data, op in plan:
        t0 = clock()
        session.append(type_, data, surface_op=op)
        t1 = clock()
        messages = session.derive_messages()
        t2 = clock()
        append_ns.append(t1 - t0)
        derive_ns.append(t2 - t1)

    def row(samples: list[int]) -> tuple[float, float, float]:
        first = _median_us(samples[:WINDOW])
        last = _median_us(samples[-WINDOW:])
        return first, last, last / first if first else float("inf")

    rows = {
        "append": row(append_ns),
        "derive_messages": row(derive_ns),
    }

    last_label = f"calls {n - WINDOW + 1:,}-{n:,}"
    print(f"{n:,} events, {len(messages):,} derived messages")
    print(
        f"{'median per call (µs)':<24}{'calls 1-100':>14}{last_label:>20}{'ratio':>8}"
    )
    for name, (first, last, ratio) in rows.items():
        print(f"{name:<24}{first:>14.2f}{last:>20.2f}{ratio:>8.2f}")
    return {
        "events": n,
        "messages": len(messages),
        **{
            f"{name}": {"first_us": first, "last_us": last, "ratio": ratio}
            for name, (first, last, ratio) in rows.items()
        },
    }


if __name__ == "__main__":
    main(quick="--quick" in sys.argv[1:])
