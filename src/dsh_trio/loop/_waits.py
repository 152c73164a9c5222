"""How an agent follows ``run``/``stream`` messages to their turn's end.

:class:`TurnWaits` holds the :class:`TurnWatch` of every message a ``run`` or ``stream``
caller follows, feeds them from the inbox notifications and the session's appends, and
relays those appends as ``session/event``. It asks the agent's :class:`AgentWork` what
the agent is doing; it never changes the agent's phase itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import trio

from ..errors import AgentReentrancyError, TurnFailedError
from ..values import (
    Aborted,
    DisposedCancel,
    Errored,
    LlmFailure,
    SessionEvent,
    TurnEnd,
    UserCancel,
    UserMessage,
)
from ._ids import user_message
from ._payloads import SessionEventAppended
from ._turns import TurnResult, TurnWatch, turn_result

if TYPE_CHECKING:
    from ._payloads import AssistantStream
    from ._work import AgentWork

__all__ = ["TurnWaits", "as_message"]

logger = logging.getLogger("dsh_trio")


class TurnWaits:
    """The messages ``run``/``stream`` follow to their turn's end, and the session relay.

    Runtime use only; one per agent, made by its :class:`AgentWork` on first use. While
    it listens, the agent's subscription to its session settles the watches (each
    ``turn/end``) and emits ``session/event``.
    """

    __slots__ = ("_unsubscribe", "_watches", "_work")

    def __init__(self, work: AgentWork) -> None:
        self._work = work
        # Copied on write: notifications iterate a list nobody changes under them.
        self._watches: list[TurnWatch] | None = None
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def following(self) -> bool:
        """Whether a ``run``/``stream`` caller follows a message now."""
        return self._watches is not None

    # ------------------------------------------------------------------ the session relay

    def listen(self) -> None:
        """Subscribe to the session's appends, ahead of every other subscriber. Idempotent."""
        if self._unsubscribe is None:
            session = self._work.session
            self._unsubscribe = session._subscribe_first(self.on_session_event)

    def stop(self) -> None:
        """Stop following the session (the agent is disposed)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def on_session_event(self, event: SessionEvent) -> None:
        """The session appended ``event``: settle the watches of its turn, relay it."""
        watches = self._watches
        if watches is not None and event.type == "turn/end":
            data = event.data
            if isinstance(data, TurnEnd):
                for watch in watches:
                    if watch.turn == data.turn and watch.end is None:
                        watch.ended(data, event.seq)
        work = self._work
        if "session/event" in (bus := work.services.bus).listened:
            bus.emit(
                "session/event",
                SessionEventAppended(work.session, event),
                scope=work.agent,
            )

    # ------------------------------------------------------------------ feeds

    def poke(self) -> None:
        """The agent went idle: every waiter looks again (a parked message, a lost end)."""
        watches = self._watches
        if watches is not None:
            for watch in watches:
                watch.poke()

    def hint(self, cause: Aborted | None) -> None:
        """While set, a followed message the inbox discards ends with ``cause``."""
        watches = self._watches
        if watches is not None:
            for watch in watches:
                watch.cancel_hint = cause

    def claimed(self, message: UserMessage, turn: int) -> None:
        """Turn ``turn`` claimed ``message``: its watch follows that turn now."""
        watches = self._watches
        if watches is not None:
            for watch in watches:
                if (
                    watch.turn is None
                    and not watch.settled
                    and watch.message_id == message.id
                ):
                    watch.claimed(turn, self._work.session)
                    if watch.output is not None:  # typed output: arm the turn
                        watch.output.turn = turn
                        self._work.turn_driver().arm_output(watch.output)

    def discarded(self, message: UserMessage) -> None:
        """The inbox discarded ``message``: a watch of it will see no turn."""
        watches = self._watches
        # Still pending: replaced in place under the same id, not discarded.
        if watches is not None and not self._work.inbox.holds(message.id):
            for watch in watches:
                if (
                    watch.turn is None
                    and not watch.settled
                    and watch.message_id == message.id
                ):
                    watch.discarded()

    # ------------------------------------------------------------------ following

    def follow(self, message: UserMessage, watch: TurnWatch) -> None:
        """Follow ``watch`` and queue ``message`` as a follow-up; unfollow if that raises."""
        work = self._work
        work.listen()  # the watch learns its turn's end from the session
        watches = self._watches
        self._watches = [watch] if watches is None else [*watches, watch]
        try:
            work.agent.followup(message)
        except BaseException:
            self.unfollow(watch)
            raise

    def unfollow(self, watch: TurnWatch) -> None:
        """Stop following ``watch``."""
        watches = self._watches
        if watches is not None and watch in watches:
            rest = [w for w in watches if w is not watch]
            self._watches = rest or None

    def watch_frames(self, watch: TurnWatch) -> Callable[[], None]:
        """Buffer the agent's live frames into ``watch``; returns the disposer."""
        agent = self._work.agent

        def on_frame(event: AssistantStream) -> None:
            if event.agent is agent:
                watch.frame(event)

        return self._work.services.bus.on(
            "agent/assistant-stream", on_frame, scope=agent
        )

    async def outcome(
        self, watch: TurnWatch, *, check: bool, owned: bool = False
    ) -> TurnResult:
        """Wait until ``watch`` settles; its result (raised as a failure if ``check``).

        With ``owned`` (``run``), a cancelled wait abandons the turn and the watch
        ends with the wait; otherwise (a stream) its context does both.
        """
        session = self._work.session
        try:
            while not watch.settled:
                if watch.closed:
                    raise RuntimeError(
                        f'the stream of agent "{session.id}" was closed before the turn '
                        f"of message {watch.message_id!r} ended"
                    )
                if self._look_after(watch):
                    break
                await watch.lot.park()
        except BaseException:
            if owned:
                await self.wind_down(watch)  # noqa: ASYNC102  # shielded inside; bounded: the turn's scope is cancelled
            raise
        finally:
            if owned:
                self.unfollow(watch)
        # A schedule point that cannot lose the result: the turn has already ended.
        await trio.lowlevel.cancel_shielded_checkpoint()
        result = turn_result(session, watch)
        if check and result.failed:
            raise TurnFailedError(result, agent_id=session.id)
        return result

    def _look_after(self, watch: TurnWatch) -> bool:
        """Settle a wait that no event will settle; re-wake a parked message.

        Returns whether ``watch`` is settled now.
        """
        work = self._work
        if watch.turn is None:
            if not work.live:
                # A disposing agent starts no more work: the message never runs.
                watch.gone = Aborted(DisposedCancel())
            elif work.idle and work.inbox.holds(watch.message_id):
                work.wake()
        elif watch.end is None and work.running_turn() != watch.turn:
            watch.gone = Errored(
                LlmFailure(
                    f'turn {watch.turn} of agent "{work.session.id}" ended without a '
                    "turn/end record (its append failed)",
                    "UNKNOWN",
                )
            )
        return watch.settled

    async def wind_down(self, watch: TurnWatch) -> None:  # noqa: ASYNC910  # a turn that already ended leaves nothing to wait for
        """The waiter is gone: cancel its turn and wait, shielded, for its ``turn/end``.

        A message no turn has claimed yet is removed from the inbox instead, and there
        is nothing to wait for. The wait is bounded: the turn's scope is cancelled, so
        it ends at its next checkpoint (after whatever it shields). Once it returns the
        driver that ran the turn has let go of the agent. Does nothing (and does not
        checkpoint) if the turn has already ended.
        """
        self._abandon(watch)
        if watch.turn is None:
            return  # noqa: ASYNC910  # removed from the inbox (or settled): no turn runs for it
        with trio.CancelScope(shield=True):
            while not watch.settled and not self._look_after(watch):
                await watch.lot.park()

    def _abandon(self, watch: TurnWatch) -> None:
        """The waiter is gone: cancel its turn, or drop its still-queued message."""
        if watch.settled:
            return
        work = self._work
        if watch.turn is None:
            inbox = work.inbox
            if work.takes_input and inbox.holds(watch.message_id):
                try:
                    inbox.remove(watch.message_id)
                except Exception:
                    logger.warning(
                        "agent %s: could not remove message %r from the inbox",
                        work.session.id,
                        watch.message_id,
                        exc_info=True,
                    )
            return
        work.cancel_turn(watch.turn, UserCancel())

    def refuse_reentry(self, call: str) -> None:
        """Raise :class:`AgentReentrancyError` if the current task runs the agent's activity.

        That is the agent's driver task (its turn, the turn's hooks) or a task it
        started (a tool body, say), or the task of its maintenance: waiting there for a
        turn of the same agent would wait forever. Never blocks.
        """
        owner, where = self._work.activity_task()
        if owner is None:
            return
        task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
        while task is not None:
            if task is owner:
                raise AgentReentrancyError(
                    f'{call} of agent "{self._work.session.id}" was called from inside '
                    f"that agent's own {where}: it would wait for a turn that cannot "
                    "start before the current one ends. Queue the message with "
                    "agent.followup() instead, or await the agent from a task outside "
                    "its turn"
                )
            nursery = task.parent_nursery
            task = None if nursery is None else nursery.parent_task


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
