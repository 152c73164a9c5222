"""Agent-local registrations: listeners, prompt sections and cleanups, unwound at dispose."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import AgentDisposedError

if TYPE_CHECKING:
    from ._agent import Agent
    from ._services import AgentServices

__all__ = ["AgentScope"]


class AgentScope:
    """Agent-local registrations, unwound when the agent is disposed.

    Listeners registered here are scoped to the agent: they hear events about
    this agent and about the agents it owns. Registering after disposal raises
    :class:`AgentDisposedError`.

    Example::

        agent.scope.on("agent/status", lambda e: print(e.status))
    """

    __slots__ = ("_agent", "_cleanups", "_closed", "_services")

    def __init__(self, agent: Agent, services: AgentServices) -> None:
        self._agent = agent
        self._services = services
        self._cleanups: list[Callable[[], object]] = []
        self._closed = False

    @property
    def agent(self) -> Agent:
        """The agent this scope belongs to."""
        return self._agent

    def _check(self) -> None:
        if self._closed:
            raise AgentDisposedError(
                f'agent "{self._agent.id}" is disposed: its scope accepts no registration'
            )

    def on(
        self, name: str, listener: Callable[..., Any], *, prepend: bool = False
    ) -> Callable[[], None]:
        """Register an agent-scoped listener; returns its disposer (also run at dispose)."""
        self._check()
        dispose = self._services.bus.on(
            name, listener, scope=self._agent, prepend=prepend
        )
        self._cleanups.append(dispose)
        return dispose

    def add_section(
        self, name: str, text: str | Callable[[object], str]
    ) -> Callable[[], None]:
        """Add a system-prompt section that applies to this agent only."""
        self._check()
        dispose = self._services.prompt.add_section(name, text, scope=self._agent)
        self._cleanups.append(dispose)
        return dispose

    def add_cleanup(self, fn: Callable[[], object]) -> None:
        """Run ``fn()`` when the agent is disposed (last added runs first)."""
        self._check()
        self._cleanups.append(fn)

    def unwind(self) -> list[Exception]:
        """Close the scope and run every cleanup, last first; their errors.

        Runtime use only: the agent's disposal unwinds it once its activity ended.
        """
        self._closed = True
        errors: list[Exception] = []
        while self._cleanups:
            fn = self._cleanups.pop()
            try:
                fn()
            except Exception as exc:  # collected; dispose reports them
                errors.append(exc)
        return errors
