"""What an agent needs from its runtime, bundled (the seams the loop drives)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from .._values import (
    JsonValue,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
    new_message_id,
)

if TYPE_CHECKING:
    from ..events import EventBus
    from ..llm import ModelRegistry
    from ._agent import Agent
    from ._prompt import SystemPrompt
    from ._signal import CancelSignal

__all__ = ["AgentServices", "NoTools", "ToolExecutor"]


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


class NoTools:
    """The executor used when no tool is registered: every call gets an error result."""

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        return ()

    async def execute(
        self,
        agent: Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: CancelSignal,
    ) -> bool:
        session = agent.session
        for call in calls:
            ev = session.append(
                "tool/call",
                ToolCallData(
                    turn=turn,
                    step=step,
                    call_id=call.id,
                    name=call.name,
                    arguments=call.arguments,
                ),
            )
            text = f"Error: unknown tool {call.name!r}: no tools are registered"
            session.append(
                "tool/result",
                ToolResultData(
                    turn=turn,
                    step=step,
                    message=UserMessage(
                        id=new_message_id(),
                        content=(
                            ToolResultBlock(call.id, (TextBlock(text),), is_error=True),
                        ),
                        source=ToolSource(call.id),
                    ),
                    error=ToolErrorInfo("UnknownToolError", "UNKNOWN_TOOL"),
                ),
                surface_op="append",
                source_event_seqs=(ev.seq,),
            )
        await trio.lowlevel.checkpoint()
        return False


@attrs.define(eq=False)
class AgentServices:
    """The runtime services one agent uses; shared by every agent of a runtime.

    ``spawn(async_fn, *args)`` starts a task in the nursery that owns the agent.
    """

    bus: EventBus
    models: ModelRegistry
    prompt: SystemPrompt
    spawn: Callable[..., None]
    tools: ToolExecutor = attrs.field(factory=NoTools)
