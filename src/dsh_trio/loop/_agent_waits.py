"""How an agent follows ``run``/``stream`` messages to their turn's end.

Functions of :class:`Agent` (bound as its private methods): the waits of
``run``/``stream`` and the inbox/session notifications that settle them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

import trio

from ..errors import TurnFailedError
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
    user_message,
)
from ._agent_work import _LIVE, _SEALED
from ._payloads import (
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    SessionEventAppended,
)
from ._phase import Idle, Running
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
            agent._abandon(watch)
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
