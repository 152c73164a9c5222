"""The user's decision on a log that load refuses: cut it before a chosen event.

A load cuts only a tail a crash can leave; damage anywhere else is refused, because
cutting it could lose events that were written and may have had effects (a tool
call that ran). :func:`truncate_log` is the explicit choice: everything from an
event on moves into a side file beside the log, and the log ends before it.
"""

from __future__ import annotations

import os

import trio

from .._files import open_regular
from ..errors import SessionCorruptError, SessionNotFoundError
from ._damage import SalvagedTail, complete_first_write, cut_tail
from ._jsonl import JsonlPersistence
from ._jsonl_lines import parse_header
from ._jsonl_load import iter_lines
from ._jsonl_lock import acquire_lock, claim, release
from ._jsonl_paths import LOG_FILE_NAME, check_id

__all__ = ["truncate_log"]


async def truncate_log(
    persistence: JsonlPersistence, session_id: str, seq: int
) -> SalvagedTail | None:
    """Cut the stored log of ``session_id`` before event ``seq``; keep what is cut.

    Everything from the line where event ``seq`` belongs (line ``seq + 2``; line 1
    is the header) to the end of the file, valid or damaged, is copied into a side
    file beside the log (``session.v3.jsonl.damaged-<time>``, fsynced) and then cut
    off the log (fsynced). Nothing else is read or checked beyond the header, so
    this works on a log that load refuses; load it afterwards to close the turn the
    cut left open.

    Blocks on a worker thread. The session is claimed for the duration, so no
    writer in this or another process may hold it. Not cancellable once the
    worker thread runs (the cut completes).

    Args:
        persistence: where the session is stored.
        session_id: the session to cut.
        seq: the first event to cut (``0`` keeps only the header).

    Returns:
        What was cut and where it is kept, or ``None`` when the log has no line
        ``seq + 2`` (nothing to cut; the log is unchanged).

    Raises:
        ValueError: ``seq`` is not a non-negative integer.
        InvalidSessionIdError: the id is empty or not a string.
        SessionNotFoundError: nothing is stored under the id.
        SessionLockedError: a writer holds the session.
        UnusableFileError: the log or the lock file is a link, a FIFO, ...
        SessionFormatError, SessionCorruptError: the header line is not readable
            (the log is unchanged).
        OSError: the side file could not be written (the log is unchanged).
    """
    if seq.__class__ is not int or seq < 0:
        raise ValueError(f"seq must be a non-negative integer, got {seq!r:.40}")
    check_id(session_id)
    key = (persistence.root, session_id)
    claim(key)
    try:
        return await trio.to_thread.run_sync(
            _truncate_sync, persistence, session_id, seq
        )
    finally:
        release(key)


def _truncate_sync(
    persistence: JsonlPersistence, session_id: str, seq: int
) -> SalvagedTail | None:
    session_dir = persistence._locate(session_id)
    if session_dir is None:
        raise SessionNotFoundError(session_id)
    path = os.path.join(session_dir, LOG_FILE_NAME)
    lock_fd = acquire_lock(session_dir, session_id)
    try:
        complete_first_write(session_dir, session_id)
        fd = _open_existing(path, session_id)
        try:
            lines = iter_lines(fd)
            first = next(lines, None)
            if first is None or not first[2]:
                raise SessionCorruptError(
                    f"session log {path} has no complete header line", line=1
                )
            parse_header(first[1], path, session_id)
            target = seq + 2
            for line_no, (offset, _line, _whole) in enumerate(lines, start=2):
                if line_no == target:
                    return cut_tail(
                        fd,
                        session_dir,
                        offset=offset,
                        size=os.fstat(fd).st_size - offset,
                        seq=seq,
                        line=line_no,
                        reason=f"cut by request from seq {seq} on",
                    )
            return None
        finally:
            os.close(fd)
    finally:
        os.close(lock_fd)


def _open_existing(path: str, session_id: str) -> int:
    try:
        return open_regular(path, os.O_RDWR)[0]
    except FileNotFoundError:
        raise SessionNotFoundError(session_id) from None
