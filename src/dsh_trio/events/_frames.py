"""The names of the runtime's events and the frames of ``agent/assistant-stream``.

Frames and outcomes are plain values; the payloads that carry an agent, a session or a
cancel signal live with the agent in :mod:`dsh_trio.loop` (re-exported by
:mod:`dsh_trio.events`).
"""

from __future__ import annotations

from typing import TypeAlias

import attrs

from ..values import StreamChunk

__all__ = [
    "EMIT_EVENT_NAMES",
    "EVENT_NAMES",
    "Abandoned",
    "Committed",
    "StreamChunkFrame",
    "StreamEndFrame",
    "StreamFrame",
    "StreamOutcome",
    "StreamStartFrame",
]

#: Every event the runtime dispatches.
EVENT_NAMES: tuple[str, ...] = (
    "agent/created",
    "agent/disposed",
    "agent/activated",
    "agent/passivated",
    "agent/status",
    "agent/error",
    "agent/inbox/inserted",
    "agent/inbox/claimed",
    "agent/inbox/discarded",
    "agent/assistant-stream",
    "agent/pre-step",
    "agent/request",
    "agent/request-error",
    "agent/turn-stopping",
    "session/event",
)

#: The runtime's events dispatched with ``emit``: their listeners are plain callables.
EMIT_EVENT_NAMES: frozenset[str] = frozenset(
    {
        "agent/disposed",
        "agent/activated",
        "agent/passivated",
        "agent/status",
        "agent/error",
        "agent/inbox/inserted",
        "agent/inbox/claimed",
        "agent/inbox/discarded",
        "agent/assistant-stream",
        "session/event",
    }
)

# --------------------------------------------------------------------------- stream frames


@attrs.frozen(weakref_slot=False)
class Committed:
    """The attempt settled as the session event ``seq`` of type ``event_type``
    (``"assistant/message"`` or ``"assistant/attempt"``)."""

    event_type: str
    seq: int


@attrs.frozen(weakref_slot=False)
class Abandoned:
    """The attempt ended without a settlement event."""


StreamOutcome: TypeAlias = Committed | Abandoned


@attrs.frozen(weakref_slot=False)
class StreamStartFrame:
    """A model attempt started streaming.

    ``attempt_id`` is ``"<session id>:<attempt counter>"``; ``revision`` counts every
    frame of the agent's lifetime, from 1.
    """

    attempt_id: str
    revision: int
    turn: int
    step: int


@attrs.frozen(weakref_slot=False)
class StreamChunkFrame:
    """One received chunk; ``index`` is dense from 0 within the attempt, ``time`` is the
    receive time in epoch milliseconds."""

    attempt_id: str
    revision: int
    index: int
    time: int
    chunk: StreamChunk


@attrs.frozen(weakref_slot=False)
class StreamEndFrame:
    """The attempt ended; ``index`` is the number of chunk frames it emitted."""

    attempt_id: str
    revision: int
    index: int
    outcome: StreamOutcome


StreamFrame: TypeAlias = StreamStartFrame | StreamChunkFrame | StreamEndFrame
