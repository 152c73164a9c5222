"""Paths given on the command line, checked before a command starts.

A path that cannot be what the flag asks for is a usage error (exit status 2, one line
naming the flag), found before anything is read or written. Blocking ``stat`` calls only.
"""

from __future__ import annotations

import os

from .._files import regular_or_absent
from ..errors import UnusableFileError
from ._config import UsageError, first_existing, session_dir_probe

__all__ = ["check_export_root", "check_import_file", "check_sessions_readable"]


def check_sessions_readable(path: str) -> None:
    """Check that ``path`` can be the session directory of a command that only reads.

    A directory, or nothing yet (then there are no sessions); not a file, and not
    below one.

    Raises:
        UsageError: ``path`` is, or is below, something that is not a directory.
    """
    session_dir_probe(path)


def check_export_root(path: str) -> None:
    """Check that ``--to DIR`` can receive an exported log (a directory, or nothing yet).

    Raises:
        UsageError: ``path`` is, or is below, something that is not a directory.
    """
    probe = first_existing(os.path.abspath(path))
    if not os.path.isdir(probe):
        raise UsageError(
            f"--to {path}: {probe} is not a directory (name a directory for the JSONL root)"
        )


def check_import_file(path: str) -> None:
    """Check that ``FILE`` of ``import`` is a readable regular file.

    Raises:
        UsageError: it does not exist, is a directory, a FIFO or a device, or
            cannot be read.
    """
    if not os.path.exists(path):
        raise UsageError(f"no file {path} to import")
    if os.path.isdir(path):
        raise UsageError(
            f"{path} is a directory: name its session.v3.jsonl log to import"
        )
    try:
        regular_or_absent(path, follow=True)
    except UnusableFileError as exc:
        raise UsageError(
            f"{path} {exc.problem}: name a session.v3.jsonl log to import"
        ) from None
    if not os.access(path, os.R_OK):
        raise UsageError(f"{path} cannot be read (permission denied)")
