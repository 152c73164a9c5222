"""Reading a JSONL session log, and recovering what a crash left when a writer opens it.

The log is streamed: it is read in blocks and split into lines, and each event is
decoded, checked and admitted into the surface as its line is read
(:class:`~dsh_trio.session.LoadedLog`); only the lines are kept, compressed, so
reading needs a fraction of the file's size in memory and builds no list of decoded
events.

What may be cut is only what a crash can leave: a **damaged tail**, which starts at
the first damaged line and holds nothing that parses after it. A damaged line is a
last line without its line end, a line that is not JSON, or a well-formed last
surface event without its ``surfaceOp`` (the reference treats that one as torn
too). Everything else is refused with :class:`SessionCorruptError` naming the line
(``seq`` and ``line``) and the file is left byte for byte as it is: a well-formed
line that is not a valid event, and damage followed by any line that parses (the
damage is then not a crash's tail, and cutting it would lose what follows). When a
writer opens a log with a damaged tail, the tail is copied into a side file and then
cut off (:mod:`._damage`). Everything here is blocking file work for a worker thread.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Final

import attrs

from .._files import open_regular
from ..errors import (
    SessionCorruptError,
    SessionFormatError,
    SessionNotFoundError,
    UnknownEventTypeError,
    UnusableFileError,
)
from ..session import LoadedLog, Session
from ..values import (
    SURFACE_TYPES,
    SessionEvent,
    SessionHeader,
    decode_event,
    parse_json_line,
    typed_line_check,
)
from ._damage import SalvagedTail, complete_first_write, cut_tail
from ._gc import gc_paused
from ._jsonl_lines import parse_header, parse_line
from ._jsonl_lock import acquire_lock
from ._jsonl_paths import LOG_FILE_NAME
from ._persistence import history_error

__all__ = [
    "Scan",
    "Tail",
    "iter_lines",
    "open_log",
    "read_header",
    "scan_log",
]

_logger = logging.getLogger("dsh_trio")

_BLOCK: Final = 1 << 20
_HEADER_MAX: Final = 1 << 20


@attrs.frozen
class Tail:
    """The damaged tail of a log: from byte ``offset`` to the end."""

    offset: int
    seq: int  # the seq its first line would have had
    line: int  # the line number of its first line
    reason: str


@attrs.frozen
class Scan:
    """What :func:`scan_log` found in a log."""

    header: SessionHeader
    #: The intact events (a :class:`~dsh_trio.session.LoadedLog` from
    #: :func:`scan_log`, which ``Session.restore`` adopts without a second pass).
    events: Sequence[SessionEvent]
    good_end: int  # bytes up to and including the last intact line
    size: int  # the file's size when it was read
    tail: Tail | None = None  # the damaged tail, if any (it starts at ``good_end``)
    #: The tail that :func:`open_log` cut off and kept in a side file.
    salvaged: SalvagedTail | None = None


def iter_lines(fd: int, start: int = 0) -> Iterator[tuple[int, bytes, bool]]:
    """The lines of ``fd`` from byte ``start``: ``(offset, line, has_line_end)``.

    Reads blocks with ``pread`` (the file position is not used). The line is
    given without its ``\\n``; only the last one can lack it.
    """
    offset = start  # where the next line starts
    pieces: list[bytes] = []  # the start of a line that spans blocks
    pos = start
    while True:
        block = os.pread(fd, _BLOCK, pos)
        if not block:
            break
        pos += len(block)
        lines = block.split(b"\n")
        last = lines.pop()  # after the block's last line end (maybe empty)
        if lines:
            if pieces:
                pieces.append(lines[0])
                lines[0] = b"".join(pieces)
                pieces.clear()
            for line in lines:
                yield offset, line, True
                offset += len(line) + 1
        if last:
            pieces.append(last)
    if pieces:
        yield offset, b"".join(pieces), False


def _parses(line: bytes) -> bool:
    try:
        parse_line(line)
    except (ValueError, RecursionError):
        return False
    return True


def scan_log(fd: int, path: str, session_id: str | None) -> Scan:
    """Read a whole log: the header, the intact events and a damaged tail.

    Streams the file; keeps each intact event's line (compressed), admitted into
    the surface as it is read, and no decoded event.

    Raises:
        SessionFormatError: the header names a foreign format version.
        SessionCorruptError: the header is damaged or names another id, a
            well-formed line is not a valid event, or a line that parses follows
            damage. ``seq`` and ``line`` name the damaged line.
    """
    lines = iter_lines(fd)
    first = next(lines, None)
    if first is None or not first[2]:
        size = 0 if first is None else len(first[1])
        raise SessionCorruptError(
            f"session log {path}, line 1: no complete header line ({size} bytes)",
            line=1,
        )
    header = parse_header(first[1], path, session_id)
    events = LoadedLog()
    admit = events.admit
    admit_line = events.admit_line
    typed = typed_line_check()  # the common line in one typed decode, if it can
    good_end = len(first[1]) + 1
    size = good_end
    tail: Tail | None = None
    line_no = 1
    seq = 0  # the seq of the next intact event
    for offset, line, whole in lines:
        line_no += 1
        size = offset + len(line) + whole
        if tail is not None:
            if whole and _parses(line):
                raise SessionCorruptError(
                    f"session log {path} is damaged at line {tail.line} (seq "
                    f"{tail.seq}: {tail.reason}), and line {line_no} after it parses: "
                    "the damage is not a torn tail, and cutting it would lose what "
                    "follows; the log is left unchanged",
                    seq=tail.seq,
                    line=tail.line,
                )
            continue
        if not whole:
            tail = Tail(
                offset,
                seq,
                line_no,
                f"the last line ({len(line)} bytes) has no line end",
            )
            continue
        if typed is not None:
            found = typed(line)
            if found is not None and found[1] == seq:
                admit_line(found[0], found[3], line)
                seq += 1
                good_end = offset + len(line) + 1
                continue
        try:
            obj = parse_json_line(line)
        except (ValueError, RecursionError) as exc:
            tail = Tail(offset, seq, line_no, f"the line is not JSON: {exc}")
            continue
        try:
            event, checked = decode_event(obj, seq)
        except UnknownEventTypeError as exc:
            raise UnknownEventTypeError(
                f"session log {path}, line {line_no} (seq {seq}): {exc}; the log is "
                "left unchanged",
                event_type=exc.event_type,
                seq=seq,
                line=line_no,
            ) from exc
        except (SessionCorruptError, RecursionError) as exc:
            raise SessionCorruptError(
                f"session log {path}, line {line_no} (seq {seq}): {exc}; the line is "
                "well-formed but not a valid event, so the log is left unchanged",
                seq=seq,
                line=line_no,
            ) from exc
        if event.surface_op is None and event.type in SURFACE_TYPES:
            # What the reference reads as a torn write: cut if nothing follows.
            tail = Tail(
                offset, seq, line_no, f"a {event.type} event without its surfaceOp"
            )
            continue
        admit(event, line, checked)
        seq += 1
        good_end = offset + len(line) + 1
    return Scan(header=header, events=events, good_end=good_end, size=size, tail=tail)


def read_header(path: str) -> SessionHeader | None:
    """The header of the log at ``path``, or ``None`` if it is missing or unreadable.

    Only a regular file is read: a link or a FIFO at ``path`` is left unopened (a
    warning on the ``dsh_trio`` logger names it).
    """
    try:
        fd, _st = open_regular(path, os.O_RDONLY)
    except UnusableFileError as exc:
        _logger.warning("%s; it is skipped", exc)
        return None
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            line = f.readline(_HEADER_MAX)
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        return parse_header(line[:-1], path, None)
    except (SessionCorruptError, SessionFormatError):
        return None


def open_log(session_dir: str, session_id: str) -> tuple[int, int, Scan]:
    """Lock the log in ``session_dir``, read it and cut off a damaged tail (kept).

    An interrupted first write is completed (or cleared) first. A damaged tail is
    cut only once the history before it is known to be valid (restored as a
    :class:`Session`), so a refused log is left byte for byte as it is; its bytes
    are copied to a side file, fsynced, before the log is cut (fsynced), and the
    cut is logged as a warning on the ``dsh_trio`` logger.

    Returns:
        The lock fd, the log's fd (open for appending) and the scan
        (``scan.salvaged`` reports a cut).

    Raises:
        SessionNotFoundError: the log file is gone.
        SessionLockedError: another process holds the lock.
        UnusableFileError: the log or the lock file is a link, a FIFO, ...
        SessionFormatError, SessionCorruptError: as :func:`scan_log`, or the
            history before a damaged tail is not a valid session.
        OSError: the tail could not be kept and cut (the log is unchanged).
    """
    path = os.path.join(session_dir, LOG_FILE_NAME)
    lock_fd = acquire_lock(session_dir, session_id)
    try:
        complete_first_write(session_dir, session_id)
        try:
            fd, _st = open_regular(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            with gc_paused():
                scan = scan_log(fd, path, session_id)
                if scan.tail is not None:
                    scan = _salvage(fd, session_dir, path, scan, scan.tail)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        os.close(lock_fd)
        raise
    return lock_fd, fd, scan


def _salvage(fd: int, session_dir: str, path: str, scan: Scan, tail: Tail) -> Scan:
    try:
        Session.restore(scan.header, scan.events)
    except SessionCorruptError as exc:
        raise history_error(exc, f"session log {path}") from exc
    salvaged = cut_tail(
        fd,
        session_dir,
        offset=tail.offset,
        size=scan.size - tail.offset,
        seq=tail.seq,
        line=tail.line,
        reason=tail.reason,
    )
    _logger.warning('session "%s": %s', scan.header.id, salvaged.describe())
    return attrs.evolve(scan, size=tail.offset, tail=None, salvaged=salvaged)
