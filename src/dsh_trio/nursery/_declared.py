"""Declared agents: started at ``open_runtime(config=...)``, awaited with ``wait_for``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import AgentStartError, InvalidSessionIdError, SessionNotFoundError
from ..loop import ConfigStartFailed
from ..values import AgentOptions, SessionId

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..composition import DeclaredAgent
    from ..events import EventBus
    from ..loop import Agent, AgentScope
    from ..persistence import SessionPersistence
    from ._handle import AgentHandle
    from ._registry import AgentRegistry

__all__ = ["CONFIG_START_FAILED", "DeclaredStarts"]

logger = logging.getLogger("dsh_trio")

CONFIG_START_FAILED = "agent-loop/config-start-failed"


def _fill(options: AgentOptions, fallback: AgentOptions | None) -> AgentOptions:
    if fallback is None:
        return options
    unset = {
        f.name: getattr(fallback, f.name)
        for f in attrs.fields(AgentOptions)
        if getattr(options, f.name) is None and getattr(fallback, f.name) is not None
    }
    return attrs.evolve(options, **unset) if unset else options


class DeclaredStarts:
    """The starts of a runtime's declared agents, and the waiters on any agent id.

    Each declared agent starts in its own task of the runtime nursery, so a failing or
    slow one never blocks the others. A failure is recorded (``wait_for`` raises
    :class:`AgentStartError`) and emitted as ``agent-loop/config-start-failed``
    unless the runtime is closing.
    """

    def __init__(
        self,
        registry: AgentRegistry,
        *,
        spawn: Callable[..., None],
        bus: EventBus,
        persistence: SessionPersistence | None,
    ) -> None:
        self._registry = registry
        self._spawn = spawn
        self._bus = bus
        self._persistence = persistence
        self._failed: dict[SessionId, BaseException] = {}
        self._changed = trio.Event()
        self._pending = 0
        self._idle = trio.Event()
        self._idle.set()
        self._scopes: set[trio.CancelScope] = set()
        self._closing = False

    def changed(self) -> None:
        """Wake every waiter to look again (an agent was published, or a start failed)."""
        self._changed.set()
        self._changed = trio.Event()

    def start(
        self, agents: tuple[DeclaredAgent, ...], model: AgentOptions | None
    ) -> None:
        """Start each declared agent in its own runtime-nursery task. Synchronous."""
        for declared in agents:
            self._failed.pop(SessionId(declared.id), None)
            self._pending += 1
            self._idle = trio.Event() if self._pending == 1 else self._idle
            self._spawn(self._start_one, declared, model)

    async def _start_one(  # noqa: ASYNC910  # a spawned task, never awaited by a caller
        self, declared: DeclaredAgent, model: AgentOptions | None
    ) -> None:
        scope = trio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                await trio.lowlevel.checkpoint()
                await self._create_or_resume(declared, model)
                return
            error: BaseException = RuntimeError(
                f'the runtime closed before declared agent "{declared.id}" started'
            )
        except Exception as exc:
            error = exc
        finally:
            self._scopes.discard(scope)
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()
        self._failed[SessionId(declared.id)] = error
        if not self._closing:
            logger.warning(
                'declared agent "%s" failed to start: %r', declared.id, error
            )
            self._bus.emit(CONFIG_START_FAILED, ConfigStartFailed(declared.id, error))
        self.changed()

    async def _create_or_resume(
        self, declared: DeclaredAgent, model: AgentOptions | None
    ) -> None:
        """Resume the declared id when it is persisted (its log keeps its preset), else create it."""

        async def fill(_scope: AgentScope, agent: Agent) -> None:
            # After the preset's defaults: the config's default model fills the rest.
            agent.options = _fill(agent.options, model)
            await trio.lowlevel.checkpoint()

        registry = self._registry
        if self._persistence is not None:
            try:
                await registry.resume(declared.id, options=declared.options, setup=fill)
                return
            except SessionNotFoundError:
                pass
        await registry.create(
            declared.id, options=declared.options, preset=declared.preset, setup=fill
        )

    async def aclose(self) -> None:
        """Stop the starts still running and wait for them to end (the runtime is closing)."""
        self._closing = True
        for scope in self._scopes:
            scope.cancel(reason="the runtime is closing")
        await self._idle.wait()

    async def wait_for(self, session_id: str) -> AgentHandle:
        """The handle of ``session_id`` once published; see ``AgentRegistry.wait_for``.

        Raises:
            InvalidSessionIdError: ``session_id`` is not a non-empty str (no agent
                could ever be published under it, so waiting would never end).
        """
        given: object = session_id
        if not isinstance(given, str) or not given:
            raise InvalidSessionIdError(
                f"wait_for() expects a session id (a non-empty str), got {session_id!r:.60}"
            )
        sid = SessionId(session_id)
        while True:
            handle = self._registry.published_handle(sid)
            if handle is not None:
                await trio.lowlevel.checkpoint()
                return handle
            failed = self._failed.get(sid)
            if failed is not None:
                await trio.lowlevel.checkpoint()
                raise AgentStartError(session_id, failed)
            await self._changed.wait()
