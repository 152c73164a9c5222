"""Session identity: checked ids and the header a new or restored session gets."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import attrs

from ..errors import InvalidSessionIdError, SessionCorruptError, SessionFormatError
from ..values import FORMAT_VERSION, SessionHeader, SessionId

__all__ = ["check_id", "new_header", "restored_header"]


def check_id(value: object) -> SessionId:
    """``value`` as a session id.

    Raises:
        InvalidSessionIdError: it is not a non-empty ``str``.
    """
    if value.__class__ is not str or not value:
        raise InvalidSessionIdError(
            f"a session id must be a non-empty str, got {value!r:.60}"
        )
    return SessionId(value)


def new_header(
    session_id: str | None,
    header: SessionHeader | None,
    *,
    seeded: bool,
    cwd: str | None,
    parent_session: str | None,
    clock: Callable[[], int],
) -> SessionHeader:
    """The header of a session ``Session.create`` makes (see its arguments).

    Raises:
        InvalidSessionIdError: the id is not a non-empty string, or does not match
            ``header.id``.
    """
    if header is None:
        sid = check_id(session_id if session_id is not None else str(uuid.uuid4()))
        return SessionHeader(
            version=FORMAT_VERSION,
            id=sid,
            created_at=clock(),
            cwd=cwd,
            parent_session=parent_session,
            is_seeded=seeded,
        )
    if header.__class__ is not SessionHeader:
        raise InvalidSessionIdError(
            f"header must be a SessionHeader, got {type(header).__name__}"
        )
    sid = check_id(header.id)
    if session_id is not None and session_id != sid:
        raise InvalidSessionIdError(
            f"session id {session_id!r} does not match header id {sid!r}"
        )
    return attrs.evolve(
        header,
        cwd=cwd if cwd is not None else header.cwd,
        parent_session=(
            parent_session if parent_session is not None else header.parent_session
        ),
        is_seeded=header.is_seeded or seeded,
    )


def restored_header(header: SessionHeader) -> SessionHeader:
    """``header``, checked for ``Session.restore``.

    Raises:
        SessionCorruptError: it is not a ``SessionHeader``.
        SessionFormatError: ``header.version`` is not 3.
        InvalidSessionIdError: ``header.id`` is not a non-empty string.
    """
    if header.__class__ is not SessionHeader:
        raise SessionCorruptError(
            f"header must be a SessionHeader, got {type(header).__name__}"
        )
    if header.version != FORMAT_VERSION:
        raise SessionFormatError(
            f"session format version {header.version!r} is not supported "
            f"(this library reads version {FORMAT_VERSION})",
            version=header.version,
        )
    check_id(header.id)
    return header
