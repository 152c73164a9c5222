"""The latest turn and request markers of a session log, folded as events commit."""

from __future__ import annotations

import attrs

from ..values import (
    EpochHeader,
    RequestContextData,
    RequestHeaderData,
    SessionEvent,
    TurnStart,
)

__all__ = ["MARKER_TYPES", "Markers"]

#: The event types :meth:`Markers.fold` takes into account (it ignores the others).
MARKER_TYPES = frozenset(
    {"turn/start", "turn/end", "request/header", "request/context"}
)


@attrs.define(eq=False, weakref_slot=False)
class Markers:
    """The latest turn and request markers of a log, folded from its off-surface events.

    ``last_turn`` is the turn of the last ``turn/start`` (0 if none); ``open_turn``
    that turn until a ``turn/end`` closes it; ``request_header`` and
    ``request_context`` hold the latest ``request/header``'s header and
    ``request/context``'s data.
    """

    last_turn: int = 0
    open_turn: int | None = None
    #: The seq of the ``turn/start`` of ``open_turn``.
    open_turn_seq: int | None = None
    request_header: EpochHeader | None = None
    request_context: RequestContextData | None = None

    def fold(self, event: SessionEvent) -> None:
        """Take a committed off-surface event into account.

        Raises:
            TypeError: a marker event's data is not of its type (only the runtime's
                trusted appends skip the check that rules this out).
        """
        type_ = event.type
        if type_ == "turn/start":
            self.fold_turn(event.data_as(TurnStart).turn, event.seq)
        elif type_ == "turn/end":
            self.close_turn()
        elif type_ == "request/header":
            self.request_header = event.data_as(RequestHeaderData).header
        elif type_ == "request/context":
            self.request_context = event.data_as(RequestContextData)

    def fold_turn(self, turn: int, seq: int) -> None:
        """Take the ``turn/start`` of ``turn`` at ``seq`` into account."""
        self.last_turn = self.open_turn = turn
        self.open_turn_seq = seq

    def close_turn(self) -> None:
        """Take a ``turn/end`` into account."""
        self.open_turn = self.open_turn_seq = None
