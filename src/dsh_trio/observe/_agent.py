"""One agent's spans: the listener on its session, and its open turn.

Every span is opened and ended from a session event of the agent, read as the event
is appended (the listener runs synchronously inside the append, in the task that
appends):

- ``turn/start`` opens the turn's ``invoke_agent`` span, ``turn/end`` ends it;
- ``step/start`` opens the ``chat`` span of the step's first attempt,
  ``llm/retry-started`` the span of a retry; ``assistant/message`` or
  ``assistant/attempt`` (the attempt's one settlement event) ends it;
- ``tool/call`` opens an ``execute_tool`` span, the call's ``tool/result`` ends it.

Whatever the log did not close (a turn whose ``turn/end`` could not be written, an
uninstall mid-turn) is ended by :meth:`AgentSpans.stop`.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

from opentelemetry.context import get_current
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from ..llm import redact_live_secrets
from ..values import (
    Aborted,
    AssistantAttemptData,
    AssistantMessageData,
    Completed,
    Errored,
    Finish,
    RawChunkRecord,
    RequestContextData,
    SessionEvent,
    StreamRecord,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    Usage,
)
from ._content import chat_content, result_text
from ._metrics import NO_ROUTE
from ._names import (
    AGENT_ID,
    AGENT_NAME,
    CANCEL_CAUSE,
    END_REASON,
    END_REASONS,
    ERROR_TYPE,
    OPERATION,
    TOOL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_NAME,
    TOOL_RESULT,
    TOOL_TYPE,
    TURN,
)
from ._turn import OpenChat, OpenTurn

if TYPE_CHECKING:
    from opentelemetry.context import Context

    from ..loop import Agent
    from ._observer import Observer

__all__ = ["AgentSpans"]

_now = time.time_ns
_INTERNAL: Final = SpanKind.INTERNAL
_CLIENT: Final = SpanKind.CLIENT

#: The tool call whose body runs in this task: ``(session id, call id)``. Set as its
#: ``tool/call`` is appended, in the task that then starts the body, which inherits it;
#: a child agent's turn started from that body finds its parent's span through it.
_CURRENT_TOOL: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "dsh_trio.observe.tool", default=None
)


class AgentSpans:
    """The spans of one agent: subscribed to its session from :meth:`follow` until
    :meth:`stop`. Runtime use only (its :class:`Observer` makes and stops it)."""

    __slots__ = ("_observer", "_preset", "_unsubscribe", "agent", "owner", "turn")

    def __init__(self, observer: Observer, agent: Agent, owner: str | None) -> None:
        self._observer = observer
        self.agent = agent
        #: The id of the agent that owns this one (created it with ``parent=``).
        self.owner = owner
        #: The open turn (``None`` between turns).
        self.turn: OpenTurn | None = None
        self._preset = agent.session.header.agent_preset
        self._unsubscribe: Callable[[], None] | None = None

    def follow(self) -> None:
        """Subscribe to the agent's session."""
        if self._unsubscribe is None:
            self._unsubscribe = self.agent.session.subscribe(self.on_event)

    def stop(self, now: int) -> None:
        """Unsubscribe and end the spans still open. Idempotent."""
        unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        turn, self.turn = self.turn, None
        if turn is not None:
            turn.close(now, self._observer.metrics)

    def on_event(self, event: SessionEvent) -> None:
        """The session appended ``event``."""
        handler = self._handlers.get(event.type)
        if handler is not None:
            handler(self, event)

    # ------------------------------------------------------------------ turns

    def _turn_start(self, event: SessionEvent) -> None:
        data = event.data
        if data.__class__ is not TurnStart:
            return
        assert isinstance(data, TurnStart)
        now = _now()
        observer = self._observer
        stale = self.turn
        if stale is not None:  # its turn/end was never written
            self.turn = None
            stale.close(now, observer.metrics)
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            AGENT_ID: redact_live_secrets(self.agent.id),
            TURN: data.turn,
        }
        if self._preset:
            attributes[AGENT_NAME] = redact_live_secrets(self._preset)
        owner = self.owner
        parent = None if owner is None else observer.parent_context(owner)
        if parent is None:
            parent = get_current()  # read once, for the span and its children
        span = observer.tracer.start_span(
            "invoke_agent", parent, _INTERNAL, attributes, start_time=now
        )
        self.turn = OpenTurn(span, set_span_in_context(span, parent), now)

    def child_context(self) -> Context | None:
        """The context a turn of an agent this one owns opens in: the tool call
        that runs it, else this agent's turn (``None``: no turn is open)."""
        turn = self.turn
        if turn is None:
            return None
        tools = turn.tools
        running = _CURRENT_TOOL.get()
        if running is not None and running[0] == self.agent.id and running[1] in tools:
            return set_span_in_context(tools[running[1]])
        if len(tools) == 1:
            return set_span_in_context(next(iter(tools.values())))
        return turn.context

    def _turn_end(self, event: SessionEvent) -> None:
        turn = self.turn
        if turn is None:
            return
        self.turn = None
        now = _now()
        data = event.data
        if data.__class__ is TurnEnd:
            assert isinstance(data, TurnEnd)
            reason = data.reason
            span = turn.span
            end_reason = END_REASONS.get(reason.__class__, "")
            if reason.__class__ is Completed:  # the common case: one attribute
                span.set_attribute(END_REASON, end_reason)
            else:
                attributes: dict[str, Any] = {END_REASON: end_reason}
                if isinstance(reason, Aborted):
                    attributes[CANCEL_CAUSE] = reason.reason.kind
                elif isinstance(reason, Errored):
                    attributes[ERROR_TYPE] = redact_live_secrets(reason.error.code)
                    span.set_status(
                        Status(
                            StatusCode.ERROR, redact_live_secrets(reason.error.message)
                        )
                    )
                span.set_attributes(attributes)
        if turn.chat is None and not turn.tools:  # the common case: nothing else open
            turn.span.end(end_time=now)
        else:
            turn.close(now, self._observer.metrics)

    # ------------------------------------------------------------------ attempts

    def _step_start(self, event: SessionEvent) -> None:
        turn = self.turn
        if turn is not None:
            turn.attempts = 0
            self._open_chat(turn, _now())

    def _retry_started(self, event: SessionEvent) -> None:
        turn = self.turn
        if turn is not None:
            self._open_chat(turn, _now())

    def _step_end(self, event: SessionEvent) -> None:
        turn = self.turn
        if turn is not None and turn.chat is not None:
            # The step ended before its attempt was made (a cancel, a request that
            # could not be built): nothing was sent.
            turn.end_chat(_now(), self._observer.metrics)

    def _route(self, event: SessionEvent) -> None:
        """The step's request names a new provider or model (appended before the
        attempt is made, on a first request or a change)."""
        turn = self.turn
        data = event.data
        if (
            turn is not None
            and turn.chat is not None
            and isinstance(data, RequestContextData)
        ):
            turn.chat.rename(data.provider, data.model, self._observer.metrics)

    def _open_chat(self, turn: OpenTurn, now: int) -> OpenChat:
        observer = self._observer
        metrics = observer.metrics
        if turn.chat is not None:  # never settled
            turn.end_chat(now, metrics)
        attempt = turn.attempts
        turn.attempts = attempt + 1
        context = self.agent.session.request_context()
        if context is None:
            provider = model = ""
            route = NO_ROUTE
        else:
            provider, model = context.provider, context.model
            key = (redact_live_secrets(provider), redact_live_secrets(model))
            route = metrics.routes.get(key) or metrics.route(*key)
        span = observer.tracer.start_span(
            route.name,
            turn.context,
            _CLIENT,
            route.first if attempt == 0 else route.attempt(attempt),
            start_time=now,
        )
        chat = turn.chat = OpenChat(span, now, provider, model, route)
        return chat

    def _settled(self, event: SessionEvent) -> None:
        turn = self.turn
        if turn is None:
            return
        now = _now()
        chat = turn.chat
        if chat is None:
            # A retry no ``llm/retry-started`` announced (another request-error
            # listener's): it started when the attempt before it ended.
            chat = self._open_chat(turn, turn.last_end)
        turn.chat = None
        turn.last_end = now
        metrics = self._observer.metrics
        data = event.data
        usage: Usage | None = None
        if data.__class__ is AssistantMessageData:
            assert isinstance(data, AssistantMessageData)
            message = data.message
            usage = data.usage
            source = message.source
            provider, model = source.provider, source.model
        elif data.__class__ is AssistantAttemptData:
            assert isinstance(data, AssistantAttemptData)
            message = None
            context = self.agent.session.request_context()
            provider = context.provider if context is not None else ""
            model = context.model if context is not None else ""
        else:
            chat.end(now, metrics)
            return
        if provider != chat.provider or model != chat.model:
            chat.rename(provider, model, metrics)
        stream = data.stream
        last = stream[-1] if stream else None
        finish: Finish | None = None
        if usage is not None and last.__class__ is RawChunkRecord:
            assert isinstance(last, RawChunkRecord)
            if last.chunk.__class__ is Finish:  # the common case: the last record
                assert isinstance(last.chunk, Finish)
                finish = last.chunk
        if finish is None:
            finish, found = _finish_and_usage(stream, usage is None)
            if usage is None:
                usage = found
        if self._observer.content:
            chat.span.set_attributes(chat_content(self.agent.session, message, finish))
        chat.end(now, metrics, finish, usage, message is not None)

    # ------------------------------------------------------------------ tools

    def _tool_call(self, event: SessionEvent) -> None:
        turn = self.turn
        data = event.data
        if turn is None or data.__class__ is not ToolCallData:
            return
        assert isinstance(data, ToolCallData)
        now = _now()
        name = redact_live_secrets(data.name)
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: name,
            TOOL_CALL_ID: redact_live_secrets(data.call_id),
            TOOL_TYPE: "function",
        }
        observer = self._observer
        if observer.content:
            attributes[TOOL_ARGUMENTS] = redact_live_secrets(data.arguments)
        previous = turn.tools.pop(data.call_id, None)
        if previous is not None:  # a call id used twice: the first is over
            previous.end(end_time=now)
        turn.tools[data.call_id] = observer.tracer.start_span(
            f"execute_tool {name}",
            turn.context,
            _INTERNAL,
            attributes,
            start_time=now,
        )
        _CURRENT_TOOL.set((self.agent.id, data.call_id))

    def _tool_result(self, event: SessionEvent) -> None:
        turn = self.turn
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
        if self._observer.content:
            span.set_attribute(TOOL_RESULT, redact_live_secrets(result_text(message)))
        span.end(end_time=_now())

    #: The handler of each event type that opens or ends a span.
    _handlers: ClassVar[dict[str, Callable[[AgentSpans, SessionEvent], None]]] = {
        "turn/start": _turn_start,
        "turn/end": _turn_end,
        "step/start": _step_start,
        "step/end": _step_end,
        "llm/retry-started": _retry_started,
        "request/context": _route,
        "assistant/message": _settled,
        "assistant/attempt": _settled,
        "tool/call": _tool_call,
        "tool/result": _tool_result,
    }


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
