"""The agent registry: the table of live agents, their creation and disposal.

The creation path itself (setup, recording, publication) is
:class:`~dsh_trio.nursery._creation.AgentCreation`'s.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio

from ..composition import logged_preset
from ..errors import (
    AgentDisposedError,
    DshError,
    PersistenceNotConfiguredError,
)
from ..events import AgentDisposed
from ..loop import Agent, AgentWork
from ..persistence import load_session
from ..persistence.postgres import PostgresWriter
from ..session import Session
from ..values import (
    AgentOptions,
    DisposedCancel,
    SessionEvent,
    SessionHeader,
    SessionId,
    now_ms,
)
from ._collector import RuntimeCollector
from ._creation import AgentCreation, Setup, _Entry
from ._declared import DeclaredStarts
from ._handle import AgentHandle, _Disposal, disposing
from ._header import header_fields

if TYPE_CHECKING:
    from ..composition import DeclaredAgent, PresetRegistry
    from ..events import EventBus
    from ..loop import AgentServices
    from ..persistence import SessionPersistence

__all__ = ["AgentExistsError", "AgentHandle", "AgentRegistry"]


class AgentExistsError(DshError, ValueError):
    """An agent with this session id is already live (or being created)."""


class AgentRegistry:
    """The live agents of a runtime, and the way to create and resume them.

    Made by the runtime with what its agents share; it owns the table of live
    agents and of their sessions (``runtime.sessions`` reads the latter).
    """

    def __init__(
        self,
        services: AgentServices,
        persistence: SessionPersistence | None,
        presets: PresetRegistry,
        sessions: dict[SessionId, Session],
        collector: RuntimeCollector | None = None,
    ) -> None:
        self._services = services
        self._bus: EventBus = services.bus
        self._persistence = persistence
        self._presets = presets
        self._sessions = sessions
        self._entries: dict[SessionId, _Entry] = {}
        # Told the live count as it changes: many agents raise the thresholds.
        self._collector = collector if collector is not None else RuntimeCollector()
        self._starts = DeclaredStarts(
            self, spawn=services.spawn, bus=self._bus, persistence=persistence
        )
        self._creation = AgentCreation(
            registry=self,
            services=services,
            persistence=persistence,
            presets=presets,
            sessions=sessions,
            check_free=self._check_free,
            register=self._register,
            published=self._starts.changed,
        )
        # Agents relay their session's appends only once someone listens for them.
        self._bus._watch("session/event", self._follow_sessions)

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

    def pg_writer(self, session_id: str) -> PostgresWriter | None:
        """The PostgreSQL writer of the live agent ``session_id``, if it writes to one.

        Runtime use only (mail delivery acknowledges through it).
        """
        entry = self._entries.get(SessionId(session_id))
        if entry is None or entry.recorder is None:
            return None
        writer = entry.recorder.writer
        return writer if isinstance(writer, PostgresWriter) else None

    def wake(self, session_id: str) -> None:
        """Start a turn for the pending input of the idle agent ``session_id``.

        Runtime use only: a worker activating a resumed session whose inbox still
        holds messages (a resumed agent starts no turn by itself). Does nothing
        for an agent that is not live or not idle. Synchronous.
        """
        entry = self._entries.get(SessionId(session_id))
        if entry is not None and entry.published and entry.agent.inbox.has_pending:
            entry.work.wake()

    def published_handle(self, session_id: SessionId) -> AgentHandle | None:
        """The handle of ``session_id`` once its creation completed, else ``None``.

        Runtime use only (declared starts and preset bindings ask it).
        """
        entry = self._entries.get(session_id)
        return entry.handle if entry is not None and entry.published else None

    async def wait_for(self, session_id: str) -> AgentHandle:
        """Wait until the agent ``session_id`` is published; return its handle.

        Blocks until an agent with this id has completed creation (at once if it
        is live): an agent still in ``setup`` or ``agent/created``, or being rolled
        back after either failed, is never returned. For a declared agent
        (``open_runtime(config=...)``) whose start failed, raises instead of
        waiting, to every waiter, whenever it began. Cancelling the wait changes
        nothing.

        Raises:
            AgentStartError: ``session_id`` is a declared agent that failed to start
                (``.error`` is why).
        """
        return await self._starts.wait_for(session_id)

    def _entry_of(self, agent: Agent) -> _Entry | None:
        entry = self._entries.get(agent.id)
        return entry if entry is not None and entry.agent is agent else None

    def _children_of(self, agent: Agent) -> builtins.list[AgentHandle]:
        return [e.handle for e in self._entries.values() if e.owner is agent]

    def owner_of(self, agent: object) -> Agent | None:
        """The owning parent of the live agent ``agent`` (``None``: a root, or no
        live agent). Runtime use only: the event bus's scope parents."""
        if not isinstance(agent, Agent):
            return None
        entry = self._entry_of(agent)
        return entry.owner if entry is not None else None

    def _follow_sessions(self) -> None:
        """A ``session/event`` listener was registered: every agent relays its appends."""
        for entry in builtins.list(self._entries.values()):
            entry.work.listen()

    def _remove(self, agent: Agent) -> None:
        entry = self._entries.get(agent.id)
        if entry is not None and entry.agent is agent:
            del self._entries[agent.id]
            self._bus._owners_changed()  # its owner is gone from the bus
            self._collector.removed(len(self._entries))

    def _register(self, entry: _Entry) -> None:
        self._entries[entry.work.session.id] = entry
        self._bus._owners_changed()  # the bus now sees its owner
        self._collector.added(len(self._entries))

    def _forget_session(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]

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
        preset: str | None = None,
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
            preset: the preset a root agent binds to (``None``: the default preset,
                if any is registered); a child joins its parent's generation. The
                header records it as ``agentPreset``.

        Raises:
            AgentExistsError: the id is live.
            PresetError, PresetNotFoundError: the preset is broken or unknown.
            AgentDisposedError: ``parent`` is disposed.
            InvalidSessionIdError: the id is not usable.
        """
        fields = header_fields(session_id, meta)
        plan = self._presets.plan(preset, parent)
        if plan is not None:
            fields.setdefault("agent_preset", plan.preset_id)
        header = SessionHeader(
            created_at=now_ms(), is_seeded=seed is not None, **fields
        )
        session = Session.create(
            header.id,
            header=header,
            seed=seed,
            inherited=inherited_event_count is not None,
        )
        self._check_free(session.id, parent)
        return await self._creation.publish(
            session, None, options or AgentOptions(), parent, setup, "startup", plan
        )

    async def resume(
        self,
        session_id: str,
        *,
        options: AgentOptions | None = None,
        parent: Agent | None = None,
        setup: Setup | None = None,
        preset: str | None = None,
    ) -> AgentHandle:
        """Load a persisted session (crash-repaired) and publish an agent on it.

        The agent binds to ``preset`` if given, else to the preset its log last
        selected (the last ``agent-preset/selected``, else the header's
        ``agentPreset``), else to the default; a child joins its parent's generation.

        Raises:
            PersistenceNotConfiguredError: the runtime has no persistence.
            SessionNotFoundError: nothing is persisted under ``session_id``.
            SessionCorruptError, SessionFormatError, SessionLockedError: see the message.
        """
        persistence = self._persistence
        if persistence is None:
            raise PersistenceNotConfiguredError(
                f'cannot resume "{session_id}": session persistence is not configured (open_runtime(persistence=...))'
            )
        self._check_free(SessionId(session_id), parent)
        session, writer = await load_session(persistence, session_id)
        try:
            plan = self._presets.plan(
                preset if preset is not None else logged_preset(session), parent
            )
        except BaseException:
            with trio.CancelScope(shield=True):
                await writer.close()  # noqa: ASYNC102  # closing a file is bounded
            raise
        # _publish owns the writer from here: it closes it if publication fails.
        return await self._creation.publish(
            session, writer, options or AgentOptions(), parent, setup, "resume", plan
        )

    @asynccontextmanager
    async def open(
        self, session_id: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Agent]:
        """``create(...)`` as an async context manager that disposes the agent on exit.

        If the block raises and the disposal fails too, both are raised together in
        one :class:`BaseExceptionGroup` (``except*`` on either matches).
        """
        handle = await self.create(session_id, **kwargs)
        async with disposing(handle) as agent:
            yield agent

    @asynccontextmanager
    async def open_resumed(
        self, session_id: str, **kwargs: Any
    ) -> AsyncIterator[Agent]:
        """``resume(...)`` as an async context manager that disposes the agent on exit.

        If the block raises and the disposal fails too, both are raised together in
        one :class:`BaseExceptionGroup` (``except*`` on either matches).
        """
        handle = await self.resume(session_id, **kwargs)
        async with disposing(handle) as agent:
            yield agent

    def _check_free(self, session_id: SessionId, parent: Agent | None) -> None:
        if session_id in self._entries:
            raise AgentExistsError(f'agent "{session_id}" is already live')
        if parent is not None and (parent.disposed or self._entry_of(parent) is None):
            raise AgentDisposedError(
                f'parent agent "{parent.id}" is not live in this runtime'
            )

    # ------------------------------------------------------------------ disposal

    def dispose_soon(self, work: AgentWork) -> _Disposal:
        """Start the teardown of ``work``'s agent in the runtime nursery.

        Runtime use only: :meth:`AgentHandle.dispose` starts it.

        Synchronous; call it once per agent (its handle does). The returned record's
        ``done`` is set once the teardown has completed.
        """
        disposal = _Disposal()
        self._services.spawn(self._teardown, work, disposal)
        return disposal

    async def _teardown(self, work: AgentWork, disposal: _Disposal) -> None:
        """Children first, then drain, close the recorder, unregister, announce.

        Shielded: it runs to completion even while the runtime is being cancelled.
        Failures are collected into ``disposal.errors``.
        """
        errors = disposal.errors
        agent = work.agent
        with trio.CancelScope(shield=True):
            entry = self._entry_of(agent)
            if entry is not None and entry.publishing is not None:
                # Creation still running: abort its setup/listeners, then wait for it.
                agent.cancel(DisposedCancel(), keep_inbox=True)
                await entry.publishing.wait()
            for child in self._children_of(agent):
                try:
                    await child.dispose()
                except Exception as exc:
                    errors.append(exc)
            errors.extend(await work.drain())
            if entry is not None and entry.recorder is not None:
                try:
                    await entry.recorder.aclose()
                except Exception as exc:
                    errors.append(exc)
            errors.extend(await self._presets.release(agent))
            self._remove(agent)
            if entry is not None and entry.announced:
                self._bus.emit("agent/disposed", AgentDisposed(agent), scope=agent)
            work.finish_dispose()
            self._forget_session(agent.session)
        disposal.done.set()

    def start_declared(
        self, agents: tuple[DeclaredAgent, ...], model: AgentOptions | None
    ) -> None:
        """Start each declared agent (``open_runtime(config=...)``) in its own task.

        Runtime use only. Synchronous; see :meth:`wait_for`.
        """
        self._starts.start(agents, model)

    async def aclose(self) -> None:
        """Stop the declared starts still running, then dispose every live agent.

        Runtime use only (the runtime is closing). Roots go first (each disposes its
        children); blocks until every teardown has completed.

        Raises:
            ExceptionGroup: the failures of the disposals that failed.
        """
        # Disposing every agent: the collector's setting is put back first.
        self._collector.close()
        await self._starts.aclose()
        await trio.lowlevel.checkpoint()
        errors: builtins.list[Exception] = []

        async def dispose(  # noqa: ASYNC910
            handle: AgentHandle,
        ) -> None:  # dispose() always waits on an event
            try:
                await handle.dispose()
            except Exception as exc:
                errors.append(exc)

        while self._entries:
            roots = [
                e.handle
                for e in self._entries.values()
                if e.owner is None or e.owner.disposed
            ]
            if not roots:  # pragma: no cover - every live chain has a root
                roots = [e.handle for e in self._entries.values()]
            async with trio.open_nursery() as nursery:
                for handle in roots:
                    nursery.start_soon(dispose, handle)
        if errors:
            raise ExceptionGroup("disposing the runtime's agents failed", errors)
