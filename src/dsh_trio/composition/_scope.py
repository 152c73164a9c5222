"""``PresetScope``: what a plugin registers into one preset generation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ..errors import PresetError
from ..values import AgentOptions

if TYPE_CHECKING:
    from ..loop import Agent
    from ..tools import Tool
    from ._generation import Generation

__all__ = ["PresetScope"]

_OPTION_FIELDS = frozenset(f.name for f in attrs.fields(AgentOptions))


class PresetScope:
    """What a plugin may register into a preset generation; all of it is unwound on retire.

    A plugin's setup function gets the scope of the generation being activated.
    Tools, listeners, sections and contexts reach exactly the agents bound to that
    generation and the agents they own. Registration is synchronous and never
    blocks; registering into a generation that was torn down raises
    :class:`~dsh_trio.errors.PresetError`.

    Example::

        def setup(scope: dsh.PresetScope, config: Mapping[str, JsonValue]) -> None:
            scope.tool(search)
            scope.section("style", "Answer briefly.")
            scope.on("agent/status", lambda e: print(e.agent.id, e.status))
            scope.defaults(model=str(config.get("model", "deepseek-flash")))
    """

    __slots__ = ("_generation",)

    def __init__(self, generation: Generation) -> None:
        self._generation = generation

    @property
    def preset_id(self) -> str:
        """The id of the preset this scope's generation belongs to."""
        return self._generation.preset_id

    def _named(self, method: str, name: object) -> Generation:
        """The live generation, once ``name`` is checked to be a non-blank str."""
        generation = self._live()
        if not isinstance(name, str):
            raise TypeError(
                f'preset "{generation.preset_id}": scope.{method}() expects a name '
                f"(str), got {name!r:.60}"
            )
        if not name.strip():
            raise PresetError(
                f'preset "{generation.preset_id}": scope.{method}() got a blank name'
            )
        return generation

    def _live(self) -> Generation:
        generation = self._generation
        if generation.torn_down:
            raise PresetError(
                f'preset "{generation.preset_id}" generation {generation.number} '
                "is torn down: its scope accepts no registration"
            )
        return generation

    def tool(self, tool: Tool) -> None:
        """Offer ``tool`` to the generation's agents (beside the runtime's tools).

        Raises:
            ToolDefinitionError: ``tool`` is not a ``@tool`` or its name is taken here.
        """
        generation = self._live()
        generation.cleanups.append(generation.tools.register(tool))

    def on(
        self, event: str, listener: Callable[..., Any], *, prepend: bool = False
    ) -> None:
        """Listen to ``event`` for the generation's agents (and the agents they own).

        Raises:
            TypeError: ``event`` is not a str or ``listener`` is not callable.
        """
        generation = self._named("on", event)
        if not callable(listener):
            raise TypeError(
                f'preset "{generation.preset_id}": the listener for "{event}" '
                f"is not callable: {listener!r:.60}"
            )
        generation.cleanups.append(
            generation.bus.on(event, listener, scope=generation, prepend=prepend)
        )

    def section(self, name: str, text: str | Callable[[Agent], str]) -> None:
        """Add a system-prompt section, rendered after the runtime's own sections.

        Raises:
            TypeError: ``name`` is not a str, or ``text`` is neither a str nor callable.
            PresetError: ``name`` is blank.
        """
        generation = self._named("section", name)
        if not isinstance(text, str) and not callable(text):
            raise TypeError(
                f'preset "{generation.preset_id}": section "{name}" needs a str or a '
                f"callable (agent) -> str, got {text!r:.60}"
            )
        generation.sections.append((name, text))

    def context(self, name: str, render: Callable[[Agent], str | None]) -> None:
        """Add a runtime context, rendered at the first pre-step proposal of a turn.

        Raises:
            TypeError: ``name`` is not a str, or ``render`` is not callable.
            PresetError: ``name`` is blank.
        """
        generation = self._named("context", name)
        if not callable(render):
            raise TypeError(
                f'preset "{generation.preset_id}": context "{name}" needs a callable '
                f"(agent) -> str | None, got {render!r:.60}"
            )
        generation.contexts.append((name, render))

    def provide(self, name: str, service: object) -> None:
        """Publish ``service`` inside the generation (``presets.service_for(agent, name)``).

        A service with an ``aclose()`` method is closed when the generation is torn down.

        Raises:
            PresetError: a service named ``name`` is already provided here, or
                ``name`` is blank.
            TypeError: ``name`` is not a str.
        """
        generation = self._named("provide", name)
        if name in generation.services:
            raise PresetError(
                f'preset "{generation.preset_id}" already provides a service named "{name}"'
            )
        generation.services[name] = service

    def defaults(self, **options: Any) -> None:
        """Set ``AgentOptions`` fields the generation's agents get unless they set them.

        Raises:
            PresetError: a keyword is not an ``AgentOptions`` field, or
                ``AgentOptions`` refuses a value (the message names the field).
        """
        generation = self._live()
        unknown = set(options) - _OPTION_FIELDS
        if unknown:
            raise PresetError(
                f'preset "{generation.preset_id}": unknown option(s) {sorted(unknown)} '
                f"for defaults (AgentOptions fields: {sorted(_OPTION_FIELDS)})"
            )
        try:
            AgentOptions(**{**generation.defaults, **options})  # refuses bad values
        except (TypeError, ValueError) as exc:
            raise PresetError(
                f'preset "{generation.preset_id}": defaults refused: {exc}'
            ) from exc
        generation.defaults.update(options)
