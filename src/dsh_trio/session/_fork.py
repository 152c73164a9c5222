"""Where a fork may cut a session log: the checked prefix a child is seeded with."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ForkBoundaryError
from ..values import SessionEvent, TurnStart

__all__ = ["fork_prefix"]


def fork_prefix(
    session_id: str, events: Sequence[SessionEvent], boundary: int | None
) -> tuple[SessionEvent, ...]:
    """The events up to ``boundary`` (inclusive; the last one when ``None``).

    Never blocks.

    Raises:
        ForkBoundaryError: ``boundary`` is not an existing seq, or the prefix it
            ends stops inside an open turn.
    """
    n = len(events)
    if boundary is None:
        boundary = n - 1
    elif boundary.__class__ is not int or not 0 <= boundary < n:
        raise ForkBoundaryError(
            f'session "{session_id}": fork boundary {boundary!r:.40} is not an '
            f"existing seq (the log has {n} events)",
            boundary=boundary,
        )
    prefix = tuple(events[: boundary + 1])
    open_turn: int | None = None
    for event in prefix:
        if event.type == "turn/start":
            open_turn = event.data_as(TurnStart).turn
        elif event.type == "turn/end":
            open_turn = None
    if open_turn is not None:
        raise ForkBoundaryError(
            f'session "{session_id}": fork boundary {boundary} ends inside open '
            f"turn {open_turn}",
            boundary=boundary,
        )
    return prefix
