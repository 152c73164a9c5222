"""W1-otel: W1's turns with ``dsh_trio.observe.instrument`` off and on.

Agents of separate runtimes run W1's turns (``followup`` then ``when_idle``, the
20-delta scripted reply) in turn, repetition after repetition, in one ``trio.run``:

- **off**: a runtime nobody instrumented (what W1 measures);
- **on, no-op API**: ``instrument(runtime)`` with no provider given and none set
  globally, so the OpenTelemetry API's default no-op tracer and meter: what an
  application that installed the instrumentation but no SDK pays;
- **on, SDK, batch**: the OpenTelemetry SDK's ``TracerProvider`` with a
  ``BatchSpanProcessor`` (what production uses: spans are queued and exported by the
  SDK's worker thread, whose CPU time is counted too) over an exporter that drops the
  spans, and a ``MeterProvider`` with an in-memory reader, never read: every span and
  measurement is built and recorded;
- **on, SDK, simple**: the same with a ``SimpleSpanProcessor`` (each span exported
  synchronously as it ends).

Each "on" runtime is a separate runtime (the listeners hear every agent of their
runtime), measured beside the "off" runtime in the same process, so the ratios
compare like with like. Beside them, **SDK alone**: the same two spans and three
histogram records per turn made directly with each processor, no runtime, which is
the floor any instrumentation of this turn pays (as a ratio to off: what is left of
the bar's 0.5 for the listeners is 0.5 minus it). The exporters count what they are
given: a run whose SDK dropped spans (a full batch queue) fails instead of reporting
a cheaper figure.

Needs ``opentelemetry-api`` (and ``opentelemetry-sdk`` for the SDK rows): without
them the rows say "skipped".

The CPU-time ratios move with the machine's load. The same configurations counted
in CPU instructions (valgrind's cachegrind, as :mod:`benchmarks.instructions` counts
the other workloads: a child runs N turns after its set-up and warm-up, the same
child with 0 turns is counted too, the cyclic garbage collector off, one hash seed)
give the stable reading::

    python -m benchmarks.w1_otel --instructions [--turns 200]

prints the instructions per turn off, on with the no-op API, on with the SDK (both
processors) and the SDK alone, each with its ratio to off.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
#: The span processors measured, the production one first.
PROCESSORS = ("batch", "simple")
#: Spans per W1 turn (the turn's and its one attempt's).
SPANS_PER_TURN = 2


class _Sdk:
    """SDK providers with ``processor``'s span processor over an exporter that drops
    the spans (counting them), and an unread in-memory metric reader."""

    def __init__(self, processor: str) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        sdk = self
        self.exported = 0

        class Drop(SpanExporter):
            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                sdk.exported += len(spans)
                return SpanExportResult.SUCCESS

        self.tracer_provider = TracerProvider()
        kind = BatchSpanProcessor if processor == "batch" else SimpleSpanProcessor
        self.tracer_provider.add_span_processor(kind(Drop()))
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])

    def close(self) -> int:
        """Export what is queued, shut down; the number of spans exported."""
        self.tracer_provider.force_flush()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        return self.exported


def _sdk_available() -> bool:
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _sdk_alone(sdk: _Sdk) -> Callable[[int], None]:
    """What the SDK alone costs per W1 turn: the two spans (with their attributes) and
    the three histogram records ``instrument`` makes, with no runtime."""
    from opentelemetry import trace

    tracer = sdk.tracer_provider.get_tracer("bench")
    meter = sdk.meter_provider.get_meter("bench")
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
            turn.set_attribute("dsh.turn.end_reason", "completed")
            turn.end()

    return turns


def _measure(turns: int, reps: int, with_sdk: bool) -> dict[str, list[float]]:
    """CPU µs/turn per repetition of each configuration, measured alternately."""
    from dsh_trio.observe import instrument

    kinds = ["off", "api", *(PROCESSORS if with_sdk else ())]
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    sdks = {kind: _Sdk(kind) for kind in kinds if kind in PROCESSORS}
    alone_sdks = {kind: _Sdk(kind) for kind in sdks}
    alone = {kind: _sdk_alone(sdk) for kind, sdk in alone_sdks.items()}
    for kind in alone:
        samples[f"alone {kind}"] = []
    ran = dict.fromkeys(sdks, 0)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            agents: dict[str, dsh.Agent] = {}
            uninstalls: list[Callable[[], None]] = []
            for kind in kinds:
                model = ScriptedModel(default=scripted_reply())
                runtime = await stack.enter_async_context(bench_runtime(model))
                if kind == "api":
                    uninstalls.append(instrument(runtime))
                elif kind in sdks:
                    sdk = sdks[kind]
                    uninstalls.append(
                        instrument(
                            runtime,
                            tracer_provider=sdk.tracer_provider,
                            meter_provider=sdk.meter_provider,
                        )
                    )
                handle = await runtime.agents.create(options=OPTIONS)
                stack.push_async_callback(handle.dispose)
                agents[kind] = handle.agent
            warm = max(turns // 5, 1)
            for kind, agent in agents.items():  # warm-up
                await runtime_turns(agent, warm)
                if kind in ran:
                    ran[kind] += warm
            for f in alone.values():
                f(warm)
            for _ in range(reps):
                for kind, agent in agents.items():
                    clean_heap()
                    with timed() as t:
                        await runtime_turns(agent, turns)
                    samples[kind].append(t.cpu_ns / turns / 1000)
                    if kind in ran:
                        ran[kind] += turns
                for kind, f in alone.items():
                    clean_heap()
                    with timed() as t:
                        f(turns)
                    samples[f"alone {kind}"].append(t.cpu_ns / turns / 1000)
            for uninstall in uninstalls:
                uninstall()

    trio.run(main)
    for kind, sdk in sdks.items():
        exported, expected = sdk.close(), ran[kind] * SPANS_PER_TURN
        if exported != expected:
            raise AssertionError(
                f"the {kind} span processor exported {exported} spans of {expected}"
            )
    for sdk in alone_sdks.values():
        sdk.close()
    return samples


def _ratios(on: Sequence[float], off: Sequence[float]) -> tuple[float, ...]:
    return tuple(a / o for a, o in zip(on, off, strict=True))


def run(ctx: Context) -> list[Row]:
    """Run W1-otel: rows for off, on (no-op API), on (SDK, batch and simple span
    processors), the on/off ratios, and the SDK's own cost beside them."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return [skipped(NAME, "opentelemetry-api is not installed (the otel extra)")]
    with_sdk = _sdk_available()
    turns = ctx.size(1_000, 200)
    samples = _measure(turns, ctx.repetitions, with_sdk)
    off = samples["off"]
    shape = f"{turns:,} W1 turns per repetition, alternating"
    bar = Target(bar=1.5)
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
            samples=_ratios(samples["api"], off),
            target=bar,
        ),
    ]
    if not with_sdk:
        rows.append(skipped(NAME, "opentelemetry-sdk is not installed: no SDK rows"))
        return rows
    for kind in PROCESSORS:
        label = f"on, SDK {kind}"
        on, alone = samples[kind], samples[f"alone {kind}"]
        processor = "BatchSpanProcessor" if kind == "batch" else "SimpleSpanProcessor"
        rows += [
            Row(
                workload=NAME,
                metric=f"{label}: dsh_trio CPU µs/turn",
                unit="µs",
                samples=tuple(on),
                note=f"SDK providers, {processor}; spans go to a dropping exporter",
            ),
            Row(
                workload=NAME,
                metric=f"{label}: ratio on / off (CPU)",
                unit="x",
                samples=_ratios(on, off),
                target=bar,
                note="2 spans, 3 histogram records per turn",
            ),
            Row(
                workload=NAME,
                metric=f"SDK {kind} alone: CPU µs/turn",
                unit="µs",
                samples=tuple(alone),
                note="the same spans and records made directly, no runtime",
            ),
            Row(
                workload=NAME,
                metric=f"SDK {kind} alone / off",
                unit="x",
                samples=_ratios(alone, off),
                note="the SDK's floor, of the 0.5 the bar leaves",
            ),
        ]
    return rows


