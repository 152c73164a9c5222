"""The token and duration histograms, and what each route is named in them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._names import (
    ATTEMPT,
    DURATION_BUCKETS,
    OPERATION,
    PROVIDER,
    REQUEST_MODEL,
    TOKEN_BUCKETS,
    TOKEN_TYPE,
)

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter


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
    """``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration`` (an
    attempt's :class:`~._turn.OpenChat` records them as it ends), and the routes seen."""

    __slots__ = ("duration", "routes", "tokens")

    def __init__(self, meter: Meter) -> None:
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        #: The routes made, by ``(provider, model)``: see :meth:`route`.
        self.routes: dict[tuple[str, str], Route] = {}

    def route(self, provider: str, model: str) -> Route:
        """The route of ``provider`` and ``model`` (redacted strings), made once."""
        found = self.routes.get((provider, model))
        if found is None:
            found = Route(provider, model)
            if len(self.routes) < _MAX_ROUTES:
                self.routes[provider, model] = found
        return found
