"""Write-behind recording of one live session through one :class:`SessionWriter`.

``Session.append`` is synchronous memory; the recorder hears each committed event,
queues it, and has a background task write the queue in batches. The task exists only
while there is something to write, so an idle session costs no task. A failed write
is a *fault*: reported at once (the ``dsh_trio`` log and ``on_fault``), kept until a
write succeeds again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import PersistenceError

if TYPE_CHECKING:
    from ..session import Session
    from ..values import SessionEvent
    from ._persistence import Durability, SessionPersistence, SessionWriter

__all__ = ["SessionRecorder", "persist_new_session"]

logger = logging.getLogger("dsh_trio")

#: Starts a background task (the runtime passes ``nursery.start_soon``).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]


def _noop_fault(error: PersistenceError) -> None:
    return None


def _noop() -> None:
    return None


@attrs.define(eq=False)
class SessionRecorder:
    """Keeps one live :class:`Session`'s log written through one :class:`SessionWriter`.

    Every appended event is queued; the first event queued while no write is running
    starts one writer task (through ``spawn``), which writes the whole queue as one
    batch, then the next, and ends when the queue is empty. A batch is fsynced when
    durability is ``"always"``, or ``"turn"`` and the batch holds a ``turn/end``. A
    failed write keeps its events at the head of the queue; the next append,
    :meth:`wait_written` or :meth:`flush` retries it, and the last two report the
    failure as a :class:`PersistenceError`.

    The first failed write after a success starts a *fault*: it is logged on the
    ``dsh_trio`` logger and passed to ``on_fault`` at once (from the task that
    wrote), and :attr:`fault` holds it until a write succeeds again, which is logged
    and reported to ``on_recover``.

    Events the session holds beyond what the writer has written are queued at
    construction, so a recorder may be attached at any point. After each write the
    recorder hands the session the lines the writer wrote, compressed in chunks by
    the writer (when it gathers them, as both stores' writers do): the session keeps
    its settled events as those lines, so a long live session's memory grows by
    the compressed lines of a turn, not its values.

    Example::

        writer = await persist_new_session(persistence, session)
        recorder = SessionRecorder(
            session, writer, durability=persistence.durability, spawn=nursery.start_soon
        )
        ...
        await recorder.aclose()

    Args:
        session: the live session to record.
        writer: its log's writer; the recorder closes it in :meth:`aclose`.
        durability: the fsync policy.
        spawn: starts a background task.
        on_fault: called (synchronously) when writes start failing.
        on_recover: called (synchronously) when a write succeeds after a fault.
    """

    _session: Session
    _writer: SessionWriter
    _durability: Durability = attrs.field(kw_only=True)
    _spawn: Spawn = attrs.field(kw_only=True)
    _on_fault: Callable[[PersistenceError], None] = attrs.field(
        kw_only=True, default=_noop_fault
    )
    _on_recover: Callable[[], None] = attrs.field(kw_only=True, default=_noop)
    _pending: list[SessionEvent] = attrs.field(init=False, factory=list)
    _task_running: bool = attrs.field(init=False, default=False)
    _fault: PersistenceError | None = attrs.field(init=False, default=None)
    _unsynced: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _unsubscribe: Callable[[], None] | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        self._pending.extend(self._session.events[self._writer.durable_seq :])
        self._unsubscribe = self._session.subscribe(self._on_event)
        if self._pending:
            self._start_task()

    @property
    def pending_count(self) -> int:
        """How many events are queued and not yet written."""
        return len(self._pending)

    @property
    def writer(self) -> SessionWriter:
        """The writer the recorder writes through."""
        return self._writer

    @property
    def fault(self) -> PersistenceError | None:
        """The failure of the last write, while writes fail; ``None`` when healthy."""
        return self._fault

    @trio.lowlevel.enable_ki_protection
    def _on_event(self, event: SessionEvent) -> None:
        self._pending.append(event)
        if not self._task_running:
            self._start_task()

    def _start_task(self) -> None:
        self._task_running = True
        try:
            self._spawn(self._drain)
        except RuntimeError:
            # The owner's nursery is closed; the queue stays for flush() to write.
            self._task_running = False

    async def _drain(self) -> None:
        try:
            while True:
                await self._lock.acquire()
                try:
                    if not self._pending or self._closed:
                        self._task_running = False
                        return
                    await self._write_pending(flushing=False)
                except PersistenceError:
                    # Reported and kept for flush(): a background write must not
                    # crash the owner's nursery.
                    self._task_running = False
                    return
                finally:
                    self._lock.release()
        finally:
            self._task_running = False

    async def _write_pending(self, *, flushing: bool) -> None:
        """Write the whole queue as one batch (the caller holds the lock)."""
        batch = list(self._pending)
        if flushing:
            sync = self._durability != "none"
        else:
            sync = self._durability == "always" or (
                self._durability == "turn"
                and any(ev.type == "turn/end" for ev in batch)
            )
        try:
            await self._writer.append(batch, sync=sync)
        except Exception as exc:
            raise self._failed(exc, batch) from exc
        finally:
            # What the writer holds is written, whatever happened after.
            written = self._writer.durable_seq - batch[0].seq
            if written > 0:
                del self._pending[:written]
        self._unsynced = not sync
        if self._fault is not None:
            self._recovered()
        self._hand_lines()

    def _hand_lines(self) -> None:
        """Give the session the chunks of lines its writer wrote (if the writer
        gathers them: see :class:`~dsh_trio.session.LineChunks`), so the session
        keeps its settled events as those lines."""
        take = getattr(self._writer, "take_lines", None)
        if take is not None:
            chunks = take()
            if chunks:
                self._session._offer_lines(chunks)

    def _failed(
        self, exc: Exception, batch: Sequence[SessionEvent]
    ) -> PersistenceError:
        """The :class:`PersistenceError` for ``exc``; starts a fault if healthy."""
        sid = self._session.id
        if batch:
            what = f"events {batch[0].seq}-{batch[-1].seq}"
        else:
            what = "an fsync of the written events"
        error = PersistenceError(
            f'session "{sid}": writing {what} to its log failed: {exc}',
            session_id=sid,
            cause=exc,
        )
        error.__cause__ = exc
        if self._fault is None:
            self._fault = error
            logger.error(
                "%s; %d events wait to be written (a flush retries)",
                error,
                len(self._pending),
            )
            self._on_fault(error)
        else:
            self._fault = error
        return error

    def _recovered(self) -> None:
        self._fault = None
        logger.warning('session "%s": its log is being written again', self._session.id)
        self._on_recover()

    async def wait_written(self) -> None:
        """Wait until every event queued so far is written (not necessarily fsynced).

        Writes what is queued itself, after a background write in progress, with
        the recorder's fsync policy; retries after a fault. Returns after one
        checkpoint when nothing is queued. If cancelled, the queue keeps whatever
        was not written.

        Raises:
            PersistenceError: a write failed; the events stay queued.
        """
        pending = self._pending
        if not pending:
            await trio.lowlevel.checkpoint()
            return
        end = pending[-1].seq
        async with self._lock:
            while pending and pending[0].seq <= end:
                if self._closed:
                    raise self._closed_error()
                await self._write_pending(flushing=False)

    def _closed_error(self) -> PersistenceError:
        sid = self._session.id
        return PersistenceError(
            f'session "{sid}": its log was closed with {len(self._pending)} events '
            "not written",
            session_id=sid,
            cause=self._fault,
        )

    async def flush(self) -> None:
        """Wait until every event queued so far is written and durable.

        Writes what is queued itself (fsynced unless durability is ``"none"``),
        retrying a batch whose background write failed; a success ends a fault.
        Blocks on the disk; if cancelled, the queue keeps whatever was not written.
        After :meth:`aclose`, returns at once if everything was written.

        Raises:
            PersistenceError: a write failed (``__cause__`` is what the writer
                raised); the events stay queued and a later append or flush
                retries them. After :meth:`aclose`: events were left unwritten.
        """
        async with self._lock:
            if self._closed:
                if self._pending:
                    raise self._closed_error()
                return
            await self._flush_locked()

    async def _flush_locked(self, *, closing: bool = False) -> None:  # noqa: ASYNC910  # private: the scheduler around it checkpoints
        while self._pending:
            await self._write_pending(flushing=True)
        if closing:
            # Right after the last emptiness check, with no checkpoint between:
            # no event can slip in unheard and unwritten.
            self._stop_listening()
        if self._unsynced and self._durability != "none":
            try:
                await self._writer.append([], sync=True)
            except Exception as exc:
                raise self._failed(exc, ()) from exc
            self._unsynced = False
            if self._fault is not None:
                self._recovered()

    def _stop_listening(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    async def aclose(self) -> None:
        """Flush, stop listening to the session and close the writer.

        Idempotent. Shielded from cancellation, so what is queued is written even
        while the owner is being cancelled. The writer is closed even if the flush
        fails.

        Raises:
            PersistenceError: the flush failed; events that could not be written
                stay counted in :attr:`pending_count`.
            OSError: the writer's close failed.
        """
        with trio.CancelScope(shield=True):
            async with self._lock:
                if self._closed:
                    return
                self._closed = True
                try:
                    await self._flush_locked(closing=True)
                finally:
                    self._stop_listening()
                    await self._writer.close()  # noqa: ASYNC102  # the writer's close is itself shielded


async def persist_new_session(
    persistence: SessionPersistence, session: Session
) -> SessionWriter:
    """Claim a new session's id and write the events it already holds, durably.

    Those events are the seed and anything appended before publication; a session
    without events stays off the disk until its first append. On failure or
    cancellation the claim is released.

    Example::

        writer = await persist_new_session(persistence, Session.create("s1"))

    Raises:
        InvalidSessionIdError, SessionExistsError, SessionLockedError: as
            :meth:`SessionPersistence.create`.
        OSError: the events could not be written.
    """
    writer = await persistence.create(session.header)
    try:
        events = list(session.events)
        if events:
            await writer.append(events, sync=True)
        else:
            await trio.lowlevel.checkpoint()
    except BaseException:
        with trio.CancelScope(shield=True):
            await writer.close()
        raise
    return writer
