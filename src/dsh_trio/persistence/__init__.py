"""Persistence backends for the session log: the protocol, JSONL files, the recorder, load.

A backend stores what :class:`~dsh_trio.session.Session` appends; the runtime's
:class:`SessionRecorder` batches appends into a backend's :class:`SessionWriter` and
:func:`load_session` reads a session back, repairing an interrupted turn.
:func:`restore_session` does the same and reports what a load cut off a damaged log
(every cut byte is kept beside it); :func:`truncate_log` cuts a log the user
chooses to cut.
"""

from ._damage import (
    SalvagedTail as SalvagedTail,
    damaged_files as damaged_files,
)
from ._jsonl import JsonlPersistence as JsonlPersistence
from ._jsonl_repair import truncate_log as truncate_log
from ._persistence import (
    Durability as Durability,
    RestoredSession as RestoredSession,
    SessionPersistence as SessionPersistence,
    SessionWriter as SessionWriter,
    load_session as load_session,
    restore_session as restore_session,
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
    "restore_session",
    "RestoredSession",
    "SalvagedTail",
    "damaged_files",
    "truncate_log",
]
