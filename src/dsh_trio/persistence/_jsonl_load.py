"""Reading a JSONL session log, and cutting off its torn tail when a writer opens it.

A reader keeps every complete, valid line up to the first damaged one; the damaged
tail is dropped (and cut off, durably, when a writer opens the log) unless a later
line ends a turn, in which case committed data follows the damage and the log is
refused as corrupt. Everything here is blocking file work for a worker thread.
"""

from __future__ import annotations

import os

import attrs

from ..errors import SessionCorruptError, SessionFormatError, SessionNotFoundError
from ..values import (
    FORMAT_VERSION,
    SessionEvent,
    SessionHeader,
    event_from_json,
    header_from_json,
)
from ._jsonl_lines import parse_line
from ._jsonl_lock import acquire_lock
from ._jsonl_paths import LOG_FILE_NAME

__all__ = ["Scan", "scan_log", "read_header", "open_log"]


@attrs.frozen
class Scan:
    """What :func:`scan_log` found in a log."""

    header: SessionHeader
    events: list[SessionEvent]
    good_end: int  # bytes up to and including the last intact line
    size: int


def scan_log(data: bytes, path: str, session_id: str | None) -> Scan:
    """Read a whole log: the header, the intact event prefix and where it ends.

    Raises:
        SessionFormatError: the header names a foreign format version.
        SessionCorruptError: the header is damaged, names another id, or a line
            ending a turn follows damaged lines.
    """
    header_end = data.find(b"\n")
    if header_end < 0:
        raise SessionCorruptError(
            f"session log {path} has no complete header line ({len(data)} bytes)"
        )
    try:
        raw_header = parse_line(data[:header_end])
    except (ValueError, RecursionError) as exc:
        raise SessionCorruptError(
            f"session log {path}: the header line is not JSON ({exc})"
        ) from exc
    if isinstance(raw_header, dict):
        version = raw_header.get("version")
        if (
            isinstance(version, (int, float))
            and not isinstance(version, bool)
            and version != FORMAT_VERSION
        ):
            raise SessionFormatError(
                f"session log {path} uses format version {version}; this library "
                f"reads version {FORMAT_VERSION} only",
                version=version,
            )
    try:
        header = header_from_json(raw_header)
    except SessionCorruptError as exc:
        raise SessionCorruptError(f"session log {path}: {exc}") from exc
    if session_id is not None and header.id != session_id:
        raise SessionCorruptError(
            f'session log {path} holds session "{header.id}", not "{session_id}"'
        )

    events: list[SessionEvent] = []
    good_end = header_end + 1
    damage: tuple[int, int, str] | None = None  # (seq, line number, what)
    start = good_end
    line_no = 1
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            break  # a final line without newline is a torn tail
        line = data[start:end]
        line_no += 1
        if damage is None:
            expected = len(events)
            obj: object = None
            try:
                obj = parse_line(line)
                events.append(event_from_json(obj, expected_seq=expected))
                good_end = end + 1
            except (ValueError, RecursionError) as exc:
                # SessionCorruptError is a ValueError: a bad event or a seq gap.
                damage = (expected, line_no, str(exc))
                if isinstance(obj, dict) and obj.get("type") == "turn/end":
                    _refuse_damage(path, damage, line_no)
        else:
            # Parse what can be parsed: damaged logs are rare, so no shortcut here.
            try:
                obj = parse_line(line)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict) and obj.get("type") == "turn/end":
                _refuse_damage(path, damage, line_no)
        start = end + 1
    return Scan(header=header, events=events, good_end=good_end, size=len(data))


def _refuse_damage(path: str, damage: tuple[int, int, str], turn_end_line: int) -> None:
    seq, line_no, what = damage
    raise SessionCorruptError(
        f"session log {path} is damaged at seq {seq} (line {line_no}: {what}), and "
        f"line {turn_end_line} after it ends a turn: committed data follows the damage",
        seq=seq,
    )


def read_header(path: str) -> SessionHeader | None:
    """The header of the log at ``path``, or ``None`` if it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        return scan_log(line, path, None).header
    except (SessionCorruptError, SessionFormatError):
        return None


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def open_log(session_dir: str, session_id: str) -> tuple[int, int, Scan]:
    """Lock the log in ``session_dir``, read it and cut off a torn tail (fsynced).

    Returns:
        The lock fd, the log's fd (open for appending) and the scan.

    Raises:
        SessionNotFoundError: the log file is gone.
        SessionLockedError: another process holds the lock.
        SessionFormatError, SessionCorruptError: as :func:`scan_log`.
    """
    path = os.path.join(session_dir, LOG_FILE_NAME)
    lock_fd = acquire_lock(session_dir, session_id)
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            raise SessionNotFoundError(session_id) from None
        try:
            scan = scan_log(_read_all(fd), path, session_id)
            if scan.good_end < scan.size:
                os.ftruncate(fd, scan.good_end)
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        os.close(lock_fd)
        raise
    return lock_fd, fd, scan
