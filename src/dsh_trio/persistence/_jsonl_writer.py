"""The writer of one JSONL session log: the only code that appends to a log file.

The first append writes header and batch to a temporary file, fsyncs it and links it
into place (never replacing an existing file); later appends go to the end of the
file and, on any failure, cut the file back to its previous size. Where the log
stands is one :class:`WriterState`; every change of it goes through
:func:`_next_state` and its table of transitions.

All disk work runs in worker threads, one hop per operation.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..errors import PersistenceSeqError, SessionExistsError
from ..values import SessionEvent, SessionHeader
from ._jsonl_lines import encode_events, encode_header
from ._jsonl_lock import acquire_lock, release
from ._jsonl_paths import LOG_FILE_NAME

if TYPE_CHECKING:
    from ._jsonl import JsonlPersistence

__all__ = ["JsonlWriter", "WriterState", "write_all", "sync_data", "sync_dir"]


# --------------------------------------------------------------------------- disk helpers


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (the one place appends touch the disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def sync_data(fd: int) -> None:
    """Make the data written to ``fd`` durable."""
    if sys.platform == "linux":
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def sync_dir(path: str) -> None:
    """Make the entries of directory ``path`` durable (a no-op on Windows)."""
    if sys.platform == "win32":
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- state


class WriterState(enum.Enum):
    """Where a writer's log stands."""

    #: Claimed; no log file yet (the first append creates it).
    UNWRITTEN = "unwritten"
    #: The log file is open and everything written to it is fsynced.
    SYNCED = "synced"
    #: The log file is open; the last batch was written without an fsync.
    UNSYNCED = "unsynced"
    #: As ``SYNCED``, but a failed append left bytes after the log's end that could
    #: not be cut off; the next append cuts them first.
    TORN = "torn"
    #: As ``UNSYNCED``, with such bytes.
    TORN_UNSYNCED = "torn-unsynced"
    #: Closed: the claim is released and nothing more is written.
    CLOSED = "closed"

    @property
    def unsynced(self) -> bool:
        """Whether the log holds written batches that are not fsynced yet."""
        return self is WriterState.UNSYNCED or self is WriterState.TORN_UNSYNCED

    @property
    def torn(self) -> bool:
        """Whether bytes after the log's end must be cut off before the next write."""
        return self is WriterState.TORN or self is WriterState.TORN_UNSYNCED


class _Step(enum.Enum):
    """What happened to a writer's log."""

    CREATED = "created"  # the first append linked the fsynced file into place
    WROTE_SYNCED = "wrote-synced"  # a batch (possibly empty) was written and fsynced
    WROTE_UNSYNCED = "wrote-unsynced"  # a batch was written without an fsync
    CUT_FAILED = "cut-failed"  # a failed append could not cut the file back
    CUT = "cut"  # the bytes a failed append left were cut off
    CLOSED = "closed"


_S = WriterState
#: Every transition of a writer's state: (state, step) → the state after it.
_TRANSITIONS: Final[dict[tuple[WriterState, _Step], WriterState]] = {
    (_S.UNWRITTEN, _Step.CREATED): _S.SYNCED,
    (_S.UNWRITTEN, _Step.CLOSED): _S.CLOSED,
    (_S.SYNCED, _Step.WROTE_SYNCED): _S.SYNCED,
    (_S.SYNCED, _Step.WROTE_UNSYNCED): _S.UNSYNCED,
    (_S.SYNCED, _Step.CUT_FAILED): _S.TORN,
    (_S.SYNCED, _Step.CLOSED): _S.CLOSED,
    (_S.UNSYNCED, _Step.WROTE_SYNCED): _S.SYNCED,
    (_S.UNSYNCED, _Step.WROTE_UNSYNCED): _S.UNSYNCED,
    (_S.UNSYNCED, _Step.CUT_FAILED): _S.TORN_UNSYNCED,
    (_S.UNSYNCED, _Step.CLOSED): _S.CLOSED,
    (_S.TORN, _Step.CUT): _S.SYNCED,
    (_S.TORN, _Step.CLOSED): _S.CLOSED,
    (_S.TORN_UNSYNCED, _Step.CUT): _S.UNSYNCED,
    (_S.TORN_UNSYNCED, _Step.CLOSED): _S.CLOSED,
}


def _next_state(state: WriterState, step: _Step) -> WriterState:
    """The state after ``step``; every change of a writer's state goes through here."""
    after = _TRANSITIONS.get((state, step))
    if after is None:
        raise AssertionError(
            f"a JSONL writer in state {state.value!r} cannot take step {step.value!r}"
        )
    return after


# --------------------------------------------------------------------------- writer


