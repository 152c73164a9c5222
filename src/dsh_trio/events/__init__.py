"""The event bus, the names of the runtime's events, and their payloads.

The bus is generic: it knows no agent. Scope filtering asks the runtime for an agent's
owners through a resolver the runtime installs.

The payload classes of the runtime's events that carry an agent, a session or a cancel signal are
defined by the agent driver in :mod:`dsh_trio.loop` (they depend on it; this layer sits
below it) and resolved here on first access, so ``from dsh_trio.events import PreStep``
works as documented without this package importing the layer above it.
"""

import importlib
from typing import TYPE_CHECKING

from ._bus import (
    EmitListener as EmitListener,
    EventBus as EventBus,
    SerialListener as SerialListener,
    WaterfallListener as WaterfallListener,
)

# The emit policy, for the runtime's hot paths (not part of the public API).
from ._dispatch import dispatch as dispatch
from ._frames import (
    EVENT_NAMES as EVENT_NAMES,
    Abandoned as Abandoned,
    Committed as Committed,
    StreamChunkFrame as StreamChunkFrame,
    StreamEndFrame as StreamEndFrame,
    StreamFrame as StreamFrame,
    StreamOutcome as StreamOutcome,
    StreamStartFrame as StreamStartFrame,
)

_PAYLOAD_NAMES = frozenset(
    {
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
    }
)

if TYPE_CHECKING:
    from ..loop import (
        AgentActivated as AgentActivated,
        AgentCreated as AgentCreated,
        AgentDisposed as AgentDisposed,
        AgentErrorEvent as AgentErrorEvent,
        AgentPassivated as AgentPassivated,
        AgentStatusChanged as AgentStatusChanged,
        AssistantStream as AssistantStream,
        ConfigStartFailed as ConfigStartFailed,
        InboxClaimed as InboxClaimed,
        InboxDiscarded as InboxDiscarded,
        InboxInserted as InboxInserted,
        PresetSelected as PresetSelected,
        PreStep as PreStep,
        RequestFailed as RequestFailed,
        RequestProposal as RequestProposal,
        SessionEventAppended as SessionEventAppended,
        TurnStopping as TurnStopping,
    )


def __getattr__(name: str) -> object:
    if name in _PAYLOAD_NAMES:
        return getattr(importlib.import_module("dsh_trio.loop"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EventBus",
    "EmitListener",
    "SerialListener",
    "WaterfallListener",
    "EVENT_NAMES",
    "Abandoned",
    "Committed",
    "StreamChunkFrame",
    "StreamEndFrame",
    "StreamFrame",
    "StreamOutcome",
    "StreamStartFrame",
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
