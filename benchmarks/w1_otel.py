"""W1-otel: W1's turns with ``dsh_trio.observe.instrument`` off and on.

Three agents of one runtime run W1's turns (``followup`` then ``when_idle``, the
20-delta scripted reply) in turn, repetition after repetition, in one ``trio.run``:

- **off**: a runtime nobody instrumented (what W1 measures);
- **on, no-op API**: ``instrument(runtime)`` with no provider given and none set
  globally, so the OpenTelemetry API's default no-op tracer and meter: what an
  application that installed the instrumentation but no SDK pays;
- **on, SDK**: the OpenTelemetry SDK's ``TracerProvider`` (a simple span processor
  over an exporter that drops every span) and ``MeterProvider`` (an in-memory reader,
  never read): every span and measurement is built and recorded.

Each "on" runtime is a separate runtime (the listeners hear every agent of their
runtime), measured beside an "off" runtime in the same process, so the ratios compare
like with like. Needs ``opentelemetry-api`` (and ``opentelemetry-sdk`` for the SDK
rows): without them the rows say "skipped".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel

from ._harness import Context, Row, Target, clean_heap, skipped, timed
from ._scenario import OPTIONS, bench_runtime, scripted_reply
from .w1_turns import runtime_turns

__all__ = ["run"]

NAME = "W1-otel"


def _providers() -> tuple[Any, Any] | None:
    """An SDK tracer provider whose exporter drops the spans, and an SDK meter
    provider with an unread in-memory reader; ``None`` without the SDK."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return None

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Drop()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return tracer_provider, meter_provider


def _sdk_alone(tracer_provider: Any, meter_provider: Any) -> Callable[[int], None]:
    """What the SDK alone costs per W1 turn: the two spans (with their attributes) and
    the three histogram records ``instrument`` makes, with no runtime."""
    from opentelemetry import trace

    tracer = tracer_provider.get_tracer("bench")
    meter = meter_provider.get_meter("bench")
    tokens = meter.create_histogram("bench.tokens", unit="{token}")
    duration = meter.create_histogram("bench.duration", unit="s")
    route = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted"}
    inputs = {**route, "gen_ai.token.type": "input"}
    outputs = {**route, "gen_ai.token.type": "output"}

    def turns(n: int) -> None:
        start_span, in_context = tracer.start_span, trace.set_span_in_context
        for i in range(n):
            turn = start_span(
                "invoke_agent",
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.id": "bench",
                    "dsh.turn": i,
                },
            )
            chat = start_span(
                "chat bench",
                context=in_context(turn),
                attributes={**route, "dsh.attempt": 0, "gen_ai.request.model": "b"},
            )
            chat.set_attributes(
                {
                    "gen_ai.response.finish_reasons": ("stop",),
                    "gen_ai.usage.input_tokens": 10,
                    "gen_ai.usage.output_tokens": 100,
                }
            )
            chat.end()
            tokens.record(10, inputs)
            tokens.record(100, outputs)
            duration.record(0.001, route)
            turn.set_attributes({"dsh.turn.end_reason": "completed"})
            turn.end()

    return turns


def _providers_or_fail() -> tuple[Any, Any]:
    found = _providers()
    assert found is not None
    return found


def _measure(
    turns: int, reps: int, sdk: tuple[Any, Any] | None
) -> dict[str, list[float]]:
    """CPU µs/turn per repetition of each configuration, measured alternately."""
    from dsh_trio.observe import instrument

    samples: dict[str, list[float]] = {"off": [], "api": [], "sdk": [], "alone": []}
    alone = None if sdk is None else _sdk_alone(*_providers_or_fail())

    async def main() -> None:
        async with AsyncExitStack() as stack:
            agents: dict[str, dsh.Agent] = {}
            uninstalls: list[Callable[[], None]] = []
            for kind in ("off", "api", "sdk"):
                if kind == "sdk" and sdk is None:
                    continue
                model = ScriptedModel(default=scripted_reply())
                runtime = await stack.enter_async_context(bench_runtime(model))
                if kind == "api":
                    uninstalls.append(instrument(runtime))
                elif kind == "sdk":
                    assert sdk is not None
                    tracer_provider, meter_provider = sdk
                    uninstalls.append(
                        instrument(
                            runtime,
                            tracer_provider=tracer_provider,
                            meter_provider=meter_provider,
                        )
                    )
                handle = await runtime.agents.create(options=OPTIONS)
                stack.push_async_callback(handle.dispose)
                agents[kind] = handle.agent
            for agent in agents.values():  # warm-up
                await runtime_turns(agent, max(turns // 5, 1))
            for _ in range(reps):
                for kind, agent in agents.items():
                    clean_heap()
                    with timed() as t:
                        await runtime_turns(agent, turns)
                    samples[kind].append(t.cpu_ns / turns / 1000)
                if alone is not None:
                    clean_heap()
                    with timed() as t:
                        alone(turns)
                    samples["alone"].append(t.cpu_ns / turns / 1000)
            for uninstall in uninstalls:
                uninstall()

    trio.run(main)
    return samples


def run(ctx: Context) -> list[Row]:
    """Run W1-otel: rows for off, on (no-op API), on (SDK) and the on/off ratios."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return [skipped(NAME, "opentelemetry-api is not installed (the otel extra)")]
    sdk = _providers()
    turns = ctx.size(1_000, 200)
    samples = _measure(turns, ctx.repetitions, sdk)
    off = samples["off"]
    shape = f"{turns:,} W1 turns per repetition, alternating"
    rows = [
        Row(
            workload=NAME,
            metric="off: dsh_trio CPU µs/turn",
            unit="µs",
            samples=tuple(off),
            note=f"not instrumented (W1); {shape}",
        ),
        Row(
            workload=NAME,
            metric="on, no-op API: dsh_trio CPU µs/turn",
            unit="µs",
            samples=tuple(samples["api"]),
            note="instrument(runtime), no SDK installed",
        ),
        Row(
            workload=NAME,
            metric="on, no-op API: ratio on / off (CPU)",
            unit="x",
            samples=tuple(a / o for a, o in zip(samples["api"], off, strict=True)),
            target=Target(bar=1.5),
        ),
    ]
    if sdk is None:
        rows.append(skipped(NAME, "opentelemetry-sdk is not installed: no SDK rows"))
        return rows
    rows += [
        Row(
            workload=NAME,
            metric="on, SDK: dsh_trio CPU µs/turn",
            unit="µs",
            samples=tuple(samples["sdk"]),
            note="SDK providers; spans exported to a no-op exporter",
        ),
        Row(
            workload=NAME,
            metric="on, SDK: ratio on / off (CPU)",
            unit="x",
            samples=tuple(s / o for s, o in zip(samples["sdk"], off, strict=True)),
            target=Target(bar=1.5),
            note="2 spans, 3 histogram records per turn",
        ),
        Row(
            workload=NAME,
            metric="SDK alone: CPU µs/turn",
            unit="µs",
            samples=tuple(samples["alone"]),
            note="the same spans and records made directly, no runtime (other providers)",
        ),
    ]
    return rows
