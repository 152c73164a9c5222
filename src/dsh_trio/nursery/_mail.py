"""Mail to sessions through the PostgreSQL store: posting, delivery, waiting for a turn.

Posting stores a row and notifies (:meth:`PostgresPersistence.post_mail`).
Delivery is done by the process whose live agent holds the session's lease: the
mail is applied to the agent (``followup``, ``steer`` or ``cancel``) and its row is
deleted in the transaction that writes the inbox splice it caused
(:meth:`PostgresWriter.ack_mail`), so it is delivered exactly once; a mail that
caused no event (a cancel of an idle agent with an empty inbox) is deleted in a
transaction of its own under the same lease. Waiting reads the session's log as
it grows, woken by the turn-end notifications, and polls.

Every runtime on the PostgreSQL store delivers the mail of its own live agents,
whether or not it runs ``serve``: while it holds at least one, its courier
(:meth:`MailRoom.start_courier`) delivers on every mail notification for one of
them and, whatever is heard, looks every ``poll_s``. While ``serve`` runs in the
runtime the fleet delivers instead, and the courier only waits.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import trio

from ..errors import (
    AgentDisposedError,
    DshError,
    PersistenceNotConfiguredError,
    TurnFailedError,
)
from ..loop import Agent, TurnResult
from ..persistence.postgres import (
    MAIL_CHANNEL,
    TURN_CHANNEL,
    Mail,
    PostgresPersistence,
)
from ..values import CancelCause, SessionId, UserMessage, structure, to_json
from ._turn_log import ClaimTracker

if TYPE_CHECKING:
    from ..persistence import SessionPersistence
    from ._registry import AgentRegistry

__all__ = ["MailRoom", "decode_cancel", "encode_cancel", "pg_store"]

logger = logging.getLogger("dsh_trio")


def pg_store(persistence: SessionPersistence | None, what: str) -> PostgresPersistence:
    """The runtime's store if it is the PostgreSQL one.

    Raises:
        PersistenceNotConfiguredError: the runtime has no persistence or another kind.
    """
    if isinstance(persistence, PostgresPersistence):
        return persistence
    has = "none" if persistence is None else type(persistence).__name__
    raise PersistenceNotConfiguredError(
        f"{what} needs the PostgreSQL session store "
        f"(open_runtime(persistence=PostgresPersistence(dsn))); this runtime's "
        f"persistence is {has}"
    )


def encode_cancel(cause: CancelCause, keep_inbox: bool) -> str:
    """The JSON body of a cancel mail."""
    return json.dumps({"cause": to_json(cause), "keepInbox": keep_inbox})


def decode_cancel(body: str) -> tuple[CancelCause, bool]:
    """The cause and ``keep_inbox`` of a cancel mail's body."""
    raw = json.loads(body)
    return structure(raw["cause"], CancelCause), bool(raw.get("keepInbox", False))


@attrs.define(eq=False)
class _Box:
    """What this process knows of one live session's mail."""

    lock: trio.Lock = attrs.field(factory=trio.Lock)
    delivered: int = 0  # the highest mail row id applied to the agent
    closing: bool = False  # being passivated: deliver nothing more
    applied: int = 0  # how many mails were applied (a worker's activity count)


