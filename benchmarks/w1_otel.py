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
compare like with like; the order of the configurations turns by one each
repetition. Beside them, two floors of any instrumentation of this turn:

- **SDK in the turn**: a runtime whose agent's session has a listener making the same
  two spans and three histogram records from the same session events
  (``turn/start``, ``step/start``, ``assistant/message``, ``turn/end``), with
  constant attributes and no logic of its own. Its ratio to off is what the SDK's
  calls cost inside the turn; the ratio of "on" to it is what ``instrument``'s own
  listeners add.
- **SDK alone**: the same calls made in a loop, no runtime (the SDK's cost when
  nothing else runs between its calls).

The exporters count what they are given: a run whose SDK dropped spans (a full batch
queue) fails instead of reporting a cheaper figure.

Needs ``opentelemetry-api`` (and ``opentelemetry-sdk`` for the SDK rows): without
them the rows say "skipped".

The CPU-time ratios move with the machine's load. The same configurations counted
in CPU instructions (valgrind's cachegrind, as :mod:`benchmarks.instructions` counts
the other workloads: a child runs N turns after its set-up and warm-up, the same
child with 0 turns is counted too, the cyclic garbage collector off, one hash seed)
give the stable reading::

    python -m benchmarks.w1_otel --instructions [--turns 200]

prints the instructions per turn off, on with the no-op API, on with the SDK (both
processors), the SDK in the turn and the SDK alone, each with its ratio to off.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from functools import partial
from typing import Any

import trio

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


class _FloorCalls:
    """The OpenTelemetry calls ``instrument`` makes for one W1 turn, with constant
    attributes and no logic of their own: the turn's ``invoke_agent`` span, its one
    attempt's ``chat`` span (its finish and usage set as it ends) and the three
    histogram records (input and output tokens, duration)."""

    __slots__ = (
        "_chat",
        "_context",
        "_duration",
        "_in_context",
        "_inputs",
        "_outputs",
        "_route",
        "_start_span",
        "_tokens",
        "_turn",
        "_turns",
    )

    def __init__(self, sdk: _Sdk) -> None:
        from opentelemetry import trace

        tracer = sdk.tracer_provider.get_tracer("bench")
        meter = sdk.meter_provider.get_meter("bench")
        self._tokens = meter.create_histogram("bench.tokens", unit="{token}")
        self._duration = meter.create_histogram("bench.duration", unit="s")
        self._route = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "scripted",
        }
        self._inputs = {**self._route, "gen_ai.token.type": "input"}
        self._outputs = {**self._route, "gen_ai.token.type": "output"}
        self._start_span, self._in_context = (
            tracer.start_span,
            trace.set_span_in_context,
        )
        self._turns = 0
        self._turn: Any = None
        self._chat: Any = None
        self._context: Any = None

    def open_turn(self) -> None:
        """``turn/start``: the turn's span, and the context its attempt opens in."""
        self._turns += 1
        turn = self._turn = self._start_span(
            "invoke_agent",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.id": "bench",
                "dsh.turn": self._turns,
            },
        )
        self._context = self._in_context(turn)

    def open_chat(self) -> None:
        """``step/start``: the attempt's span."""
        self._chat = self._start_span(
            "chat bench",
            context=self._context,
            attributes={**self._route, "dsh.attempt": 0, "gen_ai.request.model": "b"},
        )

    def end_chat(self) -> None:
        """``assistant/message``: the attempt's finish and usage; its records."""
        chat = self._chat
        chat.set_attributes(
            {
                "gen_ai.response.finish_reasons": ("stop",),
                "gen_ai.usage.input_tokens": 10,
                "gen_ai.usage.output_tokens": 100,
            }
        )
        chat.end()
        self._tokens.record(10, self._inputs)
        self._tokens.record(100, self._outputs)
        self._duration.record(0.001, self._route)

    def end_turn(self) -> None:
        """``turn/end``: the turn's end reason."""
        turn = self._turn
        turn.set_attribute("dsh.turn.end_reason", "completed")
        turn.end()

    def turns(self, n: int) -> None:
        """``n`` turns' calls, one after another, with no runtime."""
        for _ in range(n):
            self.open_turn()
            self.open_chat()
            self.end_chat()
            self.end_turn()

    def listener(self) -> Callable[[Any], None]:
        """A session listener making the turn's calls from the events
        ``instrument``'s listener makes them from (a W1 turn's), and nothing else."""
        calls = {
            "turn/start": self.open_turn,
            "step/start": self.open_chat,
            "assistant/message": self.end_chat,
            "turn/end": self.end_turn,
        }.get

        def on_event(event: Any) -> None:
            call = calls(event.type)
            if call is not None:
                call()

        return on_event


