"""The writer of one JSONL session log: the only code that appends to a log file.

The first append writes header and batch to a temporary file, fsyncs it and links it
into place (never replacing an existing file); later appends go to the end of the
file and, on any failure, cut the file back to its previous size. Where the log
stands is one :class:`WriterState`; every change of it goes through
:func:`_next_state` and its table of transitions.

The log is opened for each operation and closed after it, so an idle writer holds no
file descriptor. Before each append the writer checks that the file is still the one
it wrote, with the size it left (a fence against a second writer that ignored the
lease); a mismatch refuses the append and leaves the file alone.

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

from .._files import FILE_MODE, open_regular
from ..errors import PersistenceSeqError, SessionExistsError, SessionLockedError
from ..session import LineChunks
from ..values import SessionEvent, SessionHeader
from ._jsonl_lines import encode_events, encode_header
from ._jsonl_lock import release, release_lease
from ._jsonl_paths import LOG_FILE_NAME

if TYPE_CHECKING:
    from ._jsonl import JsonlPersistence

__all__ = [
    "JsonlWriter",
    "WriterState",
    "open_file",
    "stamp",
    "write_all",
    "sync_data",
    "sync_dir",
]


# --------------------------------------------------------------------------- disk helpers


def open_file(
    path: str, flags: int, mode: int = FILE_MODE
) -> tuple[int, os.stat_result]:
    """Open ``path`` (the one place the writer opens a log or its temporary file);
    the fd and its ``fstat``.

    A new file gets ``mode`` (``0600``, less the umask). A symbolic link at
    ``path`` is refused, never followed, and so is anything but a regular file
    (checked on the open file: a FIFO is opened without waiting).

    Raises:
        UnusableFileError: ``path`` is a link, a directory, a FIFO, ...
        OSError: it cannot be opened.
    """
    return open_regular(path, flags, mode=mode, look_first=False)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (the one place appends touch the disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What identifies a log file as a writer left it: device, inode, modification time."""
    return st.st_dev, st.st_ino, st.st_mtime_ns


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
    ``open`` one for the opened log in state ``SYNCED``. It holds the session's
    lease (``token``) until :meth:`close`, and no open file between operations.
    """

    _owner: JsonlPersistence
    _header: SessionHeader
    _session_dir: str
    _durable_seq: int
    _claim: tuple[str, str]
    _token: str = attrs.field(kw_only=True)
    _state: WriterState = attrs.field(kw_only=True, default=WriterState.UNWRITTEN)
    _size: int = attrs.field(kw_only=True, default=0)
    #: ``(st_dev, st_ino, st_mtime_ns)`` of the log file as this writer left it.
    _ident: tuple[int, int, int] | None = attrs.field(kw_only=True, default=None)
    #: Whether the claim created the root directory (its parent is synced too).
    _created_root: bool = attrs.field(kw_only=True, default=False)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    #: The lines written, gathered and compressed for the live session.
    _chunks: LineChunks = attrs.field(init=False, factory=LineChunks)

    @property
    def header(self) -> SessionHeader:
        """The header of the log."""
        return self._header

    def take_lines(self) -> list[tuple[int, int, bytes]]:
        """The chunks of written lines compressed since the last call (see
        :class:`~dsh_trio.session.LineChunks`): what the session's recorder hands
        to the live session, which keeps its settled events as these lines."""
        return self._chunks.take()

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
            SessionLockedError: another writer changed the log since this one
                wrote it (the file is left as it is).
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

        Idempotent; waits for an append in progress; shielded from cancellation. A
        session that never stored a log leaves nothing on disk.

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
                    await trio.to_thread.run_sync(self._close_sync, before)
                finally:
                    release(self._claim)

    # ---- worker-thread side

    def _append_sync(self, events: tuple[SessionEvent, ...], sync: bool) -> None:
        data = encode_events(events)
        if self._state is WriterState.UNWRITTEN:
            if events:
                self._materialise(data, len(events))
                self._chunks.add(events[0].seq, data, len(events))
            return
        fd = self._open_log()
        try:
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
                    self._ident = stamp(os.fstat(fd))
                except OSError:
                    self._state = _next_state(self._state, _Step.CUT_FAILED)
                raise
            self._ident = stamp(os.fstat(fd))
        finally:
            os.close(fd)
        self._size += len(data)
        self._durable_seq += len(events)
        self._state = _next_state(
            self._state, _Step.WROTE_SYNCED if sync else _Step.WROTE_UNSYNCED
        )
        if events:
            self._chunks.add(events[0].seq, data, len(events))

    def _open_log(self) -> int:
        """Open the log for appending, after checking it is the file this writer left.

        Raises:
            SessionLockedError: the file was replaced or written by someone else.
            OSError: it cannot be opened.
        """
        fd, st = open_file(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            now, left, size = stamp(st), self._ident, st.st_size
            torn = self._state.torn
            if left is None or now[:2] != left[:2]:
                found = "a different file"
            elif size < self._size or (size > self._size and not torn):
                found = f"{size} bytes"
            elif now[2] != left[2] and not torn:
                found = "a file modified since"
            else:
                return fd
            raise SessionLockedError(
                f'session "{self._header.id}": its log {self.path} was changed by '
                f"another writer (this writer left {self._size} bytes, found {found}); "
                "nothing more is written to it"
            )
        except BaseException:
            os.close(fd)
            raise

    def _materialise(self, batch: bytes, count: int) -> None:
        data = encode_header(self._header) + batch
        session_dir = self._session_dir
        ident = self._link_new_log(data)
        try:
            sync_dir(session_dir)
            sync_dir(os.path.dirname(session_dir))
            sync_dir(self._owner.root)
            if self._created_root:
                sync_dir(os.path.dirname(self._owner.root))
        except BaseException:
            # Keep the promise that a failed append leaves nothing behind.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._ident = ident
        self._state = _next_state(self._state, _Step.CREATED)
        self._size = len(data)
        self._durable_seq += count
        self._owner._dirs[self._header.id] = session_dir

    def _link_new_log(self, data: bytes) -> tuple[int, int, int]:
        """Write ``data`` to a temporary file, fsync it, link it to the log path.

        Returns the :func:`stamp` of the new log.
        """
        path = self.path
        tmp = os.path.join(
            self._session_dir, f".{LOG_FILE_NAME}.{uuid.uuid4().hex}.tmp"
        )
        fd, _st = open_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # fails if the path exists: never replaces a log
            except FileExistsError:
                raise SessionExistsError(self._header.id, path) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return stamp(st)

    def _close_sync(self, before: WriterState) -> None:
        try:
            if before.unsynced and self._owner.durability != "none":
                fd, _st = open_file(self.path, os.O_WRONLY)
                try:
                    sync_data(fd)
                finally:
                    os.close(fd)
        finally:
            release_lease(
                self._session_dir,
                self._token,
                remove=before is WriterState.UNWRITTEN,
            )
