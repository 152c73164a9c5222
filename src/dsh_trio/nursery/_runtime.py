"""The runtime: the nursery that owns every agent, the registry, and disposal."""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, Self

import attrs
import trio

from ..errors import (
    AgentDisposedError,
    DshError,
    InvalidSessionIdError,
    PersistenceNotConfiguredError,
)
from ..events import AgentCreated, AgentDisposed, EventBus
from ..llm import ModelAdapter, ModelRegistry, RetryPolicy
from ..loop import (
    Agent,
    AgentConfigError,
    AgentScope,
    AgentServices,
    CancelSignal,
    SystemPrompt,
)
from ..persistence import (
    SessionPersistence,
    SessionRecorder,
    SessionWriter,
    load_session,
)
from ..session import Session
from ..tools import Tool, ToolRegistry
from ..values import (
    AgentOptions,
    DisposedCancel,
    EndSeed,
    SessionEvent,
    SessionHeader,
    SessionId,
    now_ms,
)
from ._retry import install_retry_listener

if TYPE_CHECKING:
    from ..persistence import SessionPersistence as _Persistence

__all__ = [
    "AgentExistsError",
    "AgentHandle",
    "AgentRegistry",
    "Runtime",
    "SessionStore",
    "open_runtime",
]

logger = logging.getLogger("dsh_trio")

Setup = Callable[[AgentScope, Agent], Awaitable[Callable[[], object] | None]]
CreationSource = Literal["startup", "resume"]


_META_KEYS = frozenset(
    {"cwd", "parent_session", "origin", "delegation_depth", "agent_preset"}
)


class AgentExistsError(DshError, ValueError):
    """An agent with this session id is already live (or being created)."""


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


@attrs.define(eq=False)
class _Entry:
    agent: Agent
    handle: AgentHandle
    owner: Agent | None
    recorder: SessionRecorder | None = None
    announced: bool = False
    publishing: trio.Event | None = attrs.field(
        factory=trio.Event
    )  # None once published


class AgentHandle:
    """The owner's handle on an agent: ``.agent`` and :meth:`dispose`.

    Usable as ``async with handle:`` (disposes on exit).
    """

    def __init__(self, agent: Agent, registry: AgentRegistry) -> None:
        self._agent = agent
        self._registry = registry
        self._done: trio.Event | None = None
        self._errors: list[Exception] = []

    @property
    def agent(self) -> Agent:
        """The agent."""
        return self._agent

    async def dispose(self) -> None:
        """Dispose the agent: children first, cancel, drain, unwind, flush, unregister.

        Idempotent: concurrent and later callers wait for the same teardown and see
        the same outcome. The teardown runs in the runtime's nursery, shielded, so
        cancelling a caller only stops that caller's wait.

        Raises:
            Exception: the single failure collected during teardown, or an
                :class:`ExceptionGroup` of several; cleanup still completed.
        """
        if self._done is None:
            self._done = trio.Event()
            self._registry._runtime._spawn(self._teardown)
        await self._done.wait()
        if len(self._errors) == 1:
            raise self._errors[0]
        if self._errors:
            raise ExceptionGroup(
                f'agent "{self._agent.id}" disposal failed', self._errors
            )

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True):
            await self.dispose()  # noqa: ASYNC102  # disposal cancels every activity first, so it ends; it must end before we leave

    async def _teardown(self) -> None:
        registry = self._registry
        agent = self._agent
        errors: list[Exception] = []
        assert self._done is not None
        with trio.CancelScope(shield=True):
            entry = registry._entry_of(agent)
            if entry is not None and entry.publishing is not None:
                # Creation still running: abort its setup/listeners, then wait for it.
                agent.cancel(DisposedCancel(), keep_inbox=True)
                await entry.publishing.wait()
            for child in registry._children_of(agent):
                try:
                    await child.dispose()
                except Exception as exc:
                    errors.append(exc)
            agent._begin_drain()
            agent.cancel(DisposedCancel())
            await agent.when_idle()
            errors.extend(agent.scope._unwind())
            if entry is not None and entry.recorder is not None:
                try:
                    await entry.recorder.aclose()
                except Exception as exc:
                    errors.append(exc)
            registry._remove(agent)
            if entry is not None and entry.announced:
                registry._runtime.events.emit(
                    "agent/disposed", AgentDisposed(agent), scope=agent
                )
            agent._finish_dispose()
            registry._runtime.sessions._remove(agent.session)
        self._errors = errors
        self._done.set()


