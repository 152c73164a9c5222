"""Where a JSONL session log lives: the reference's directory layout and id encoding.

::

    <root>/<projectDir>/<encodedId>/session.v3.jsonl
    <root>/<projectDir>/<encodedId>/session.lock
    <root>/<projectDir>/<encodedId>/.session.v3.jsonl.<random>.tmp      (a first write)
    <root>/<projectDir>/<encodedId>/session.v3.jsonl.damaged-<time>     (cut bytes)

``projectDir`` is ``_no-cwd`` or ``--<slug>--`` (from the header's ``cwd``);
``encodedId`` is the session id with every code unit outside ``[A-Za-z0-9._-]`` (and
``~``) written as ``~XXXX`` (its UTF-16 code unit in hex), ``.`` as ``~002E`` and
``..`` as ``~002E~002E``, so no id can name a path outside its directory.
"""

from __future__ import annotations

import datetime
import os
from typing import Final

from ..errors import InvalidSessionIdError
from ..values import FORMAT_VERSION, SessionHeader

__all__ = [
    "LOG_FILE_NAME",
    "LOCK_FILE_NAME",
    "DAMAGED_PREFIX",
    "FIRST_WRITE_PREFIX",
    "FIRST_WRITE_SUFFIX",
    "check_id",
    "check_new_id",
    "damaged_file_name",
    "is_first_write",
    "encode_session_id",
    "project_dir_name",
    "session_dir_for",
]

#: The log file's name inside its session directory.
LOG_FILE_NAME: Final = f"session.v{FORMAT_VERSION}.jsonl"
#: The lock file's name inside its session directory.
LOCK_FILE_NAME: Final = "session.lock"
#: A log's first write goes to ``FIRST_WRITE_PREFIX + <random> + FIRST_WRITE_SUFFIX``
#: beside it, fsynced, then linked into place.
FIRST_WRITE_PREFIX: Final = f".{LOG_FILE_NAME}."
FIRST_WRITE_SUFFIX: Final = ".tmp"
#: Bytes cut off a log are kept in ``DAMAGED_PREFIX + <time>`` beside it.
DAMAGED_PREFIX: Final = f"{LOG_FILE_NAME}.damaged-"
_NO_CWD: Final = "_no-cwd"
_NAME_MAX: Final = 255

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def check_id(session_id: object) -> None:
    """Refuse a session id that is not a non-empty string.

    Raises:
        InvalidSessionIdError: the id is empty or not a string.
    """
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"a session id must be a string, got {type(session_id).__name__}"
        )
    if not session_id:
        raise InvalidSessionIdError("a session id must not be empty")


def _code_units(ch: str) -> tuple[int, ...]:
    cp = ord(ch)
    if cp > 0xFFFF:
        cp -= 0x10000
        return (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))
    return (cp,)


def encode_session_id(session_id: str) -> str:
    """The session id as one safe path segment (reversible, no traversal possible).

    Raises:
        InvalidSessionIdError: the id is empty or not a string.
    """
    check_id(session_id)
    if session_id == ".":
        return "~002E"
    if session_id == "..":
        return "~002E~002E"
    out: list[str] = []
    for ch in session_id:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"~{unit:04X}" for unit in _code_units(ch))
    return "".join(out)


def project_dir_name(cwd: str | None) -> str:
    """The project directory a session with working directory ``cwd`` is stored under.

    Separators (``/``, ``\\``, ``:``) collapse to one ``-``; other unsafe code units
    become ``~XXXX``; leading dashes are dropped and the slug is cut to 251 characters.
    """
    if cwd is None:
        return _NO_CWD
    out: list[str] = []
    separator_run = False
    for ch in cwd:
        if ch in "/\\:":
            if not separator_run:
                out.append("-")
            separator_run = True
            continue
        separator_run = False
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"~{unit:04X}" for unit in _code_units(ch))
    slug = "".join(out).lstrip("-") or "root"
    return f"--{slug[:251]}--"


def check_new_id(session_id: object) -> str:
    """Refuse an id no new session may take; the id as one path segment.

    The rule of every backend (the shared store applies it too, so that any
    session it holds can be exported as a JSONL log): a non-empty string whose
    encoding (:func:`encode_session_id`) is a file name, at most 255 characters.

    Raises:
        InvalidSessionIdError: the id is empty, not a string, or too long to be a
            file name once encoded.
    """
    check_id(session_id)
    assert isinstance(session_id, str)
    encoded = encode_session_id(session_id)
    if len(encoded) > _NAME_MAX:
        raise InvalidSessionIdError(
            f"session id is too long to be a file name ({len(encoded)} characters "
            f"encoded, at most {_NAME_MAX}): {session_id[:40]!r}..."
        )
    return encoded


def session_dir_for(root: str, header: SessionHeader) -> str:
    """The directory under ``root`` a session with ``header`` is stored in (pure).

    Raises:
        InvalidSessionIdError: the id is empty, not a string, or too long to be a
            file name once encoded.
    """
    encoded = check_new_id(header.id)
    return os.path.join(root, project_dir_name(header.cwd), encoded)


def is_first_write(name: str) -> bool:
    """Whether ``name`` is the temporary file of a log's first write."""
    return name.startswith(FIRST_WRITE_PREFIX) and name.endswith(FIRST_WRITE_SUFFIX)


def damaged_file_name(when: datetime.datetime) -> str:
    """The side file name for bytes cut at ``when`` (UTC, to the millisecond).

    Example: ``session.v3.jsonl.damaged-20260301T101500.250Z``.
    """
    utc = when.astimezone(datetime.UTC)
    return f"{DAMAGED_PREFIX}{utc:%Y%m%dT%H%M%S}.{utc.microsecond // 1000:03d}Z"
