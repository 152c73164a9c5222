"""The agent driver: one agent, its inbox, its turns and steps."""

from ._agent import Agent as Agent
from ._driver import AgentConfigError as AgentConfigError
from ._ids import new_message_id as new_message_id, user_message as user_message
from ._inbox import Inbox as Inbox
from ._initiator import (
    current_initiator as current_initiator,
    initiator as initiator,
    no_initiator as no_initiator,
    require_initiator as require_initiator,
)
from ._output_schema import strip_annotated as strip_annotated
from ._payloads import (
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
from ._prompt import SystemPrompt as SystemPrompt
from ._scope import AgentScope as AgentScope
from ._services import AgentServices as AgentServices, ToolExecutor as ToolExecutor
from ._signal import CancelSignal as CancelSignal
from ._turns import (
    TurnResult as TurnResult,
    TurnStream as TurnStream,
    result_of_events as result_of_events,
    text_of as text_of,
)
from ._work import AgentWork as AgentWork

__all__ = [
    "Agent",
    "AgentConfigError",
    "AgentScope",
    "CancelSignal",
    "Inbox",
    "SystemPrompt",
    "ToolExecutor",
    "TurnResult",
    "TurnStream",
    "text_of",
]