# ---------------------------------------------------------------------- instructions

#: The configurations counted: ``off``, ``api`` (no-op), the SDK's processors, and the
#: SDK alone with each processor.
COUNTED = ("off", "api", *PROCESSORS, *(f"alone-{kind}" for kind in PROCESSORS))
#: Warm-up turns every counted child runs first.
_WARM_UP = 20
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _child(kind: str, turns: int) -> None:
    """One counted child: ``_WARM_UP`` then ``turns`` W1 turns in configuration
    ``kind`` (see :data:`COUNTED`), with the garbage collector off."""
    gc.disable()
    if kind.startswith("alone-"):
        floor = _Sdk(kind.removeprefix("alone-"))
        alone = _sdk_alone(floor)
        alone(_WARM_UP)
        alone(turns)
        floor.close()
        return
    sdk = _Sdk(kind) if kind in PROCESSORS else None

    async def main() -> None:
        from dsh_trio.observe import instrument

        async with bench_runtime(ScriptedModel(default=scripted_reply())) as runtime:
            uninstall: Callable[[], None] | None = None
            if kind == "api":
                uninstall = instrument(runtime)
            elif sdk is not None:
                uninstall = instrument(
                    runtime,
                    tracer_provider=sdk.tracer_provider,
                    meter_provider=sdk.meter_provider,
                )
            handle = await runtime.agents.create(options=OPTIONS)
            await runtime_turns(handle.agent, _WARM_UP)
            await runtime_turns(handle.agent, turns)
            await handle.dispose()
            if uninstall is not None:
                uninstall()

    trio.run(main)
    if sdk is not None:
        exported, expected = sdk.close(), (_WARM_UP + turns) * SPANS_PER_TURN
        if exported != expected:
            raise AssertionError(f"{kind}: {exported} spans exported of {expected}")


