"""Persistence backends for the session log: the protocol, JSONL files, the recorder, load.

A backend stores what :class:`~dsh_trio.session.Session` appends; the runtime's
:class:`SessionRecorder` batches appends into a backend's :class:`SessionWriter` and
:func:`load_session` reads a session back, repairing an interrupted turn.
"""

from ._jsonl import JsonlPersistence as JsonlPersistence
from ._persistence import (
    Durability as Durability,
    SessionPersistence as SessionPersistence,
    SessionWriter as SessionWriter,
    load_session as load_session,
)
from ._recorder import (
    SessionRecorder as SessionRecorder,
    persist_new_session as persist_new_session,
)

__all__ = [
    "JsonlPersistence",
    "SessionPersistence",
    "SessionWriter",
    "Durability",
    "SessionRecorder",
    "load_session",
    "persist_new_session",
]
