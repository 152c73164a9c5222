"""OpenTelemetry traces and metrics of a runtime's agents (the ``otel`` extra).

:func:`instrument` listens to a runtime's event bus and turns what the session logs
record into spans that follow the OpenTelemetry GenAI semantic conventions: one span
per turn, one per model attempt and one per tool call, a child agent's turns nested
under the parent's span that ran them, and the token and duration metrics. It needs
``opentelemetry-api`` only (``pip install 'dsh-trio[otel]'``); the SDK and its
exporters are the application's choice. Importing this module imports no
OpenTelemetry package: :func:`instrument` does, when called.

Example::

    import dsh_trio as dsh
    from dsh_trio.observe import instrument

    async with dsh.open_runtime(models=models) as runtime:
        uninstall = instrument(runtime)  # the global tracer and meter providers
        ...
        uninstall()
"""

from ._instrument import instrument as instrument

__all__ = ["instrument"]
