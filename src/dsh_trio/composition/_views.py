"""What the loop sees of the presets: a bound agent's tools, sections and contexts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..tools import ToolRegistry
from ..values import JsonValue, ToolCallBlock
from ._registry import SELECTED_EVENT, PresetRegistry

if TYPE_CHECKING:
    from ..loop import Agent, CancelSignal
    from ..session import Session

__all__ = ["CompositionSections", "CompositionTools", "logged_preset"]


def logged_preset(session: Session) -> str | None:
    """The preset a session was last bound to: the last ``agent-preset/selected``, else the header's."""
    for event in session.events.of_types(SELECTED_EVENT, reverse=True):
        if isinstance(event.data, dict):
            value = event.data.get("agentPreset")
            if isinstance(value, str):
                return value
    return session.header.agent_preset


class CompositionTools:
    """The loop's tool seam with presets: a bound agent sees its generation's tools too."""

    __slots__ = ("_base", "_bindings", "_presets")

    def __init__(self, base: ToolRegistry, presets: PresetRegistry) -> None:
        self._base = base
        self._presets = presets
        # The registry's live bindings (read once per step: a lookup, not a call).
        self._bindings = presets._bindings

    def _for(self, agent: Agent) -> ToolRegistry:
        binding = self._bindings.get(agent)
        return binding.generation.tools if binding is not None else self._base

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        """The schemas of the tools ``agent`` sees, sorted by name."""
        binding = self._bindings.get(agent)  # ``_for``, inline: once per step
        tools = binding.generation.tools if binding is not None else self._base
        return tools.schemas(agent)

    async def execute(
        self,
        agent: Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: CancelSignal,
    ) -> bool:
        """Run ``calls`` against the tools ``agent`` sees (see ``ToolRegistry.execute``)."""
        return await self._for(agent).execute(
            agent, turn=turn, step=step, calls=calls, signal=signal
        )


class CompositionSections:
    """The loop's composition view: a bound agent's generation sections and contexts."""

    __slots__ = ("_bindings", "_presets")

    def __init__(self, presets: PresetRegistry) -> None:
        self._presets = presets
        # The registry's live bindings (read once per step: a lookup, not a call).
        self._bindings = presets._bindings

    def sections_for(
        self, agent: Agent
    ) -> Sequence[tuple[str, str | Callable[[Agent], str]]]:
        """The sections ``agent``'s generation adds (``()`` when unbound)."""
        binding = self._bindings.get(agent)
        return binding.generation.sections if binding is not None else ()

    def contexts_for(
        self, agent: Agent
    ) -> Sequence[tuple[str, Callable[[Agent], str | None]]]:
        """The contexts ``agent``'s generation adds (``()`` when unbound)."""
        binding = self._bindings.get(agent)
        return binding.generation.contexts if binding is not None else ()
