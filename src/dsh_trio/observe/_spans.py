"""The listeners :func:`~dsh_trio.observe.instrument` registers: session events to spans.

Imported by ``instrument`` only (it imports OpenTelemetry). Every span is opened and
ended from a session event of the agent it is about, read as the event is appended:

- ``turn/start`` opens the turn's ``invoke_agent`` span, ``turn/end`` ends it;
- ``step/start`` opens the ``chat`` span of the step's first attempt,
  ``llm/retry-started`` the span of a retry; ``assistant/message`` or
  ``assistant/attempt`` (the attempt's one settlement event) ends it;
- ``tool/call`` opens an ``execute_tool`` span, the call's ``tool/result`` ends it.

Whatever the log did not close (a turn whose ``turn/end`` could not be written, an
uninstall mid-turn) is ended by ``agent/disposed`` or by the uninstall function.
"""

from __future__ import annotations

import contextvars
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from ..llm import redact_live_secrets
from ..values import (
    Aborted,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Blocked,
    Completed,
    Errored,
    Finish,
    ImageBlock,
    Interrupted,
    LlmFailure,
    MaxTokens,
    Message,
    RawChunkRecord,
    ReasoningBlock,
    RequestContextData,
    SessionEvent,
    StreamRecord,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    Usage,
)

if TYPE_CHECKING:
    from ..events import AgentDisposed, SessionEventAppended
    from ..nursery import Runtime
    from ..session import Session

__all__ = ["Observer"]

_now = time.time_ns
_INTERNAL: Final = SpanKind.INTERNAL
_CLIENT: Final = SpanKind.CLIENT

# Attribute names (OpenTelemetry GenAI semantic conventions, and the library's own).
OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
AGENT_ID: Final = "gen_ai.agent.id"
AGENT_NAME: Final = "gen_ai.agent.name"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
TOKEN_TYPE: Final = "gen_ai.token.type"
ERROR_TYPE: Final = "error.type"
TURN: Final = "dsh.turn"
END_REASON: Final = "dsh.turn.end_reason"
CANCEL_CAUSE: Final = "dsh.cancel.cause"
ATTEMPT: Final = "dsh.attempt"

#: ``dsh.turn.end_reason`` of each ``turn/end`` reason class.
_END_REASONS: Final[dict[type, str]] = {
    Completed: "completed",
    MaxTokens: "max_tokens",
    Blocked: "blocked",
    Aborted: "aborted",
    Errored: "errored",
    Interrupted: "interrupted",
}
#: ``gen_ai.response.finish_reasons`` of each finish kind (the conventions' words).
_FINISH_REASONS: Final[dict[str, tuple[str, ...]]] = {
    "stop": ("stop",),
    "tool-calls": ("tool_call",),
    "max-tokens": ("length",),
    "error": ("error",),
    "aborted": ("error",),
}
#: The bucket boundaries the conventions advise for the two histograms.
_TOKEN_BUCKETS: Final = tuple(float(4**k) for k in range(14))
_DURATION_BUCKETS: Final = tuple(0.01 * 2**k for k in range(14))
#: How many routes' metric attributes are kept made.
_MAX_ROUTES: Final = 256

#: The tool call whose body runs in this task: ``(session id, call id)``. Set as its
#: ``tool/call`` is appended, in the task that then starts the body, which inherits it;
#: a child agent's turn started from that body finds its parent's span through it.
_CURRENT_TOOL: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "dsh_trio.observe.tool", default=None
)


class _Chat:
    """The open span of one model attempt."""

    __slots__ = ("attempt", "model", "provider", "span", "start")

    def __init__(
        self, span: Span, start: int, attempt: int, provider: str, model: str
    ) -> None:
        self.span = span
        self.start = start
        self.attempt = attempt
        self.provider = provider
        self.model = model


