"""The machine's invariants, one function each.

Each takes the state it checks (mostly a :class:`Subject`, between steps) and
raises :class:`~dsh_trio.testing.InvariantViolation` when the invariant is broken.
:func:`check_subject` runs every per-agent invariant in order.
"""

from __future__ import annotations

import outcome

from ...errors import AgentCancelled
from ...values import (
    Aborted,
    AgentStatus,
    InboxTarget,
    SessionEvent,
    TurnEndReason,
)
from .._guest import GuestLoop
from ._harness import RuntimeHost
from ._report import InvariantViolation, MaintenanceFailure, note, violation_at
from ._subject import Subject

__all__ = [
    "check_disposed_emitted_once",
    "check_idle_holds_no_task",
    "check_inbox_is_the_fold",
    "check_maintenance_outcomes",
    "check_no_task_outlives_the_runtime",
    "check_nothing_after_dispose",
    "check_notifications_match_the_log",
    "check_runs_while_a_turn_is_open",
    "check_status_events_alternate",
    "check_status_matches_its_events",
    "check_subject",
    "check_turn_end",
]


def check_turn_end(
    subject: Subject, turn: int, reason: TurnEndReason, event: SessionEvent
) -> None:
    """A turn ends ``Aborted`` with the first cause issued during it, and only then."""
    cause = subject.first_cause.get(("turn", turn))
    if cause is not None:
        if reason != Aborted(cause):
            raise violation_at(
                event,
                f"turn {turn} should end Aborted({cause!r}), the first cause issued during it; got {reason!r}",
            )
    elif isinstance(reason, Aborted):
        raise violation_at(
            event,
            f"turn {turn} ended {reason!r}, but no cancel was issued during it",
        )


def check_inbox_is_the_fold(subject: Subject) -> None:
    """The live inbox equals the fold of the durable ``agent/inbox/spliced`` events."""
    agent, checker = subject.agent, subject.checker
    for target, live in (
        (InboxTarget.NEXT_TURN, agent.inbox.next_turn),
        (InboxTarget.NEXT_STEP, agent.inbox.next_step),
    ):
        folded = checker.pending_messages(target)
        if tuple(live) != folded:
            raise InvariantViolation(
                f"{agent.id}: inbox {target} is {[m.id for m in live]} but the durable splices fold to "
                f"{[m.id for m in folded]}"
            )
    if agent.inbox.has_pending != bool(checker.pending):
        raise InvariantViolation(
            f"{agent.id}: inbox.has_pending is {agent.inbox.has_pending}, the fold says otherwise"
        )


def check_notifications_match_the_log(subject: Subject) -> None:
    """The live inserted/claimed/discarded notifications match the fold."""
    # Both only grow: compare what is new.
    heard, logged, seen = (
        subject.notices,
        subject.checker.notices,
        subject.notices_checked,
    )
    if len(heard) != len(logged) or heard[seen:] != logged[seen:]:
        n = next(
            (
                i
                for i in range(seen, min(len(heard), len(logged)))
                if heard[i] != logged[i]
            ),
            min(len(heard), len(logged)),
        )
        raise InvariantViolation(
            f"{subject.agent.id}: live inbox notifications diverge from the log at #{n}: heard "
            f"{heard[n : n + 3]}, from the log {logged[n : n + 3]}"
        )
    subject.notices_checked = len(heard)


def check_status_events_alternate(subject: Subject) -> None:
    """``agent/status`` events alternate running/idle."""
    events = subject.status_events
    for i in range(subject.statuses_checked, len(events)):
        want = AgentStatus.RUNNING if i % 2 == 0 else AgentStatus.IDLE
        if events[i] is not want:
            raise InvariantViolation(
                f"{subject.agent.id}: agent/status events must alternate running/idle; got {events}"
            )
    subject.statuses_checked = len(events)


def check_status_matches_its_events(subject: Subject) -> None:
    """``agent.status`` is what the last ``agent/status`` event said."""
    agent, events = subject.agent, subject.status_events
    last = events[-1] if events else AgentStatus.IDLE
    if agent.status is not last:
        raise InvariantViolation(
            f"{agent.id}: agent.status is {agent.status} but the last agent/status event said {last}"
        )


