"""How an agent follows ``run``/``stream`` messages to their turn's end.

Functions of :class:`Agent` (bound as its private methods): the waits of
``run``/``stream`` and the inbox/session notifications that settle them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

import trio

from ..errors import AgentReentrancyError, TurnFailedError
from ..values import (
    Aborted,
    AgentStatus,
    DisposedCancel,
    Errored,
    LlmFailure,
    SessionEvent,
    TurnEnd,
    UserCancel,
    UserMessage,
)
from ._agent_work import _LIVE, _SEALED
from ._ids import user_message
from ._payloads import (
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    SessionEventAppended,
)
from ._phase import Idle, Maintenance, Running
from ._turns import TurnResult, TurnWatch, turn_result

if TYPE_CHECKING:
    from ._agent import Agent

logger = logging.getLogger("dsh_trio")


# ------------------------------------------------------------------ turn results


def queue_watched(agent: Agent, message: UserMessage, watch: TurnWatch) -> None:
    """Follow ``watch`` and queue ``message`` as a follow-up; unfollow if that raises."""
    agent._listen()  # the watch learns its turn's end from the session
    waits = agent._turn_waits
    # Copied on write: notifications iterate a list nobody changes under them.
    agent._turn_waits = [watch] if waits is None else [*waits, watch]
    try:
        agent.followup(message)
    except BaseException:
        agent._unwatch(watch)
        raise


def unwatch(agent: Agent, watch: TurnWatch) -> None:
    waits = agent._turn_waits
    if waits is not None and watch in waits:
        rest = [w for w in waits if w is not watch]
        agent._turn_waits = rest or None


async def turn_outcome(
    agent: Agent, watch: TurnWatch, *, check: bool, owned: bool = False
) -> TurnResult:
    """Wait until ``watch`` settles; its result (raised as a failure if ``check``).

    With ``owned`` (``run``), a cancelled wait abandons the turn and the watch
    ends with the wait; otherwise (a stream) its context does both.
    """
    try:
        while not watch.settled:
            if watch.closed:
                raise RuntimeError(
                    f'the stream of agent "{agent.id}" was closed before the turn '
                    f"of message {watch.message_id!r} ended"
                )
            if agent._look_after(watch):
                break
            await watch.lot.park()
    except BaseException:
        if owned:
            await wind_down(agent, watch)  # noqa: ASYNC102  # shielded inside; bounded: the turn's scope is cancelled
        raise
    finally:
        if owned:
            agent._unwatch(watch)
    # A schedule point that cannot lose the result: the turn has already ended.
    await trio.lowlevel.cancel_shielded_checkpoint()
    result = turn_result(agent.session, watch)
    if check and result.failed:
        raise TurnFailedError(result, agent_id=agent.id)
    return result


def look_after(agent: Agent, watch: TurnWatch) -> bool:
    """Settle a wait that no event will settle; re-wake a parked message.

    Returns whether ``watch`` is settled now.
    """
    if watch.turn is None:
        if agent._stage != _LIVE:
            # A disposing agent starts no more work: the message never runs.
            watch.gone = Aborted(DisposedCancel())
        elif isinstance(agent._phase, Idle) and agent.inbox._pending(watch.message_id):
            agent._wake_driver()
    elif watch.end is None:
        phase = agent._phase
        if not isinstance(phase, Running) or phase.turn != watch.turn:
            watch.gone = Errored(
                LlmFailure(
                    f'turn {watch.turn} of agent "{agent.id}" ended without a '
                    "turn/end record (its append failed)",
                    "UNKNOWN",
                )
            )
    return watch.settled


async def wind_down(agent: Agent, watch: TurnWatch) -> None:  # noqa: ASYNC910  # a turn that already ended leaves nothing to wait for
    """The waiter is gone: cancel its turn and wait, shielded, for its ``turn/end``.

    A message no turn has claimed yet is removed from the inbox instead, and there
    is nothing to wait for. The wait is bounded: the turn's scope is cancelled, so
    it ends at its next checkpoint (after whatever it shields). Once it returns the
    driver that ran the turn has let go of the agent. Does nothing (and does not
    checkpoint) if the turn has already ended.
    """
    agent._abandon(watch)
    if watch.turn is None:
        return  # noqa: ASYNC910  # removed from the inbox (or settled): no turn runs for it
    with trio.CancelScope(shield=True):
        while not watch.settled and not agent._look_after(watch):
            await watch.lot.park()


def refuse_reentry(agent: Agent, call: str) -> None:
    """Raise :class:`AgentReentrancyError` if the current task runs ``agent``'s activity.

    That is the agent's driver task (its turn, the turn's hooks) or a task it started
    (a tool body, say), or the task of its maintenance: waiting there for a turn of
    the same agent would wait forever. Never blocks.
    """
    phase = agent._phase
    if phase.__class__ is Running:
        driver = agent._driver
        owner = None if driver is None else driver._task
        where = "turn (one of its tools or hooks)"
    elif phase.__class__ is Maintenance:
        owner = phase.task
        where = "maintenance task (its setup, say)"
    else:
        return
    if owner is None:
        return
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    while task is not None:
        if task is owner:
            raise AgentReentrancyError(
                f'{call} of agent "{agent.id}" was called from inside that agent\'s '
                f"own {where}: it would wait for a turn that cannot start before "
                "the current one ends. Queue the message with agent.followup() "
                "instead, or await the agent from a task outside its turn"
            )
        nursery = task.parent_nursery
        task = None if nursery is None else nursery.parent_task


def abandon(agent: Agent, watch: TurnWatch) -> None:
    """The waiter is gone: cancel its turn, or drop its still-queued message."""
    if watch.settled:
        return
    if watch.turn is None:
        if agent._stage < _SEALED and agent.inbox._pending(watch.message_id):
            try:
                agent.inbox.remove(watch.message_id)
            except Exception:
                logger.warning(
                    "agent %s: could not remove message %r from the inbox",
                    agent.id,
                    watch.message_id,
                    exc_info=True,
                )
        return
    phase = agent._phase
    if isinstance(phase, Running) and phase.turn == watch.turn:
        phase.signal._cancel(UserCancel())


# ------------------------------------------------------------------ notifications
def inbox_inserted(agent: Agent, message: UserMessage) -> None:
    if "agent/inbox/inserted" in (bus := agent._services.bus).listened:
        bus.emit("agent/inbox/inserted", InboxInserted(agent, message), scope=agent)


def inbox_discarded(agent: Agent, message: UserMessage) -> None:
    waits = agent._turn_waits
    # Still pending: replaced in place under the same id, not discarded.
    if waits is not None and not agent.inbox._pending(message.id):
        for watch in waits:
            if (
                watch.turn is None
                and not watch.settled
                and watch.message_id == message.id
            ):
                watch.discarded()
    if "agent/inbox/discarded" in (bus := agent._services.bus).listened:
        bus.emit("agent/inbox/discarded", InboxDiscarded(agent, message), scope=agent)


def inbox_claimed(agent: Agent, message: UserMessage, turn: int) -> None:
    waits = agent._turn_waits
    if waits is not None:
        for watch in waits:
            if (
                watch.turn is None
                and not watch.settled
                and watch.message_id == message.id
            ):
                watch.claimed(turn, agent.session)
    if "agent/inbox/claimed" in (bus := agent._services.bus).listened:
        bus.emit("agent/inbox/claimed", InboxClaimed(agent, message, turn), scope=agent)


def on_session_event(agent: Agent, event: SessionEvent) -> None:
    waits = agent._turn_waits
    if waits is not None and event.type == "turn/end":
        data = event.data
        if isinstance(data, TurnEnd):
            for watch in waits:
                if watch.turn == data.turn and watch.end is None:
                    watch.ended(data, event.seq)
    if "session/event" in (bus := agent._services.bus).listened:
        bus.emit(
            "session/event", SessionEventAppended(agent.session, event), scope=agent
        )


def emit_status(agent: Agent, status: AgentStatus) -> None:
    if "agent/status" in (bus := agent._services.bus).listened:
        bus.emit("agent/status", AgentStatusChanged(agent, status), scope=agent)


def as_message(message: UserMessage | str) -> UserMessage:
    """``run``/``stream`` take plain text for ``user_message(text)``."""
    if isinstance(message, str):
        return user_message(message)
    given = cast("object", message)  # callers without type checks pass anything
    if not isinstance(given, UserMessage):
        raise TypeError(
            f"run() and stream() take a UserMessage or a str, got {type(given).__name__}"
        )
    return given
