"""The agent: its input methods, its phase, and the lifetime of its activities."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from ..errors import AgentBusyError, AgentCancelled, AgentDisposedError
from ..values import (
    AgentOptions,
    AgentStatus,
    CancelCause,
    DisposedCancel,
    InboxTarget,
    SessionEvent,
    SessionId,
    TurnStart,
    UserMessage,
)
from ._driver import OpenedTurn, TurnDriver
from ._inbox import Inbox, coerce_target
from ._initiator import _initiator
from ._payloads import (
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    SessionEventAppended,
)
from ._phase import Idle, Maintenance, Phase, Running
from ._scope import AgentScope
from ._signal import CancelSignal

if TYPE_CHECKING:
    from ..session import Session
    from ._services import AgentServices

__all__ = ["Agent"]

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
        "_disposed",
        "_draining",
        "_driver",
        "_phase",
        "_services",
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
        self.inbox = Inbox(
            session,
            notify=self,
            check_alive=self._check_alive,
        )
        self._phase: Phase = Idle(last_turn=session.last_turn)
        # Made by the first turn: an agent that never ran stays small (W4).
        self._driver: TurnDriver | None = None
        self._disposed = False
        self._draining = False
        self._unsubscribe = session.subscribe(self._on_session_event)

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
        return self._disposed

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
            AgentDisposedError: the agent was disposed.
            DuplicateMessageError: a message with this id is already pending.
            InvalidSpliceError: unknown target, or the message is not a valid UserMessage.
        """
        self._check_alive()
        t = coerce_target(target)
        phase = self._phase
        after_abort = wakeup and not isinstance(phase, Idle) and phase.signal.cancelled
        self.inbox._insert(InboxTarget.NEXT_TURN if after_abort else t, message)
        if wakeup:
            self._wake_driver(after_abort)

    def followup(self, message: UserMessage) -> None:
        """Queue ``message`` as the prompt of its own turn (next-turn) and wake the driver."""
        self.send(message, InboxTarget.NEXT_TURN, True)

    def steer(self, message: UserMessage) -> None:
        """Queue ``message`` for the nearest step boundary (next-step) and wake the driver."""
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
        if not keep_inbox and not self._disposed:
            self.inbox._clear()
            self._set_wake(False)
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
            await done.wait()
            if done is self._phase.done:
                return

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
        self._enter(Maintenance(signal=signal, done=done, last_turn=phase.last_turn))
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

    def _set_wake(self, requested: bool) -> None:
        """Latch (or drop) a wake for when the current activity ends; no-op when idle."""
        phase = self._phase
        if not isinstance(phase, Idle) and phase.wake_requested is not requested:
            self._enter(attrs.evolve(phase, wake_requested=requested))

    # ------------------------------------------------------------------ notifications

    def _check_alive(self) -> None:
        if self._disposed:
            raise AgentDisposedError(f'agent "{self.id}" is disposed')

    def _inbox_inserted(self, message: UserMessage) -> None:
        if self._services.bus.has_listeners("agent/inbox/inserted"):
            self._services.bus.emit(
                "agent/inbox/inserted", InboxInserted(self, message), scope=self
            )

    def _inbox_discarded(self, message: UserMessage) -> None:
        if self._services.bus.has_listeners("agent/inbox/discarded"):
            self._services.bus.emit(
                "agent/inbox/discarded", InboxDiscarded(self, message), scope=self
            )

    def _inbox_claimed(self, message: UserMessage, turn: int) -> None:
        if self._services.bus.has_listeners("agent/inbox/claimed"):
            self._services.bus.emit(
                "agent/inbox/claimed", InboxClaimed(self, message, turn), scope=self
            )

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._services.bus.has_listeners("session/event"):
            self._services.bus.emit(
                "session/event", SessionEventAppended(self.session, event), scope=self
            )

    def _emit_status(self, status: AgentStatus) -> None:
        if self._services.bus.has_listeners("agent/status"):
            self._services.bus.emit(
                "agent/status", AgentStatusChanged(self, status), scope=self
            )

    # ------------------------------------------------------------------ driver

    def _wake_driver(self, after_abort: bool = False) -> None:
        """Start a turn on an idle agent, or latch the wake on a busy one."""
        if self._draining:
            return  # a disposing agent parks input; it never starts work again
        phase = self._phase
        if not isinstance(phase, Idle):
            disposed = isinstance(phase.signal.cause, DisposedCancel)
            if not disposed and (isinstance(phase, Maintenance) or after_abort):
                self._set_wake(True)
            return
        done = trio.Event()
        self._enter(Running(signal=CancelSignal(), done=done, turn=phase.last_turn))
        opened = self._open_turn()
        self._services.spawn(self._drive, done, opened)

    def _open_turn(self) -> OpenedTurn | None:
        """The synchronous head of a turn: ``turn/start`` and the turn-boundary claim."""
        phase = self._phase
        if not isinstance(phase, Running):
            return None  # a status listener already wound the driver down
        signal = phase.signal
        if signal.cancelled:
            return None
        turn = phase.turn + 1
        try:
            self.session._append_trusted("turn/start", TurnStart(turn))
        except Exception as exc:
            self._turn_driver().report_error(phase.turn, 0, exc)
            return None
        current = self._phase  # listeners of the append may have latched a wake
        assert isinstance(current, Running)
        self._enter(
            Running(
                signal=signal,
                done=current.done,
                turn=turn,
                wake_requested=current.wake_requested,
            )
        )
        try:
            claimed = self.inbox._claim(InboxTarget.NEXT_TURN, turn)
        except Exception as exc:
            return OpenedTurn(turn, signal, [], exc)
        return OpenedTurn(turn, signal, claimed)

    async def _drive(  # noqa: ASYNC910
        self, done: trio.Event, opened: OpenedTurn | None
    ) -> None:  # a task with no turn to run ends at once
        """The driver task: run opened turns while there is work, then go idle."""
        _initiator.set(self)
        try:
            driver = self._turn_driver()
            while opened is not None:
                if not await driver.run_turn(opened):
                    break
                phase = self._phase
                assert isinstance(phase, Running)
                self._enter(
                    Running(signal=CancelSignal(), done=phase.done, turn=phase.turn)
                )
                opened = self._open_turn()
        finally:
            phase = self._phase
            wake = False
            if isinstance(phase, Running):
                wake = phase.wake_requested
                self._enter(Idle(last_turn=phase.turn))
            if wake and self.inbox.has_pending:
                self._wake_driver()
            done.set()

    def _turn_driver(self) -> TurnDriver:
        """The agent's turn driver, made on first use."""
        driver = self._driver
        if driver is None:
            driver = self._driver = TurnDriver(self, self._services)
        return driver

    # ------------------------------------------------------------------ disposal

    async def _drain(self) -> list[Exception]:
        """Park input, cancel with :class:`DisposedCancel`, wait, unwind the scope.

        Runtime use only (the first half of disposal). Blocks until the current
        activity has ended; returns the errors of the scope's cleanups.
        """
        self._draining = True
        self.cancel(DisposedCancel())
        await self.when_idle()
        return self.scope._unwind()

    def _finish_dispose(self) -> None:
        """Mark the agent disposed and stop relaying its session. Runtime use only."""
        self._disposed = True
        self._unsubscribe()
