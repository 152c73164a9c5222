"""One writer per JSONL session log: in-process claims and a file lock across processes.

A writer first claims ``(root, session id)`` in this process (:func:`claim`), then
holds an exclusive ``flock`` on the session's lock file (:func:`acquire_lock`) while
the log file exists, so no other process writes it either.
"""

from __future__ import annotations

import os
import sys
import threading

from ..errors import SessionLockedError
from ._jsonl_paths import LOCK_FILE_NAME

if sys.platform != "win32":
    import fcntl

__all__ = ["acquire_lock", "claim", "release"]


def acquire_lock(session_dir: str, session_id: str) -> int:
    """Open and exclusively lock the session's lock file; returns the fd holding it.

    Never waits for the lock (a worker thread calls this).

    Raises:
        SessionLockedError: another process holds the lock.
    """
    fd = os.open(
        os.path.join(session_dir, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT, 0o644
    )
    if sys.platform != "win32":
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SessionLockedError(
                f'session "{session_id}" is open for writing in another process '
                f"({session_dir})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
    return fd


# In-process write claims, keyed by (root, session id); flock covers other processes.
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
