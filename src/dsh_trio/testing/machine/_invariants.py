"""The machine's invariants, one function each.

Each takes the state it checks (mostly a :class:`Subject`, between steps) and
raises :class:`~dsh_trio.testing.InvariantViolation` when the invariant is broken.
:func:`check_subject` runs every per-agent invariant in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import outcome

from ...errors import AgentCancelled
from ...loop import Agent
from ...nursery import Runtime
from ...values import (
    Aborted,
    AgentStatus,
    Errored,
    InboxTarget,
    SessionEvent,
    TurnEnd,
    TurnEndReason,
)
from .._guest import GuestLoop
from ._checker import fold_messages
from ._harness import RuntimeHost
from ._report import InvariantViolation, MaintenanceFailure, note, violation_at
from ._subject import Subject

__all__ = [
    "check_disposal_order",
    "check_nothing_starts_after_a_cancel",
    "check_requests_fold_the_log",
    "check_retries",
    "check_scoped_listener",
    "check_tree",
    "check_waiters",
    "check_waiters_returned",
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
    """A turn ends ``Aborted`` with the first cause issued during it, and only then;
    a failure the policy retries ends it only after ``max_retries`` retries."""
    check_retries(subject, turn, reason, event)
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


def check_retries(
    subject: Subject, turn: int, reason: TurnEndReason, event: SessionEvent
) -> None:
    """No step retries more than the policy allows; a retryable failure ends a turn
    only after exactly ``max_retries`` ``llm/retry`` events in its last step."""
    policy = subject.retry_policy
    if policy is None:
        return
    checker = subject.checker
    for step in range(1, checker.last_step + 1):
        n = checker.retries.get((turn, step), 0)
        if n > policy.max_retries:
            raise violation_at(
                event,
                f"step {turn}/{step} retried {n} times; the policy allows {policy.max_retries}",
            )
    if (
        isinstance(reason, Errored)
        and reason.error.code in policy.retryable_codes
        and reason.error.retry_after_ms is None
    ):
        step = checker.last_step
        n = checker.retries.get((turn, step), 0)
        if n != policy.max_retries:
            raise violation_at(
                event,
                f"turn {turn} ended Errored({reason.error.code}) after {n} llm/retry "
                f"events in step {step}; the policy retries it max_retries={policy.max_retries} times",
            )
        note("a retryable failure used up its retries")


def check_requests_fold_the_log(subject: Subject) -> None:
    """Every model request carries exactly the fold of the log at the time it was made."""
    events = subject.events
    for i in range(subject.requests_checked, len(subject.requests)):
        length, request = subject.requests[i]
        want = fold_messages(events[:length])
        if want is None:
            continue
        got = list(request.messages)
        if got != want:
            n = next(
                (k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                min(len(got), len(want)),
            )
            raise InvariantViolation(
                f"{subject.agent.id}: model request #{i} (after {length} events) carries "
                f"{len(got)} messages but the log folds to {len(want)}; they differ at #{n}: "
                f"{_ids(got[n : n + 2])} != {_ids(want[n : n + 2])}"
            )
    subject.requests_checked = len(subject.requests)


def _ids(messages: object) -> list[str]:
    return [getattr(m, "id", "?") for m in messages]  # type: ignore[attr-defined]


def check_nothing_starts_after_a_cancel(subject: Subject) -> None:
    """Once a cancel is issued to a turn, no step, message or model request starts in it."""
    events = subject.events
    for (kind, number), mark in subject.cancel_marks.items():
        if kind != "turn":
            continue
        end = len(events)
        for event in events[mark:]:
            data = event.data
            if isinstance(data, TurnEnd) and data.turn == number:
                end = event.seq
                break
            if event.type in ("step/start", "user/message"):
                raise violation_at(
                    event,
                    f"turn {number} starts a {event.type} after a cancel was issued to it "
                    f"(at #{mark}): nothing may start once a cancel is issued",
                )
        for length, _request in subject.requests:
            if mark < length <= end:
                raise InvariantViolation(
                    f"{subject.agent.id}: turn {number} made a model request (after "
                    f"{length} events) although a cancel was issued to it at #{mark}"
                )


def check_waiters(subject: Subject) -> None:
    """A ``when_idle()`` waiter returns only once no driver or maintenance task remains."""
    for waiter in subject.waiters:
        if waiter.returned and waiter.busy is not None:
            raise InvariantViolation(
                f"{subject.agent.id}: when_idle() waiter #{waiter.number} (parked after "
                f"{waiter.parked_at} events) returned while the agent was busy ({waiter.busy}); "
                "it must follow the replacement driver"
            )


def check_waiters_returned(subject: Subject) -> None:
    """On an idle (or disposed) agent every parked ``when_idle()`` waiter has returned."""
    for waiter in subject.waiters:
        if not waiter.returned:
            raise InvariantViolation(
                f"{subject.agent.id}: when_idle() waiter #{waiter.number} (parked after "
                f"{waiter.parked_at} events) never returned although the agent is idle"
            )


def check_scoped_listener(subject: Subject, by_agent: Mapping[Agent, Subject]) -> None:
    """A listener scoped to an agent hears only that agent and its descendants."""
    for agent in subject.heard_scoped:
        heard = by_agent.get(agent)
        if heard is subject or (heard is not None and subject in heard.ancestors()):
            continue
        raise InvariantViolation(
            f"a listener scoped to {subject.agent.id} heard agent/status of {agent.id}, "
            "which is neither that agent nor one of its descendants"
        )
    subject.heard_scoped.clear()


def check_tree(runtime: Runtime, subjects: Sequence[Subject]) -> None:
    """``roots()`` and ``is_owned_by`` match the model's ownership tree."""
    live = [s for s in subjects if not s.disposed]
    want = {s.agent.id for s in live if s.parent is None}
    got = {a.id for a in runtime.agents.roots()}
    if got != want:
        raise InvariantViolation(
            f"runtime.agents.roots() is {sorted(got)}; the tree has roots {sorted(want)}"
        )
    for s in live:
        if s.parent is not None and not runtime.agents.is_owned_by(
            s.agent.id, s.parent.agent
        ):
            raise InvariantViolation(
                f"{s.agent.id} should be owned by {s.parent.agent.id}"
            )


