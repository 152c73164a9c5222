"""Ownership: the runtime nursery, the agent registry, handles and disposal."""

from ..loop import (
    current_initiator as current_initiator,
    initiator as initiator,
    no_initiator as no_initiator,
    require_initiator as require_initiator,
)
from ._collector import (
    AgentCollector as AgentCollector,
    agent_collector as agent_collector,
)
from ._registry import (
    AgentExistsError as AgentExistsError,
    AgentHandle as AgentHandle,
    AgentRegistry as AgentRegistry,
)
from ._retry import (
    install_retry_listener as install_retry_listener,
    retry_delay_ms as retry_delay_ms,
)
from ._runtime import Runtime as Runtime, open_runtime as open_runtime
from ._sessions import SessionStore as SessionStore

__all__ = [
    "AgentCollector",
    "AgentExistsError",
    "AgentHandle",
    "AgentRegistry",
    "Runtime",
    "agent_collector",
    "SessionStore",
    "current_initiator",
    "install_retry_listener",
    "retry_delay_ms",
    "initiator",
    "no_initiator",
    "open_runtime",
    "require_initiator",
]
