"""Write-behind recording of one live session through one :class:`SessionWriter`.

``Session.append`` is synchronous memory; the recorder hears each committed event,
queues it, and has a background task write the queue in batches. The task exists only
while there is something to write, so an idle session costs no task.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    from ..session import Session
    from ..values import SessionEvent
    from ._persistence import Durability, SessionPersistence, SessionWriter

__all__ = ["SessionRecorder", "persist_new_session"]

#: Starts a background task (the runtime passes ``nursery.start_soon``).
Spawn = Callable[[Callable[[], Awaitable[None]]], None]


@attrs.define(eq=False)
class SessionRecorder:
    """Keeps one live :class:`Session`'s log written through one :class:`SessionWriter`.

    Every appended event is queued; the first event queued while no write is running
    starts one writer task (through ``spawn``), which writes the whole queue as one
    batch, then the next, and ends when the queue is empty. A batch is fsynced when
    durability is ``"always"``, or ``"turn"`` and the batch holds a ``turn/end``. A
    failed write keeps its events at the head of the queue; the next append or
    :meth:`flush` retries it, and :meth:`flush` reports the failure.

    Events the session holds beyond what the writer has written are queued at
    construction, so a recorder may be attached at any point.

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
    """

    _session: Session
    _writer: SessionWriter
    _durability: Durability = attrs.field(kw_only=True)
    _spawn: Spawn = attrs.field(kw_only=True)
    _pending: list[SessionEvent] = attrs.field(init=False, factory=list)
    _task_running: bool = attrs.field(init=False, default=False)
    _error: Exception | None = attrs.field(init=False, default=None)
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
                except Exception as exc:
                    # Kept for flush(): a background write must not crash the
                    # owner's nursery.
                    self._error = exc
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
        finally:
            # What the writer holds is written, whatever happened after.
            written = self._writer.durable_seq - batch[0].seq
            if written > 0:
                del self._pending[:written]
        self._error = None
        self._unsynced = not sync

    async def flush(self) -> None:
        """Wait until every event queued so far is written and durable.

        Writes what is queued itself (fsynced unless durability is ``"none"``),
        retrying a batch whose background write failed. Blocks on the disk; if
        cancelled, the queue keeps whatever was not written.

        Raises:
            OSError: or whatever else the writer raised; the events stay queued and a
                later append or flush retries them.
        """
        async with self._lock:
            await self._flush_locked()

    async def _flush_locked(self, *, closing: bool = False) -> None:  # noqa: ASYNC910  # private: the scheduler around it checkpoints
        try:
            while self._pending:
                await self._write_pending(flushing=True)
            if closing:
                # Right after the last emptiness check, with no checkpoint between:
                # no event can slip in unheard and unwritten.
                self._stop_listening()
            if self._unsynced and self._durability != "none":
                await self._writer.append([], sync=True)
                self._unsynced = False
        except Exception as exc:
            self._error = exc
            raise

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
            OSError: or whatever else the writer raised while flushing or closing;
                events that could not be written stay counted in
                :attr:`pending_count`.
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
