"""Peers: the W1 and W4 workloads on pydantic-ai and openai-agents, when installed.

Both run on asyncio, their native loop. W1 is one agent holding a conversation:
1,000 sequential turns, each streaming the same 20-delta text reply from a scripted
model, the history carried from turn to turn (``message_history`` /
``to_input_list()``), the way dsh_trio's session carries it.

- pydantic-ai: ``Agent(FunctionModel(stream_function=...))`` and ``run_stream``,
  reading every delta (``stream_text(delta=True, debounce_by=None)``).
- openai-agents: a ``Model`` whose ``stream_response`` yields 20 prebuilt
  ``response.output_text.delta`` events and a ``response.completed``;
  ``Runner.run_streamed`` with every stream event read; tracing disabled.

W4 is 1,000 idle agents (an agent object and its empty history, one shared model),
measured with ``tracemalloc``. Their turn cost grows with the history, so one
1,000-turn run takes 20-30 s: W1 runs ``--peer-reps`` times (default 1) and also
reports the medians of turns 1-100 and 901-1,000 of each run. Install them with
``pip install -e '.[bench]'``; without them the rows say "skipped".
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from typing import Any

import attrs

from ._harness import Context, Row, skipped
from ._scenario import REPLY_CHUNKS, REPLY_TEXT

__all__ = ["WANTS_EARLIER_ROWS", "run"]

NAME = "Peers"
WANTS_EARLIER_ROWS = True
WINDOW = 100
KB = 1024
INSTALL_HINT = "pip install -e '.[bench]'"

_STEP = len(REPLY_TEXT) // REPLY_CHUNKS
PARTS = tuple(REPLY_TEXT[k : k + _STEP] for k in range(0, len(REPLY_TEXT), _STEP))


@attrs.frozen
class _Peer:
    label: str
    #: Returns an async callable running ``turns`` W1 turns and returning each turn's CPU ns.
    w1: Callable[[], Callable[[int], Coroutine[Any, Any, list[int]]]]
    #: Returns a factory of one idle agent (with its empty history).
    w4: Callable[[], Callable[[], object]]


# --------------------------------------------------------------------------- pydantic-ai


def _pydantic_model() -> Any:
    from pydantic_ai.models.function import FunctionModel

    async def stream_function(messages: Any, info: Any) -> Any:
        for part in PARTS:
            yield part

    return FunctionModel(stream_function=stream_function)


def _pydantic_w1() -> Callable[[int], Coroutine[Any, Any, list[int]]]:
    from pydantic_ai import Agent

    async def turns(n: int) -> list[int]:
        agent = Agent(_pydantic_model())
        history: list[Any] = []
        costs: list[int] = []
        cpu = time.process_time_ns
        for i in range(n):
            t0 = cpu()
            async with agent.run_stream(f"q{i}", message_history=history) as result:
                received = [
                    delta
                    async for delta in result.stream_text(delta=True, debounce_by=None)
                ]
            history = result.all_messages()
            costs.append(cpu() - t0)
            if "".join(received) != REPLY_TEXT:
                raise RuntimeError(
                    "pydantic-ai W1: the streamed reply does not match the script"
                )
        return costs

    return turns


def _pydantic_w4() -> Callable[[], object]:
    from pydantic_ai import Agent

    model = _pydantic_model()

    def make() -> object:
        return Agent(model), []

    return make


# --------------------------------------------------------------------------- openai-agents


def _openai_model() -> Any:
    from agents.models.interface import Model
    from openai.types.responses import (
        Response,
        ResponseCompletedEvent,
        ResponseOutputMessage,
        ResponseOutputText,
        ResponseTextDeltaEvent,
    )

    deltas = [
        ResponseTextDeltaEvent(
            type="response.output_text.delta",
            item_id="msg",
            output_index=0,
            content_index=0,
            delta=part,
            sequence_number=k,
            logprobs=[],
        )
        for k, part in enumerate(PARTS)
    ]

    def completed() -> ResponseCompletedEvent:
        message = ResponseOutputMessage(
            id="msg",
            type="message",
            role="assistant",
            status="completed",
            content=[
                ResponseOutputText(text=REPLY_TEXT, type="output_text", annotations=[])
            ],
        )
        response = Response(
            id="resp",
            created_at=0,
            model="bench",
            object="response",
            output=[message],
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        return ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=len(deltas)
        )

    class ScriptedResponses(Model):  # type: ignore[misc,unused-ignore]
        """Streams the W1 reply as Responses API events."""

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark only streams")

        async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            for event in deltas:
                yield event
            yield completed()

    return ScriptedResponses()


def _openai_w1() -> Callable[[int], Coroutine[Any, Any, list[int]]]:
    from agents import Agent, Runner, set_tracing_disabled

    set_tracing_disabled(True)

    async def turns(n: int) -> list[int]:
        agent = Agent(name="bench", model=_openai_model())
        items: list[Any] = []
        costs: list[int] = []
        cpu = time.process_time_ns
        for i in range(n):
            t0 = cpu()
            result = Runner.run_streamed(
                agent, [*items, {"role": "user", "content": f"q{i}"}]
            )
            async for _ in result.stream_events():
                pass
            items = result.to_input_list()
            costs.append(cpu() - t0)
            if result.final_output != REPLY_TEXT:
                raise RuntimeError(
                    "openai-agents W1: the final output does not match the script"
                )
        return costs

    return turns


def _openai_w4() -> Callable[[], object]:
    from agents import Agent, set_tracing_disabled

    set_tracing_disabled(True)
    model = _openai_model()

    def make() -> object:
        return Agent(name="bench", model=model), []

    return make


PEERS = (
    ("pydantic-ai", "pydantic_ai", _Peer("pydantic-ai", _pydantic_w1, _pydantic_w4)),
    ("openai-agents", "agents", _Peer("openai-agents", _openai_w1, _openai_w4)),
)


# --------------------------------------------------------------------------- measurement


def _idle_bytes(make: Callable[[], object], agents: int) -> float:
    keep = [make() for _ in range(10)]
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        keep += [make() for _ in range(agents)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del keep
    return (after - before) / agents


def _dsh_median(earlier: list[Row], workload: str, metric: str) -> float | None:
    for row in earlier:
        if row.workload == workload and row.metric == metric and row.measured:
            return row.median
    return None


def _installed(module: str) -> str | None:
    """``None`` if ``module`` imports, else the reason it does not."""
    try:
        __import__(module)
    except ImportError as exc:
        return f"not installed ({exc.name or module}; {INSTALL_HINT})"
    return None


def _measure_peer(
    peer: _Peer, ctx: Context, dsh_w1: float | None, dsh_w4: float | None
) -> list[Row]:
    turns = ctx.size(1_000, 20)
    reps = ctx.peer_repetitions
    run_turns = peer.w1()
    asyncio.run(run_turns(ctx.size(20, 3)))  # warm-up
    means: list[float] = []
    windows: dict[tuple[int, int], list[float]] = {}
    spans = [(1, min(WINDOW, turns))]
    if turns > WINDOW:
        spans.append((turns - WINDOW + 1, turns))
    for k in range(reps):
        gc.collect()
        costs = asyncio.run(run_turns(turns))
        means.append(sum(costs) / turns / 1000)
        for start, end in spans:
            windows.setdefault((start, end), []).append(
                statistics.median(costs[start - 1 : end]) / 1000
            )
        ctx.log(f"{peer.label} W1 rep {k + 1}: {means[-1]:.0f} µs/turn CPU")
    make = peer.w4()
    agents = ctx.size(1_000, 100)
    idle = [_idle_bytes(make, agents) / KB for _ in range(ctx.repetitions)]
    ctx.log(f"{peer.label} W4: {statistics.median(idle):.2f} KB/agent")
    label = peer.label
    rows = [
        Row(
            workload=NAME,
            metric=f"{label} W1 CPU µs/turn",
            unit="µs",
            samples=tuple(means),
            note=f"{turns:,} turns, history carried; {reps} repetition{'s' if reps != 1 else ''} (--peer-reps)",
        ),
    ]
    for (start, end), samples in windows.items():
        rows.append(
            Row(
                workload=NAME,
                metric=f"{label} W1 CPU µs/turn, turns {start:,}-{end:,}",
                unit="µs",
                samples=tuple(samples),
            )
        )
    if dsh_w1 is not None:
        rows.append(
            Row(
                workload=NAME,
                metric=f"{label} W1 / dsh_trio W1",
                unit="x",
                samples=tuple(m / dsh_w1 for m in means),
            )
        )
    rows.append(
        Row(
            workload=NAME,
            metric=f"{label} W4 tracemalloc KB/idle agent",
            unit="KB",
            samples=tuple(idle),
            note=f"{agents:,} agent objects with an empty history, one shared model",
        )
    )
    if dsh_w4 is not None:
        rows.append(
            Row(
                workload=NAME,
                metric=f"{label} W4 / dsh_trio W4",
                unit="x",
                samples=tuple(b / dsh_w4 for b in idle),
            )
        )
    return rows


def run(ctx: Context, earlier: list[Row]) -> list[Row]:
    """Measure every installed peer; ratios use the W1/W4 rows of this run, if present."""
    dsh_w1 = _dsh_median(earlier, "W1", "dsh_trio CPU µs/turn")
    dsh_w4 = _dsh_median(earlier, "W4", "tracemalloc KB/idle agent")
    rows: list[Row] = []
    for label, module, peer in PEERS:
        reason = _installed(module)
        if reason is not None:
            rows.append(skipped(NAME, reason, metric=label))
            continue
        rows.extend(_measure_peer(peer, ctx, dsh_w1, dsh_w4))
    if rows and (dsh_w1 is None or dsh_w4 is None) and any(r.measured for r in rows):
        rows[0] = attrs.evolve(
            rows[0],
            note=f"{rows[0].note}; ratios need W1 and W4 in the same run".lstrip("; "),
        )
    return rows