def _count(valgrind: str, kind: str, turns: int) -> int:
    """The instructions of a child running ``turns`` turns of ``kind``."""
    done = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "benchmarks.w1_otel",  # not __name__: "__main__" when run with -m
            "--child",
            kind,
            str(turns),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = _IREFS.search(done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr}")
    return int(found.group(1).replace(",", ""))


def instructions(turns: int, kinds: Sequence[str] = COUNTED) -> dict[str, float]:
    """The instructions per W1 turn of each configuration in ``kinds``, counted two
    children at a time.

    Raises:
        RuntimeError: ``valgrind`` is not installed.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("counting instructions needs valgrind on PATH")
    jobs = [(kind, n) for kind in kinds for n in (0, turns)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(pool.map(lambda job: _count(valgrind, *job), jobs))
    return {
        kind: (counts[2 * k + 1] - counts[2 * k]) / turns
        for k, kind in enumerate(kinds)
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``--instructions``: print the table; ``--child``: one counted child."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.w1_otel")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--only", default=",".join(COUNTED))
    parser.add_argument("--child", nargs=2, metavar=("KIND", "TURNS"))
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child[0], int(args.child[1]))
        return 0
    if not args.instructions:
        parser.error("give --instructions (the timed rows: python -m benchmarks)")
    kinds = [k.strip() for k in args.only.split(",") if k.strip()]
    if "off" not in kinds:
        kinds.insert(0, "off")
    unknown = sorted(set(kinds) - set(COUNTED))
    if unknown:
        parser.error(f"unknown configuration(s) {', '.join(unknown)}")
    per_turn = instructions(args.turns, kinds)
    off = per_turn["off"]
    print(f"W1 instructions per turn, {args.turns} turns, garbage collector off")
    for kind, count in per_turn.items():
        print(f"{kind:14} {count:12,.0f}  {count / off:6.3f} x off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
