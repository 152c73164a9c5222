"""``instrument``: the entry point, which imports OpenTelemetry only when called."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from ..nursery import Runtime

__all__ = ["MISSING_API", "instrument"]

#: What :func:`instrument` says when ``opentelemetry-api`` is not installed.
MISSING_API = (
    "dsh_trio.observe.instrument() needs the opentelemetry-api package, which is not "
    "installed: install the otel extra (pip install 'dsh-trio[otel]')"
)


def instrument(
    runtime: Runtime,
    *,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    include_content: bool = False,
) -> Callable[[], None]:
    """Trace the turns, model attempts and tool calls of ``runtime``'s agents.

    Subscribes to the session of each agent of ``runtime``: those live now and
    those created later (an ``agent/created`` listener), each until the agent is
    disposed (an ``agent/disposed`` listener); returns the function that removes
    every one of those listeners. Nothing else changes: a runtime that is not
    instrumented runs exactly as before, and an instrumented one does only what
    those listeners do.

    **Spans** (OpenTelemetry GenAI semantic conventions):

    - one ``invoke_agent`` span per turn, from its ``turn/start`` to its ``turn/end``:
      ``gen_ai.operation.name = "invoke_agent"``, ``gen_ai.agent.id`` (the session
      id), ``gen_ai.agent.name`` (the agent's preset, if it has one), ``dsh.turn``,
      ``dsh.turn.end_reason`` (``completed``, ``max_tokens``, ``blocked``,
      ``aborted``, ``errored``), and for an aborted turn ``dsh.cancel.cause``
      (``user``, ``parent``, ``hook``, ``disposed``); an errored turn has status
      ERROR with the failure's message and ``error.type`` = its code. A turn of an
      agent created with ``parent=`` is the child of the parent's ``execute_tool``
      span that started it (else of the parent's open turn); any other turn is the
      child of the OpenTelemetry context current where the turn started.
    - inside it, one ``chat`` span per model attempt: ``gen_ai.operation.name =
      "chat"``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
      ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
      ``gen_ai.response.finish_reasons`` (``stop``, ``tool_call``, ``length``,
      ``error``) and ``dsh.attempt`` (0 for a step's first attempt, 1 for its first
      retry, ...); a failed attempt has status ERROR and ``error.type`` = the
      failure's code. The first attempt's span opens at the step's ``step/start``, a
      retry's at its ``llm/retry-started`` (after the retry delay); each ends when
      the attempt is settled (``assistant/message`` or ``assistant/attempt``).
    - one ``execute_tool`` span per tool call, from its ``tool/call`` to its
      ``tool/result``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
      ``gen_ai.tool.type = "function"``; a call that failed has status ERROR and
      ``error.type`` = the error's code.

    Every span is ended on every path: a cancelled or failed turn ends its spans at
    its ``turn/end``; an agent disposed without one ends them when it is disposed; the
    returned function ends those still open. Times are read from ``time.time_ns()``
    as each event's listener runs, which is when the event is appended (the events'
    own times are whole milliseconds); spans and metrics use the same readings.

    **Metrics**, recorded as each attempt is settled: ``gen_ai.client.token.usage``
    (histogram, ``{token}``, ``gen_ai.token.type`` = ``input`` / ``output``) and
    ``gen_ai.client.operation.duration`` (histogram, seconds), both with
    ``gen_ai.operation.name``, ``gen_ai.provider.name`` and ``gen_ai.request.model``
    (and ``error.type`` on the duration of a failed attempt).

    **Content.** Messages and tool arguments and results are recorded only with
    ``include_content=True``: ``gen_ai.input.messages`` and ``gen_ai.output.messages``
    on ``chat`` spans, ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``
    on ``execute_tool`` spans (JSON text). Every string recorded, content or not,
    first has the secrets of the live model adapters (API keys, passwords of base
    URLs) replaced by ``***``.

    The conventions are still in development; these names are those of
    OpenTelemetry semantic conventions 1.37 to 1.41 (``gen_ai.provider.name``, which
    replaced ``gen_ai.system``). Later drafts add per-type token metrics
    (``gen_ai.client.inference.usage.*``) and ``gen_ai.invoke_agent.duration``, which
    are not recorded here.

    Synchronous, never blocks. Call it before the turns it should see start: a turn
    already running when it is installed is not traced (the next turn of its agent
    is).

    Example::

        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        async with dsh.open_runtime(models=models) as runtime:
            uninstall = instrument(runtime, tracer_provider=provider)
            try:
                await agent.run(dsh.user_message("hello"))
            finally:
                uninstall()

    Args:
        runtime: the runtime whose agents to trace.
        tracer_provider: where the spans go; ``None`` for the global one
            (``opentelemetry.trace.set_tracer_provider``; a no-op until one is set).
        meter_provider: where the metrics go; ``None`` for the global one.
        include_content: record messages and tool arguments and results.

    Returns:
        An idempotent function that removes the listeners and ends the spans still
        open.

    Raises:
        ImportError: ``opentelemetry-api`` is not installed (the message names the
            ``otel`` extra).
        TypeError: ``include_content`` is not a bool.
    """
    if include_content is not True and include_content is not False:
        raise TypeError(
            f"instrument() takes include_content=True or include_content=False, got "
            f"{include_content!r:.60}"
        )
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:
        raise ImportError(MISSING_API, name=exc.name) from exc
    from ._observer import Observer

    version = _version()
    tracer = trace.get_tracer("dsh_trio", version, tracer_provider=tracer_provider)
    meter = metrics.get_meter("dsh_trio", version, meter_provider=meter_provider)
    return Observer(runtime, tracer, meter, include_content=include_content).install()


def _version() -> str:
    from .. import __version__

    return __version__
