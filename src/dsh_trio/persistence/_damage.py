"""What a crash leaves in a JSONL session directory, recovered without losing a byte.

* **A damaged tail**: bytes after the last intact line that a crash can leave (a
  torn last line, unparseable debris). Before it is cut off the log, every byte of it
  is copied into a side file beside the log, ``session.v3.jsonl.damaged-<time>``,
  and fsynced (:func:`cut_tail`); :class:`SalvagedTail` reports it. A crash between
  the copy and the cut leaves the tail in place and a copy beside it: the next open
  cuts it again, so nothing is ever lost, at worst kept twice.
* **An interrupted first write**: a log's first write goes to a temporary file that
  is fsynced and then linked into place. One holding a complete header line is
  linked into place now, as its writer would have done; one without holds no event
  and is removed (:func:`complete_first_write`).

Everything here is blocking file work for a worker thread, done while the session's
lock is held.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Final

import attrs

from .._files import FILE_MODE, open_regular
from ..errors import SessionCorruptError, SessionFormatError, SessionLockedError
from ._jsonl_lines import parse_header
from ._jsonl_lock import acquire_lock
from ._jsonl_paths import (
    DAMAGED_PREFIX,
    LOG_FILE_NAME,
    damaged_file_name,
    encode_session_id,
    is_first_write,
)
from ._jsonl_writer import sync_dir

__all__ = [
    "SalvagedTail",
    "clear_first_writes",
    "complete_first_write",
    "cut_tail",
    "damaged_files",
    "first_writes",
    "has_first_write",
    "save_bytes",
]

_COPY_CHUNK: Final = 1 << 20
_HEADER_MAX: Final = 1 << 20  # a header line is a few hundred bytes


@attrs.frozen(kw_only=True)
class SalvagedTail:
    """Bytes cut off the end of a session log; every one of them is in ``path``.

    What :func:`~dsh_trio.persistence.restore_session` reports (and logs as a
    warning on the ``dsh_trio`` logger) when a load cut a damaged tail.

    Attributes:
        log_path: the log the bytes were cut from.
        path: the side file beside it that holds them, byte for byte.
        offset: where the cut began: the log's size right after the cut.
        size: how many bytes were cut.
        seq: the seq the first cut line would have had.
        line: the line number of the first cut line (the header is line 1).
        reason: why that line could not stay in the log.
    """

    log_path: str
    path: str
    offset: int
    size: int
    seq: int
    line: int
    reason: str

    def describe(self) -> str:
        """The cut in one sentence, for a warning or a command's output."""
        return (
            f"{self.size} damaged bytes from line {self.line} (seq {self.seq}) to the "
            f"end of {self.log_path} were cut off ({self.reason}); they are kept in "
            f"{self.path}"
        )


def _new_side_file(session_dir: str) -> tuple[str, int]:
    """Create a new, empty side file; its path and an fd open for writing."""
    base = os.path.join(
        session_dir, damaged_file_name(datetime.datetime.now(datetime.UTC))
    )
    n = 0
    while True:
        path = base if n == 0 else f"{base}-{n}"
        try:
            fd, _st = open_regular(
                path,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                mode=FILE_MODE,
                look_first=False,  # O_EXCL opens nothing that exists
            )
            return path, fd
        except FileExistsError:
            n += 1


