"""The read-only, live view of a session's events."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from ..values import SessionEvent

__all__ = ["SessionEvents"]


class SessionEvents(Sequence[SessionEvent]):
    """A read-only, live view of a session's events (``session.events``).

    Indexing, ``len`` and iteration read the log directly (no copy); a slice
    returns a tuple. The view follows later appends.
    """

    __slots__ = ("_items",)

    def __init__(self, items: list[SessionEvent]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(
        self, index: int | slice
    ) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return tuple(self._items[index])
        return self._items[index]

    def __iter__(self) -> Iterator[SessionEvent]:
        return iter(self._items)

    def __reversed__(self) -> Iterator[SessionEvent]:
        return reversed(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionEvents):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return len(self._items) == len(other) and all(
                a == b for a, b in zip(self._items, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<SessionEvents: {len(self._items)} events>"
