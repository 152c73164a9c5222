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
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias, runtime_checkable

import attrs
import trio

from ..errors import SessionCorruptError
from ..session import Session, close_interrupted_turn
from ._gc import gc_paused

if TYPE_CHECKING:
    from ..values import SessionEvent, SessionHeader
    from ._damage import SalvagedTail

__all__ = [
    "Durability",
    "SessionWriter",
    "SessionPersistence",
    "RestoredSession",
    "history_error",
    "load_session",
    "restore_session",
]

#: When appends reach the disk: ``"turn"`` fsyncs every batch holding a ``turn/end``
#: (and on flush and close), ``"always"`` every batch, ``"none"`` never (the
#: operating system decides).
Durability: TypeAlias = Literal["turn", "always", "none"]


class SessionWriter(Protocol):
    """The exclusive write claim on one stored session log.

    Appends are contiguous: each batch continues exactly where the written log ends.
    Concurrent calls are serialised. :meth:`close` releases the claim. A writer
    should hold no scarce resource (an open file, a connection) between calls: a
    runtime keeps one writer per live agent, idle or not.
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
            SessionExistsError, SessionLockedError: another owner stored or changed
                the log; nothing was written.
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
        """Claim a new session id; no log is stored until the first append.

        The claim is visible to other processes, so a second owner of the same new
        id fails here rather than at its first write.

        Raises:
            InvalidSessionIdError: the id is empty, not a string or unusable as a
                file name.
            SessionExistsError: a log with this id is already stored.
            SessionLockedError: another writer holds the id.
            OSError: the claim could not be stored.
        """
        ...

    async def open(
        self, session_id: str
    ) -> tuple[SessionWriter, Sequence[SessionEvent]]:
        """Claim a stored session, read it, and repair a torn tail.

        Returns the writer and the durable events: the stored log cut (on disk too)
        after its last intact event. Only a damaged tail that a crash can leave may
        be cut, and every cut byte is kept beside the log first; a log damaged in
        any other way is refused with :class:`SessionCorruptError` and left as it is.

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


@runtime_checkable
class _SalvagingPersistence(Protocol):
    """A backend whose ``open`` can report what it cut off a damaged log."""

    async def open_salvaging(
        self, session_id: str
    ) -> tuple[SessionWriter, Sequence[SessionEvent], SalvagedTail | None]: ...


@attrs.frozen(kw_only=True)
class RestoredSession:
    """A stored session loaded for writing by :func:`restore_session`.

    Attributes:
        session: the restored session, the closers of an interrupted turn included.
        writer: the write claim on its log.
        salvaged: the damaged tail the load cut off the log, with the side file
            that keeps every cut byte; ``None`` when nothing was cut.
        closers: the events appended (and written durably) to close a turn a
            crash left open; empty when no turn was open.
    """

    session: Session
    writer: SessionWriter
    salvaged: SalvagedTail | None = None
    closers: tuple[SessionEvent, ...] = ()


def history_error(exc: SessionCorruptError, where: str) -> SessionCorruptError:
    """``exc`` (from restoring a stored history) with the log line of its seq.

    In the stored format event ``seq`` is on line ``seq + 2`` (line 1 is the header).
    """
    line = exc.line
    if line is None and exc.seq is not None:
        line = exc.seq + 2
    at = f", line {line}" if line is not None else ""
    return SessionCorruptError(
        f"{where}{at}: {exc}; the log is left unchanged", seq=exc.seq, line=line
    )


def _restore(
    header: SessionHeader, events: Sequence[SessionEvent], session_id: str
) -> Session:
    with gc_paused():
        try:
            return Session.restore(header, events)
        except SessionCorruptError as exc:
            raise history_error(exc, f'stored session "{session_id}"') from exc


async def restore_session(
    persistence: SessionPersistence, session_id: str
) -> RestoredSession:
    """Load a stored session for writing, and report what the load repaired.

    Claims the log first (nobody else may write it from then on), reads it,
    restores the :class:`Session`, appends the interrupted-turn closers (synthetic
    results for pending tool calls, ``step/end``, ``turn/end`` with
    ``Interrupted()``) and writes them durably before returning. Blocks on worker
    threads for the read and the restore (the trio loop keeps running).

    Repair never destroys data: a backend cuts only a damaged tail that a crash
    can leave, keeps every cut byte beside the log and reports it
    (:attr:`RestoredSession.salvaged`, also logged as a warning on the
    ``dsh_trio`` logger); a log damaged in any other way is refused with
    :class:`SessionCorruptError` and left as it is.

    On failure or cancellation the claim is released; closers already written stay
    written, and a later load finds the turn closed.

    Example::

        restored = await restore_session(JsonlPersistence(root), "s1")
        if restored.salvaged is not None:
            print(restored.salvaged.describe())

    Args:
        persistence: where the session is stored.
        session_id: the id to load.

    Returns:
        The session, its writer, the salvaged tail and the closers written.

    Raises:
        SessionNotFoundError: nothing is stored under the id.
        SessionLockedError: another writer holds the id.
        SessionFormatError: the log has a format version this library does not read.
        SessionCorruptError: the log is damaged beyond a torn tail, or its history
            is not a valid session; ``seq`` and ``line`` name the damaged line.
        InvalidSessionIdError: the id is empty or not a string.
        OSError: the closers could not be written.
    """
    salvaged: SalvagedTail | None = None
    if isinstance(persistence, _SalvagingPersistence):
        writer, events, salvaged = await persistence.open_salvaging(session_id)
    else:
        writer, events = await persistence.open(session_id)
    try:
        session = await trio.to_thread.run_sync(
            _restore, writer.header, events, session_id
        )
        del events  # the session holds them now
        written = close_interrupted_turn(session)
        if written:
            await writer.append(written, sync=True)
        else:
            await trio.lowlevel.checkpoint()
    except BaseException:
        with trio.CancelScope(shield=True):
            await writer.close()
        raise
    return RestoredSession(
        session=session, writer=writer, salvaged=salvaged, closers=tuple(written)
    )


async def load_session(
    persistence: SessionPersistence, session_id: str
) -> tuple[Session, SessionWriter]:
    """Load a stored session for writing, closing a turn that a crash left open.

    :func:`restore_session` without the report: claims the log first (nobody else
    may write it from then on), reads it, restores the :class:`Session`, appends
    the interrupted-turn closers (synthetic results for pending tool calls,
    ``step/end``, ``turn/end`` with ``Interrupted()``) and writes them durably
    before returning. A damaged tail a crash left is cut off and kept beside the
    log (a warning on the ``dsh_trio`` logger says where); any other damage is
    refused with the log left as it is. On failure or cancellation the claim is
    released; closers already written stay written, and a later load finds the
    turn closed.

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
            is not a valid session; ``seq`` and ``line`` name the damaged line.
        InvalidSessionIdError: the id is empty or not a string.
        OSError: the closers could not be written.
    """
    restored = await restore_session(persistence, session_id)
    return restored.session, restored.writer
