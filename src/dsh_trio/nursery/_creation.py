"""Creating an agent: its registration, setup, recording and publication.

:class:`AgentCreation` owns the creation path the registry's ``create`` and
``resume`` share, from a built session to a published handle, and the rollback of
a creation that failed. The registry keeps the table it registers into.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from ..events import AgentCreated
from ..loop import Agent, AgentScope, AgentWork, CancelSignal
from ..persistence import SessionRecorder
from ..values import AgentOptions, DisposedCancel, EndSeed, SessionId
from ._handle import AgentHandle, start_recording

if TYPE_CHECKING:
    from ..composition import Generation, PresetRegistry
    from ..loop import AgentServices
    from ..persistence import SessionPersistence, SessionWriter
    from ..session import Session
    from ._registry import AgentRegistry

__all__ = ["AgentCreation", "CreationSource", "Setup"]

logger = logging.getLogger("dsh_trio")

Setup = Callable[[AgentScope, Agent], Awaitable[Callable[[], object] | None]]
CreationSource = Literal["startup", "resume"]


@attrs.define(eq=False, weakref_slot=False)
class _Entry:
    handle: AgentHandle
    work: AgentWork
    owner: Agent | None
    recorder: SessionRecorder | None = None
    announced: bool = False
    publishing: trio.Event | None = attrs.field(
        factory=trio.Event
    )  # None once creation ended, published or rolled back
    # Creation completed (``agent/created`` returned): only now may ``wait_for``
    # hand the agent out. A failed creation stays registered while it is rolled
    # back, announced and no longer publishing, but never published.
    published: bool = False

    @property
    def agent(self) -> Agent:
        """The registered agent (its handle's)."""
        return self.handle.agent


@attrs.define(eq=False, weakref_slot=False, kw_only=True)
class AgentCreation:
    """The creation of a registry's agents: build, register, set up, publish.

    Made by the registry with what its agents share and the registry's own steps:
    ``check_free`` refuses a live id or a dead parent, ``register`` enters an
    entry into the live table, ``published`` tells the waiters an agent was
    published.
    """

    _registry: AgentRegistry
    _services: AgentServices
    _persistence: SessionPersistence | None
    _presets: PresetRegistry
    _sessions: dict[SessionId, Session]
    _check_free: Callable[[SessionId, Agent | None], None]
    _register: Callable[[_Entry], None]
    _published: Callable[[], None]

    async def publish(
        self,
        session: Session,
        writer: SessionWriter | None,
        options: AgentOptions,
        parent: Agent | None,
        setup: Setup | None,
        source: CreationSource,
        plan: Generation | None = None,
    ) -> AgentHandle:
        """Register an agent on ``session``, run its creation task, publish it.

        ``writer`` (a resumed log's) is owned from here: it is closed if the
        creation fails. Any failure rolls everything back (the agent is disposed)
        and the original exception propagates.
        """
        try:
            self._check_free(session.id, parent)
            # Replays the inbox: a resumed log can still be refused here.
            work = AgentWork(session, self._services)
            agent = Agent(work, options)
        except BaseException:
            if writer is not None:
                with trio.CancelScope(shield=True):
                    await writer.close()  # noqa: ASYNC102  # closing a file is bounded
            raise
        handle = AgentHandle(work, self._registry)
        entry = _Entry(handle, work, parent)
        self._register(entry)
        if plan is not None:  # no checkpoint since the plan was made: it is still live
            self._presets.join(agent, plan)
        try:
            try:
                await agent.run_maintenance(
                    functools.partial(self._initialize, entry, writer, setup, source)
                )
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
        entry.published = True
        self._published()
        return handle

    async def _initialize(
        self,
        entry: _Entry,
        writer: SessionWriter | None,
        setup: Setup | None,
        source: CreationSource,
        signal: CancelSignal,
    ) -> None:
        """The creation task: setup, recording, then publication (``agent/created``)."""
        agent = entry.agent
        session = agent.session
        persistence = self._persistence
        try:
            if setup is not None:
                commit = await setup(agent.scope, agent)
                if commit is not None:
                    commit()
            if persistence is not None:
                entry.recorder = await start_recording(
                    persistence, entry.work, writer, self._services.spawn
                )
                entry.work.recording.attach(entry.recorder)
            if source == "resume" and (
                not session.events or session.events[-1].type != "session/end-seed"
            ):
                # One marker per resume boundary, as the reference: none when the
                # log already ends with one (resumed twice with no turn between).
                session.append("session/end-seed", EndSeed())
            self._sessions[session.id] = session
            entry.announced = True
            await self._services.bus.serial(
                "agent/created", AgentCreated(agent, source, signal), scope=agent
            )
        except BaseException:
            # Queued input must not start a turn on an agent that is being rolled back.
            agent.cancel(DisposedCancel(), keep_inbox=True)
            raise
