"""``runtime.serve``: a worker of a fleet that serves the sessions of a PostgreSQL store.

A worker claims sessions that have mail and whose lease is free or expired
(:meth:`PostgresPersistence.claim_mail`: their oldest mail rows locked ``FOR
UPDATE SKIP LOCKED`` and their leases taken in one transaction), activates each
(resume with crash repair, or create from the worker's options for a session not
stored yet), delivers its mail and lets its turns run. An agent idle for
``passivate_after_s`` with nothing pending is passivated: flushed, disposed, its
lease released; its next mail activates it again, here or on another worker. A
worker that dies loses nothing: once its leases expire, other workers claim its
sessions, whose resume closes the turn it left open, and deliver their mail.

Wake-ups come from the store's notifications (mail posted) and, whatever is
heard, from polling every ``poll_s``: a lost notification only delays.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

import attrs
import trio

from ..loop import Agent, AgentActivated, AgentPassivated
from ..persistence.postgres import MAIL_CHANNEL
from ..values import AgentOptions, AgentStatus
from ._turn_log import lost_claims

if TYPE_CHECKING:
    from ..persistence.postgres import PostgresPersistence
    from ._handle import AgentHandle
    from ._mail import MailRoom
    from ._runtime import Runtime

__all__ = ["serve"]

logger = logging.getLogger("dsh_trio")

#: The most sessions one claim takes at once.
_CLAIM_BATCH = 64


async def serve(  # noqa: ASYNC128  # _Fleet.run calls task_status.started()
    runtime: Runtime,
    room: MailRoom,
    *,
    options: AgentOptions | None,
    max_active: int,
    passivate_after_s: float,
    task_status: trio.TaskStatus[None],
) -> NoReturn:
    """The body of :meth:`Runtime.serve` (its arguments checked)."""
    fleet = _Fleet(
        runtime,
        room.store,
        room,
        options or AgentOptions(),
        max_active,
        passivate_after_s,
    )
    await fleet.run(task_status)
    raise AssertionError("unreachable")  # pragma: no cover


@attrs.define(eq=False)
class _Fleet:
    runtime: Runtime
    store: PostgresPersistence
    room: MailRoom
    options: AgentOptions
    max_active: int
    passivate_after_s: float
    active: dict[str, AgentHandle] = attrs.field(factory=dict)
    activating: int = 0
    broken: set[str] = attrs.field(factory=set)  # failed to activate: not claimed again
    wake: trio.Event = attrs.field(factory=trio.Event)
    queued: set[str] = attrs.field(factory=set)  # deliveries started, not yet begun
    nursery: trio.Nursery | None = None

    async def run(  # noqa: ASYNC114  # started through Runtime.serve only
        self, task_status: trio.TaskStatus[None]
    ) -> None:
        unsubscribe = self.store.subscribe(self._heard)
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                await self.store.listening()
                task_status.started()
                while True:
                    self.wake = trio.Event()
                    await self._round()
                    with trio.move_on_after(self.store.poll_s):
                        await self.wake.wait()
        finally:
            unsubscribe()

    def _heard(self, channel: str, session_id: str) -> None:
        if channel != MAIL_CHANNEL:
            return
        if session_id in self.active or self.runtime.agents.get(session_id):
            self._deliver_soon(session_id)
        else:
            self.wake.set()

    def _deliver_soon(self, session_id: str) -> None:
        if session_id in self.queued or self.nursery is None:
            return
        self.queued.add(session_id)
        self.nursery.start_soon(self._deliver, session_id)

    async def _deliver(self, session_id: str) -> None:  # noqa: ASYNC910  # private: a task of its own, or the tail of _activate
        self.queued.discard(session_id)
        try:
            await self.room.deliver(session_id)
        except Exception as exc:  # the mail stays stored; the next round retries
            logger.warning(
                'session "%s": delivering its mail failed: %s', session_id, exc
            )

    async def _round(self) -> None:  # noqa: ASYNC910  # private: its caller waits a poll period after it
        """Deliver to live sessions with mail, then claim sessions while there is room."""
        live = [agent.id for agent in self.runtime.agents.list()]
        try:
            for sid in await self.store.sessions_with_mail(live):
                self._deliver_soon(sid)
            room = self.max_active - len(self.active) - self.activating
            if room <= 0:
                return
            claimed = await self.store.claim_mail(
                min(room, _CLAIM_BATCH), skip=[*live, *self.broken]
            )
        except Exception as exc:  # the next round retries
            logger.warning("claiming sessions with mail failed: %s", exc)
            return  # noqa: ASYNC910  # private: its caller waits a poll period after it
        assert self.nursery is not None
        for sid, stored in claimed:
            self.activating += 1
            self.nursery.start_soon(self._activate, sid, stored)
        if len(claimed) == min(room, _CLAIM_BATCH):
            self.wake.set()  # there may be more

    async def _activate(self, session_id: str, stored: bool) -> None:
        agents = self.runtime.agents
        try:
            try:
                if stored:
                    handle = await agents.resume(session_id, options=self.options)
                else:
                    handle = await agents.create(session_id, options=self.options)
            except Exception as exc:
                self.broken.add(session_id)
                logger.error(
                    'session "%s" has mail but could not be activated (it is left to '
                    "other workers): %s",
                    session_id,
                    exc,
                )
                await self.store.release_claim(session_id)
                return
        finally:
            self.activating -= 1
        agent = handle.agent
        self.active[session_id] = handle
        self.runtime.events.emit("agent/activated", AgentActivated(agent), scope=None)
        if stored:
            try:
                _requeue(self.runtime, agent)
            except (
                Exception
            ) as exc:  # its log is not being written: passivation retries
                logger.warning(
                    'session "%s": re-queueing after repair failed: %s', session_id, exc
                )
        assert self.nursery is not None
        self.nursery.start_soon(self._keep, session_id, handle)
        await self._deliver(session_id)

    async def _keep(self, session_id: str, handle: AgentHandle) -> None:
        """Passivate the agent once it has been idle ``passivate_after_s`` with nothing pending."""
        agent = handle.agent
        box = self.room.box(session_id)
        try:
            while True:
                await agent.when_idle()
                if self.runtime.agents.get(session_id) is not agent:
                    return  # disposed by someone else
                seen = box.applied
                await trio.sleep(self.passivate_after_s)
                async with box.lock:
                    if (
                        box.applied != seen
                        or agent.status != AgentStatus.IDLE
                        or agent.inbox.has_pending
                    ):
                        continue
                    box.closing = True
                break
            await self._passivate(session_id, handle)
        finally:
            if self.active.get(session_id) is handle:
                del self.active[session_id]
            self.wake.set()  # its mail (and room for others) wait for a claim

    async def _passivate(self, session_id: str, handle: AgentHandle) -> None:  # noqa: ASYNC910  # private: dispose() always waits
        agent = handle.agent
        try:
            await agent.flush()
        except Exception as exc:
            logger.warning(
                'session "%s": flushing before passivation failed: %s', session_id, exc
            )
        try:
            await handle.dispose()
        except Exception as exc:
            logger.warning(
                'session "%s": disposing on passivation failed: %s', session_id, exc
            )
        self.runtime.events.emit("agent/passivated", AgentPassivated(agent), scope=None)


def _requeue(runtime: Runtime, agent: Agent) -> None:
    """Queue again what a crash cut off between its claim and its history; wake parked input.

    A resumed agent does not start a turn by itself: messages delivered before the
    crash and still pending get theirs now, after the lost ones.
    """
    for message in lost_claims(agent.session.events):
        agent.followup(message)
    if agent.inbox.has_pending:
        runtime.agents.wake(agent.id)