class _Turn:
    """The open spans of one agent's turn."""

    __slots__ = ("attempts", "chat", "context", "last_end", "span", "tools", "turn")

    def __init__(self, span: Span, turn: int, now: int) -> None:
        self.span = span
        self.turn = turn
        #: The context the turn's child spans are opened in.
        self.context: Context = trace.set_span_in_context(span)
        self.chat: _Chat | None = None
        #: The attempts opened in the current step; when the last one ended.
        self.attempts = 0
        self.last_end = now
        self.tools: dict[str, Span] = {}


class Observer:
    """The state of one :func:`~dsh_trio.observe.instrument` call: its open spans.

    Runtime use only. Its listeners are plain callables on emit events, so they run
    synchronously as each event is appended, in the task that appends it.
    """

    __slots__ = (
        "_content",
        "_duration",
        "_handlers",
        "_routes",
        "_runtime",
        "_tokens",
        "_tracer",
        "_turns",
    )

    def __init__(
        self, runtime: Runtime, tracer: Tracer, meter: Meter, *, include_content: bool
    ) -> None:
        self._runtime = runtime
        self._tracer = tracer
        self._content = include_content
        self._tokens: Histogram = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._duration: Histogram = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        #: The metric attributes of each route seen (see ``_route_attributes``).
        self._routes: dict[
            tuple[str, str], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]
        ] = {}
        #: The open turns, by session id.
        self._turns: dict[str, _Turn] = {}
        self._handlers: dict[str, Callable[[Session, SessionEvent, int], None]] = {
            "turn/start": self._turn_start,
            "turn/end": self._turn_end,
            "step/start": self._step_start,
            "step/end": self._step_end,
            "llm/retry-started": self._retry_started,
            "request/context": self._route,
            "assistant/message": self._settled,
            "assistant/attempt": self._settled,
            "tool/call": self._tool_call,
            "tool/result": self._tool_result,
        }

    def install(self) -> Callable[[], None]:
        """Register the listeners; return the idempotent uninstall function."""
        bus = self._runtime.events
        disposers = [
            bus.on("session/event", self._on_event),
            bus.on("agent/disposed", self._on_disposed),
        ]

        def uninstall() -> None:
            for dispose in disposers:
                dispose()
            self.end_all()

        return uninstall

    def end_all(self) -> None:
        """End every span still open."""
        now = _now()
        turns = self._turns
        while turns:
            _, turn = turns.popitem()
            self._close(turn, now)

    # ------------------------------------------------------------------ listeners

    def _on_event(self, payload: SessionEventAppended) -> None:
        event = payload.event
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(payload.session, event, _now())

    def _on_disposed(self, payload: AgentDisposed) -> None:
        turn = self._turns.pop(payload.agent.id, None)
        if turn is not None:
            self._close(turn, _now())

    # ------------------------------------------------------------------ turns

    def _turn_start(self, session: Session, event: SessionEvent, now: int) -> None:
        data = event.data
        if data.__class__ is not TurnStart:
            return
        assert isinstance(data, TurnStart)
        sid = session.id
        stale = self._turns.pop(sid, None)
        if stale is not None:  # its turn/end was never written
            self._close(stale, now)
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_ID: redact_live_secrets(sid),
            TURN: data.turn,
        }
        preset = session.header.agent_preset
        if preset:
            attributes[AGENT_NAME] = redact_live_secrets(preset)
        span = self._tracer.start_span(
            "invoke_agent",
            context=self._parent(session),
            kind=_INTERNAL,
            attributes=attributes,
            start_time=now,
        )
        self._turns[sid] = _Turn(span, data.turn, now)

    def _parent(self, session: Session) -> Context | None:
        """The context a turn of ``session``'s agent opens in: its owner's span that
        runs it, else ``None`` (the current context)."""
        if not self._turns:  # no turn open: no owner's span to nest under
            return None
        agents = self._runtime.agents
        agent = agents.get(session.id)
        owner_id: str | None = None
        if agent is not None:
            owner = agents.owner_of(agent)
            if owner is not None:
                owner_id = owner.id
        else:
            owner_id = session.header.parent_session
        if owner_id is None:
            return None
        owner_turn = self._turns.get(owner_id)
        if owner_turn is None:
            return None
        tools = owner_turn.tools
        running = _CURRENT_TOOL.get()
        if running is not None and running[0] == owner_id and running[1] in tools:
            return trace.set_span_in_context(tools[running[1]])
        if len(tools) == 1:
            return trace.set_span_in_context(next(iter(tools.values())))
        return owner_turn.context

    def _turn_end(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.pop(session.id, None)
        data = event.data
        if turn is None:
            return
        if data.__class__ is not TurnEnd:
            self._close(turn, now)
            return
        assert isinstance(data, TurnEnd)
        reason = data.reason
        span = turn.span
        end_reason = _END_REASONS.get(reason.__class__, "")
        if reason.__class__ is Completed:  # the common case: one attribute
            span.set_attribute(END_REASON, end_reason)
        else:
            attributes: dict[str, Any] = {END_REASON: end_reason}
            if isinstance(reason, Aborted):
                attributes[CANCEL_CAUSE] = reason.reason.kind
            elif isinstance(reason, Errored):
                attributes[ERROR_TYPE] = redact_live_secrets(reason.error.code)
                span.set_status(
                    Status(StatusCode.ERROR, redact_live_secrets(reason.error.message))
                )
            span.set_attributes(attributes)
        self._close(turn, now)

    def _close(self, turn: _Turn, now: int) -> None:
        """End ``turn``'s open spans, children first."""
        chat = turn.chat
        if chat is not None:
            turn.chat = None
            self._end_chat(chat, now, None, None, None)
        tools = turn.tools
        while tools:
            _, span = tools.popitem()
            span.end(end_time=now)
        turn.span.end(end_time=now)

    # ------------------------------------------------------------------ attempts

    def _step_start(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        if turn is None:
            return
        turn.attempts = 0
        self._open_chat(session, turn, now)

    def _retry_started(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        if turn is not None:
            self._open_chat(session, turn, now)

    def _step_end(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        if turn is not None and turn.chat is not None:
            # The step ended before its attempt was made (a cancel, a request that
            # could not be built): nothing was sent.
            chat, turn.chat = turn.chat, None
            self._end_chat(chat, now, None, None, None)

    def _route(self, session: Session, event: SessionEvent, now: int) -> None:
        """The step's request names a new provider or model (appended before the
        attempt is made, on a first request or a change)."""
        turn = self._turns.get(session.id)
        data = event.data
        if (
            turn is not None
            and turn.chat is not None
            and isinstance(data, RequestContextData)
        ):
            self._name_route(turn.chat, data.provider, data.model)

    @staticmethod
    def _name_route(chat: _Chat, provider: str, model: str) -> None:
        if provider != chat.provider or model != chat.model:
            chat.provider = provider = redact_live_secrets(provider)
            chat.model = model = redact_live_secrets(model)
            chat.span.set_attributes({PROVIDER: provider, REQUEST_MODEL: model})
            chat.span.update_name(f"chat {model}")

    def _open_chat(self, session: Session, turn: _Turn, now: int) -> _Chat:
        previous = turn.chat
        if previous is not None:  # never settled
            turn.chat = None
            self._end_chat(previous, now, None, None, None)
        attempt = turn.attempts
        turn.attempts = attempt + 1
        context = session.request_context()
        provider = model = ""
        attributes: dict[str, Any] = {OPERATION: "chat", ATTEMPT: attempt}
        if context is not None:
            provider = attributes[PROVIDER] = redact_live_secrets(context.provider)
            model = attributes[REQUEST_MODEL] = redact_live_secrets(context.model)
        span = self._tracer.start_span(
            f"chat {model}" if model else "chat",
            context=turn.context,
            kind=_CLIENT,
            attributes=attributes,
            start_time=now,
        )
        chat = turn.chat = _Chat(span, now, attempt, provider, model)
        return chat

    def _settled(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        if turn is None:
            return
        chat = turn.chat
        if chat is None:
            # A retry no ``llm/retry-started`` announced (another request-error
            # listener's): it started when the attempt before it ended.
            chat = self._open_chat(session, turn, turn.last_end)
        turn.chat = None
        turn.last_end = now
        data = event.data
        message: AssistantMessage | None = None
        usage: Usage | None = None
        if data.__class__ is AssistantMessageData:
            assert isinstance(data, AssistantMessageData)
            message = data.message
            usage = data.usage
            source = message.source
            provider, model = source.provider, source.model
        elif data.__class__ is AssistantAttemptData:
            assert isinstance(data, AssistantAttemptData)
            context = session.request_context()
            provider = context.provider if context is not None else ""
            model = context.model if context is not None else ""
        else:
            self._end_chat(chat, now, None, None, None)
            return
        finish, found = _finish_and_usage(data.stream, usage is None)
        if usage is None:
            usage = found
        self._name_route(chat, provider, model)
        if self._content:
            chat.span.set_attributes(_chat_content(session, message, finish))
        self._end_chat(chat, now, finish, usage, message)

    def _end_chat(
        self,
        chat: _Chat,
        now: int,
        finish: Finish | None,
        usage: Usage | None,
        message: AssistantMessage | None,
    ) -> None:
        span = chat.span
        attributes: dict[str, Any] = {}
        failure: LlmFailure | None = None
        if finish is not None:
            kind = finish.reason.kind
            attributes[FINISH_REASONS] = _FINISH_REASONS.get(kind, (kind,))
            failure = finish.reason.failure
            if failure is None and message is None and kind in ("error", "aborted"):
                failure = LlmFailure(message="model call failed", code="UNKNOWN")
        route = self._route_attributes(chat.provider, chat.model)
        metric = route[0]
        if usage is not None:
            attributes[INPUT_TOKENS] = usage.input_tokens
            attributes[OUTPUT_TOKENS] = usage.output_tokens
            tokens = self._tokens
            tokens.record(usage.input_tokens, route[1])
            tokens.record(usage.output_tokens, route[2])
        if failure is not None:
            code = redact_live_secrets(failure.code)
            attributes[ERROR_TYPE] = code
            metric = {**metric, ERROR_TYPE: code}
            span.set_status(
                Status(StatusCode.ERROR, redact_live_secrets(failure.message))
            )
        if attributes:
            span.set_attributes(attributes)
        span.end(end_time=now)
        self._duration.record((now - chat.start) / 1e9, metric)

    def _route_attributes(
        self, provider: str, model: str
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The metric attributes of a route: the duration's, the input and output
        tokens'. Made once per route (the strings are already redacted)."""
        key = (provider, model)
        found = self._routes.get(key)
        if found is None:
            metric: dict[str, Any] = {OPERATION: "chat"}
            if provider:
                metric[PROVIDER] = provider
            if model:
                metric[REQUEST_MODEL] = model
            found = (
                metric,
                {**metric, TOKEN_TYPE: "input"},
                {**metric, TOKEN_TYPE: "output"},
            )
            if len(self._routes) < _MAX_ROUTES:
                self._routes[key] = found
        return found

    # ------------------------------------------------------------------ tools

    def _tool_call(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        data = event.data
        if turn is None or data.__class__ is not ToolCallData:
            return
        assert isinstance(data, ToolCallData)
        name = redact_live_secrets(data.name)
        call_id = redact_live_secrets(data.call_id)
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: name,
            TOOL_CALL_ID: call_id,
            TOOL_TYPE: "function",
        }
        if self._content:
            attributes[TOOL_ARGUMENTS] = redact_live_secrets(data.arguments)
        previous = turn.tools.pop(data.call_id, None)
        if previous is not None:  # a call id used twice: the first is over
            previous.end(end_time=now)
        turn.tools[data.call_id] = self._tracer.start_span(
            f"execute_tool {name}",
            context=turn.context,
            kind=_INTERNAL,
            attributes=attributes,
            start_time=now,
        )
        _CURRENT_TOOL.set((session.id, data.call_id))

    def _tool_result(self, session: Session, event: SessionEvent, now: int) -> None:
        turn = self._turns.get(session.id)
        data = event.data
        if turn is None or data.__class__ is not ToolResultData:
            return
        assert isinstance(data, ToolResultData)
        message = data.message
        source = message.source
        call_id: str | None = None
        if isinstance(source, ToolSource):
            call_id = source.call_id
        else:
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    call_id = block.tool_call_id
                    break
        span = turn.tools.pop(call_id, None) if call_id is not None else None
        if span is None:  # answered without being run: no span was opened
            return
        error = data.error
        if error is not None:
            code = redact_live_secrets(error.code)
            span.set_attribute(ERROR_TYPE, code)
            span.set_status(Status(StatusCode.ERROR, code))
        if self._content:
            span.set_attribute(TOOL_RESULT, redact_live_secrets(_result_text(message)))
        span.end(end_time=now)


# ---------------------------------------------------------------------- helpers


def _finish_and_usage(
    stream: Sequence[StreamRecord], want_usage: bool
) -> tuple[Finish | None, Usage | None]:
    """The last ``Finish`` chunk a settled attempt's stream recorded, and its last
    ``Usage`` chunk if ``want_usage`` (the search ends once both are found)."""
    finish: Finish | None = None
    usage: Usage | None = None
    for record in reversed(stream):
        if record.__class__ is RawChunkRecord:
            assert isinstance(record, RawChunkRecord)
            chunk = record.chunk
            if finish is None and chunk.__class__ is Finish:
                assert isinstance(chunk, Finish)
                finish = chunk
                if not want_usage:
                    break
            elif want_usage and usage is None and chunk.__class__ is Usage:
                assert isinstance(chunk, Usage)
                usage = chunk
            if finish is not None and usage is not None:
                break
    return finish, usage


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(blocks: Iterable[object]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def _result_text(message: Message) -> str:
    """The text a tool result message carries (its result blocks' text)."""
    return "".join(
        _text(block.content)
        for block in message.content
        if isinstance(block, ToolResultBlock)
    )


def _parts(blocks: Iterable[object]) -> list[dict[str, Any]]:
    """Content blocks as the conventions' message parts."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ReasoningBlock):
            parts.append({"type": "reasoning", "content": block.text})
        elif isinstance(block, ToolCallBlock):
            try:
                arguments: object = json.loads(block.arguments)
            except ValueError:
                arguments = block.arguments
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.id,
                    "name": block.name,
                    "arguments": arguments,
                }
            )
        elif isinstance(block, ToolResultBlock):
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": block.tool_call_id,
                    "response": _text(block.content),
                }
            )
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image"})  # the attachment itself is not recorded
    return parts


def _role(message: Message) -> str:
    if isinstance(message, AssistantMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message.source, ToolSource):
        return "tool"
    return "user"


def _chat_content(
    session: Session, message: AssistantMessage | None, finish: Finish | None
) -> dict[str, str]:
    """``gen_ai.input.messages`` (the history the attempt was sent) and
    ``gen_ai.output.messages`` (its reply), as JSON text with the secrets redacted."""
    history = list(session.derive_messages())
    if message is not None and history and history[-1] is message:
        history.pop()  # the reply itself, just appended
    sent = [{"role": _role(m), "parts": _parts(m.content)} for m in history]
    content = {INPUT_MESSAGES: redact_live_secrets(_json(sent))}
    if message is not None:
        reason = "stop"
        if finish is not None:
            kind = finish.reason.kind
            reason = _FINISH_REASONS.get(kind, (kind,))[0]
        reply = [
            {
                "role": "assistant",
                "parts": _parts(message.content),
                "finish_reason": reason,
            }
        ]
        content[OUTPUT_MESSAGES] = redact_live_secrets(_json(reply))
    return content
