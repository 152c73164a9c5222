"""What an agent needs from its runtime, bundled (the seams the loop drives)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from ..values import (
    JsonValue,
    ToolCallBlock,
)

if TYPE_CHECKING:
    from ..events import EventBus
    from ..llm import ModelRegistry
    from ._agent import Agent
    from ._prompt import SystemPrompt
    from ._signal import CancelSignal

__all__ = ["AgentServices", "ToolExecutor"]


class ToolExecutor(Protocol):
    """The tool seam of the loop: schemas for requests, and the step's call scheduler."""

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        """The JSON tool schemas visible to ``agent`` (``()`` for none)."""
        ...

    async def execute(
        self,
        agent: Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: CancelSignal,
    ) -> bool:
        """Run ``calls`` (appending ``tool/call`` / ``tool/result``); True if one concluded the turn."""
        ...


@attrs.define(eq=False)
class AgentServices:
    """The runtime services one agent uses; shared by every agent of a runtime.

    ``spawn(async_fn, *args)`` starts a task in the nursery that owns the agent.
    """

    bus: EventBus
    models: ModelRegistry
    prompt: SystemPrompt
    spawn: Callable[..., None]
    tools: ToolExecutor
