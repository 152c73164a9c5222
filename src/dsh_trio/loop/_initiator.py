"""Which agent initiated the current chain of work (a ContextVar)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..errors import NoInitiatorError

if TYPE_CHECKING:
    from ._agent import Agent

__all__ = ["current_initiator", "initiator", "no_initiator", "require_initiator"]

_initiator: contextvars.ContextVar[Agent | None] = contextvars.ContextVar(
    "dsh_trio_initiator", default=None
)


@contextmanager
def initiator(agent: Agent) -> Iterator[Agent]:
    """Make ``agent`` the initiator for the code in the ``with`` block.

    Tasks spawned inside the block inherit it (trio copies the context at spawn).
    The outer value is restored on exit, also after an exception.

    Example::

        with dsh.initiator(agent):
            assert dsh.require_initiator() is agent
    """
    token = _initiator.set(agent)
    try:
        yield agent
    finally:
        _initiator.reset(token)


@contextmanager
def no_initiator() -> Iterator[None]:
    """Clear the initiator for the code in the ``with`` block (for shared pools/timers)."""
    token = _initiator.set(None)
    try:
        yield
    finally:
        _initiator.reset(token)


def current_initiator() -> Agent | None:
    """The agent whose driver (or a task it spawned) is running this code, or ``None``."""
    return _initiator.get()


def require_initiator() -> Agent:
    """Like :func:`current_initiator`, but raise :class:`NoInitiatorError` when there is none."""
    agent = _initiator.get()
    if agent is None:
        raise NoInitiatorError
    return agent
