"""Taking existing events into a new session: a seed, a persisted log, or a log
admitted as it was read.

Runtime use only: :meth:`Session.create` and :meth:`Session.restore` call
:func:`load_events` on a session they have just built, before anyone can see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from ..errors import InvalidEventError, SessionCorruptError
from ..values import SessionEvent, UserMessage, UserSource
from ._admission import admitted, check_sources
from ._compact import DecodedEvents
from ._loaded import LoadedLog
from ._views import SessionEvents

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["load_events", "prompt_node"]


def prompt_node(type_: str, data: object) -> bool:
    """Whether a surface event moves ``Session._prompt_seq``: a ``system/message``, or a
    ``user/message`` whose source is not a :class:`UserSource` (assistant messages, tool
    results and plain user input never do)."""
    if type_ == "assistant/message" or type_ == "tool/result":
        return False
    return not (isinstance(data, UserMessage) and data.source.__class__ is UserSource)


def load_events(session: Session, events: Sequence[SessionEvent], what: str) -> None:
    """Admit existing events (a seed or a persisted log) into ``session`` without
    publishing.

    Events a log decoder already checked (a :class:`DecodedEvents`, except its
    ``unchecked`` positions) skip the second check of their data; a
    :class:`LoadedLog` was admitted while it was read, so its surface and markers
    are adopted as they are.

    Raises:
        SessionCorruptError: the first malformed event (``seq`` names it).
    """
    if events.__class__ is LoadedLog and what == "log":
        _adopt(session, events)
        return
    unchecked = events.unchecked if isinstance(events, DecodedEvents) else None
    for index, event in enumerate(events):
        try:
            _admit(
                session, event, index, unchecked is not None and index not in unchecked
            )
        except InvalidEventError as exc:
            raise SessionCorruptError(
                f"malformed session {what}: {exc}", seq=index
            ) from None


def _admit(
    session: Session, event: SessionEvent, index: int, data_checked: bool
) -> None:
    event = admitted(event, index, data_checked=data_checked)
    sources = event.source_event_seqs
    if sources is not None:
        sources = check_sources(event.type, sources, index)
    plan = session._surface.plan(
        event.type, event.data, event.surface_op, sources, index
    )
    session._live.append(event)
    if plan is not None:
        session._surface.apply(plan, index)
        if prompt_node(event.type, event.data):
            session._prompt_seq = index
    else:
        session._markers.fold(event)


def _adopt(session: Session, log: LoadedLog) -> None:
    """Take over a log admitted as it was read (its lines shared, not copied)."""
    error = log.error
    if error is not None:
        raise SessionCorruptError(str(error), seq=error.seq)
    markers = log.settled_markers()
    events = log.share()
    session._events = events
    session._live = events.values
    session._base = events.compact_count
    session._view = SessionEvents(events)
    session._surface = log.surface.copy(events)
    session._history = session._surface
    session._markers = attrs.evolve(markers)
    session._prompt_seq = session.next_seq - 1  # any adopted event may be one
