"""Id types, JSON values, the log format version, the clock, and the two small enums.

Fresh message ids are made where messages are made: ``dsh_trio.loop`` (its pool of
random ids is process-wide state, so it does not live among the values).
"""

from __future__ import annotations

import enum
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