class AgentRegistry:
    """The live agents of a runtime, and the way to create and resume them."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._entries: dict[SessionId, _Entry] = {}

    # ------------------------------------------------------------------ reads

    def get(self, session_id: str) -> Agent | None:
        """The live, published agent with this id, or ``None``."""
        entry = self._entries.get(SessionId(session_id))
        return entry.agent if entry is not None and entry.announced else None

    def list(self) -> list[Agent]:
        """Published agents in registration order."""
        return [e.agent for e in self._entries.values() if e.announced]

    def roots(self) -> builtins.list[Agent]:
        """Published agents that have no owning parent."""
        return [
            e.agent for e in self._entries.values() if e.announced and e.owner is None
        ]

    def is_owned_by(self, session_id: str, owner: Agent) -> bool:
        """Whether the live agent ``session_id`` was created with ``parent=owner``."""
        entry = self._entries.get(SessionId(session_id))
        return entry is not None and entry.owner is owner

    def handle_of(self, agent: Agent) -> AgentHandle | None:
        """The handle of a live agent (the runtime's own reference to it)."""
        entry = self._entry_of(agent)
        return entry.handle if entry is not None else None

    def _entry_of(self, agent: Agent) -> _Entry | None:
        entry = self._entries.get(agent.id)
        return entry if entry is not None and entry.agent is agent else None

    def _children_of(self, agent: Agent) -> builtins.list[AgentHandle]:
        return [e.handle for e in self._entries.values() if e.owner is agent]

    def _owner_of(self, agent: object) -> object | None:
        if not isinstance(agent, Agent):
            return None
        entry = self._entry_of(agent)
        return entry.owner if entry is not None else None

    def _remove(self, agent: Agent) -> None:
        entry = self._entries.get(agent.id)
        if entry is not None and entry.agent is agent:
            del self._entries[agent.id]

    # ------------------------------------------------------------------ creation

    async def create(
        self,
        session_id: str | None = None,
        *,
        options: AgentOptions | None = None,
        parent: Agent | None = None,
        meta: Mapping[str, Any] | None = None,
        seed: Sequence[SessionEvent] | None = None,
        inherited_event_count: int | None = None,
        setup: Setup | None = None,
    ) -> AgentHandle:
        """Create and publish a fresh agent; ``session_id=None`` mints one.

        Setup and publication run as the agent's first maintenance task: input
        sent by ``setup`` or by an ``agent/created`` listener is queued and starts
        its turn once creation completes. Any failure rolls everything back (nothing
        stays registered) and the original exception propagates.

        Args:
            session_id: the agent's id (its session id).
            options: provider/model route and limits.
            parent: the owning agent; it disposes this one first when disposed.
            meta: header fields: ``cwd``, ``parent_session``, ``origin``,
                ``delegation_depth``, ``agent_preset``.
            seed: events the session starts from (a fork's prefix).
            inherited_event_count: with ``seed``, marks it an inherited fork cut.
            setup: ``async setup(agent.scope, agent)``, run before publication; it
                may return a synchronous commit callable run right before publication.

        Raises:
            AgentExistsError: the id is live.
            AgentDisposedError: ``parent`` is disposed.
            InvalidSessionIdError: the id is not usable.
        """
        fields = dict(meta or {})
        unknown = set(fields) - _META_KEYS
        if unknown:
            raise AgentConfigError(
                f"unknown meta keys {sorted(unknown)} (allowed: {sorted(_META_KEYS)})"
            )
        sid = session_id if session_id is not None else str(uuid.uuid4())
        raw_id: object = sid
        if not isinstance(raw_id, str) or not raw_id:
            raise InvalidSessionIdError(
                f"a session id must be a non-empty string, got {sid!r}"
            )
        header = SessionHeader(
            id=SessionId(sid),
            created_at=now_ms(),
            is_seeded=seed is not None,
            **fields,
        )
        session = Session.create(
            sid, header=header, seed=seed, inherited=inherited_event_count is not None
        )
        self._check_free(session.id, parent)
        return await self._publish(
            session, None, options or AgentOptions(), parent, setup, "startup"
        )

    async def resume(
        self,
        session_id: str,
        *,
        options: AgentOptions | None = None,
        parent: Agent | None = None,
        setup: Setup | None = None,
    ) -> AgentHandle:
        """Load a persisted session (crash-repaired) and publish an agent on it.

        Raises:
            PersistenceNotConfiguredError: the runtime has no persistence.
            SessionNotFoundError: nothing is persisted under ``session_id``.
            SessionCorruptError, SessionFormatError, SessionLockedError: see the message.
        """
        persistence = self._runtime.persistence
        if persistence is None:
            raise PersistenceNotConfiguredError(
                f'cannot resume "{session_id}": session persistence is not configured (open_runtime(persistence=...))'
            )
        self._check_free(SessionId(session_id), parent)
        session, writer = await load_session(persistence, session_id)
        return await self._publish(
            session, writer, options or AgentOptions(), parent, setup, "resume"
        )

    @asynccontextmanager
    async def open(
        self, session_id: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Agent]:
        """``create(...)`` as an async context manager that disposes the agent on exit."""
        handle = await self.create(session_id, **kwargs)
        try:
            yield handle.agent
        finally:
            with trio.CancelScope(shield=True):
                await handle.dispose()  # noqa: ASYNC102  # disposal cancels every activity first, so it ends; it must end before we leave

    @asynccontextmanager
    async def open_resumed(
        self, session_id: str, **kwargs: Any
    ) -> AsyncIterator[Agent]:
        """``resume(...)`` as an async context manager that disposes the agent on exit."""
        handle = await self.resume(session_id, **kwargs)
        try:
            yield handle.agent
        finally:
            with trio.CancelScope(shield=True):
                await handle.dispose()  # noqa: ASYNC102  # disposal cancels every activity first, so it ends; it must end before we leave

    def _check_free(self, session_id: SessionId, parent: Agent | None) -> None:
        if session_id in self._entries:
            raise AgentExistsError(f'agent "{session_id}" is already live')
        if parent is not None and (parent.disposed or self._entry_of(parent) is None):
            raise AgentDisposedError(
                f'parent agent "{parent.id}" is not live in this runtime'
            )

    async def _publish(
        self,
        session: Session,
        writer: SessionWriter | None,
        options: AgentOptions,
        parent: Agent | None,
        setup: Setup | None,
        source: CreationSource,
    ) -> AgentHandle:
        runtime = self._runtime
        self._check_free(session.id, parent)
        agent = Agent(session=session, options=options, services=runtime._services)
        handle = AgentHandle(agent, self)
        entry = _Entry(agent, handle, parent)
        self._entries[session.id] = entry
        persistence = runtime.persistence

        async def initialize(signal: CancelSignal) -> None:
            try:
                if setup is not None:
                    commit = await setup(agent.scope, agent)
                    if commit is not None:
                        commit()
                if persistence is not None:
                    entry.recorder = await _start_recording(
                        persistence, session, writer, runtime._spawn
                    )
                if source == "resume":
                    session.append("session/end-seed", EndSeed())
                runtime.sessions._add(session)
                entry.announced = True
                await runtime.events.serial(
                    "agent/created", AgentCreated(agent, source, signal), scope=agent
                )
            except BaseException:
                # Queued input must not start a turn on an agent that is being rolled back.
                agent.cancel(DisposedCancel(), keep_inbox=True)
                raise

        try:
            try:
                await agent.run_maintenance(initialize)
            finally:
                publishing, entry.publishing = entry.publishing, None
                if publishing is not None:
                    publishing.set()
        except BaseException:
            if writer is not None and entry.recorder is None:
                with trio.CancelScope(shield=True):
                    await writer.close()  # noqa: ASYNC102  # closing a file is bounded
            try:
                with trio.CancelScope(shield=True):
                    await handle.dispose()  # noqa: ASYNC102  # disposal cancels every activity first, so it ends; it must end before we leave
            except Exception as exc:
                logger.warning(
                    "agent %s: rollback after failed creation also failed: %r",
                    session.id,
                    exc,
                )
            raise
        return handle


async def _start_recording(  # private; a resumed writer may have nothing left to write
    persistence: _Persistence,
    session: Session,
    writer: SessionWriter | None,
    spawn: Callable[..., None],
) -> SessionRecorder:
    if writer is None:
        writer = await persistence.create(session.header)
    while writer.durable_seq < session.next_seq:
        await writer.append(session.events[writer.durable_seq :], sync=True)
    # No checkpoint between the check above and subscribing: nothing can slip past.
    return SessionRecorder(  # noqa: ASYNC910
        session, writer, durability=persistence.durability, spawn=spawn
    )


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
        self._nursery.start_soon(fn, *args)

    async def _aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        errors: list[Exception] = []

        async def dispose(  # noqa: ASYNC910
            handle: AgentHandle,
        ) -> None:  # dispose() always waits on an event
            try:
                await handle.dispose()
            except Exception as exc:
                errors.append(exc)

        while self.agents._entries:
            roots = [
                e.handle
                for e in self.agents._entries.values()
                if e.owner is None or e.owner.disposed
            ]
            if not roots:  # pragma: no cover - every live chain has a root
                roots = [e.handle for e in self.agents._entries.values()]
            async with trio.open_nursery() as nursery:
                for handle in roots:
                    nursery.start_soon(dispose, handle)
        if errors:
            raise ExceptionGroup("disposing the runtime's agents failed", errors)


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
    waits for every drain, also when the block raised; nothing keeps running.

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
        finally:
            with trio.CancelScope(shield=True):
                await runtime._aclose()


def _make_tool_executor(tools: Sequence[Tool], max_parallel: int) -> ToolRegistry:
    registry = ToolRegistry(max_parallel_tool_calls=max_parallel)
    for t in tools:
        registry.register(t)
    return registry
