"""Taking an existing event (of a seed or a persisted log) into a new session: the
checks it passes before :meth:`Session._admit` commits it.
"""

from __future__ import annotations

from ..errors import InvalidEventError, SessionCorruptError
from ..values import SessionEvent
from ._admission import admitted, check_sources
from ._surface import Plan, Surface

__all__ = ["intake"]


def intake(
    surface: Surface, event: SessionEvent, index: int, what: str, data_checked: bool
) -> tuple[SessionEvent, Plan]:
    """``event``, checked for position ``index`` of a ``what`` (``"seed"`` or
    ``"log"``), and its plan on ``surface`` (the surface of the events before it).

    ``data_checked``: a log decoder checked the event's data already (see
    :func:`admitted`). Returns the event (a copy if its data was structured) and the
    plan to commit it with.

    Raises:
        SessionCorruptError: the event is malformed (``seq`` names it).
    """
    try:
        event = admitted(event, index, data_checked=data_checked)
        sources = event.source_event_seqs
        if sources is not None:
            sources = check_sources(event.type, sources, index)
        plan = surface.plan(event.type, event.data, event.surface_op, sources, index)
    except InvalidEventError as exc:
        raise SessionCorruptError(
            f"malformed session {what}: {exc}", seq=index
        ) from None
    return event, plan
