"""One writer per JSONL session log: in-process claims and an owner lease across processes.

A writer first claims ``(root, session id)`` in this process (:func:`claim`), then
records itself as the log's owner in the session's lock file: a **lease** naming its
process (pid, the process's start time, host, boot and pid namespace) and a token.
The lease is read and written only under a short, non-blocking ``flock`` of the lock
file (:func:`acquire_lock`), so two processes cannot both take it; between those
moments no file is open, so an idle writer holds no file descriptor. A lease whose
process is gone (or that this process no longer holds) is stale and is taken over;
:func:`release_lease` clears it when the writer closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import uuid
from typing import Final

from .._files import check_real_dirs, open_regular
from ..errors import SessionLockedError
from ._jsonl_paths import LOCK_FILE_NAME

if sys.platform != "win32":
    import fcntl

__all__ = [
    "acquire_lock",
    "claim",
    "new_token",
    "release",
    "release_lease",
    "write_lease",
]

_LEASE_MAX: Final = 4096  # a lease is one short JSON object
_LEASE_SIZE: Final = 256  # written padded to this size, so it is overwritten in place
_ATTEMPTS: Final = 5  # tries when the lock file is replaced under us


# --------------------------------------------------------------------------- who we are


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot; Linux), or ``None``."""
    stat = _read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        # Field 22; the command name (field 2) may hold spaces and parentheses.
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def _pid_namespace() -> int | None:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _identity() -> dict[str, object]:
    pid = os.getpid()
    return {
        "pid": pid,
        "start": _start_time(pid),
        "host": socket.gethostname(),
        "boot": _read_text("/proc/sys/kernel/random/boot_id"),
        "pidns": _pid_namespace(),
    }


_me: dict[str, object] | None = None
_me_pid = 0


def _self() -> dict[str, object]:
    global _me, _me_pid
    if _me is None or _me_pid != os.getpid():  # recomputed in a forked child
        _me, _me_pid = _identity(), os.getpid()
    return _me


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    except OSError:
        return True  # cannot tell: assume it lives
    return True


# Tokens of the leases this process holds now.
_live_tokens: set[str] = set()
_tokens_lock = threading.Lock()


def new_token() -> str:
    """A fresh lease token."""
    return uuid.uuid4().hex


def _live_holder(raw: bytes) -> str | None:
    """Who holds the lease ``raw`` (a readable phrase), or ``None`` if it is stale."""
    try:
        lease = json.loads(raw)
    except ValueError:
        return None  # empty (released) or not ours to understand
    if not isinstance(lease, dict):
        return None
    pid = lease.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    me = _self()
    if lease.get("host") != me["host"]:
        # No way to look at another machine's processes: it holds until released.
        return f"process {pid} on host {lease.get('host')!r}"
    boot = lease.get("boot")
    if boot is not None and me["boot"] is not None and boot != me["boot"]:
        return None  # written before the machine restarted
    ns = lease.get("pidns")
    if ns is not None and me["pidns"] is not None and ns != me["pidns"]:
        return f"process {pid} of another pid namespace"
    if pid == me["pid"]:
        with _tokens_lock:
            live = lease.get("token") in _live_tokens
        return "this process" if live else None
    if not _pid_alive(pid):
        return None
    start = lease.get("start")
    if start is not None and _start_time(pid) not in (None, start):
        return None  # the pid now belongs to another process
    return f"process {pid}"


# --------------------------------------------------------------------------- the lock file


