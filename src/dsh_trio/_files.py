"""Opening the files dsh_trio reads and writes: regular files only, no planted links.

* The files of a session directory (the log, its lock file, the side files of cut
  bytes, a first write's temporary file) are opened with ``O_NOFOLLOW``: a
  symbolic link planted where one belongs is refused, never followed.
* The directories a store makes below its root (a JSONL store's project and
  session directories) must be directories themselves: a symbolic link there is
  refused too (:func:`check_real_dirs`), since writing through it would put a
  session's files wherever the link points. The root itself may be a link: the
  user named it, and chose where it points.
* What is opened must be a regular file: a FIFO or a device could block a read
  forever, or never end. It is checked before the open (``stat``) and again after
  it (the file is opened with ``O_NONBLOCK``, which never waits, and checked with
  ``fstat``), so a file swapped between the two is refused too.
* Files are created ``0600`` and directories ``0700``: a session log holds a
  conversation. The umask still applies (``mode & ~umask``), so a stricter one
  gives stricter modes; nothing is ever made more open than that.
* Documents (preset files, runtime configs, the profile) are read up to
  :data:`DOCUMENT_LIMIT` bytes.

Every refusal is an :class:`~dsh_trio.errors.UnusableFileError` naming the path.
Everything here is blocking file work.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Final

from .errors import UnusableFileError

if sys.platform != "win32":
    import fcntl

__all__ = [
    "DIR_MODE",
    "DOCUMENT_LIMIT",
    "FILE_MODE",
    "check_real_dirs",
    "make_dirs",
    "open_regular",
    "read_document",
    "regular_or_absent",
]

#: The mode new files are created with (before the umask).
FILE_MODE: Final = 0o600
#: The mode new directories are created with (before the umask).
DIR_MODE: Final = 0o700
#: The largest document (preset file, runtime config, profile) read, in bytes.
DOCUMENT_LIMIT: Final = 1 << 20

_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)
_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_CHUNK: Final = 1 << 16
#: The open flags ``F_SETFL`` sets (``O_NONBLOCK`` aside).
_STATUS_FLAGS: Final = (
    os.O_APPEND
    | getattr(os, "O_ASYNC", 0)
    | getattr(os, "O_DIRECT", 0)
    | getattr(os, "O_NOATIME", 0)
)


def _kind(mode: int) -> str:
    """What a non-regular file of ``mode`` is, in words."""
    if stat.S_ISLNK(mode):
        return "is a symbolic link (not followed)"
    if stat.S_ISDIR(mode):
        return "is a directory, not a regular file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    if stat.S_ISCHR(mode):
        return "is a character device, not a regular file"
    if stat.S_ISBLK(mode):
        return "is a block device, not a regular file"
    return "is not a regular file"


def _refuse(path: str, mode: int) -> UnusableFileError:
    code = (
        errno.ELOOP
        if stat.S_ISLNK(mode)
        else errno.EISDIR
        if stat.S_ISDIR(mode)
        else None
    )
    return UnusableFileError(path, _kind(mode), errno=code)


def regular_or_absent(path: str, *, follow: bool = False) -> bool:
    """Whether a regular file is at ``path`` (``False``: nothing is there).

    Raises:
        UnusableFileError: something else is there (a link, unless ``follow``).
        OSError: ``path`` cannot be looked at.
    """
    try:
        st = os.stat(path, follow_symlinks=follow)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, st.st_mode)
    return True


def open_regular(
    path: str,
    flags: int,
    *,
    follow: bool = False,
    mode: int = FILE_MODE,
    look_first: bool = True,
) -> tuple[int, os.stat_result]:
    """Open the regular file at ``path`` (``os.open`` flags); its fd and its ``fstat``.

    A link at ``path`` is refused unless ``follow`` (the link of a path the user
    named, say); a file created here gets ``mode`` (less the umask). With
    ``look_first`` (the default), ``path`` is looked at before it is opened, so a
    device is never opened at all; without it only the check after the open runs
    (it is enough against a FIFO, a socket, a directory and a link, which is what
    can be planted without privileges).

    Raises:
        UnusableFileError: ``path`` is a link (unless ``follow``), a directory, a
            FIFO, a socket or a device.
        OSError: the open failed otherwise (``FileNotFoundError``, ...).
    """
    if look_first:
        try:
            st = os.stat(path, follow_symlinks=follow)
        except FileNotFoundError:
            if not flags & os.O_CREAT:
                raise
        else:
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(path, st.st_mode)
    try:
        fd = os.open(path, flags | _NONBLOCK | (0 if follow else _NOFOLLOW), mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
            try:
                st = os.stat(path, follow_symlinks=follow)
            except OSError:
                raise exc from None
            if not stat.S_ISREG(st.st_mode):
                raise _refuse(path, st.st_mode) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, st.st_mode)
        if _NONBLOCK:  # blocking again: one F_SETFL keeps the other status flags
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & _STATUS_FLAGS)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def check_real_dirs(*paths: str, missing_ok: bool = False) -> None:
    """Check that each of ``paths`` is a directory itself, not a link to one.

    Each is opened with ``O_DIRECTORY | O_NOFOLLOW`` (and closed): a symbolic link
    is refused without being followed, whatever it points at, and so is anything
    that is not a directory. With ``missing_ok``, a path where nothing is passes
    (check before making directories, so that none is made through a link).

    Raises:
        UnusableFileError: a path is a symbolic link (``errno`` ``ELOOP``) or not a
            directory (``ENOTDIR``).
        OSError: a path cannot be opened otherwise (``FileNotFoundError``, ...).
    """
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _NONBLOCK)
        except FileNotFoundError:
            if missing_ok:
                continue
            raise
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                st = os.lstat(path)
            except OSError:
                raise exc from None
            raise _not_a_dir(path, st.st_mode) from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISDIR(st.st_mode):  # a platform without O_DIRECTORY
            raise _not_a_dir(path, st.st_mode)


def _not_a_dir(path: str, mode: int) -> UnusableFileError:
    if stat.S_ISLNK(mode):
        return UnusableFileError(
            path,
            "is a symbolic link (not followed): only the store's root may be a link",
            errno=errno.ELOOP,
        )
    if stat.S_ISREG(mode):
        kind = "is a regular file, not a directory"
    else:
        kind = _kind(mode).replace("a regular file", "a directory")
    return UnusableFileError(path, kind, errno=errno.ENOTDIR)


def read_document(path: str, *, limit: int = DOCUMENT_LIMIT) -> bytes:
    """The bytes of the regular file at ``path`` (links followed), at most ``limit``.

    Raises:
        UnusableFileError: ``path`` is not a regular file, or holds more than
            ``limit`` bytes (``errno`` is ``EFBIG``).
        OSError: it cannot be read.
    """
    fd, st = open_regular(path, os.O_RDONLY, follow=True)
    try:
        if st.st_size > limit:
            raise _too_large(path, limit, st.st_size)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:  # it grew while it was read
                raise _too_large(path, limit, None)
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _too_large(path: str, limit: int, size: int | None) -> UnusableFileError:
    what = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
    found = "" if size is None else f" ({size} bytes)"
    return UnusableFileError(
        path, f"is larger than the {what} limit{found}", errno=errno.EFBIG
    )


def make_dirs(path: str, mode: int = DIR_MODE) -> None:
    """Make the directory ``path`` and its missing parents, each with ``mode``.

    Unlike ``os.makedirs``, the parents get ``mode`` too (less the umask). An
    existing directory is fine.

    Raises:
        OSError: a directory cannot be made, or ``path`` (or a parent) is
            something else (``FileExistsError``, ``NotADirectoryError``).
    """
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    except FileNotFoundError:
        parent = os.path.dirname(path)
        if not parent or parent == path:
            raise
        make_dirs(parent, mode)
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            if not os.path.isdir(path):
                raise
