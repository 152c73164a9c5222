"""Payloads of the runtime's events: the ones that carry an agent, a session or a signal.

They compare by identity (``eq=False``). They live here, beside the agent they carry, and
:mod:`dsh_trio.events` re-exports them under their public names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import attrs

from ..events import StreamFrame
from ..llm import RetryPolicy
from ..values import AgentStatus, LlmFailure, SessionEvent, UserMessage

if TYPE_CHECKING:
    from ..session import Session
    from ._agent import Agent
    from ._signal import CancelSignal

__all__ = [
    "AgentActivated",
    "AgentCreated",
    "AgentDisposed",
    "AgentErrorEvent",
    "AgentPassivated",
    "AgentStatusChanged",
    "AssistantStream",
    "ConfigStartFailed",
    "InboxClaimed",
    "InboxDiscarded",
    "InboxInserted",
    "PreStep",
    "PresetSelected",
    "RequestFailed",
    "RequestProposal",
    "SessionEventAppended",
    "TurnStopping",
]

# --------------------------------------------------------------------------- lifecycle


@attrs.frozen(eq=False, weakref_slot=False)
class AgentCreated:
    """``agent/created`` (serial): the agent is about to be published.

    ``source`` is ``"startup"`` for a new agent and ``"resume"`` for a resumed one;
    ``signal`` is the creation task's cancel signal. A failing listener fails the
    creation, which is rolled back.
    """

    agent: Agent
    source: Literal["startup", "resume"]
    signal: CancelSignal


@attrs.frozen(eq=False, weakref_slot=False)
class AgentDisposed:
    """``agent/disposed`` (emit): the agent left the registry."""

    agent: Agent


@attrs.frozen(eq=False, weakref_slot=False)
class AgentActivated:
    """``agent/activated`` (emit): ``runtime.serve`` took the agent's session and published it."""

    agent: Agent


@attrs.frozen(eq=False, weakref_slot=False)
class AgentPassivated:
    """``agent/passivated`` (emit): ``runtime.serve`` flushed and disposed the idle agent
    and released its session's lease (its next mail activates it again)."""

    agent: Agent


@attrs.frozen(eq=False, weakref_slot=False)
class AgentStatusChanged:
    """``agent/status`` (emit): the public status changed (never repeated)."""

    agent: Agent
    status: AgentStatus


@attrs.frozen(eq=False, weakref_slot=False)
class AgentErrorEvent:
    """``agent/error`` (emit): something failed for ``agent``; ``phase`` says what.

    ``phase="turn"``: turn ``turn`` failed with ``error`` (at ``step``, 0 before its
    first step); emitted before its ``turn/end``. ``phase="persistence"``: the
    session's log stopped being written (``error`` is a
    :class:`~dsh_trio.errors.PersistenceError`); emitted at once, with the turn and
    step open at the time (or the last turn), and only once per fault: until a write
    succeeds again, waking input raises :class:`~dsh_trio.errors.PersistenceError`
    and the open turn ends ``Errored`` with code ``"PERSISTENCE"``.
    """

    agent: Agent
    turn: int
    step: int
    error: Exception
    phase: Literal["turn", "persistence"] = "turn"


# --------------------------------------------------------------------------- inbox


@attrs.frozen(eq=False, weakref_slot=False)
class InboxInserted:
    """``agent/inbox/inserted`` (emit): ``message`` was durably queued."""

    agent: Agent
    message: UserMessage


@attrs.frozen(eq=False, weakref_slot=False)
class InboxClaimed:
    """``agent/inbox/claimed`` (emit): turn ``turn`` claimed ``message``."""

    agent: Agent
    message: UserMessage
    turn: int


@attrs.frozen(eq=False, weakref_slot=False)
class InboxDiscarded:
    """``agent/inbox/discarded`` (emit): ``message`` left the inbox unclaimed."""

    agent: Agent
    message: UserMessage


@attrs.frozen(eq=False, weakref_slot=False)
class AssistantStream:
    """``agent/assistant-stream`` (emit): a live frame of a model attempt."""

    agent: Agent
    frame: StreamFrame


# --------------------------------------------------------------------------- hooks


@attrs.frozen(eq=False, weakref_slot=False)
class PreStep:
    """``agent/pre-step`` (waterfall → ``PreStepDecision``): a step is proposed with the
    claimed ``messages``."""

    agent: Agent
    messages: tuple[UserMessage, ...]
    turn: int
    step: int
    signal: CancelSignal


@attrs.frozen(eq=False, weakref_slot=False)
class RequestProposal:
    """``agent/request`` (waterfall → ``CallConfig``): a request attempt is about to be
    built."""

    agent: Agent
    turn: int
    step: int
    signal: CancelSignal


@attrs.frozen(eq=False, weakref_slot=False)
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


@attrs.frozen(eq=False, weakref_slot=False)
class TurnStopping:
    """``agent/turn-stopping`` (serial): the turn is about to end with nothing queued
    for its next step."""

    agent: Agent
    turn: int
    signal: CancelSignal


# --------------------------------------------------------------------------- session


@attrs.frozen(eq=False, weakref_slot=False)
class SessionEventAppended:
    """``session/event`` (emit): ``event`` was appended to ``session``."""

    session: Session
    event: SessionEvent


# --------------------------------------------------------------------------- composition


@attrs.frozen(eq=False, weakref_slot=False)
class PresetSelected:
    """``agent-preset/selected`` (emit, unscoped): ``presets.select`` bound the session's
    agent to ``preset``; the durable log event of the same name is already appended."""

    session_id: str
    preset: str


@attrs.frozen(eq=False, weakref_slot=False)
class ConfigStartFailed:
    """``agent-loop/config-start-failed`` (emit, unscoped): a declared agent
    (``open_runtime(config=...)``) failed before publication; ``wait_for`` on its id
    raises :class:`~dsh_trio.errors.AgentStartError`."""

    session_id: str
    error: BaseException
