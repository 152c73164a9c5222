"""The agent: its input methods, its phase, and the lifetime of its activities."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from ..errors import (
    AgentBusyError,
    AgentCancelled,
    AgentDisposedError,
)
from ..values import (
    Aborted,
    AgentOptions,
    AgentStatus,
    CancelCause,
    DisposedCancel,
    InboxTarget,
    SessionId,
    UserMessage,
)
from ._agent_waits import (
    abandon,
    as_message,
    emit_status,
    inbox_claimed,
    inbox_discarded,
    inbox_inserted,
    look_after,
    on_session_event,
    queue_watched,
    refuse_reentry,
    turn_outcome,
    unwatch,
    wind_down,
)
from ._agent_work import (
    _DISPOSED,
    _DRAINING,
    _LIVE,
    _SEALED,
    SessionRecording,
    attach_recorder,
    drive,
    open_turn,
    persistence_failed,
    refusal,
    turn_driver,
    wait_written,
    wake_driver,
)
from ._driver import TurnDriver
from ._inbox import Inbox, coerce_target
from ._phase import Idle, Maintenance, Phase
from ._scope import AgentScope
from ._signal import CancelSignal
from ._turns import OpenTurnStream, TurnResult, TurnStream, TurnWatch

if TYPE_CHECKING:
    from ..session import Session
    from ._services import AgentServices

__all__ = ["Agent", "SessionRecording"]

T = TypeVar("T")


class Agent:
    """A live agent: a session, an inbox, and a driver that runs turns on demand.

    Created by the runtime (``runtime.agents.create`` / ``open`` / ``resume``); there
    is no public constructor. An idle agent holds no task: a waking input runs the
    turn's synchronous prefix inline (durable splice, ``running`` status,
    ``turn/start``, claim) and only then starts the driver task in the owning
    nursery. Every activity (each turn, each maintenance task) runs in its own
    :class:`trio.CancelScope`; :meth:`cancel` records the first cause and cancels it.

    All input methods are synchronous, never block and must be called from within
    the trio run that owns the agent.
    """

    __slots__ = (
        "__weakref__",
        "_driver",
        "_phase",
        "_recorder",
        "_services",
        "_stage",
        "_turn_waits",
        "_unsubscribe",
        "id",
        "inbox",
        "options",
        "scope",
        "session",
    )

    def __init__(
        self, *, session: Session, options: AgentOptions, services: AgentServices
    ) -> None:
        self.id: SessionId = session.id
        self.options = options
        self.session = session
        self._services = services
        self.scope = AgentScope(self, services)
        # ``check_alive=None``: the inbox asks this agent's ``_check_alive`` itself.
        self.inbox = Inbox(session, notify=self, check_alive=None)
        self._phase: Phase = Idle(last_turn=session.last_turn)
        # Made by the first turn: an agent that never ran stays small (W4).
        self._driver: TurnDriver | None = None
        self._stage = _LIVE
        # Writes the session's log; its ``fault`` refuses waking input.
        self._recorder: SessionRecording | None = None
        # The messages ``run``/``stream`` follow to their turn's end (None: none).
        self._turn_waits: list[TurnWatch] | None = None
        # The agent follows its session's appends only while something needs them
        # (a turn wait, a ``session/event`` listener): a relay call per append costs.
        self._unsubscribe: Callable[[], None] | None = None
        if "session/event" in services.bus.listened:
            self._listen()

    def __repr__(self) -> str:
        return f"<Agent {self.id!r} {self.status.value}>"

    # ------------------------------------------------------------------ reads

    @property
    def status(self) -> AgentStatus:
        """``RUNNING`` while a driver runs turns; ``IDLE`` otherwise (maintenance included)."""
        return self._phase.status

    @property
    def disposed(self) -> bool:
        """Whether :meth:`AgentHandle.dispose` has completed for this agent."""
        return self._stage == _DISPOSED

    # ------------------------------------------------------------------ input

    def send(
        self, message: UserMessage, target: InboxTarget | str, wakeup: bool
    ) -> None:
        """Queue ``message`` on ``target``'s list; wake the driver if ``wakeup``.

        A waking send to an idle agent starts a turn before returning (the message
        is already claimed when this returns). A waking send that arrives after the
        current activity was cancelled goes to next-turn and runs once that activity
        has wound down (the wake latch), except under :class:`DisposedCancel`.

        Raises:
            TypeError: ``wakeup`` is not a bool.
            AgentDisposedError: the agent was disposed (or its disposal has drained
                it).
            PersistenceError: ``wakeup`` and the session's log cannot be written
                (nothing was queued); :meth:`flush` retries the writes.
            DuplicateMessageError: a message with this id is already pending.
            InvalidSpliceError: unknown target, or the message is not a valid UserMessage.
        """
        if wakeup is not True and wakeup is not False:
            raise TypeError(f"send() takes wakeup=True or wakeup=False, got {wakeup!r}")
        if self._stage >= _SEALED:
            self._check_alive()
        recorder = self._recorder
        if wakeup and recorder is not None and recorder.fault is not None:
            raise self._refusal(recorder.fault)
        t = target if target.__class__ is InboxTarget else coerce_target(target)
        phase = self._phase
        after_abort = wakeup and not isinstance(phase, Idle) and phase.signal.cancelled
        self.inbox._insert(InboxTarget.NEXT_TURN if after_abort else t, message)
        if wakeup:
            self._wake_driver(after_abort)

    def followup(self, message: UserMessage) -> None:
        """Queue ``message`` as the prompt of its own turn (next-turn) and wake the driver.

        Raises as :meth:`send` (``PersistenceError`` while the log cannot be written).
        """
        self.send(message, InboxTarget.NEXT_TURN, True)

    def steer(self, message: UserMessage) -> None:
        """Queue ``message`` for the nearest step boundary (next-step) and wake the driver.

        Raises as :meth:`send` (``PersistenceError`` while the log cannot be written).
        """
        self.send(message, InboxTarget.NEXT_STEP, True)

    def inject(self, message: UserMessage) -> None:
        """Queue ``message`` for the next step boundary without waking the driver."""
        self.send(message, InboxTarget.NEXT_STEP, False)

    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """Cancel the current activity with ``cause`` (the first cause wins).

        Unless ``keep_inbox``, everything pending is durably discarded first (also
        on an idle agent) and a latched wake is dropped. The activity's scope is
        cancelled, so whatever it awaits raises :class:`trio.Cancelled` at its next
        checkpoint; the turn ends ``Aborted(first cause)``. Never blocks.

        Raises:
            TypeError: ``cause`` is not a :class:`CancelCause`.
        """
        if not isinstance(cause, CancelCause):
            raise TypeError(
                f"cancel() takes a CancelCause (UserCancel(), HookCancel(reason), ...), got {cause!r}"
            )
        if not keep_inbox and self._stage < _SEALED:
            waits = self._turn_waits
            if waits is None:
                self.inbox._clear()
                self._set_wake(False)
            else:
                # A followed message discarded by this clear ends Aborted(cause).
                hint = Aborted(cause)
                for watch in waits:
                    watch.cancel_hint = hint
                try:
                    self.inbox._clear()
                    self._set_wake(False)
                finally:
                    for watch in waits:
                        watch.cancel_hint = None
        phase = self._phase
        if not isinstance(phase, Idle):
            phase.signal._cancel(cause)

    async def when_idle(self) -> None:
        """Return once no driver or maintenance task remains.

        Always checkpoints, also on an idle agent. Follows replacement drivers
        started before the observed one retired. Never raises a turn's failure;
        cancelling the caller only cancels the wait.
        """
        while True:
            done = self._phase.done
            if done is None:
                await trio.lowlevel.checkpoint()
                return
            await done.wait()  # a checkpoint, also when ``done`` is already set
            current = self._phase.done
            if current is None or current is done:
                return  # idle now: the wait was this call's checkpoint

    async def flush(self) -> None:
        """Wait until every event appended before the call is written and durable.

        The durability barrier: once it returns, the session's persistence holds
        those events (fsynced unless its durability is ``"none"``), e.g.
        ``await agent.when_idle(); await agent.flush()``. Blocks on the disk (in a
        worker thread); with no persistence it returns after one checkpoint. A
        success ends a persistence fault: the agent accepts waking input again. If
        cancelled, whatever was not written stays queued. Never raises
        :class:`AgentDisposedError`.

        Raises:
            PersistenceError: a write failed (``__cause__`` is the writer's error,
                ``errno`` its errno); the events stay queued for the next flush.
                After disposal: events were left unwritten.
        """
        recorder = self._recorder
        if recorder is None:
            await trio.lowlevel.checkpoint()
            return
        await recorder.flush()

    async def run(
        self, message: UserMessage | str, *, check: bool = True
    ) -> TurnResult:
        """Queue ``message`` as a follow-up, wait for the turn that claims it, return its result.

        ``message`` is queued exactly as :meth:`followup` queues it (a string becomes
        ``user_message(message)``). The turn awaited is the one that claims this
        message, not merely the next turn to end: input queued before it runs first.
        Blocks until that turn's ``turn/end`` is written; the agent may go on with
        later input afterwards. Not idempotent: each call queues its message and
        runs a turn.

        Cancellation: cancelling the caller cancels *that* turn with
        :class:`UserCancel` (only that turn; the rest of the inbox is kept), waits
        for it to wind down (in a shielded scope: the turn's own scope is cancelled,
        so it ends at its next checkpoint) and then raises the caller's
        :class:`trio.Cancelled`, unchanged. By then the turn's
        ``turn/end`` is ``Aborted(UserCancel())``, its partial reply is kept and the
        driver that ran it has let go of the agent. If no turn has claimed the
        message yet, it is removed from the inbox instead and no turn runs for it.
        :meth:`stream` follows the same rule when its block is left early.

        If the agent goes idle with the message still queued (work parks after an
        errored, blocked or aborted turn), ``run`` wakes it again: a waiting ``run``
        gets its turn unless its message is removed from the inbox. It cannot be
        awaited from inside this agent's own turn (one of its tools or hooks, or a
        task they started) or maintenance task: the turn it would wait for cannot
        start before the current one ends, so it raises
        :class:`AgentReentrancyError` at once (queue with :meth:`followup` there).

        Example::

            result = await agent.run("What is a nursery?")
            print(result.text)

        Args:
            message: the prompt, a :class:`UserMessage` or plain text.
            check: raise :class:`TurnFailedError` for a failed turn (the default);
                with ``False``, return its result instead.

        Returns:
            The :class:`TurnResult`: the turn's number, its ``turn/end`` reason, its
            final assistant text, the messages it appended and its summed usage.

        Raises:
            TurnFailedError: ``check`` and the turn errored (``result.reason`` is
                ``Errored(failure)``) or was aborted (``Aborted(cause)``), also when
                the message was discarded from the inbox before a turn claimed it
                (``result.turn`` is ``None``).
            AgentDisposedError: the agent was disposed (nothing was queued).
            AgentReentrancyError: called from inside this agent's own turn or
                maintenance task (nothing was queued).
            PersistenceError, DuplicateMessageError, InvalidSpliceError: as
                :meth:`followup` (nothing was queued).
            TypeError: ``message`` is neither a :class:`UserMessage` nor a str.
        """
        queued = as_message(message)
        self._refuse_reentry("run()")
        await trio.lowlevel.checkpoint_if_cancelled()
        watch = TurnWatch(queued.id)
        self._queue_watched(queued, watch)
        return await self._turn_outcome(watch, check=check, owned=True)

    def stream(
        self, message: UserMessage | str, *, detach: bool = False
    ) -> AbstractAsyncContextManager[TurnStream]:
        """Queue ``message`` as a follow-up and follow its turn live.

        ``async with agent.stream(message) as turn:`` queues the message (as
        :meth:`run`) on entry and yields a :class:`TurnStream`:
        ``async for delta in turn.text()`` gives the turn's text deltas as they
        stream, ``turn.frames()`` every live frame of the turn, and
        ``await turn.result()`` its :class:`TurnResult` exactly as :meth:`run`
        returns it (raising :class:`TurnFailedError` likewise). Frames are buffered
        without bound from entry until the block is left, so a reader that stops
        reading never holds the turn up.

        The block owns the turn, as a nursery owns its tasks: leaving it before the
        turn ended (``break`` out of ``turn.text()``, an exception, the caller
        cancelled) cancels that turn with :class:`UserCancel` (the cause of a
        cancelled :meth:`run` caller: whoever follows the turn gave up on it; no
        hook, parent or disposal did) and waits for it to wind down before the
        block exits. The wait runs in a shielded scope and is bounded: the turn's
        own scope is cancelled, so it ends at its next checkpoint (after whatever
        it shields). Once the block has exited, the turn's ``turn/end`` is
        ``Aborted(UserCancel())`` (or the earlier cause, if it was cancelled
        already), no more of the model's reply is read, the partial reply is kept
        (an interrupted assistant message) and the driver has let go of the agent. The exception leaving the block (a
        :class:`trio.Cancelled` included) propagates unchanged. If no turn has
        claimed the message yet, it is removed from the inbox instead. Leaving the
        block after the turn ended changes nothing.

        With ``detach=True`` the block does not own the turn: leaving it, however
        it is left, only stops the buffering, and the turn runs on (``await
        agent.when_idle()`` waits for it).

        This call itself does nothing and never blocks; entering the block
        checkpoints. Each call queues its own message; a context can be entered once.

        Example::

            async with agent.stream("Tell me a story") as turn:
                async for delta in turn.text():
                    print(delta, end="", flush=True)
                result = await turn.result()

        Raises (on entry):
            AgentReentrancyError: entered from inside this agent's own turn (one of
                its tools or hooks) or maintenance task, where it could never be
                followed to its end (nothing was queued).
            AgentDisposedError, PersistenceError, DuplicateMessageError,
            InvalidSpliceError: as :meth:`followup` (nothing was queued).

        Raises:
            TypeError: ``message`` is neither a :class:`UserMessage` nor a str, or
                ``detach`` is not a bool.
        """
        if detach is not True and detach is not False:
            raise TypeError(
                f"stream() takes detach=True or detach=False, got {detach!r}"
            )
        return OpenTurnStream(self, as_message(message), detach=detach)

    async def run_maintenance(self, task: Callable[[CancelSignal], Awaitable[T]]) -> T:
        """Run ``task(signal)`` as a maintenance activity from the idle phase.

        The phase is claimed before the first checkpoint; status stays ``idle``.
        Blocks for as long as ``task`` runs, in the caller's task. Waking input sent
        meanwhile is queued and starts its turn when the task ends. If :meth:`cancel`
        interrupts the task, raise :class:`AgentCancelled`; otherwise return or raise
        exactly what ``task`` did.

        Raises:
            AgentBusyError: a turn or another maintenance task is active.
            AgentDisposedError: the agent was disposed.
        """
        self._check_alive()
        phase = self._phase
        if not isinstance(phase, Idle):
            raise AgentBusyError(f'agent "{self.id}" already has active work')
        signal = CancelSignal()
        done = trio.Event()
        self._enter(
            Maintenance(
                signal=signal,
                done=done,
                last_turn=phase.last_turn,
                task=trio.lowlevel.current_task(),
            )
        )
        try:
            with signal.scope:
                result = await task(signal)
        finally:
            ending = self._phase
            assert isinstance(ending, Maintenance)
            self._enter(Idle(last_turn=ending.last_turn))
            if (
                ending.wake_requested
                and self.inbox.has_pending
                and not isinstance(signal.cause, DisposedCancel)
            ):
                self._wake_driver()
            done.set()
        if signal.scope.cancelled_caught:
            assert signal.cause is not None
            raise AgentCancelled(signal.cause)
        return result

    # ------------------------------------------------------------------ turn results
    # (in ._agent_waits)

    _queue_watched = queue_watched
    _unwatch = unwatch
    _turn_outcome = turn_outcome
    _look_after = look_after
    _abandon = abandon
    _wind_down = wind_down
    _refuse_reentry = refuse_reentry

    # ------------------------------------------------------------------ phase

    def _enter(self, phase: Phase) -> None:
        """Make ``phase`` the agent's phase; emit ``agent/status`` if the status changed.

        The only place the phase changes. Synchronous; status listeners run before
        it returns.
        """
        previous = self._phase
        self._phase = phase
        if phase.status is not previous.status:
            self._emit_status(phase.status)
        waits = self._turn_waits
        if waits is not None and isinstance(phase, Idle):
            for watch in waits:  # a parked message, or a turn with no turn/end
                watch.poke()

    def _set_wake(self, requested: bool) -> None:
        """Latch (or drop) a wake for when the current activity ends; no-op when idle."""
        phase = self._phase
        if not isinstance(phase, Idle) and phase.wake_requested is not requested:
            self._enter(attrs.evolve(phase, wake_requested=requested))

    # ------------------------------------------------------------------ notifications

    def _check_alive(self) -> None:
        if self._stage >= _SEALED:
            if self._stage == _DISPOSED:
                raise AgentDisposedError(f'agent "{self.id}" is disposed')
            raise AgentDisposedError(
                f'agent "{self.id}" is being disposed and takes no more input'
            )

    # ------------------------------------------------------------------ persistence
    # (in ._agent_work)

    _attach_recorder = attach_recorder
    _persistence_failed = persistence_failed
    _refusal = refusal
    _wait_written = wait_written

    # ------------------------------------------------------------------ inbox and session
    # (in ._agent_waits)

    _inbox_inserted = inbox_inserted
    _inbox_discarded = inbox_discarded
    _inbox_claimed = inbox_claimed
    _on_session_event = on_session_event
    _emit_status = emit_status

    # ------------------------------------------------------------------ driver
    # (in ._agent_work)

    _wake_driver = wake_driver
    _open_turn = open_turn
    _drive = drive
    _turn_driver = turn_driver

    # ------------------------------------------------------------------ disposal

    async def _drain(self) -> list[Exception]:
        """Park input, cancel with :class:`DisposedCancel`, wait, unwind the scope.

        Runtime use only (the first half of disposal). Blocks until the current
        activity has ended; returns the errors of the scope's cleanups.
        """
        self._stage = _DRAINING
        self.cancel(DisposedCancel())
        await self.when_idle()
        errors = self.scope._unwind()
        # The last inbox change is behind us: what is sent from now on could not
        # be persisted, so it is refused rather than lost.
        self._stage = _SEALED
        return errors

    def _finish_dispose(self) -> None:
        """Mark the agent disposed and stop relaying its session. Runtime use only."""
        self._stage = _DISPOSED
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _listen(self) -> None:
        """Follow the session's appends (turn waits, ``session/event``). Idempotent.

        Runtime use only: called when a turn wait starts, and by the runtime when a
        ``session/event`` listener is registered. The agent's subscription runs
        ahead of any other (a log writer's, say), as if made at creation.
        """
        if self._unsubscribe is None and self._stage != _DISPOSED:
            self._unsubscribe = self.session._subscribe_first(self._on_session_event)
