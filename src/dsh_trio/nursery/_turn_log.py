"""Following one message through a stored log: which turn claimed it, and how that turn ended.

``runtime.sessions.wait`` reads a session's log in pieces as it grows (the store
hands out whole batches) and feeds them to a :class:`ClaimTracker`, which keeps
only what it needs: the inbox's pending message ids, the open turn's events and,
once a turn claimed the message, that turn's events until its ``turn/end``. The
result is built from the log exactly as ``Agent.run`` builds it from memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..loop import TurnResult, text_of
from ..values import (
    Aborted,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Message,
    RawChunkRecord,
    SessionEvent,
    StreamRecord,
    SystemMessageData,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    Usage,
    UserCancel,
    UserMessage,
)

__all__ = ["ClaimTracker"]


class ClaimTracker:
    """Reads a stored log piece by piece for the turn that claims ``message_id``.

    Feed every event in seq order (:meth:`feed`); :attr:`result` is set once the
    claiming turn's ``turn/end`` was read, or once the message left the inbox
    without a turn claiming it and no turn is open (``turn=None``,
    ``Aborted(UserCancel())``, as ``Agent.run`` reports a discarded message).
    """

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        #: The seq of the next event to feed.
        self.next_seq = 0
        self.result: TurnResult | None = None
        self._inbox: dict[str, list[str]] = {"next-turn": [], "next-step": []}
        self._seen = False  # the message was inserted into the inbox
        self._turn: int | None = None  # the open turn
        self._events: list[SessionEvent] = []  # of the open turn, from turn/start
        self._claimed = False

    def feed(self, events: Iterable[SessionEvent]) -> None:
        """Read more of the log; events already read (by seq) are skipped."""
        for event in events:
            if event.seq < self.next_seq or self.result is not None:
                continue
            self.next_seq = event.seq + 1
            self._read(event)
        if (
            self.result is None
            and self._seen
            and not self._claimed
            and self._turn is None
            and not any(self.message_id in ids for ids in self._inbox.values())
        ):
            self.result = TurnResult(
                turn=None,
                reason=Aborted(UserCancel()),
                text="",
                messages=(),
                usage=None,
            )

    def _read(self, event: SessionEvent) -> None:
        kind = event.type
        data: Any = event.data
        if kind == "turn/start":
            self._turn = getattr(data, "turn", None)
            self._events = [event]
            return
        if self._turn is not None:
            self._events.append(event)
        if kind == "agent/inbox/spliced":
            self._splice(data)
        elif (
            data.__class__ is UserMessage
            and event.surface_op == "append"
            and data.id == self.message_id
            and self._turn is not None
        ):
            self._claimed = True
        elif kind == "turn/end":
            if self._claimed and isinstance(data, TurnEnd):
                self.result = _result(self._events, data.turn, data.reason)
            self._turn = None
            self._events = []

    def _splice(self, data: Any) -> None:
        ids = self._inbox.get(str(getattr(data, "target", "")))
        if ids is None:
            return
        start = int(getattr(data, "start", 0))
        removed = int(getattr(data, "removed_count", 0) or 0)
        inserted = [m.id for m in getattr(data, "inserted", ()) or ()]
        if self.message_id in inserted:
            self._seen = True
        ids[start : start + removed] = inserted


def _result(
    events: Sequence[SessionEvent], turn: int, reason: TurnEndReason
) -> TurnResult:
    """The :class:`TurnResult` of a turn's events (``turn/start`` .. ``turn/end``)."""
    messages: list[Message] = []
    usage: Usage | None = None
    last: AssistantMessage | None = None
    for event in events:
        data: Any = event.data
        if event.surface_op == "append":
            message = _appended(data)
            if message is not None:
                messages.append(message)
        if data.__class__ is AssistantMessageData:
            usage = _add_usage(usage, data.usage)
            last = data.message
        elif data.__class__ is AssistantAttemptData:
            usage = _add_usage(usage, _attempt_usage(data.stream))
    return TurnResult(
        turn=turn,
        reason=reason,
        text="" if last is None else text_of(last),
        messages=tuple(messages),
        usage=usage,
    )


def _add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    if total is None:
        return more

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        total.input_tokens + more.input_tokens,
        total.output_tokens + more.output_tokens,
        plus(total.cache_read_tokens, more.cache_read_tokens),
        plus(total.cache_write_tokens, more.cache_write_tokens),
        plus(total.reasoning_tokens, more.reasoning_tokens),
    )


def _attempt_usage(stream: Sequence[StreamRecord]) -> Usage | None:
    found: Usage | None = None
    for record in stream:
        if record.__class__ is RawChunkRecord and isinstance(record.chunk, Usage):
            found = record.chunk
    return found


def _appended(data: object) -> Message | None:
    if data.__class__ is UserMessage:
        return data
    if data.__class__ is ToolResultData:
        return data.message
    if data.__class__ is AssistantMessageData or data.__class__ is SystemMessageData:
        message: Message = data.message
        return message if message.content else None
    return None
