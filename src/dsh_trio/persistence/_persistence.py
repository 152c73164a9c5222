"""The persistence seam: where a session log goes when it leaves memory.

A :class:`SessionPersistence` stores session logs; each live session writes through
one :class:`SessionWriter`, the exclusive claim on its stored log. :func:`load_session`
turns a stored log back into a live :class:`Session`, closing a turn that a crash left
open. Backends implement the two protocols; :class:`JsonlPersistence` is the embedded
one.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

import trio

from ..session import Session, close_interrupted_turn

if TYPE_CHECKING:
    from ..values import SessionEvent, SessionHeader

__all__ = [
    "Durability",
    "SessionWriter",
    "SessionPersistence",
    "load_session",
]

#: When appends reach the disk: ``"turn"`` fsyncs every batch holding a ``turn/end``
#: (and on flush and close), ``"always"`` every batch, ``"none"`` never (the
#: operating system decides).
Durability: TypeAlias = Literal["turn", "always", "none"]


class SessionWriter(Protocol):
    """The exclusive write claim on one stored session log.

    Appends are contiguous: each batch continues exactly where the written log ends.
    Concurrent calls are serialised. :meth:`close` releases the claim.
    """

    @property
    def header(self) -> SessionHeader:
        """The header of the stored log."""
        ...

    @property
    def durable_seq(self) -> int:
        """The seq the next written event must have (the number of events written)."""
        ...

    async def append(self, events: Sequence[SessionEvent], *, sync: bool) -> None:
        """Write ``events`` after the written log; with ``sync``, make them durable.

        Blocks until the batch is written (a worker thread does the disk work). If the
        call raises, nothing of the batch is kept, so a retry cannot duplicate seqs.
        A cancellation that arrives while the disk work runs waits for it: the batch
        is written and the cancellation is delivered at the caller's next checkpoint.
        An empty batch with ``sync=True`` makes the earlier appends durable.

        Raises:
            PersistenceSeqError: the batch does not start at :attr:`durable_seq` or
                is not contiguous; nothing was written.
            trio.ClosedResourceError: the writer was closed.
            OSError: the disk refused the write; the stored log is unchanged.
        """
        ...

    async def close(self) -> None:
        """Make what was written durable (unless durability is ``"none"``) and release the claim.

        Idempotent. Waits for an append in progress; shielded from cancellation.
        """
        ...


class SessionPersistence(Protocol):
    """A store of session logs with at most one writer per log at a time."""

    durability: Durability

    async def create(self, header: SessionHeader) -> SessionWriter:
        """Claim a new session id; nothing is stored until the first append.

        Raises:
            InvalidSessionIdError: the id is empty, not a string or unusable as a
                file name.
            SessionExistsError: a log with this id is already stored.
            SessionLockedError: another writer holds the id.
        """
        ...

    async def open(
        self, session_id: str
    ) -> tuple[SessionWriter, builtins.list[SessionEvent]]:
        """Claim a stored session, read it, and repair a torn tail.

        Returns the writer and the durable events: the stored log cut (on disk too)
        after its last intact event.

        Raises:
            InvalidSessionIdError: the id is empty or not a string.
            SessionNotFoundError: nothing is stored under the id.
            SessionLockedError: another writer holds the id.
            SessionFormatError: the log has a format version this library does not read.
            SessionCorruptError: the log is damaged beyond a torn tail.
        """
        ...

    async def exists(self, session_id: str) -> bool:
        """Whether a log is stored under ``session_id``."""
        ...

    async def list(self) -> builtins.list[SessionHeader]:
        """The headers of every stored session."""
        ...


async def load_session(
    persistence: SessionPersistence, session_id: str
) -> tuple[Session, SessionWriter]:
    """Load a stored session for writing, closing a turn that a crash left open.

    Claims the log first (nobody else may write it from then on), reads it, restores
    the :class:`Session`, appends the interrupted-turn closers (synthetic results for
    pending tool calls, ``step/end``, ``turn/end`` with ``Interrupted()``) and writes
    them durably before returning. On failure or cancellation the claim is released;
    closers already written stay written, and a later load finds the turn closed.

    Example::

        session, writer = await load_session(JsonlPersistence(root), "s1")

    Args:
        persistence: where the session is stored.
        session_id: the id to load.

    Returns:
        The restored session (closers included) and the writer holding its log.

    Raises:
        SessionNotFoundError: nothing is stored under the id.
        SessionLockedError: another writer holds the id.
        SessionFormatError: the log has a format version this library does not read.
        SessionCorruptError: the log is damaged beyond a torn tail, or its history
            is not a valid session.
        InvalidSessionIdError: the id is empty or not a string.
        OSError: the closers could not be written.
    """
    writer, events = await persistence.open(session_id)
    try:
        session = Session.restore(writer.header, events)
        written = close_interrupted_turn(session)
        if written:
            await writer.append(written, sync=True)
        else:
            await trio.lowlevel.checkpoint()
    except BaseException:
        with trio.CancelScope(shield=True):
            await writer.close()
        raise
    return session, writer
