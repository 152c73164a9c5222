"""What an agent is doing and whether it may do more: its phase, lifetime and driver task.

:class:`AgentWork` is the runtime side of one :class:`Agent`. It owns the agent's phase
(idle, maintenance, running), its lifetime stage, the gate of its session log
(:class:`~._recording.RecordingGate`) and the driver task that runs its turns; it is the
observer of the agent's inbox. The agent (the public face) forwards its input methods
here; the runtime keeps the work of each agent it created to attach a recorder, relay
sessions and dispose of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import attrs
import trio

from ..errors import (
    AgentBusyError,
    AgentCancelled,
    AgentDisposedError,
    PersistenceError,
)
from ..values import (
    Aborted,
    AgentStatus,
    CancelCause,
    DisposedCancel,
    InboxTarget,
    TurnStart,
    UserMessage,
    builder,
)
from ._driver import OpenedTurn, TurnDriver
from ._inbox import Inbox, coerce_target
from ._initiator import _initiator
from ._payloads import (
    AgentErrorEvent,
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
)
from ._phase import Idle, Maintenance, Phase, Running
from ._recording import RecordingGate
from ._signal import CancelSignal
from ._waits import TurnWaits

if TYPE_CHECKING:
    from ..session import Session
    from ._agent import Agent
    from ._services import AgentServices

__all__ = ["AgentWork"]

T = TypeVar("T")

# The agent's lifetime, one small int.
_LIVE = 0
_DRAINING = 1  # disposal is draining it: input is parked, no work starts
_SEALED = 2  # the drain is over: input raises AgentDisposedError
_DISPOSED = 3

# Built on every turn (see ``values.builder``).
_turn_start = builder(TurnStart)
_running = builder(Running)


class AgentWork:
    """The runtime side of one agent: its phase, lifetime stage and driver task.

    Runtime use only. Made by the runtime before the agent it serves
    (``Agent(work, options)`` binds the two); the runtime keeps it to attach the
    session's recorder, to relay the session and to drain and dispose of the agent.
    Only :meth:`_enter` stores a phase, so every change of status is announced in one
    place. All methods but the awaited ones are synchronous and never block.
    """

    __slots__ = (
        "_driver",
        "_phase",
        "_stage",
        "_task",
        "_waits",
        "agent",
        "inbox",
        "recording",
        "services",
        "session",
    )

    def __init__(self, session: Session, services: AgentServices) -> None:
        self.session = session
        self.services = services
        # The inbox asks this work's ``check_alive`` itself: it keeps no bound method.
        self.inbox = Inbox(session, notify=self, check_alive=None)
        self._phase: Phase = Idle(last_turn=session.last_turn)
        self._stage = _LIVE
        # Made by the first turn: an agent that never ran stays small.
        self._driver: TurnDriver | None = None
        #: The driver task running this agent's turns now (``None`` between runs).
        self._task: trio.lowlevel.Task | None = None
        # The recorder writing the session's log, once it records: its fault refuses
        # waking input, and a turn waits for it before it reports success.
        self.recording = RecordingGate(session.id)
        # Made by the first ``run``/``stream`` or ``session/event`` listener.
        self._waits: TurnWaits | None = None
        self.agent: Agent  # bound by the agent (``bind``)

    def bind(self, agent: Agent) -> None:
        """Serve ``agent`` (its constructor calls this once)."""
        self.agent = agent
        if "session/event" in self.services.bus.listened:
            self.listen()

    # ------------------------------------------------------------------ reads

    @property
    def phase(self) -> Phase:
        """What the agent is doing now (replaced, never changed in place)."""
        return self._phase

    @property
    def idle(self) -> bool:
        """Whether the agent has no activity (no turn, no maintenance)."""
        return isinstance(self._phase, Idle)

    @property
    def live(self) -> bool:
        """Whether work may still start (no disposal has begun)."""
        return self._stage == _LIVE

    @property
    def takes_input(self) -> bool:
        """Whether the inbox may still change (the drain of a disposal is not over)."""
        return self._stage < _SEALED

    @property
    def disposed(self) -> bool:
        """Whether the disposal of the agent has completed."""
        return self._stage == _DISPOSED

    def check_alive(self) -> None:
        """Raise :class:`AgentDisposedError` once the agent takes no more input."""
        if self._stage >= _SEALED:
            agent_id = self.session.id
            if self._stage == _DISPOSED:
                raise AgentDisposedError(f'agent "{agent_id}" is disposed')
            raise AgentDisposedError(
                f'agent "{agent_id}" is being disposed and takes no more input'
            )

    def running_turn(self) -> int | None:
        """The turn a driver has open now (or last closed, while it runs), else ``None``."""
        phase = self._phase
        return phase.turn if isinstance(phase, Running) else None

    def activity_task(self) -> tuple[trio.lowlevel.Task | None, str]:
        """The task running the current activity (``None`` for none) and what it is."""
        phase = self._phase
        if phase.__class__ is Running:
            return self._task, "turn (one of its tools or hooks)"
        if phase.__class__ is Maintenance:
            assert isinstance(phase, Maintenance)
            return phase.task, "maintenance task (its setup, say)"
        return None, ""

    def waits(self) -> TurnWaits:
        """The turn waits of ``run``/``stream`` (and the session relay), made on first use."""
        waits = self._waits
        if waits is None:
            waits = self._waits = TurnWaits(self)
        return waits

    # ------------------------------------------------------------------ input

    def accept(
        self, message: UserMessage, target: InboxTarget | str, wakeup: bool
    ) -> None:
        """``Agent.send`` once its arguments are checked: queue, then wake or latch."""
        if self._stage >= _SEALED:
            self.check_alive()
        if wakeup and (refused := self.recording.refusal()) is not None:
            raise refused
        t = target if target.__class__ is InboxTarget else coerce_target(target)
        phase = self._phase
        after_abort = wakeup and not isinstance(phase, Idle) and phase.signal.cancelled
        self.inbox.insert(InboxTarget.NEXT_TURN if after_abort else t, message)
        if wakeup:
            self.wake(after_abort)

    def cancel(self, cause: CancelCause, keep_inbox: bool) -> None:
        """``Agent.cancel`` once its cause is checked (see there). Never blocks."""
        if not keep_inbox and self._stage < _SEALED:
            waits = self._waits
            if waits is None or not waits.following:
                self.inbox.discard_all()
                self._set_wake(False)
            else:
                # A followed message discarded by this clear ends Aborted(cause).
                waits.hint(Aborted(cause))
                try:
                    self.inbox.discard_all()
                    self._set_wake(False)
                finally:
                    waits.hint(None)
        phase = self._phase
        if not isinstance(phase, Idle):
            phase.signal.cancel(cause)

    def cancel_turn(self, turn: int, cause: CancelCause) -> None:
        """Cancel turn ``turn`` with ``cause`` if it is the turn running now."""
        phase = self._phase
        if isinstance(phase, Running) and phase.turn == turn:
            phase.signal.cancel(cause)

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
        waits = self._waits
        if waits is not None and isinstance(phase, Idle):
            waits.poke()  # a parked message, or a turn with no turn/end

    def _set_wake(self, requested: bool) -> None:
        """Latch (or drop) a wake for when the current activity ends; no-op when idle."""
        phase = self._phase
        if not isinstance(phase, Idle) and phase.wake_requested is not requested:
            self._enter(attrs.evolve(phase, wake_requested=requested))

    def _emit_status(self, status: AgentStatus) -> None:
        if "agent/status" in (bus := self.services.bus).listened:
            agent = self.agent
            bus.emit("agent/status", AgentStatusChanged(agent, status), scope=agent)

    # ------------------------------------------------------------------ inbox notifications

    def inserted(self, message: UserMessage) -> None:
        """The inbox took ``message`` in (durably)."""
        if "agent/inbox/inserted" in (bus := self.services.bus).listened:
            agent = self.agent
            bus.emit("agent/inbox/inserted", InboxInserted(agent, message), scope=agent)

    def discarded(self, message: UserMessage) -> None:
        """The inbox discarded ``message`` (durably)."""
        waits = self._waits
        if waits is not None:
            waits.discarded(message)
        if "agent/inbox/discarded" in (bus := self.services.bus).listened:
            agent = self.agent
            bus.emit(
                "agent/inbox/discarded", InboxDiscarded(agent, message), scope=agent
            )

    def claimed(self, message: UserMessage, turn: int) -> None:
        """Turn ``turn`` claimed ``message`` from the inbox (durably)."""
        waits = self._waits
        if waits is not None:
            waits.claimed(message, turn)
        if "agent/inbox/claimed" in (bus := self.services.bus).listened:
            agent = self.agent
            bus.emit(
                "agent/inbox/claimed", InboxClaimed(agent, message, turn), scope=agent
            )

    # ------------------------------------------------------------------ persistence

    def persistence_failed(self, error: PersistenceError) -> None:
        """The session log's writes started failing: tell listeners.

        The recorder's ``on_fault``, called once the recorder's ``fault`` is set,
        which refuses waking input. Never blocks.
        """
        bus = self.services.bus
        if bus.has_listeners("agent/error"):
            phase = self._phase
            if isinstance(phase, Running):
                turn = phase.turn
                step = self._driver.step if self._driver is not None else 0
            else:
                turn, step = phase.last_turn, 0
            agent = self.agent
            bus.emit(
                "agent/error",
                AgentErrorEvent(agent, turn, step, error, phase="persistence"),
                scope=agent,
            )

    # ------------------------------------------------------------------ driver

    def wake(self, after_abort: bool = False) -> None:
        """Start a turn on an idle agent, or latch the wake on a busy one."""
        if self._stage:
            return  # a disposing agent parks input; it never starts work again
        if self.recording.failing:
            return  # no turn on a log that is not written: a latched wake parks
        phase = self._phase
        if not isinstance(phase, Idle):
            disposed = isinstance(phase.signal.cause, DisposedCancel)
            if not disposed and (isinstance(phase, Maintenance) or after_abort):
                self._set_wake(True)
            return
        done = trio.Event()
        self._enter(_running(CancelSignal(), done, phase.last_turn, False))
        opened = self.open_turn(True)
        self.services.spawn(self.drive, done, opened, name=_DRIVER_TASK)

    def open_turn(self, fresh: bool = False) -> OpenedTurn | None:
        """The synchronous head of a turn: ``turn/start`` and the turn-boundary claim.

        ``fresh``: the turn is opened for a driver task that has not started yet.
        """
        phase = self._phase
        if not isinstance(phase, Running):
            return None  # a status listener already wound the driver down
        signal = phase.signal
        if signal.cause is not None:
            return None
        turn = phase.turn + 1
        try:
            self.session.append_trusted("turn/start", _turn_start(turn))
        except Exception as exc:
            self.turn_driver().report_error(phase.turn, 0, exc)
            return None
        current = self._phase  # listeners of the append may have latched a wake
        assert isinstance(current, Running)
        self._enter(_running(signal, current.done, turn, current.wake_requested))
        try:
            claimed = self.inbox.claim(InboxTarget.NEXT_TURN, turn)
        except Exception as exc:
            return OpenedTurn(turn, signal, [], exc, fresh)
        return OpenedTurn(turn, signal, claimed, None, fresh)

    async def drive(  # noqa: ASYNC910
        self, done: trio.Event, opened: OpenedTurn | None
    ) -> None:  # a task with no turn to run ends at once
        """The driver task: run opened turns while there is work, then go idle."""
        _initiator.set(self.agent)
        try:
            driver = self.turn_driver()
            # The task ``run``/``stream`` refuse to be awaited from (``activity_task``).
            self._task = trio.lowlevel.current_task()
            while opened is not None:
                if not await driver.run_turn(opened):
                    break
                phase = self._phase
                assert isinstance(phase, Running)
                self._enter(_running(CancelSignal(), phase.done, phase.turn, False))
                opened = self.open_turn()
        finally:
            self._task = None
            phase = self._phase
            wake = False
            if isinstance(phase, Running):
                wake = phase.wake_requested
                self._enter(Idle(last_turn=phase.turn))
            if wake and self.inbox.has_pending:
                self.wake()
            done.set()

    def turn_driver(self) -> TurnDriver:
        """The agent's turn driver, made on first use."""
        driver = self._driver
        if driver is None:
            driver = self._driver = TurnDriver(self)
        return driver

    # ------------------------------------------------------------------ maintenance

    async def maintain(self, task: Callable[[CancelSignal], Awaitable[T]]) -> T:
        """``Agent.run_maintenance`` (see there): ``task`` as the agent's activity."""
        self.check_alive()
        phase = self._phase
        if not isinstance(phase, Idle):
            raise AgentBusyError(f'agent "{self.session.id}" already has active work')
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
                self.wake()
            done.set()
        if signal.scope.cancelled_caught:
            assert signal.cause is not None
            raise AgentCancelled(signal.cause)
        return result

    # ------------------------------------------------------------------ disposal

    async def drain(self) -> list[Exception]:
        """Park input, cancel with :class:`DisposedCancel`, wait, unwind the scope.

        The first half of disposal. Blocks until the current activity has ended;
        returns the errors of the scope's cleanups.
        """
        agent = self.agent
        self._stage = _DRAINING
        agent.cancel(DisposedCancel())
        await agent.when_idle()
        errors = agent.scope.unwind()
        # The last inbox change is behind us: what is sent from now on could not
        # be persisted, so it is refused rather than lost.
        self._stage = _SEALED
        return errors

    def finish_dispose(self) -> None:
        """Mark the agent disposed and stop relaying its session."""
        self._stage = _DISPOSED
        if self._waits is not None:
            self._waits.stop()

    def listen(self) -> None:
        """Follow the session's appends (turn waits, ``session/event``). Idempotent.

        Called when a turn wait starts, and by the runtime when a ``session/event``
        listener is registered. The agent's subscription runs ahead of any other (a
        log writer's, say), as if made at creation.
        """
        if self._stage != _DISPOSED:
            self.waits().listen()


#: The driver task's name: the one trio derives from ``drive``, made once per process.
_DRIVER_TASK = f"{AgentWork.drive.__module__}.{AgentWork.drive.__qualname__}"