def _sdk_alone(sdk: _Sdk) -> Callable[[int], None]:
    """What the SDK alone costs per W1 turn: the two spans (with their attributes) and
    the three histogram records ``instrument`` makes, with no runtime."""
    return _FloorCalls(sdk).turns


def _measure(turns: int, reps: int, with_sdk: bool) -> dict[str, list[float]]:
    """CPU µs/turn per repetition of each configuration, measured alternately (the
    order turns by one configuration each repetition, so no configuration always
    follows the same one)."""
    from dsh_trio.observe import instrument

    floors = [f"floor {kind}" for kind in PROCESSORS] if with_sdk else []
    kinds = ["off", "api", *(PROCESSORS if with_sdk else ()), *floors]
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    sdks = {kind: _Sdk(kind.removeprefix("floor ")) for kind in kinds[2:]}
    alone_sdks = {kind: _Sdk(kind) for kind in PROCESSORS if with_sdk}
    alone = {kind: _sdk_alone(sdk) for kind, sdk in alone_sdks.items()}
    for kind in alone:
        samples[f"alone {kind}"] = []
    ran = dict.fromkeys(sdks, 0)

    async def main() -> None:
        async with AsyncExitStack() as stack:
            runs: dict[str, Callable[[int], Awaitable[None]]] = {}
            uninstalls: list[Callable[[], None]] = []
            for kind in kinds:
                model = ScriptedModel(default=scripted_reply())
                runtime = await stack.enter_async_context(bench_runtime(model))
                sdk = sdks.get(kind)
                if kind == "api":
                    uninstalls.append(instrument(runtime))
                elif kind in PROCESSORS:
                    assert sdk is not None
                    uninstalls.append(
                        instrument(
                            runtime,
                            tracer_provider=sdk.tracer_provider,
                            meter_provider=sdk.meter_provider,
                        )
                    )
                handle = await runtime.agents.create(options=OPTIONS)
                stack.push_async_callback(handle.dispose)
                if kind in floors:
                    assert sdk is not None
                    uninstalls.append(
                        handle.agent.session.subscribe(_FloorCalls(sdk).listener())
                    )
                runs[kind] = partial(runtime_turns, handle.agent)
            for kind, f in alone.items():
                runs[f"alone {kind}"] = _as_async(f)
            warm = max(turns // 5, 1)
            for kind, run_turns in runs.items():  # warm-up
                await run_turns(warm)
                if kind in ran:
                    ran[kind] += warm
            order = list(runs)
            for _ in range(reps):
                for kind in order:
                    clean_heap()
                    with timed() as t:
                        await runs[kind](turns)
                    samples[kind].append(t.cpu_ns / turns / 1000)
                    if kind in ran:
                        ran[kind] += turns
                order = order[1:] + order[:1]
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


def _as_async(f: Callable[[int], None]) -> Callable[[int], Awaitable[None]]:
    """``f`` (the SDK alone's turns) as a coroutine function, to be run in turn with
    the runtimes' turns."""

    async def run(n: int) -> None:
        f(n)
        await trio.lowlevel.checkpoint()

    return run


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
                metric=f"SDK {kind} in the turn: ratio to off (CPU)",
                unit="x",
                samples=_ratios(samples[f"floor {kind}"], off),
                note="the same calls made by a listener with no logic, from the "
                "same session events: the floor of any instrumentation",
            ),
            Row(
                workload=NAME,
                metric=f"{label}: ratio on / SDK in the turn (CPU)",
                unit="x",
                samples=_ratios(on, samples[f"floor {kind}"]),
                note="what instrument's own listeners add to the SDK's calls",
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

#: The configurations counted: ``off``, ``api`` (no-op), the SDK's processors, the
#: SDK's calls alone made from the turn's events (``floor-``), and the SDK alone with
#: each processor, no runtime.
COUNTED = (
    "off",
    "api",
    *PROCESSORS,
    *(f"floor-{kind}" for kind in PROCESSORS),
    *(f"alone-{kind}" for kind in PROCESSORS),
)
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
    processor = kind.removeprefix("floor-")
    sdk = _Sdk(processor) if processor in PROCESSORS else None

    async def main() -> None:
        from dsh_trio.observe import instrument

        async with bench_runtime(ScriptedModel(default=scripted_reply())) as runtime:
            uninstall: Callable[[], None] | None = None
            if kind == "api":
                uninstall = instrument(runtime)
            elif sdk is not None and kind in PROCESSORS:
                uninstall = instrument(
                    runtime,
                    tracer_provider=sdk.tracer_provider,
                    meter_provider=sdk.meter_provider,
                )
            handle = await runtime.agents.create(options=OPTIONS)
            if sdk is not None and kind not in PROCESSORS:  # floor-
                uninstall = handle.agent.session.subscribe(_FloorCalls(sdk).listener())
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
