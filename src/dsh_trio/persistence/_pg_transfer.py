"""Moving a session between a JSONL log and the shared store, line for line.

The store keeps each event as the byte-identical v3 line of a JSONL log, so both
directions copy lines, never re-encoded values: :func:`export_session` writes a
stored session as a JSONL log under a root, :func:`import_session` stores a JSONL
log file. Neither takes the source's lease; each takes the target's like any
writer, so a session already stored there is never overwritten.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import trio

from .._files import open_regular
from ..values import SessionHeader
from ._jsonl import JsonlPersistence
from ._jsonl_load import scan_log
from ._pg_read import check_stored_id, read_rows

if TYPE_CHECKING:
    from .postgres import PostgresPersistence

__all__ = ["export_session", "import_session"]

_logger = logging.getLogger("dsh_trio")


async def export_session(
    store: PostgresPersistence,
    session_id: str,
    to: str | os.PathLike[str] | JsonlPersistence,
) -> str:
    """Write the stored session ``session_id`` as a JSONL log under ``to``.

    Reads one snapshot of the session without taking its lease (a live writer
    keeps writing; what it commits later is not exported). The log is created as
    a JSONL writer creates one (fsynced, never replacing a file), with the event
    lines exactly as stored.

    Example::

        path = await export_session(PostgresPersistence(dsn), "s1", "~/.dsh/sessions")

    Returns:
        The path of the new log file.

    Raises:
        InvalidSessionIdError: the id is empty, not a string, or holds a NUL or a
            lone surrogate (which the store cannot hold).
        SessionNotFoundError: nothing is stored under the id.
        SessionExistsError: the JSONL root already holds a session with this id.
        SessionLockedError: a JSONL writer holds the id.
        SessionFormatError, SessionCorruptError: the stored session is not readable.
        OSError: the log could not be written (nothing is left behind).
    """
    check_stored_id(session_id)
    target = to if isinstance(to, JsonlPersistence) else JsonlPersistence(to)
    header, lines = await store._pool.run(
        lambda conn: read_rows(store._pool, conn, session_id)
    )
    data = b"".join(line + b"\n" for line in lines)
    writer = await target.create(header)
    try:
        if lines:
            await trio.to_thread.run_sync(writer._materialise, data, len(lines))
        else:
            await trio.lowlevel.checkpoint()
    finally:
        with trio.CancelScope(shield=True):
            await writer.close()
    return writer.path


def _read_log(path: str) -> tuple[SessionHeader, list[str], int]:
    # The path the user named: a link to a log is fine, a FIFO or device is not.
    fd, _st = open_regular(path, os.O_RDONLY, follow=True)
    try:
        scan = scan_log(fd, path, None)
        data = os.pread(fd, scan.good_end, 0)
    finally:
        os.close(fd)
    lines = data.decode("utf-8").split("\n")[1:-1]  # as text, for the COPY
    if len(lines) != len(scan.events):  # pragma: no cover - scan_log counts lines
        raise AssertionError(
            f"{path}: {len(lines)} lines for {len(scan.events)} events"
        )
    return scan.header, lines, scan.size - scan.good_end


async def import_session(
    store: PostgresPersistence, path: str | os.PathLike[str]
) -> SessionHeader:
    """Store the JSONL log file at ``path`` in the shared store, line for line.

    The log is read and checked as a JSONL load checks it; a damaged tail a crash
    left is not imported (a warning says how many bytes were left out) and the file
    is not changed. The session is written in one durable transaction under a new
    lease, which is released at once; load it afterwards to close a turn a crash
    left open.

    Example::

        header = await import_session(PostgresPersistence(dsn), "session.v3.jsonl")

    Returns:
        The imported session's header.

    Raises:
        FileNotFoundError: there is no file at ``path``.
        UnusableFileError: ``path`` is not a regular file (a directory, a FIFO,
            a device, ...); it is not read.
        SessionFormatError, SessionCorruptError: the log is not readable.
        SessionExistsError: the store already holds a session with this id.
        SessionLeaseError: a live writer holds the id in the store.
        ConnectionError: the server cannot be reached.
    """
    path = os.fspath(path)
    header, lines, left_out = await trio.to_thread.run_sync(_read_log, path)
    if left_out:
        _logger.warning(
            "%s: its damaged tail (%d bytes) is not imported", path, left_out
        )
    writer = await store.create(header)
    try:
        await writer.append_lines(lines, sync=True)
    finally:
        with trio.CancelScope(shield=True):
            await writer.close()
    return header
