"""The runtime: the nursery that owns every agent, and what its agents share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import trio

from ..events import EventBus
from ..llm import ModelAdapter, ModelRegistry, RetryPolicy
from ..loop import AgentServices, SystemPrompt
from ..persistence import SessionPersistence
from ..session import Session
from ..tools import Tool, ToolRegistry
from ..values import SessionId
from ._registry import AgentRegistry
from ._retry import install_retry_listener

__all__ = ["Runtime", "SessionStore", "open_runtime"]


class SessionStore:
    """The live sessions of a runtime (one per live agent)."""

    def __init__(self) -> None:
        self._sessions: dict[SessionId, Session] = {}

    def get(self, session_id: str) -> Session | None:
        """The live session ``session_id``, or ``None``."""
        return self._sessions.get(SessionId(session_id))

    def list(self) -> list[Session]:
        """Live sessions in creation order."""
        return list(self._sessions.values())

    def _add(self, session: Session) -> None:
        self._sessions[session.id] = session

    def _remove(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]


class Runtime:
    """Everything agents share: registry, event bus, models, tools, prompt, sessions.

    Obtained from :func:`open_runtime`; no public constructor.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        persistence: SessionPersistence | None,
        system_prompt: str | None,
        tools: ToolRegistry,
        max_parallel_tool_calls: int,
    ) -> None:
        self._nursery = nursery
        self.persistence = persistence
        self.agents = AgentRegistry(self)
        self.events = EventBus(parent_of=self.agents._owner_of)
        self.models = ModelRegistry()
        self.prompt = SystemPrompt(system_prompt)
        self.sessions = SessionStore()
        self.max_parallel_tool_calls = max_parallel_tool_calls
        self.tools = tools
        self._services = AgentServices(
            bus=self.events,
            models=self.models,
            prompt=self.prompt,
            spawn=self._spawn,
            tools=self.tools,
        )

    def _spawn(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start ``fn(*args)`` in the runtime nursery (drivers, writers, teardowns)."""
        self._nursery.start_soon(fn, *args)

    async def _aclose(self) -> None:
        """Dispose every live agent; blocks until all are gone (see ``open_runtime``)."""
        await self.agents._dispose_all()


async def _close_after(runtime: Runtime, exc: BaseException) -> None:
    """Dispose every agent after the runtime block raised ``exc``; never mask ``exc``.

    Runs inside the caller's shielded scope. If disposal fails too, the block's own
    exception and the disposal failures are raised together in one group, so
    ``except*`` on either matches.
    """
    try:
        await runtime._aclose()
    except Exception as failed:
        if isinstance(exc, GeneratorExit):
            raise
        failures = (
            list(failed.exceptions) if isinstance(failed, ExceptionGroup) else [failed]
        )
        raise BaseExceptionGroup(  # noqa: ASYNC104  # exc (Cancelled too) is re-raised inside the group
            "the runtime block raised, and disposing its agents failed",
            [exc, *failures],
        ) from None


@asynccontextmanager
async def open_runtime(
    *,
    models: Mapping[str, ModelAdapter] | None = None,
    tools: Sequence[Tool] = (),
    persistence: SessionPersistence | None = None,
    system_prompt: str | None = None,
    max_parallel_tool_calls: int = 10,
) -> AsyncIterator[Runtime]:
    """Open a runtime whose nursery owns every agent created through it.

    Leaving the block disposes every live agent (children before parents) and
    waits for every drain, also when the block raised; nothing keeps running. When
    the block raised and a disposal failed too, both are raised together in one
    exception group (``except*`` on the block's exception matches); disposal
    failures alone are raised as an :class:`ExceptionGroup`.

    Example::

        async with dsh.open_runtime(models={"scripted": ScriptedModel(reply("hi"))}) as rt:
            async with rt.agents.open(options=dsh.AgentOptions(provider="scripted", model="m")) as agent:
                agent.followup(dsh.user_message("hello"))
                await agent.when_idle()

    Args:
        models: provider name → adapter, registered with the default retry policy.
        tools: tool definitions (``@dsh.tool`` functions) to register.
        persistence: where sessions are stored (e.g. ``JsonlPersistence(root)``).
        system_prompt: the persona section of the system prompt.
        max_parallel_tool_calls: the bound of the parallel tool pool.
    """
    raw: object = max_parallel_tool_calls
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise ValueError(
            f"max_parallel_tool_calls must be a positive int, got {max_parallel_tool_calls!r}"
        )
    executor = _make_tool_executor(tools, max_parallel_tool_calls)
    async with trio.open_nursery() as nursery:
        runtime = Runtime(
            nursery,
            persistence=persistence,
            system_prompt=system_prompt,
            tools=executor,
            max_parallel_tool_calls=max_parallel_tool_calls,
        )
        install_retry_listener(runtime.events, runtime.models)
        for provider, adapter in (models or {}).items():
            runtime.models.register(provider, adapter, retry_policy=RetryPolicy())
        try:
            yield runtime
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await _close_after(runtime, exc)
            raise
        with trio.CancelScope(shield=True):
            await runtime._aclose()


def _make_tool_executor(tools: Sequence[Tool], max_parallel: int) -> ToolRegistry:
    registry = ToolRegistry(max_parallel_tool_calls=max_parallel)
    for t in tools:
        registry.register(t)
    return registry
