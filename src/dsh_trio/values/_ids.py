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


# uuid4 bits: version 4 in bits 76-79, the RFC 4122 variant (0b10) in bits 62-63.
_UUID4_KEEP: Final = ~((0xF000 << 64) | (0xC000 << 48))
_UUID4_SET: Final = (0x4000 << 64) | (0x8000 << 48)
_urandom = os.urandom


def new_message_id() -> MessageId:
    """Return a fresh random message id (uuid4 text).

    The same text as ``str(uuid.uuid4())`` (16 bytes of ``os.urandom``, version and
    variant bits set), built without a :class:`uuid.UUID`: a turn makes several.
    """
    h = f"{int.from_bytes(_urandom(16)) & _UUID4_KEEP | _UUID4_SET:032x}"
    return MessageId(f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


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