def check_disposal_order(
    node: Subject,
    subjects: Sequence[Subject],
    order: Sequence[tuple[Subject, SessionEvent]],
    disposals: Sequence[Subject],
) -> None:
    """After ``node``'s dispose: its descendants were disposed (``agent/disposed``) before
    it, and none of them appended after it started draining."""
    below = [s for s in subjects if node in s.ancestors()]
    for child in below:
        if child.parent is None or child.parent not in disposals:
            continue
        if child not in disposals or disposals.index(child) > disposals.index(
            child.parent
        ):
            raise InvariantViolation(
                f"agent/disposed of {child.agent.id} must precede its owner {child.parent.agent.id}'s"
            )
    mark = node.dispose_mark
    if mark is None:
        return
    first = next((i for i in range(mark, len(order)) if order[i][0] is node), None)
    if first is None:
        return
    for i in range(first + 1, len(order)):
        s, event = order[i]
        if s in below:
            mine = order[first][1]
            raise InvariantViolation(
                f"disposing {node.agent.id} drained it before its descendant {s.agent.id} was "
                f"disposed: {s.agent.id}'s #{event.seq} ({event.type}) came after "
                f"{node.agent.id}'s #{mine.seq} ({mine.type})"
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
    check_requests_fold_the_log(subject)
    check_nothing_starts_after_a_cancel(subject)
    check_waiters(subject)


def check_idle_holds_no_task(
    subject: Subject | Sequence[Subject], host: RuntimeHost
) -> None:
    """Idle agents with no maintenance hold no task in the runtime."""
    subjects = [subject] if isinstance(subject, Subject) else subject
    if all(
        s.disposed
        or (s.agent.status is AgentStatus.IDLE and s.active_maintenance() is None)
        for s in subjects
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
