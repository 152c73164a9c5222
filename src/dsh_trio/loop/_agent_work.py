"""An agent's lifetime stages, its persistence faults and its driver task.

Functions of :class:`Agent` (bound as its private methods): the recorder that
writes its session log, and starting, opening and driving its turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import trio

from ..errors import PersistenceError
from ..values import DisposedCancel, InboxTarget, TurnStart, builder
from ._driver import OpenedTurn, TurnDriver
from ._initiator import _initiator
from ._payloads import AgentErrorEvent
from ._phase import Idle, Maintenance, Running
from ._signal import CancelSignal

if TYPE_CHECKING:
    from ._agent import Agent

# The agent's lifetime, one small int (a slot per idle agent counts, see W4).
_LIVE = 0
_DRAINING = 1  # disposal is draining it: input is parked, no work starts
_SEALED = 2  # the drain is over: input raises AgentDisposedError
_DISPOSED = 3

# Built on every turn (see ``values.builder``).
_turn_start = builder(TurnStart)
_running = builder(Running)


class SessionRecording(Protocol):
    """What an agent needs of the recorder that writes its session's log."""

    @property
    def fault(self) -> PersistenceError | None:
        """The failure of the last write while writes fail, else ``None``."""
        ...

    async def flush(self) -> None:
        """Write and fsync everything queued; raise :class:`PersistenceError`."""
        ...

    async def wait_written(self) -> None:
        """Write everything queued; raise :class:`PersistenceError`."""
        ...


# ------------------------------------------------------------------ persistence
def attach_recorder(agent: Agent, recorder: SessionRecording) -> None:
    """Runtime use only: the recorder writing this agent's session log."""
    agent._recorder = recorder


def persistence_failed(agent: Agent, error: PersistenceError) -> None:
    """The session log's writes started failing: tell listeners.

    Runtime use only (the recorder's ``on_fault``, called once the recorder's
    ``fault`` is set, which refuses waking input). Never blocks.
    """
    bus = agent._services.bus
    if bus.has_listeners("agent/error"):
        phase = agent._phase
        if isinstance(phase, Running):
            turn = phase.turn
            step = agent._driver._step if agent._driver is not None else 0
        else:
            turn, step = phase.last_turn, 0
        bus.emit(
            "agent/error",
            AgentErrorEvent(agent, turn, step, error, phase="persistence"),
            scope=agent,
        )


def refusal(agent: Agent, fault: PersistenceError) -> PersistenceError:
    error = PersistenceError(
        f'agent "{agent.id}" takes no waking input while its session log cannot '
        f"be written ({fault}); await agent.flush() to retry the writes",
        session_id=agent.id,
        cause=fault.__cause__,
    )
    error.__cause__ = fault.__cause__ or fault
    return error


async def wait_written(agent: Agent) -> None:  # noqa: ASYNC910  # hot path: no persistence, nothing to wait for
    """Wait until the turn's events so far are written (before its ``turn/end``).

    Runtime use only: a turn reports no success on a log that is not written.

    Raises:
        PersistenceError: they could not be written.
    """
    recorder = agent._recorder
    if recorder is not None:
        await recorder.wait_written()


# ------------------------------------------------------------------ driver
def wake_driver(agent: Agent, after_abort: bool = False) -> None:
    """Start a turn on an idle agent, or latch the wake on a busy one."""
    if agent._stage:
        return  # a disposing agent parks input; it never starts work again
    recorder = agent._recorder
    if recorder is not None and recorder.fault is not None:
        return  # no turn on a log that is not written: a latched wake parks
    phase = agent._phase
    if not isinstance(phase, Idle):
        disposed = isinstance(phase.signal.cause, DisposedCancel)
        if not disposed and (isinstance(phase, Maintenance) or after_abort):
            agent._set_wake(True)
        return
    done = trio.Event()
    agent._enter(_running(CancelSignal(), done, phase.last_turn, False))
    opened = agent._open_turn(True)
    agent._services.spawn(agent._drive, done, opened, name=_DRIVER_TASK)


def open_turn(agent: Agent, fresh: bool = False) -> OpenedTurn | None:
    """The synchronous head of a turn: ``turn/start`` and the turn-boundary claim.

    ``fresh``: the turn is opened for a driver task that has not started yet.
    """
    phase = agent._phase
    if not isinstance(phase, Running):
        return None  # a status listener already wound the driver down
    signal = phase.signal
    if signal._cause is not None:  # ``cancelled``, without the call
        return None
    turn = phase.turn + 1
    try:
        agent.session._append_trusted("turn/start", _turn_start(turn))
    except Exception as exc:
        agent._turn_driver().report_error(phase.turn, 0, exc)
        return None
    current = agent._phase  # listeners of the append may have latched a wake
    assert isinstance(current, Running)
    agent._enter(_running(signal, current.done, turn, current.wake_requested))
    try:
        claimed = agent.inbox._claim(InboxTarget.NEXT_TURN, turn)
    except Exception as exc:
        return OpenedTurn(turn, signal, [], exc, fresh)
    return OpenedTurn(turn, signal, claimed, None, fresh)


async def drive(  # noqa: ASYNC910
    agent: Agent, done: trio.Event, opened: OpenedTurn | None
) -> None:  # a task with no turn to run ends at once
    """The driver task: run opened turns while there is work, then go idle."""
    _initiator.set(agent)
    try:
        driver = agent._turn_driver()
        # The task ``run``/``stream`` refuse to be awaited from (``refuse_reentry``).
        driver._task = trio.lowlevel.current_task()
        while opened is not None:
            if not await driver.run_turn(opened):
                break
            phase = agent._phase
            assert isinstance(phase, Running)
            agent._enter(_running(CancelSignal(), phase.done, phase.turn, False))
            opened = agent._open_turn()
    finally:
        if agent._driver is not None:
            agent._driver._task = None
        phase = agent._phase
        wake = False
        if isinstance(phase, Running):
            wake = phase.wake_requested
            agent._enter(Idle(last_turn=phase.turn))
        if wake and agent.inbox.has_pending:
            agent._wake_driver()
        done.set()


#: The driver task's name: the one trio derives from ``drive``, made once per process.
_DRIVER_TASK = f"{drive.__module__}.{drive.__qualname__}"


def turn_driver(agent: Agent) -> TurnDriver:
    """The agent's turn driver, made on first use."""
    driver = agent._driver
    if driver is None:
        driver = agent._driver = TurnDriver(agent, agent._services)
    return driver
