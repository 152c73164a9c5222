"""The open spans of one turn: its own, its model attempt's and its tool calls'."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, Status, StatusCode

from ..llm import redact_live_secrets
from ..values import Finish, LlmFailure, Usage
from ._names import (
    ERROR_TYPE,
    FINISH_REASONS,
    FINISH_WORDS,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    PROVIDER,
    REQUEST_MODEL,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ._metrics import Metrics, Route

__all__ = ["OpenChat", "OpenTurn"]

#: The failure of an attempt that failed without saying why.
_UNKNOWN_FAILURE = LlmFailure(message="model call failed", code="UNKNOWN")


class OpenChat:
    """The open ``chat`` span of one model attempt, and the route it names (the
    provider and model as read, and as recorded)."""

    __slots__ = ("model", "provider", "route", "span", "start")

    def __init__(
        self, span: Span, start: int, provider: str, model: str, route: Route
    ) -> None:
        self.span = span
        self.start = start
        self.provider = provider
        self.model = model
        self.route = route

    def rename(self, provider: str, model: str, metrics: Metrics) -> None:
        """The attempt was made on ``provider`` and ``model``, not the ones named."""
        self.provider, self.model = provider, model
        route = self.route = metrics.route(
            redact_live_secrets(provider), redact_live_secrets(model)
        )
        self.span.set_attributes({PROVIDER: route.provider, REQUEST_MODEL: route.model})
        self.span.update_name(route.name)

    def end(
        self,
        now: int,
        metrics: Metrics,
        finish: Finish | None = None,
        usage: Usage | None = None,
        replied: bool = False,
    ) -> None:
        """End the span at ``now`` with the attempt's finish and usage (``None``: the
        attempt was abandoned), and record its metrics. ``replied``: it settled with a
        reply (an aborted reply is no failure)."""
        span = self.span
        attributes: dict[str, Any] = {}
        failure: LlmFailure | None = None
        if finish is not None:
            kind = finish.reason.kind
            attributes[FINISH_REASONS] = FINISH_WORDS.get(kind, (kind,))
            failure = finish.reason.failure
            if failure is None and not replied and kind in ("error", "aborted"):
                failure = _UNKNOWN_FAILURE
        if usage is not None:
            attributes[INPUT_TOKENS] = usage.input_tokens
            attributes[OUTPUT_TOKENS] = usage.output_tokens
        code: str | None = None
        if failure is not None:
            code = attributes[ERROR_TYPE] = redact_live_secrets(failure.code)
            span.set_status(
                Status(StatusCode.ERROR, redact_live_secrets(failure.message))
            )
        if attributes:
            span.set_attributes(attributes)
        span.end(end_time=now)
        route = self.route
        if usage is not None:
            tokens = metrics.tokens
            tokens.record(usage.input_tokens, route.input)
            tokens.record(usage.output_tokens, route.output)
        duration = route.duration
        if code is not None:
            duration = {**duration, ERROR_TYPE: code}
        metrics.duration.record((now - self.start) / 1e9, duration)


class OpenTurn:
    """The open spans of one agent's turn."""

    __slots__ = ("attempts", "chat", "context", "last_end", "span", "tools")

    def __init__(self, span: Span, context: Context, now: int) -> None:
        self.span = span
        #: The context the turn's child spans are opened in (``span``'s).
        self.context = context
        self.chat: OpenChat | None = None
        #: The attempts opened in the current step; when the last one ended.
        self.attempts = 0
        self.last_end = now
        #: The open ``execute_tool`` spans, by call id.
        self.tools: dict[str, Span] = {}

    def end_chat(self, now: int, metrics: Metrics) -> None:
        """End the open attempt's span, if any, as abandoned."""
        chat = self.chat
        if chat is not None:
            self.chat = None
            chat.end(now, metrics)

    def close(self, now: int, metrics: Metrics) -> None:
        """End every span still open, children first."""
        if self.chat is not None:
            self.end_chat(now, metrics)
        tools = self.tools
        while tools:
            _, span = tools.popitem()
            span.end(end_time=now)
        self.span.end(end_time=now)
