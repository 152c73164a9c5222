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

__all__ = ["AgentServices", "CompositionView", "ToolExecutor"]


class CompositionView(Protocol):
    """What an agent's composition (its preset generation) adds to the runtime's own.

    The loop asks it per agent, at the point of use: sections when the system prompt is
    rendered, contexts when the runtime-context snapshot is rendered (first pre-step
    proposal of a turn). Entries come in registration order; the runtime's own sections
    and contexts come first.
    """

    def sections_for(
        self, agent: Agent
    ) -> Sequence[tuple[str, str | Callable[[Agent], str]]]:
        """The (name, text-or-render) system-prompt sections ``agent``'s composition adds."""
        ...

    def contexts_for(
        self, agent: Agent
    ) -> Sequence[tuple[str, Callable[[Agent], str | None]]]:
        """The (name, render) runtime contexts ``agent``'s composition adds."""
        ...


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
    composition: CompositionView | None = None
