"""The agent's phase: what it is doing right now, as one frozen value.

An agent is :class:`Idle` (no task, no signal), in :class:`Maintenance` (a task run by
``run_maintenance`` in its caller's task) or :class:`Running` (a driver task runs
turns). Each activity phase carries its :class:`CancelSignal` and the ``done`` event
``when_idle`` waits on; ``wake_requested`` is the wake latch. ``Agent.status`` is
``phase.status``. Only ``Agent._enter`` stores a phase, so every change of status is
seen (and announced) in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeAlias

import attrs

from ..values import AgentStatus

if TYPE_CHECKING:
    import trio

    from ._signal import CancelSignal

__all__ = ["Idle", "Maintenance", "Phase", "Running"]


@attrs.frozen(kw_only=True, weakref_slot=False)
class Idle:
    """No activity: the agent holds no task. ``last_turn`` is the last turn opened."""

    status: ClassVar[AgentStatus] = AgentStatus.IDLE
    done: ClassVar[None] = None

    last_turn: int


@attrs.frozen(kw_only=True, weakref_slot=False)
class Maintenance:
    """A ``run_maintenance`` task is active; waking input latches ``wake_requested``.

    ``task`` is the trio task running it (the caller of ``run_maintenance``).
    """

    status: ClassVar[AgentStatus] = AgentStatus.IDLE

    signal: CancelSignal
    done: trio.Event
    last_turn: int
    task: trio.lowlevel.Task | None = None
    wake_requested: bool = False


@attrs.frozen(kw_only=True, weakref_slot=False)
class Running:
    """A driver task runs turns; ``turn`` is the turn open now (or the last one closed).

    The step number is not part of the phase: only the turn's own driver reads it.
    """

    status: ClassVar[AgentStatus] = AgentStatus.RUNNING

    signal: CancelSignal
    done: trio.Event
    turn: int
    wake_requested: bool = False


Phase: TypeAlias = Idle | Maintenance | Running
