"""Oracles for the operations on activities: cancel, maintenance, waiting, dispose.

Each oracle drives the trio run of a :class:`~dsh_trio.testing.GuestLoop`,
performs one operation on a :class:`Subject`, and raises
:class:`~dsh_trio.testing.InvariantViolation` when the agent's reaction differs
from what the model expects: a cancel aborts the running activity (recording its
first cause), discards or parks the inbox and replays a latched wake; maintenance
is refused unless the agent is idle; ``when_idle()`` completes once the model is
released; dispose discards the inbox and leaves no task behind.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from ...errors import AgentBusyError, AgentDisposedError
from ...nursery import Runtime
from ...values import AgentStatus, DisposedCancel, InboxSplice, TurnEnd
from .._guest import Deadlock, GuestLoop
from .._strategies import Cancel, Maintenance, ReleaseMaintenance
from ._harness import RuntimeHost
from ._inbox_oracles import send
from ._invariants import (
    check_maintenance_outcomes,
    check_subject,
    check_waiters_returned,
)
from ._report import InvariantViolation, note
from ._subject import ActivityKey, MaintenanceRecord, Subject, run_maintenance

__all__ = [
    "CancelPlan",
    "cancel",
    "cancel_once",
    "cancel_tick",
    "dispose",
    "maintenance",
    "release_maintenance",
    "wait_idle",
]


@attrs.frozen
class CancelPlan:
    """What the settle after a cancel tick must show for the activity it aborted."""

    activity: ActivityKey
    #: Whether a wake is latched for when the activity wound down.
    latched: bool
    #: The ids that must stay pending if no wake is latched.
    parked: list[str]


def cancel(
    loop: GuestLoop, subject: Subject, op: Cancel, *, predict_scheduling: bool
) -> None:
    """Run the tick of ``op`` (its cancels and sends), settle, and check the outcome.

    With ``predict_scheduling``, the aborted activity must have wound down, and a
    turn must start afterwards exactly when a wake was latched (otherwise what was
    pending stays parked).
    """
    start = len(subject.events)
    plan = loop.run_sync(
        lambda: cancel_tick(subject, op, predict_scheduling=predict_scheduling)
    )
    if not predict_scheduling or plan is None:
        return
    activity, latched, parked = plan.activity, plan.latched, plan.parked
    subject.sync()
    new = subject.events[start:]
    kind, number = activity
    if kind == "turn":
        ends = [
            i
            for i, e in enumerate(new)
            if isinstance(e.data, TurnEnd) and e.data.turn == number
        ]
        if not ends:
            raise InvariantViolation(
                f"turn {number} is still open after {op!r} and a settle"
            )
        after = new[ends[0] + 1 :]
    else:
        m = subject.maintenances[number]
        if not m.finished:
            raise InvariantViolation(
                f"{m.describe()} is still running after {op!r} and a settle"
            )
        after = new
    restarted = any(e.type == "turn/start" for e in after)
    note(
        f"cancel of a {kind}: {'latched wake replayed' if latched else 'nothing latched'}"
    )
    if restarted != latched:
        if latched:
            why = "waking input sent after the abort is latched: a turn must start once the activity wound down"
        elif isinstance(subject.first_cause.get(activity), DisposedCancel):
            why = "a DisposedCancel never latches a wake"
        else:
            why = "no wake is latched (keep_inbox parks, a later cancel drops the latch): nothing may start"
        raise InvariantViolation(
            f"after {op!r} on {kind} {number}: {why}; a turn started: {restarted}"
        )
    if not restarted:
        pending = set(subject.pending_ids())
        lost = [i for i in parked if i not in pending]
        if lost:
            raise InvariantViolation(
                f"after {op!r} nothing ran, so what was pending must stay parked; gone: {lost}"
            )


def cancel_tick(
    subject: Subject, op: Cancel, *, predict_scheduling: bool
) -> CancelPlan | None:
    """Run the tick's cancels and sends in order (inside the run); return what the settle must show.

    Returns the plan for the activity the tick aborted (``None`` if it aborted
    none): whether a wake is latched for when it wound down, and the ids that must
    stay pending if it is not.
    """
    aborted: ActivityKey | None = None
    latch = False
    for item in (op, *op.then):
        activity = subject.activity()
        if isinstance(item, Cancel):
            cancel_once(subject, item)
            if activity is None or subject.disposed:
                continue
            if aborted is not None and activity != aborted:
                raise InvariantViolation(
                    f"{op!r}: one tick aborted two activities ({aborted} and {activity})"
                )
            if aborted is None:
                aborted = activity
                latch = (
                    activity[0] == "maintenance"
                    and subject.maintenances[activity[1]].woken
                )
            if not item.keep_inbox:
                latch = False
                if activity[0] == "maintenance":
                    subject.maintenances[activity[1]].woken = False
        else:
            after_abort = activity is not None and activity == aborted
            accepted = send(
                subject,
                item,
                after_abort=after_abort,
                predict_scheduling=predict_scheduling,
            )
            if accepted and after_abort:
                latch = True
    if aborted is None or subject.disposed:
        return None
    cause = subject.first_cause.get(aborted)
    pending = subject.agent.inbox.has_pending
    latched = latch and pending and not isinstance(cause, DisposedCancel)
    return CancelPlan(aborted, latched, [] if latched else subject.pending_ids())


def cancel_once(subject: Subject, op: Cancel) -> None:
    """One ``cancel`` (inside the run): it discards the inbox as canceled splices, or parks it."""
    inbox = subject.agent.inbox
    events = subject.events
    before = len(events)
    steps, turns = len(inbox.next_step), len(inbox.next_turn)
    pending_before = subject.pending_ids()
    subject.cancel(op.cause, op.keep_inbox)
    new = events[before:]
    what = f"cancel({op.cause!r}, keep_inbox={op.keep_inbox})"
    if op.keep_inbox or subject.disposed:
        if new or subject.pending_ids() != pending_before:
            raise InvariantViolation(
                f"{what} must leave the inbox as it was (appended {[e.type for e in new]})"
            )
        return
    if inbox.next_step or inbox.next_turn:
        raise InvariantViolation(f"{what} must discard everything pending")
    expected = [c for c in (steps, turns) if c]
    got = [
        e.data.removed_count if isinstance(e.data, InboxSplice) else e.type for e in new
    ]
    canceled = all(
        isinstance(e.data, InboxSplice) and e.data.outcome == "canceled" for e in new
    )
    if got != expected or not canceled:
        raise InvariantViolation(
            f"{what} must write canceled splices, next-step then next-turn {expected}; got {got}"
        )


async def _start_maintenance(
    nursery: trio.Nursery, subject: Subject, record: MaintenanceRecord
) -> None:
    nursery.start_soon(run_maintenance, subject, record)
    await trio.lowlevel.checkpoint()


def maintenance(loop: GuestLoop, subject: Subject, op: Maintenance) -> None:
    """Start a maintenance task: refused unless idle, and the status stays idle during it."""
    subject.sync()
    refusal: type[Exception] | None = None
    if subject.disposed:
        refusal = AgentDisposedError
    elif not subject.idle_phase():
        refusal = AgentBusyError
    record = MaintenanceRecord(len(subject.maintenances), op.mode, refusal)
    subject.maintenances.append(record)
    loop.call(_start_maintenance, loop.nursery, subject, record)
    if refusal is None and record.mode == "block" and not record.active:
        raise InvariantViolation(
            f"{record.describe()} should be running, but it is not"
        )
    if refusal is None and subject.agent.status is not AgentStatus.IDLE:
        raise InvariantViolation(
            f"the status must stay idle during {record.describe()}"
        )
    check_maintenance_outcomes(subject)


def release_maintenance(
    loop: GuestLoop,
    subject: Subject,
    op: ReleaseMaintenance,
    *,
    predict_scheduling: bool,
) -> None:
    """Let the blocked maintenance task return (or fail); a turn starts iff a wake was latched.

    Raises:
        LookupError: no maintenance task is blocked.
    """
    record = subject.blocked_maintenance()
    if record is None:
        raise LookupError("no maintenance task is blocked")
    start = len(subject.events)
    replay = record.woken and subject.agent.inbox.has_pending
    record.fail_on_release = op.fail
    record.released = True
    loop.run_sync(record.release.set)
    if not record.finished:
        raise InvariantViolation(f"{record.describe()} did not finish once released")
    check_maintenance_outcomes(subject)
    if predict_scheduling:
        restarted = any(e.type == "turn/start" for e in subject.events[start:])
        if restarted != replay:
            raise InvariantViolation(
                f"{record.describe()} ended; waking input during it was "
                f"{'latched' if record.woken else 'absent'} and the inbox was "
                f"{'not ' if not subject.agent.inbox.has_pending and not restarted else ''}empty: "
                f"a turn must start iff a wake was latched and work is pending (a turn started: {restarted})"
            )


def wait_idle(loop: GuestLoop, subject: Subject) -> None:
    """``await agent.when_idle()``: it completes, and leaves the agent idle with no open turn."""
    try:
        loop.call(subject.agent.when_idle)
    except Deadlock as exc:
        raise InvariantViolation(
            f"when_idle() never completed although the model was released: {exc}"
        ) from exc
    subject.sync()
    check_maintenance_outcomes(subject)
    if (
        subject.agent.status is not AgentStatus.IDLE
        or subject.checker.open_turn is not None
    ):
        raise InvariantViolation(
            f"when_idle() returned while the agent is {subject.agent.status} "
            f"(open turn: {subject.checker.open_turn})"
        )
    check_waiters_returned(subject)


async def _dispose_concurrently(subject: Subject, callers: int) -> None:
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(subject.handle.dispose)


def dispose(
    loop: GuestLoop,
    runtime: Runtime,
    host: RuntimeHost,
    subject: Subject,
    *,
    callers: int = 1,
    descendants: Sequence[Subject] = (),
    others_idle: bool = True,
) -> bool:
    """``await handle.dispose()`` from ``callers`` concurrent tasks, and check what it
    leaves: nothing pending, running or new, for the agent and its ``descendants``
    (disposed first). A second dispose must append nothing. With ``others_idle``,
    no task may remain in the runtime.

    Returns:
        Whether this was the agent's first dispose.
    """
    first = not subject.disposed
    live_below = [d for d in descendants if not d.disposed]
    if first:
        for node in (*live_below, subject):
            loop.run_sync(node.record_disposal)
    before = len(subject.events)
    loop.call(_dispose_concurrently, subject, callers)
    for node in live_below:
        node.sync()
        node.disposed = True
        node.disposed_length = len(node.events)
        if not node.agent.disposed:
            raise InvariantViolation(
                f"disposing {subject.agent.id} must dispose its descendant {node.agent.id} first"
            )
        check_subject(node)
        check_waiters_returned(node)
    subject.sync()
    subject.disposed = True
    check_maintenance_outcomes(subject)
    agent = subject.agent
    if not first and len(subject.events) != before:
        raise InvariantViolation("a second dispose() appended events")
    if not agent.disposed or runtime.agents.get(agent.id) is not None:
        raise InvariantViolation(
            "after dispose() the agent must be disposed and gone from the registry"
        )
    if subject.checker.open_turn is not None or agent.status is not AgentStatus.IDLE:
        raise InvariantViolation(
            "after dispose() no turn may stay open and the agent must be idle"
        )
    if agent.inbox.next_turn or agent.inbox.next_step:
        raise InvariantViolation("dispose() must durably discard the pending inbox")
    if first:
        subject.disposed_length = len(subject.events)
    leftovers = host.runtime_tasks() if others_idle else []
    if leftovers:
        raise InvariantViolation(
            f"tasks still run in the runtime after dispose(): {[t.name for t in leftovers]}"
        )
    check_subject(subject)
    check_waiters_returned(subject)
    return first
