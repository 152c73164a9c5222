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
#: How many ids one read of ``os.urandom`` makes.
_BATCH: Final = 64
_SIZE: Final = 16 * _BATCH


def _every_id(mask: int) -> int:
    """``mask`` (the 128 bits of one uuid) repeated for every id of a batch."""
    return int.from_bytes(mask.to_bytes(16, "big") * _BATCH, "big")


#: A uuid4 keeps every random bit but the version nibble (set to 4) and the two high
#: bits of the variant (set to ``10``, RFC 4122): for the whole batch at once.
_KEEP: Final = _every_id(~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1))
_SET: Final = _every_id((0x4000 << 64) | (0x8000 << 48))
#: Where each of the five dash-separated groups of every id lies in the batch's hex.
_GROUPS: Final = tuple(
    tuple(slice(k + a, k + b) for k in range(0, 2 * _SIZE, 32))
    for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
)
_join = "-".join
#: Ids made and not yet handed out. ``list.pop`` hands each out once, whichever
#: thread asks; a forked child starts with none, so it never repeats its parent's.
_unused: list[MessageId] = []
os.register_at_fork(after_in_child=_unused.clear)


def _made() -> list[MessageId]:
    """``_BATCH`` fresh ids from one read of ``os.urandom``.

    The version and variant bits of all of them are set in one integer operation
    and the dashes put in by ``map`` (no Python code runs per id).
    """
    bits = int.from_bytes(_urandom(_SIZE), "big") & _KEEP | _SET
    cut = bits.to_bytes(_SIZE, "big").hex().__getitem__
    g1, g2, g3, g4, g5 = _GROUPS
    ids: list[Any] = list(
        map(
            _join,
            zip(
                map(cut, g1),
                map(cut, g2),
                map(cut, g3),
                map(cut, g4),
                map(cut, g5),
                strict=True,
            ),
        )
    )
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
