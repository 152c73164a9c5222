"""A session's listeners: the subscription disposer and the report of a failing one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..values import SessionEvent

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["Subscription", "listener_failed"]

_logger = logging.getLogger("dsh_trio")


class Subscription:
    """One listener of a session; calling it unsubscribes (the idempotent disposer)."""

    __slots__ = ("listener", "session")

    def __init__(
        self, listener: Callable[[SessionEvent], None], session: Session
    ) -> None:
        self.listener = listener
        self.session = session

    def __call__(self) -> None:
        session = self.session
        session._subs = tuple(s for s in session._subs if s is not self)


def listener_failed(session_id: str, sub: Subscription, event: SessionEvent) -> None:
    """Log the exception being handled: ``sub``'s listener raised it on ``event``."""
    _logger.exception(
        'session "%s": listener %r failed on event %d (%s)',
        session_id,
        sub.listener,
        event.seq,
        event.type,
    )