def check_runs_while_a_turn_is_open(subject: Subject) -> None:
    """Between steps an agent runs exactly while a turn is open."""
    agent, checker = subject.agent, subject.checker
    if (agent.status is AgentStatus.RUNNING) != (checker.open_turn is not None):
        raise InvariantViolation(
            f"{agent.id}: between steps an agent runs exactly while a turn is open; status {agent.status}, "
            f"open turn {checker.open_turn}"
        )


def check_nothing_after_dispose(subject: Subject) -> None:
    """Nothing is appended to a disposed agent's log."""
    if subject.disposed and len(subject.events) != subject.disposed_length:
        extra = [e.type for e in subject.events[subject.disposed_length :]]
        raise InvariantViolation(
            f"{subject.agent.id}: events were appended after dispose(): {extra}"
        )


def check_disposed_emitted_once(subject: Subject) -> None:
    """``agent/disposed`` is emitted once after dispose, and never before."""
    agent = subject.agent
    if subject.disposed:
        if subject.disposed_events != 1:
            raise InvariantViolation(
                f"{agent.id}: agent/disposed must be emitted exactly once; it was {subject.disposed_events} times"
            )
    elif subject.disposed_events:
        raise InvariantViolation(
            f"{agent.id}: agent/disposed was emitted although dispose() was never called"
        )


def check_maintenance_outcomes(subject: Subject) -> None:
    """Every finished maintenance task ended as it should (checked once per task).

    A refused task raises the refusal; a task cancelled during its run raises
    ``AgentCancelled`` with the first cause issued during it; otherwise it returns
    its own result or raises its own failure.
    """
    for record in subject.maintenances:
        if not record.finished or record.verified:
            continue
        record.verified = True
        result = record.result
        assert result is not None
        cause = subject.first_cause.get(("maintenance", record.number))
        if record.refusal is not None:
            ok = isinstance(result, outcome.Error) and isinstance(
                result.error, record.refusal
            )
            want = record.refusal.__name__
        elif cause is not None:
            ok = (
                isinstance(result, outcome.Error)
                and isinstance(result.error, AgentCancelled)
                and result.error.cause == cause
            )
            want = f"AgentCancelled({cause!r}), the first cause issued during it"
        elif record.mode == "fail" or (
            record.mode == "block" and record.fail_on_release
        ):
            ok = isinstance(result, outcome.Error) and isinstance(
                result.error, MaintenanceFailure
            )
            want = "the task's own MaintenanceFailure"
        else:
            ok = isinstance(result, outcome.Value) and result.unwrap() == record.number
            want = f"the task's result {record.number}"
        if not ok:
            got = result.error if isinstance(result, outcome.Error) else result.unwrap()
            raise InvariantViolation(
                f"{record.describe()} ended with {got!r}; expected {want}"
            )
        label = (
            type(result.error).__name__
            if isinstance(result, outcome.Error)
            else "a result"
        )
        note(f"maintenance ended with {label}")


def check_subject(subject: Subject) -> None:
    """Fold the new events of ``subject``'s log and check every per-agent invariant."""
    subject.sync()
    check_inbox_is_the_fold(subject)
    check_notifications_match_the_log(subject)
    check_status_events_alternate(subject)
    check_status_matches_its_events(subject)
    check_runs_while_a_turn_is_open(subject)
    check_nothing_after_dispose(subject)
    check_disposed_emitted_once(subject)
    check_maintenance_outcomes(subject)


def check_idle_holds_no_task(subject: Subject, host: RuntimeHost) -> None:
    """An idle agent with no maintenance holds no task in the runtime."""
    if (
        subject.agent.status is AgentStatus.IDLE
        and subject.active_maintenance() is None
    ):
        busy = host.runtime_tasks()
        if busy:
            raise InvariantViolation(
                f"an idle agent must hold no task; running: {[t.name for t in busy]}"
            )


def check_no_task_outlives_the_runtime(loop: GuestLoop) -> None:
    """Once the runtime closed, no task is left in the trio run."""
    leaked = loop.live_tasks()
    if leaked:
        raise InvariantViolation(
            f"tasks outlived the runtime: {[t.name for t in leaked]}"
        )
