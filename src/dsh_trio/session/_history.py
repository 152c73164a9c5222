"""The derived history: the surface folded into the messages a model sees.

:class:`HistoryFold` keeps the fold of one session up to date incrementally and hands
out :class:`DerivedMessages` snapshots of it in O(1).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Final, overload

from ..values import (
    AssistantMessageData,
    Message,
    SessionEvent,
    SystemMessageData,
    ToolResultData,
    UserMessage,
)

__all__ = ["DerivedMessages", "HistoryFold"]

_new = object.__new__

#: The messages of a fold that holds none yet (shared, never mutated).
_NO_ITEMS: Final[list[Message]] = []


class DerivedMessages(Sequence[Message]):
    """An immutable snapshot of the derived history (what ``derive_messages()`` returns).

    Taking one is O(1): it shares the session's append-only fold and remembers its
    length, so later appends never show through and a replace op starts a new fold
    instead of editing this one. Indexing, slicing (a tuple), iteration and ``==``
    against lists and tuples work as for a tuple; ``list(snapshot)`` gives a mutable
    copy.
    """

    __slots__ = ("_items", "_len")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._len = length

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            return tuple(self._items[: self._len][index])
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("derived message index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Message]:
        items = self._items
        for i in range(self._len):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (DerivedMessages, list, tuple)):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DerivedMessages({list(self)!r})"


def _none(seq: int) -> None:
    return None


def _project(event: SessionEvent) -> Message | None:
    """The message a surface event contributes to the derived history, if any."""
    data = event.data
    # Exact-class tests: the cheapest narrowing, and validated data has exact classes.
    if data.__class__ is UserMessage:
        return data
    if data.__class__ is ToolResultData:
        return data.message
    if data.__class__ is AssistantMessageData or data.__class__ is SystemMessageData:
        message = data.message
        return message if message.content else None
    return None


class HistoryFold:
    """The surface folded into messages, extended as the surface grows.

    ``user/message`` gives its message; ``system/message`` and ``assistant/message``
    give theirs unless the content is empty; ``tool/result`` gives its result
    message. Only nodes added since the last :meth:`snapshot` are visited; after a
    replace op (a new surface generation) the fold starts over in a new list, so
    earlier snapshots never change. Until the fold holds a message its list is a
    shared empty one (never mutated), so an idle session pays nothing for it.

    A surface is its own fold (:class:`~dsh_trio.session._surface.Surface` mixes this
    in), so a session keeps one object for both; the class mixing it in provides
    the fields annotated here.
    """

    # The fold: the messages (``_NO_ITEMS`` until the first), how many nodes were
    # folded, and the surface generation they were folded from.
    __slots__ = ("_fold_generation", "_folded", "_items")

    # The surface's: the log, its node seqs in order, its replace-op count.
    _events: Sequence[SessionEvent]
    nodes: array[int]
    generation: int

    def _start_fold(self) -> None:
        """An empty fold (the mixing class calls it once it is built)."""
        self._items = _NO_ITEMS
        self._folded = 0
        self._fold_generation = 0

    def snapshot(self) -> DerivedMessages:
        """The derived history now, as an immutable O(1) snapshot."""
        if self._fold_generation != self.generation:
            self._items = _NO_ITEMS
            self._folded = 0
            self._fold_generation = self.generation
        nodes = self.nodes
        folded = self._folded
        if folded < len(nodes):
            events = self._events
            items = self._items
            if items is _NO_ITEMS:  # the first nodes to fold: this fold's own list
                items = self._items = []
            # A resumed log's assistant messages are read without their streams
            # (events kept as lines come first; a live session's are values).
            kept: Callable[[int], Message | None] = getattr(
                events, "assistant_message", _none
            )
            lines: int = getattr(events, "compact_count", 0)
            for seq in nodes[folded:]:
                message = kept(seq) if seq < lines else None
                if message is None:
                    message = _project(events[seq])
                elif not message.content:
                    continue
                if message is not None:
                    items.append(message)
            self._folded = len(nodes)
        # A snapshot is taken on every call: building it without the ``__init__``
        # frame keeps a call with nothing new to fold as cheap as it can be.
        snapshot = _new(DerivedMessages)
        snapshot._items = items = self._items
        snapshot._len = len(items)
        return snapshot