@attrs.define(eq=False)
class JsonlWriter:
    """The write claim on one session's JSONL log (a :class:`SessionWriter`).

    Made by :class:`JsonlPersistence`: ``create`` gives one in state ``UNWRITTEN``,
    ``open`` one holding the opened log in state ``SYNCED``.
    """

    _owner: JsonlPersistence
    _header: SessionHeader
    _session_dir: str
    _durable_seq: int
    _claim: tuple[str, str]
    _state: WriterState = attrs.field(kw_only=True, default=WriterState.UNWRITTEN)
    _fd: int | None = attrs.field(kw_only=True, default=None)
    _lock_fd: int | None = attrs.field(kw_only=True, default=None)
    _size: int = attrs.field(kw_only=True, default=0)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)

    @property
    def header(self) -> SessionHeader:
        """The header of the log."""
        return self._header

    @property
    def durable_seq(self) -> int:
        """The seq the next written event must have."""
        return self._durable_seq

    @property
    def path(self) -> str:
        """The log file."""
        return os.path.join(self._session_dir, LOG_FILE_NAME)

    @property
    def state(self) -> WriterState:
        """Where the log stands."""
        return self._state

    @property
    def _materialised(self) -> bool:
        # Whether the log file exists. The persistence state machine of the property
        # tests (tests/properties/persistence_machine.py) reads this name.
        return self._state is not WriterState.UNWRITTEN

    async def append(self, events: Sequence[SessionEvent], *, sync: bool) -> None:
        """Write ``events`` at the end of the log; with ``sync``, fsync them.

        The first append creates the file (header and batch written to a temporary
        file, fsynced, then linked into place). Blocks on a worker thread; a
        cancellation arriving meanwhile is delivered after the batch is written.

        Raises:
            PersistenceSeqError: the batch does not continue the written log.
            trio.ClosedResourceError: the writer was closed.
            SessionExistsError: another owner stored a log under the id first.
            SessionLockedError: another process holds the id.
            OSError: the disk refused the write; the file is as it was.
        """
        async with self._lock:
            if self._state is WriterState.CLOSED:
                raise trio.ClosedResourceError(
                    f'the writer of session "{self._header.id}" is closed'
                )
            expected = self._durable_seq
            for i, ev in enumerate(events):
                if ev.seq != expected + i:
                    raise PersistenceSeqError(
                        f'session "{self._header.id}": append seq mismatch at batch '
                        f"position {i}: got seq {ev.seq}, expected {expected + i}",
                        expected=expected + i,
                        got=ev.seq,
                    )
            if not events and not (sync and self._state.unsynced):
                await trio.lowlevel.checkpoint()
                return
            await trio.to_thread.run_sync(self._append_sync, tuple(events), sync)

    async def close(self) -> None:
        """Fsync what is unsynced (unless durability is ``"none"``) and release the claim.

        Idempotent; waits for an append in progress; shielded from cancellation.

        Raises:
            OSError: the final fsync failed (the claim is released all the same).
        """
        with trio.CancelScope(shield=True):
            async with self._lock:
                before = self._state
                if before is WriterState.CLOSED:
                    return
                self._state = _next_state(before, _Step.CLOSED)
                try:
                    await trio.to_thread.run_sync(self._close_sync, before.unsynced)
                finally:
                    release(self._claim)

    # ---- worker-thread side

    def _append_sync(self, events: tuple[SessionEvent, ...], sync: bool) -> None:
        data = encode_events(events)
        if self._state is WriterState.UNWRITTEN:
            if events:
                self._materialise(data, len(events))
            return
        fd = self._fd
        assert fd is not None
        if self._state.torn:
            os.ftruncate(fd, self._size)
            self._state = _next_state(self._state, _Step.CUT)
        try:
            if data:
                write_all(fd, data)
            if sync:
                sync_data(fd)
        except BaseException:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                self._state = _next_state(self._state, _Step.CUT_FAILED)
            raise
        self._size += len(data)
        self._durable_seq += len(events)
        self._state = _next_state(
            self._state, _Step.WROTE_SYNCED if sync else _Step.WROTE_UNSYNCED
        )

    def _materialise(self, batch: bytes, count: int) -> None:
        data = encode_header(self._header) + batch
        session_dir = self._session_dir
        created_root = not os.path.isdir(self._owner.root)
        os.makedirs(session_dir, exist_ok=True)
        locked_here = self._lock_fd is None
        if locked_here:
            self._lock_fd = acquire_lock(session_dir, self._header.id)
        try:
            self._link_new_log(data)
        except BaseException:
            if locked_here and self._lock_fd is not None:
                # Do not keep someone else's session locked over a failed create.
                os.close(self._lock_fd)
                self._lock_fd = None
            raise
        try:
            sync_dir(session_dir)
            sync_dir(os.path.dirname(session_dir))
            sync_dir(self._owner.root)
            if created_root:
                sync_dir(os.path.dirname(self._owner.root))
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            # Keep the promise that a failed append leaves nothing behind.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._state = _next_state(self._state, _Step.CREATED)
        self._size = len(data)
        self._durable_seq += count
        self._owner._dirs[self._header.id] = session_dir

    def _link_new_log(self, data: bytes) -> None:
        """Write ``data`` to a temporary file, fsync it, link it to the log path."""
        path = self.path
        tmp = os.path.join(
            self._session_dir, f".{LOG_FILE_NAME}.{uuid.uuid4().hex}.tmp"
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # fails if the path exists: never replaces a log
            except FileExistsError:
                raise SessionExistsError(self._header.id, path) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _close_sync(self, unsynced: bool) -> None:
        fd, lock_fd = self._fd, self._lock_fd
        self._fd = self._lock_fd = None
        try:
            if fd is not None and unsynced and self._owner.durability != "none":
                sync_data(fd)
        finally:
            if fd is not None:
                os.close(fd)
            if lock_fd is not None:
                os.close(lock_fd)
