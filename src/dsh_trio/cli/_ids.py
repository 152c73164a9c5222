"""Session ids on the command line: a whole id or a unique prefix of one.

Every command that takes a session id (``chat --resume``, ``show``, ``repair``,
``export``) resolves it with :func:`resolve_id`, so they accept the same prefixes and
fail with the same messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["SessionIdError", "resolve_id"]

#: How many of the ids an ambiguous prefix matches the error names.
_SHOWN: Final = 5


class SessionIdError(LookupError):
    """An id matches no stored session, or a prefix matches several; the message says which."""


def resolve_id(ids: Iterable[str], wanted: str, where: str) -> str:
    """The stored id that ``wanted`` names: itself, or the one id it is a prefix of.

    ``ids`` are the stored sessions' ids, ``where`` names the store in the messages
    (a directory, or "the shared store"). Pure; never blocks.

    >>> resolve_id(["a1b2", "c3d4"], "a1", "~/.dsh/sessions")
    'a1b2'

    Raises:
        SessionIdError: no id is or starts with ``wanted`` ("no session 'x' in
            WHERE"), or ``wanted`` is the prefix of several ("the prefix 'x' matches
            2 sessions in WHERE (a1, a2)").
    """
    known = set(ids)
    if wanted in known:
        return wanted
    matches = sorted(i for i in known if wanted and i.startswith(wanted))
    if not matches:
        raise SessionIdError(f"no session {wanted!r} in {where}")
    if len(matches) > 1:
        shown = ", ".join(matches[:_SHOWN]) + (", ..." if len(matches) > _SHOWN else "")
        raise SessionIdError(
            f"the prefix {wanted!r} matches {len(matches)} sessions in {where} ({shown})"
        )
    return matches[0]
