"""Ids, JSON values, the log format version, the clock, and the two small enums."""

from __future__ import annotations

import enum
import os
import time
from typing import Any, Final, NewType, TypeAlias

SessionId = NewType("SessionId", str)
MessageId = NewType("MessageId", str)
ToolCallId = NewType("ToolCallId", str)

#: A JSON value as it appears in session data (``dict``/``list`` are never mutated
#: by the runtime once accepted).
JsonValue: TypeAlias = (
    bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
)


_urandom = os.urandom
#: The RFC 4122 variant of a uuid4 keeps the low two bits of the 17th hex digit and
#: sets its high two to ``10``: each digit's variant digit.
_VARIANT: Final = {f"{n:x}": "89ab"[n & 3] for n in range(16)}
#: How many ids one read of ``os.urandom`` makes.
_BATCH: Final = 64
#: Ids made and not yet handed out. ``list.pop`` hands each out once, whichever
#: thread asks; a forked child starts with none, so it never repeats its parent's.
_unused: list[MessageId] = []
os.register_at_fork(after_in_child=_unused.clear)


def _made() -> list[MessageId]:
    """``_BATCH`` fresh ids from one read of ``os.urandom``."""
    h = _urandom(16 * _BATCH).hex()
    ids: list[Any] = [
        f"{h[k : k + 8]}-{h[k + 8 : k + 12]}-4{h[k + 13 : k + 16]}-"
        f"{_VARIANT[h[k + 16]]}{h[k + 17 : k + 20]}-{h[k + 20 : k + 32]}"
        for k in range(0, 32 * _BATCH, 32)
    ]
    return ids


def new_message_id() -> MessageId:
    """Return a fresh random message id (uuid4 text).

    The same text as ``str(uuid.uuid4())`` (16 bytes of ``os.urandom``, version and
    variant bits set), built from the hex digits without a :class:`uuid.UUID`: a
    turn makes several, so the bytes of ``_BATCH`` ids are read at once.
    """
    try:
        return _unused.pop()
    except IndexError:
        made = _made()
        _unused.extend(made[1:])
        return made[0]


#: The session log format this library reads and writes (the reference's v3).
FORMAT_VERSION: Final = 3


def now_ms() -> int:
    """Wall-clock epoch milliseconds: only for the ``time`` field of log events and headers."""
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------- enums


class InboxTarget(enum.StrEnum):
    """Which inbox list a message goes to."""

    NEXT_TURN = "next-turn"
    NEXT_STEP = "next-step"


class AgentStatus(enum.StrEnum):
    """The public status of an agent (maintenance reports ``IDLE``)."""

    IDLE = "idle"
    RUNNING = "running"