def save_bytes(fd: int, session_dir: str, offset: int, size: int) -> str:
    """Copy ``size`` bytes of ``fd`` from ``offset`` into a new side file (fsynced).

    The side file is ``session.v3.jsonl.damaged-<time>`` in ``session_dir`` (a
    ``-N`` suffix if that name is taken); the directory is fsynced too, so the copy
    survives a crash that follows.

    Returns:
        The side file's path.

    Raises:
        OSError: the copy could not be made (no side file is left behind).
    """
    path, out = _new_side_file(session_dir)
    try:
        try:
            done = 0
            while done < size:
                chunk = os.pread(fd, min(_COPY_CHUNK, size - done), offset + done)
                if not chunk:
                    raise OSError(
                        f"the log ended {size - done} bytes early while its damaged "
                        f"tail was copied to {path}"
                    )
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
                done += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        sync_dir(session_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path


def cut_tail(
    fd: int,
    session_dir: str,
    *,
    offset: int,
    size: int,
    seq: int,
    line: int,
    reason: str,
) -> SalvagedTail:
    """Keep the log's bytes from ``offset`` on in a side file, then cut them off.

    ``fd`` is the log, open for writing; ``size`` is how many bytes follow
    ``offset``. The copy is fsynced before the log is truncated, and the truncation
    is fsynced before this returns.

    Raises:
        OSError: the copy or the cut failed; the log still holds every byte.
    """
    path = save_bytes(fd, session_dir, offset, size)
    os.ftruncate(fd, offset)
    os.fsync(fd)
    return SalvagedTail(
        log_path=os.path.join(session_dir, LOG_FILE_NAME),
        path=path,
        offset=offset,
        size=size,
        seq=seq,
        line=line,
        reason=reason,
    )


def damaged_files(session_dir: str) -> list[str]:
    """The side files of cut bytes in ``session_dir``, oldest first (by name)."""
    try:
        names = os.listdir(session_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        os.path.join(session_dir, name)
        for name in sorted(names)
        if name.startswith(DAMAGED_PREFIX)
    ]


def first_writes(session_dir: str) -> list[str]:
    """The temporary files of first writes in ``session_dir`` (by name)."""
    try:
        names = os.listdir(session_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [os.path.join(session_dir, n) for n in sorted(names) if is_first_write(n)]


def _read_start(path: str) -> bytes:
    """The first bytes of the regular file at ``path`` (a link is not followed).

    Raises:
        UnusableFileError: ``path`` is not a regular file.
        OSError: it cannot be read.
    """
    fd, _st = open_regular(path, os.O_RDONLY)
    try:
        return os.pread(fd, _HEADER_MAX, 0)
    finally:
        os.close(fd)


def _complete_header(path: str, session_id: str) -> bool:
    """Whether the file at ``path`` starts with a complete header line of ``session_id``."""
    try:
        start = _read_start(path)
    except OSError:
        return False
    line = start[: start.find(b"\n") + 1]
    if not line.endswith(b"\n"):
        return False
    try:
        parse_header(line[:-1], path, session_id)
    except SessionFormatError:
        return True  # a whole header all the same: the open reports the version
    except SessionCorruptError:
        return False
    return True


def has_first_write(session_dir: str, session_id: str) -> bool:
    """Whether ``session_dir`` holds an interrupted first write of ``session_id``.

    That is a temporary file holding a complete header line, with no log beside it:
    the session is stored, and opening it completes the write. Reads only.
    """
    if os.path.lexists(os.path.join(session_dir, LOG_FILE_NAME)):
        return False
    return any(_complete_header(p, session_id) for p in first_writes(session_dir))


def complete_first_write(session_dir: str, session_id: str) -> str | None:
    """Finish or clear what an interrupted first write left in ``session_dir``.

    Call with the session's lock held. If there is no log yet, the largest
    temporary file holding a complete header line of ``session_id`` is fsynced and
    linked into place as the log. Every other temporary file is removed when it
    holds no complete line (so no event) or is the log itself, and otherwise kept
    as a side file of cut bytes.

    Returns:
        The log path if a first write was completed, else ``None``.

    Raises:
        OSError: a file could not be linked, renamed or removed.
    """
    pending = first_writes(session_dir)
    if not pending:
        return None
    log_path = os.path.join(session_dir, LOG_FILE_NAME)
    completed: str | None = None
    if not os.path.lexists(log_path):
        whole = [p for p in pending if _complete_header(p, session_id)]
        if whole:
            chosen = max(whole, key=lambda p: (os.path.getsize(p), p))
            fd, _st = open_regular(chosen, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(chosen, log_path)
            completed = log_path
    for path in pending:
        if completed is not None or os.path.lexists(log_path):
            with contextlib.suppress(FileNotFoundError):
                if os.path.samefile(path, log_path):
                    os.unlink(path)
                    continue
        try:
            has_line = b"\n" in _read_start(path)
        except FileNotFoundError:
            continue
        if not has_line:
            os.unlink(path)
            continue
        # A second complete first write: keep its bytes beside the log.
        target, fd = _new_side_file(session_dir)
        os.close(fd)
        os.rename(path, target)
    sync_dir(session_dir)
    return completed


def clear_first_writes(root: str, session_id: str) -> bool:
    """Complete or remove the interrupted first writes of ``session_id`` under ``root``.

    For a session that is not stored (no log, no first write with a whole header):
    every session directory of the id holding temporary files is locked and
    :func:`complete_first_write` run in it. A directory whose lease a live writer
    holds is left alone (its first write may be under way).

    Returns:
        Whether a first write was completed (the session is stored after all).
    """
    encoded = encode_session_id(session_id)
    completed = False
    try:
        with os.scandir(root) as entries:
            projects = [e.path for e in entries if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return False
    for project in projects:
        candidate = os.path.join(project, encoded)
        if not first_writes(candidate):
            continue
        try:
            lock_fd = acquire_lock(candidate, session_id)
        except SessionLockedError:
            continue
        try:
            completed |= complete_first_write(candidate, session_id) is not None
        finally:
            os.close(lock_fd)
    return completed
