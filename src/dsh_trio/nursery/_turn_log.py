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

from ..loop import TurnResult, result_of_events
from ..values import (
    Aborted,
    Interrupted,
    SessionEvent,
    TurnEnd,
    UserCancel,
    UserMessage,
)

__all__ = ["ClaimTracker", "lost_claims"]


class ClaimTracker:
    """Reads a stored log piece by piece for the turn that claims ``message_id``.

    Feed every event in seq order (:meth:`feed`); :attr:`result` is set once the
    claiming turn's ``turn/end`` was read, or once the message was discarded from
    the inbox (a ``canceled`` splice) before a turn claimed it (``turn=None``,
    ``Aborted(UserCancel())``, as ``Agent.run`` reports a discarded message). A
    claiming turn that a crash cut off before it recorded the message (closed
    ``Interrupted`` by repair, the message not in its history) does not count:
    the worker that takes the session over queues the message again.
    """

    def __init__(self, message_id: str) -> None:
        self.message_id = message_id
        #: The seq of the next event to feed.
        self.next_seq = 0
        self.result: TurnResult | None = None
        self._inbox: dict[str, list[str]] = {"next-turn": [], "next-step": []}
        self._turn: int | None = None  # the open turn
        self._events: list[SessionEvent] = []  # of the open turn, from turn/start
        self._claimed = False  # removed from the inbox by the open turn's claim
        self._recorded = False  # and appended to its history

    def feed(self, events: Iterable[SessionEvent]) -> None:
        """Read more of the log; events already read (by seq) are skipped."""
        for event in events:
            if event.seq < self.next_seq or self.result is not None:
                continue
            self.next_seq = event.seq + 1
            self._read(event)

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
        ):
            self._recorded = True
        elif kind == "turn/end":
            if (
                self._claimed
                and isinstance(data, TurnEnd)
                and (self._recorded or data.reason.__class__ is not Interrupted)
            ):
                self.result = result_of_events(self._events, data.turn, data.reason)
            self._turn = None
            self._events = []
            self._claimed = self._recorded = False

    def _splice(self, data: Any) -> None:
        ids = self._inbox.get(str(getattr(data, "target", "")))
        if ids is None:
            return
        start = int(getattr(data, "start", 0))
        removed = int(getattr(data, "removed_count", 0) or 0)
        inserted = [m.id for m in getattr(data, "inserted", ()) or ()]
        gone = self.message_id in ids[start : start + removed]
        ids[start : start + removed] = inserted
        if not gone or self.message_id in inserted:
            return
        if getattr(data, "outcome", None) == "canceled":
            self.result = TurnResult(
                turn=None,
                reason=Aborted(UserCancel()),
                text="",
                messages=(),
                usage=None,
            )
        elif self._turn is not None:
            self._claimed = True


def lost_claims(events: Sequence[SessionEvent]) -> list[UserMessage]:
    """Messages the last turn claimed but never recorded, if repair closed that turn.

    A crash between the batch holding a turn's claim and the one holding the
    claimed message leaves the message neither pending nor in the history; the
    repair closes the turn ``Interrupted``. These are the messages to queue again.
    """
    inbox: dict[str, list[UserMessage]] = {"next-turn": [], "next-step": []}
    claimed: list[UserMessage] = []
    recorded: set[str] = set()
    lost: list[UserMessage] = []
    for event in events:
        kind = event.type
        data: Any = event.data
        if kind == "turn/start":
            claimed, recorded = [], set()
        elif kind == "agent/inbox/spliced":
            pending = inbox.get(str(getattr(data, "target", "")))
            if pending is None:
                continue
            start = int(getattr(data, "start", 0))
            removed = int(getattr(data, "removed_count", 0) or 0)
            taken = pending[start : start + removed]
            pending[start : start + removed] = list(getattr(data, "inserted", ()) or ())
            if getattr(data, "outcome", None) != "canceled":
                claimed.extend(taken)
        elif data.__class__ is UserMessage and event.surface_op == "append":
            recorded.add(data.id)
        elif kind == "turn/end":
            lost = []
            if getattr(data, "reason", None).__class__ is Interrupted:
                lost = [m for m in claimed if m.id not in recorded]
            claimed = []
    return lost
