"""The read-only, live view of a session's events."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import SupportsIndex, overload

from ..values import SessionEvent
from ._compact import DecodedEvents

__all__ = ["SessionEvents"]


class SessionEvents(Sequence[SessionEvent]):
    """A read-only, live view of a session's events (``session.events``).

    Indexing (negative indices too), ``len`` and iteration read the log directly
    (no copy); a slice returns a tuple. The view follows later appends. Events a
    restored log kept as their lines are decoded when read, to values equal to
    the ones its reader decoded. Never blocks.

    Example::

        session.events[-1].type  # "turn/end"
        [e.seq for e in session.events[:3]]  # [0, 1, 2]
    """

    __slots__ = ("_items",)

    def __init__(self, items: DecodedEvents) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: SupportsIndex) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(
        self, index: SupportsIndex | slice
    ) -> SessionEvent | tuple[SessionEvent, ...]:
        return self._items[index]

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._items)

    def of_types(self, *types: str, reverse: bool = False) -> Iterator[SessionEvent]:
        """The events of the given types, in log order (last first with ``reverse``).

        What ``(e for e in events if e.type in types)`` gives, without decoding
        the other events a restored log keeps as lines: use it to look for a few
        event types in a long log. Never blocks.

        Example::

            last = next(session.events.of_types("turn/start", reverse=True), None)
        """
        return self._items.of_types(types, reverse=reverse)

    def __reversed__(self) -> Iterator[SessionEvent]:
        return reversed(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionEvents):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return self._items == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<SessionEvents: {len(self._items)} events>"
