"""Payloads of the runtime's events, and the frames of ``agent/assistant-stream``.

Payloads that carry an agent, a session or a cancel signal compare by identity
(``eq=False``); frames and outcomes are plain values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

import attrs

from .._values import AgentStatus, LlmFailure, SessionEvent, StreamChunk, UserMessage

if TYPE_CHECKING:
    from ..llm import RetryPolicy
    from ..loop import Agent, CancelSignal
    from ..session import Session

__all__ = [
    "EVENT_NAMES",
    "Abandoned",
    "AgentCreated",
    "AgentDisposed",
    "AgentErrorEvent",
    "AgentStatusChanged",
    "AssistantStream",
    "Committed",
    "InboxClaimed",
    "InboxDiscarded",
    "InboxInserted",
    "PreStep",
    "RequestFailed",
    "RequestProposal",
    "SessionEventAppended",
    "StreamChunkFrame",
    "StreamEndFrame",
    "StreamFrame",
    "StreamOutcome",
    "StreamStartFrame",
    "TurnStopping",
]

#: Every event the runtime dispatches.
EVENT_NAMES: tuple[str, ...] = (
    "agent/created",
    "agent/disposed",
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

# --------------------------------------------------------------------------- lifecycle


@attrs.frozen(eq=False)
class AgentCreated:
    """``agent/created`` (serial): the agent is about to be published.

    ``source`` is ``"startup"`` for a new agent and ``"resume"`` for a resumed one;
    ``signal`` is the creation task's cancel signal. A failing listener fails the
    creation, which is rolled back.
    """

    agent: Agent
    source: Literal["startup", "resume"]
    signal: CancelSignal


@attrs.frozen(eq=False)
class AgentDisposed:
    """``agent/disposed`` (emit): the agent left the registry."""

    agent: Agent


@attrs.frozen(eq=False)
class AgentStatusChanged:
    """``agent/status`` (emit): the public status changed (never repeated)."""

    agent: Agent
    status: AgentStatus


@attrs.frozen(eq=False)
class AgentErrorEvent:
    """``agent/error`` (emit): a turn failed with ``error``, before its ``turn/end``."""

    agent: Agent
    turn: int
    step: int
    error: Exception


# --------------------------------------------------------------------------- inbox


@attrs.frozen(eq=False)
class InboxInserted:
    """``agent/inbox/inserted`` (emit): ``message`` was durably queued."""

    agent: Agent
    message: UserMessage


@attrs.frozen(eq=False)
class InboxClaimed:
    """``agent/inbox/claimed`` (emit): turn ``turn`` claimed ``message``."""

    agent: Agent
    message: UserMessage
    turn: int


@attrs.frozen(eq=False)
class InboxDiscarded:
    """``agent/inbox/discarded`` (emit): ``message`` left the inbox unclaimed."""

    agent: Agent
    message: UserMessage


# --------------------------------------------------------------------------- stream frames


@attrs.frozen
class Committed:
    """The attempt settled as the session event ``seq`` of type ``event_type``
    (``"assistant/message"`` or ``"assistant/attempt"``)."""

    event_type: str
    seq: int


@attrs.frozen
class Abandoned:
    """The attempt ended without a settlement event."""


StreamOutcome: TypeAlias = Committed | Abandoned


@attrs.frozen
class StreamStartFrame:
    """A model attempt started streaming.

    ``attempt_id`` is ``"<session id>:<attempt counter>"``; ``revision`` counts every
    frame of the agent's lifetime, from 1.
    """

    attempt_id: str
    revision: int
    turn: int
    step: int


@attrs.frozen
class StreamChunkFrame:
    """One received chunk; ``index`` is dense from 0 within the attempt, ``time`` is the
    receive time in epoch milliseconds."""

    attempt_id: str
    revision: int
    index: int
    time: int
    chunk: StreamChunk


@attrs.frozen
class StreamEndFrame:
    """The attempt ended; ``index`` is the number of chunk frames it emitted."""

    attempt_id: str
    revision: int
    index: int
    outcome: StreamOutcome


StreamFrame: TypeAlias = StreamStartFrame | StreamChunkFrame | StreamEndFrame


@attrs.frozen(eq=False)
class AssistantStream:
    """``agent/assistant-stream`` (emit): a live frame of a model attempt."""

    agent: Agent
    frame: StreamFrame


# --------------------------------------------------------------------------- hooks


@attrs.frozen(eq=False)
class PreStep:
    """``agent/pre-step`` (waterfall → ``PreStepDecision``): a step is proposed with the
    claimed ``messages``."""

    agent: Agent
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: CancelSignal


@attrs.frozen(eq=False)
class RequestProposal:
    """``agent/request`` (waterfall → ``CallConfig``): a request attempt is about to be
    built."""

    agent: Agent
    turn: int
    step: int
    signal: CancelSignal


@attrs.frozen(eq=False)
class RequestFailed:
    """``agent/request-error`` (waterfall → ``Retry() | None``): a request attempt failed.

    ``retry_policy`` is the provider's policy (``None`` when retries are off).
    """

    agent: Agent
    turn: int
    step: int
    provider: str
    failure: LlmFailure
    retry_policy: RetryPolicy | None
    signal: CancelSignal


@attrs.frozen(eq=False)
class TurnStopping:
    """``agent/turn-stopping`` (serial): the turn is about to end with nothing queued
    for its next step."""

    agent: Agent
    turn: int
    signal: CancelSignal


# --------------------------------------------------------------------------- session


@attrs.frozen(eq=False)
class SessionEventAppended:
    """``session/event`` (emit): ``event`` was appended to ``session``."""

    session: Session
    event: SessionEvent
