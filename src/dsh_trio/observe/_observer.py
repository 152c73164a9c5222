"""The state of one :func:`~dsh_trio.observe.instrument` call: the agents it follows."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._agent import AgentSpans
from ._metrics import Metrics

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Meter
    from opentelemetry.trace import Tracer

    from ..events import AgentCreated, AgentDisposed
    from ..loop import Agent
    from ..nursery import Runtime

__all__ = ["Observer"]


class Observer:
    """The agents one :func:`~dsh_trio.observe.instrument` call follows, each through
    an :class:`AgentSpans` subscribed to its session, and what they share.

    Runtime use only. It follows the agents live when it is installed and each one
    published afterwards (``agent/created``), and stops following an agent when it is
    disposed (``agent/disposed``) or when it is uninstalled. No runtime-wide
    ``session/event`` listener: an instrumented runtime's agents do not relay their
    appends through the event bus.
    """

    __slots__ = ("_agents", "_runtime", "content", "metrics", "tracer")

    def __init__(
        self, runtime: Runtime, tracer: Tracer, meter: Meter, *, include_content: bool
    ) -> None:
        self._runtime = runtime
        self.tracer = tracer
        self.metrics = Metrics(meter)
        #: Record message content (``include_content``).
        self.content = include_content
        #: The followed agents, by id.
        self._agents: dict[str, AgentSpans] = {}

    def install(self) -> Callable[[], None]:
        """Follow the runtime's agents; return the idempotent uninstall function."""
        bus = self._runtime.events
        # Ahead of every other ``agent/created`` listener: input one of them queues
        # starts no turn before creation completes, but be first anyway.
        disposers = [
            bus.on("agent/created", self._on_created, prepend=True),
            bus.on("agent/disposed", self._on_disposed),
        ]
        for agent in self._runtime.agents.list():
            self._follow(agent)

        def uninstall() -> None:
            while disposers:
                disposers.pop()()
            self.stop_all()

        return uninstall

    def stop_all(self) -> None:
        """Stop following every agent, ending the spans still open."""
        now = time.time_ns()
        agents = self._agents
        while agents:
            _, spans = agents.popitem()
            spans.stop(now)

    def parent_context(self, owner: str) -> Context | None:
        """The context a turn of an agent owned by the agent ``owner`` opens in
        (``None``: the current one)."""
        spans = self._agents.get(owner)
        return None if spans is None else spans.child_context()

    def _follow(self, agent: Agent) -> None:
        found = self._agents.get(agent.id)
        if found is not None and found.agent is agent:
            return  # listed when installed, and announced since
        if found is not None:  # an agent of that id that left unannounced
            found.stop(time.time_ns())
        owner = self._runtime.agents.owner_of(agent)
        spans = AgentSpans(self, agent, None if owner is None else owner.id)
        self._agents[agent.id] = spans
        spans.follow()

    async def _on_created(self, payload: AgentCreated) -> None:  # noqa: ASYNC910  # a serial listener: the dispatch checkpoints
        self._follow(payload.agent)

    def _on_disposed(self, payload: AgentDisposed) -> None:
        agent = payload.agent
        spans = self._agents.get(agent.id)
        if spans is not None and spans.agent is agent:
            del self._agents[agent.id]
            spans.stop(time.time_ns())