def acquire_lock(session_dir: str, session_id: str) -> int:
    """Open and ``flock`` the session's lock file, and check that no live owner holds it.

    Returns the fd holding the ``flock``; the caller writes its lease with
    :func:`write_lease` (or does not) and closes it, which ends the ``flock``. Never
    waits for the ``flock`` (a worker thread calls this).

    The lock file is created ``0600`` (less the umask); a symbolic link or
    anything else but a regular file at its path is refused, never followed. So is
    a symbolic link at the session directory or at its project directory (the
    store's root, above them, may be a link).

    Raises:
        SessionLockedError: another process holds the ``flock`` right now, or a live
            owner holds the lease.
        UnusableFileError: the lock file's path holds a symbolic link, a
            directory or another file that is not a regular file, or the session
            directory or its project directory is a symbolic link.
        OSError: the lock file cannot be opened.
    """
    # Every use of a session directory (create, open, repair, a first write's
    # completion) begins here: what it holds is reached through no link.
    check_real_dirs(os.path.dirname(session_dir), session_dir)
    path = os.path.join(session_dir, LOCK_FILE_NAME)
    for _ in range(_ATTEMPTS):
        fd, opened = open_regular(path, os.O_RDWR | os.O_CREAT)
        try:
            if sys.platform != "win32":
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise SessionLockedError(
                        f'session "{session_id}" is open for writing in another process '
                        f"({session_dir})"
                    ) from None
            try:
                same = os.path.samestat(opened, os.lstat(path))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)  # a closing writer removed it meanwhile: look again
                continue
            holder = _live_holder(os.pread(fd, _LEASE_MAX, 0))
            if holder is not None:
                where = "another process" if holder != "this process" else holder
                raise SessionLockedError(
                    f'session "{session_id}" is open for writing in {where} '
                    f"({holder}; lock file {path})"
                )
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(fd)
            raise
        return fd
    raise SessionLockedError(
        f'session "{session_id}": its lock file {path} keeps being replaced'
    )


def write_lease(fd: int, token: str) -> None:
    """Record this process as the owner (lease ``token``) in the lock file ``fd``.

    The caller holds the ``flock`` (from :func:`acquire_lock`).
    """
    data = json.dumps({**_self(), "token": token}, separators=(",", ":")).encode()
    # Overwritten in place, padded: truncating a file that holds data makes some
    # file systems flush it, which costs milliseconds per session.
    data = data.ljust(_LEASE_SIZE - 1) + b"\n"
    os.pwrite(fd, data, 0)
    if os.fstat(fd).st_size > len(data):
        os.ftruncate(fd, len(data))
    with _tokens_lock:
        _live_tokens.add(token)


def release_lease(session_dir: str, token: str, *, remove: bool = False) -> None:
    """Clear lease ``token`` from the session's lock file, if it still holds it.

    With ``remove``, delete the lock file and the session and project directories
    if that leaves them empty: a session that never stored a log leaves nothing
    behind. Waits for a short
    ``flock`` held by another process's check. Never raises: a lock file that
    cannot be reached keeps a lease that is stale once this process ends.
    """
    with _tokens_lock:
        _live_tokens.discard(token)
    path = os.path.join(session_dir, LOCK_FILE_NAME)
    try:
        fd, _st = open_regular(path, os.O_RDWR)
    except OSError:  # a link or another file planted there is left alone
        return
    try:
        if sys.platform != "win32":
            fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, _LEASE_MAX, 0)
        try:
            lease = json.loads(raw)
        except ValueError:
            return
        if not isinstance(lease, dict) or lease.get("token") != token:
            return  # someone took over a lease they found stale
        if remove:
            os.unlink(path)
            with contextlib.suppress(OSError):
                os.rmdir(session_dir)
                os.rmdir(os.path.dirname(session_dir))  # the project directory
        else:
            os.pwrite(fd, b" " * len(raw), 0)  # blank: no owner
    except OSError:
        return
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- in-process claims

# In-process write claims, keyed by (root, session id); leases cover other processes.
_claims: set[tuple[str, str]] = set()
_claims_lock = threading.Lock()


def claim(key: tuple[str, str]) -> None:
    """Claim ``(root, session id)`` for writing in this process.

    Raises:
        SessionLockedError: a writer of this process holds it.
    """
    with _claims_lock:
        if key in _claims:
            raise SessionLockedError(
                f'session "{key[1]}" is already open for writing (under {key[0]})'
            )
        _claims.add(key)


def release(key: tuple[str, str]) -> None:
    """Give up the claim on ``key`` (idempotent)."""
    with _claims_lock:
        _claims.discard(key)
