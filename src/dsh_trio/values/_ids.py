"""Ids, JSON values, the log format version, the clock, and the two small enums."""

from __future__ import annotations

import enum
import os
import time
from typing import Final, NewType, TypeAlias

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


def new_message_id() -> MessageId:
    """Return a fresh random message id (uuid4 text).

    The same text as ``str(uuid.uuid4())`` (16 bytes of ``os.urandom``, version and
    variant bits set), built from the hex digits without a :class:`uuid.UUID`: a
    turn makes several.
    """
    h = _urandom(16).hex()
    return MessageId(
        f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"
    )


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
