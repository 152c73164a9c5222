"""The token and duration histograms, and what each route is named in them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._names import (
    ATTEMPT,
    DURATION_BUCKETS,
    ERROR_TYPE,
    OPERATION,
    PROVIDER,
    REQUEST_MODEL,
    TOKEN_BUCKETS,
    TOKEN_TYPE,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from ..values import Usage

__all__ = ["Metrics", "Route"]

#: How many routes are kept made.
_MAX_ROUTES: Final = 256


class Route:
    """A provider and model as the spans and metrics name them (already redacted),
    made once: the ``chat`` span's name and first-attempt attributes, and the
    attributes of the duration and of the input and output token records."""

    __slots__ = ("duration", "first", "input", "model", "name", "output", "provider")

    def __init__(self, provider: str, model: str) -> None:
        self.provider = provider
        self.model = model
        self.name = f"chat {model}" if model else "chat"
        metric: dict[str, Any] = {OPERATION: "chat"}
        if provider:
            metric[PROVIDER] = provider
        if model:
            metric[REQUEST_MODEL] = model
        self.duration = metric
        self.input = {**metric, TOKEN_TYPE: "input"}
        self.output = {**metric, TOKEN_TYPE: "output"}
        #: A step's first attempt's span attributes (shared: the SDK copies them).
        self.first: dict[str, Any] = {**metric, ATTEMPT: 0}

    def attempt(self, attempt: int) -> dict[str, Any]:
        """The ``chat`` span's attributes at its start."""
        return self.first if attempt == 0 else {**self.duration, ATTEMPT: attempt}


#: The route of an attempt whose request names neither provider nor model.
NO_ROUTE: Final = Route("", "")


class Metrics:
    """``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``, and the
    routes seen (see :class:`Route`)."""

    __slots__ = ("_duration", "_routes", "_tokens")

    def __init__(self, meter: Meter) -> None:
        self._tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._routes: dict[tuple[str, str], Route] = {}

    def route(self, provider: str, model: str) -> Route:
        """The route of ``provider`` and ``model`` (redacted strings)."""
        found = self._routes.get((provider, model))
        if found is None:
            found = Route(provider, model)
            if len(self._routes) < _MAX_ROUTES:
                self._routes[provider, model] = found
        return found

    def record(
        self, route: Route, seconds: float, usage: Usage | None, error: str | None
    ) -> None:
        """One settled (or abandoned) attempt: its tokens, if reported, and duration."""
        if usage is not None:
            tokens = self._tokens
            tokens.record(usage.input_tokens, route.input)
            tokens.record(usage.output_tokens, route.output)
        duration = route.duration
        if error is not None:
            duration = {**duration, ERROR_TYPE: error}
        self._duration.record(seconds, duration)