@attrs.define(eq=False)
class MailRoom:
    """Delivers mail into the live agents of one runtime on the PostgreSQL store."""

    registry: AgentRegistry
    store: PostgresPersistence
    #: How many ``serve`` calls run in the runtime (they deliver; the courier waits).
    serving: int = attrs.field(init=False, default=0)
    _boxes: dict[SessionId, _Box] = attrs.field(init=False, factory=dict)
    _courier: bool = attrs.field(init=False, default=False)
    _wake: trio.Event = attrs.field(init=False, factory=trio.Event)
    _heard: set[str] = attrs.field(init=False, factory=set)

    def forget(self, session_id: str) -> None:
        """The agent of ``session_id`` left: its delivery state goes (synchronous)."""
        self._boxes.pop(SessionId(session_id), None)
        self._wake.set()  # the courier stops once no agent is left

    def nudge(self) -> None:
        """Let the courier look again now (a ``serve`` ended). Synchronous."""
        self._wake.set()

    def start_courier(self, spawn: Callable[..., None]) -> None:
        """Start the courier with ``spawn`` unless it runs (synchronous).

        The courier delivers the mail of this runtime's live agents as it is
        posted (on each notification, and looking every ``poll_s``) until no
        agent is left; while a ``serve`` runs here it only waits.
        """
        if self._courier:
            # The running courier sees the new agent: the registry lists it
            # before ``agent/created``, which starts this.
            return
        self._courier = True
        spawn(self._carry, name="dsh_trio mail courier")

    def _live(self) -> list[str]:
        registry = self.registry
        return [a.id for a in registry.list() if registry.pg_writer(a.id) is not None]

    async def _carry(self) -> None:
        store = self.store

        def hear(channel: str, session_id: str) -> None:
            if channel == MAIL_CHANNEL and not self.serving:  # else serve delivers
                self._heard.add(session_id)
                self._wake.set()

        unsubscribe = store.subscribe(hear)
        polled = -math.inf
        try:
            while True:
                live = self._live()
                if not live:
                    # No checkpoint since the look: no agent can slip in unserved.
                    return  # noqa: ASYNC910  # a task of its own
                self._wake = trio.Event()
                heard, self._heard = self._heard, set()
                due: set[str] = set()
                if not self.serving:
                    due = heard.intersection(live)
                    if trio.current_time() - polled >= store.poll_s:
                        polled = trio.current_time()
                        try:
                            due |= await store.sessions_with_mail(live)
                        except Exception as exc:  # the next look retries
                            logger.warning("looking for mail failed: %s", exc)
                if due:
                    async with trio.open_nursery() as nursery:
                        for session_id in sorted(due):
                            nursery.start_soon(self._deliver_quietly, session_id)
                # While a serve delivers, only a wake (an agent gone, the serve
                # ended) makes the courier look again.
                with trio.move_on_at(
                    math.inf if self.serving else polled + store.poll_s
                ):
                    await self._wake.wait()
        finally:
            unsubscribe()
            self._courier = False

    async def _deliver_quietly(self, session_id: str) -> None:  # noqa: ASYNC910  # a task of its own; deliver checkpoints
        try:
            await self.deliver(session_id)
        except Exception as exc:  # the mail stays stored; the next look retries
            logger.warning(
                'session "%s": delivering its mail failed: %s', session_id, exc
            )

    def box(self, session_id: str) -> _Box:
        """The delivery state of ``session_id`` (made on first use)."""
        sid = SessionId(session_id)
        box = self._boxes.get(sid)
        if box is None:
            box = self._boxes[sid] = _Box()
        return box

    async def deliver(self, session_id: str) -> int:
        """Apply the undelivered mail of ``session_id`` to its live agent here, in order.

        Does nothing (returns 0) when the agent is not live in this runtime, is
        being passivated, or does not write to this store. Returns how many mails
        were applied.

        Raises:
            ConnectionError: the server failed (undelivered mail stays stored).
        """
        agent = self.registry.get(session_id)
        writer = self.registry.pg_writer(session_id)
        if agent is None or writer is None:
            await trio.lowlevel.checkpoint()
            return 0
        box = self.box(session_id)
        if box.closing:
            await trio.lowlevel.checkpoint()
            return 0
        async with box.lock:
            mails = await self.store.read_mail(session_id, box.delivered)
            if self._gone(session_id, agent, box):
                return 0
            settle: list[int] = []
            applied = 0
            for mail in mails:
                before = agent.session.next_seq
                try:
                    _apply(agent, mail)
                except (AgentDisposedError, OSError) as exc:
                    # Disposed, or its log is not being written: the mail stays
                    # stored for whoever holds the session next.
                    logger.warning(
                        'session "%s": mail %d stays undelivered: %s',
                        session_id,
                        mail.id,
                        exc,
                    )
                    break
                except (DshError, ValueError, TypeError, KeyError) as exc:
                    logger.warning(
                        'session "%s": mail %d was refused and dropped: %s',
                        session_id,
                        mail.id,
                        exc,
                    )
                    settle.append(mail.id)
                else:
                    applied += 1
                    box.applied += 1
                    if agent.session.next_seq > before:
                        writer.ack_mail(before, mail.id)
                    else:
                        settle.append(mail.id)
                box.delivered = mail.id
            if settle:
                # After what the earlier mail wrote, so a crash never reorders them.
                try:
                    await agent.flush()
                    await writer.settle_mail(settle)
                except OSError as exc:  # a later holder delivers them again
                    logger.warning(
                        'session "%s": delivered mail %s could not be settled: %s',
                        session_id,
                        settle,
                        exc,
                    )
            return applied

    def _gone(self, session_id: str, agent: Agent, box: _Box) -> bool:
        """Whether delivery to ``agent`` must stop (disposed, or being passivated)."""
        return (
            self.registry.get(session_id) is not agent
            or box.closing
            or self._boxes.get(SessionId(session_id)) is not box
        )

    async def wait(
        self, session_id: str, message_id: str, *, check: bool
    ) -> TurnResult:
        """The result of the turn that claimed ``message_id`` in ``session_id``, once it ended."""
        store = self.store
        tracker = ClaimTracker(message_id)
        heard = trio.Event()
        holder = [heard]

        def hear(channel: str, sid: str) -> None:
            if channel == TURN_CHANNEL and sid == session_id:
                holder[0].set()

        unsubscribe = store.subscribe(hear)
        try:
            await store.listening()
            while True:
                holder[0] = trio.Event()
                tracker.feed(await store.read_from(session_id, tracker.next_seq))
                if tracker.result is not None:
                    break
                with trio.move_on_after(store.poll_s):
                    await holder[0].wait()
        finally:
            unsubscribe()
        result = tracker.result
        if check and result.failed:
            raise TurnFailedError(result, agent_id=session_id)
        return result


def _apply(agent: Agent, mail: Mail) -> None:
    if mail.kind == "cancel":
        cause, keep = decode_cancel(mail.body)
        agent.cancel(cause, keep_inbox=keep)
        return
    message: UserMessage = structure(json.loads(mail.body), UserMessage)
    if mail.kind == "steer":
        agent.steer(message)
    else:
        agent.followup(message)
