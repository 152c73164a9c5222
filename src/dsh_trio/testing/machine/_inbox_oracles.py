"""Oracles for the inbox operations: sends (``followup``, ``steer``, ``inject``,
``send``) and the public inbox edits.

Each oracle runs inside the trio run: it works out what the model of the inbox
expects, performs the operation on the agent, and raises
:class:`~dsh_trio.testing.InvariantViolation` when the agent's reaction (error,
result, appended splices, opened turn) differs.
"""

from __future__ import annotations

import attrs

from ...errors import AgentDisposedError, DuplicateMessageError
from ...loop import Agent, Inbox
from ...values import AgentStatus, InboxSplice, InboxTarget
from .._strategies import InboxEdit, Send
from ._report import InvariantViolation
from ._subject import Subject

__all__ = ["EditPrediction", "edit_inbox", "predict_edit", "send"]


def _deliver(agent: Agent, op: Send) -> None:
    method = op.method
    if method == "followup":
        agent.followup(op.message)
    elif method == "steer":
        agent.steer(op.message)
    elif method == "inject":
        agent.inject(op.message)
    else:
        agent.send(op.message, op.target, op.wakeup)


def send(
    subject: Subject, op: Send, *, after_abort: bool, predict_scheduling: bool
) -> bool:
    """Send ``op`` and check it: one insertion splice, a turn opened on an idle agent.

    A send to a disposed agent raises ``AgentDisposedError``, a pending id
    ``DuplicateMessageError``; either appends nothing. Waking input sent right
    after an abort (``after_abort``) goes to next-turn. With
    ``predict_scheduling``, a waking send to an idle agent opens a turn before it
    returns. A waking send during a maintenance task marks it woken.

    Returns:
        Whether a waking send was accepted.
    """
    agent = subject.agent
    subject.sync()
    events = subject.events
    before = len(events)
    target = InboxTarget(op.target)
    expected: type[Exception] | None = None
    if subject.disposed:
        expected = AgentDisposedError
    elif op.message.id in subject.pending_ids():
        expected = DuplicateMessageError
    idle = subject.idle_phase()
    maintenance = subject.active_maintenance()
    try:
        _deliver(agent, op)
    except (AgentDisposedError, DuplicateMessageError) as exc:
        if expected is None or not isinstance(exc, expected):
            raise InvariantViolation(
                f"{op!r} raised {exc!r}, but nothing made it invalid"
            ) from exc
        if len(events) != before:
            raise InvariantViolation(
                f"{op!r} was refused ({type(exc).__name__}) but still appended events"
            ) from exc
        return False
    if expected is not None:
        raise InvariantViolation(
            f"{op!r} was accepted, but it should raise {expected.__name__}"
        )
    new = events[before:]
    resolved = InboxTarget.NEXT_TURN if (after_abort and op.wakeup) else target
    if not new or new[0].type != "agent/inbox/spliced":
        raise InvariantViolation(f"{op!r} did not append its insertion splice first")
    splice = new[0].data
    assert isinstance(splice, InboxSplice)
    if (
        splice.target is not resolved
        or splice.inserted != (op.message,)
        or splice.removed_count
    ):
        redirect = (
            " (waking input after an abort goes to next-turn)"
            if resolved is not target
            else ""
        )
        raise InvariantViolation(
            f"{op!r} should insert exactly its message at the end of {resolved}{redirect}; got {splice!r}"
        )
    opened = agent.status is AgentStatus.RUNNING and any(
        e.type == "turn/start" for e in new
    )
    if predict_scheduling and op.wakeup and idle and not opened:
        raise InvariantViolation(
            f"{op!r} on an idle agent must open a turn before it returns (status {agent.status}, "
            f"appended {[e.type for e in new]})"
        )
    if op.wakeup and maintenance is not None:
        maintenance.woken = True
    return op.wakeup


@attrs.frozen(kw_only=True)
class EditPrediction:
    """What the model of the inbox expects from one inbox edit."""

    #: The message id the edit names (``remove``/``replace``), pending or not.
    picked: str
    #: The error the edit must raise, if any.
    error: type[Exception] | None
    #: The value the edit must return.
    result: object
    #: How many splices the edit must append.
    events: int


def predict_edit(subject: Subject, op: InboxEdit) -> EditPrediction:
    """What ``op`` must do to ``subject``'s inbox now."""
    inbox = subject.agent.inbox
    pending_ids = subject.pending_ids()
    target = InboxTarget(op.target)
    lst = list(inbox.next_turn if target is InboxTarget.NEXT_TURN else inbox.next_step)
    expected_events = 0
    expected_error: type[Exception] | None = (
        AgentDisposedError if subject.disposed else None
    )
    expected_result: object = None
    picked = pending_ids[op.pick] if op.pick < len(pending_ids) else f"absent-{op.pick}"
    inserted = op.messages
    if expected_error is None:
        if op.kind in ("append", "prepend"):
            if inserted[0].id in pending_ids:
                expected_error = DuplicateMessageError
            else:
                expected_events = 1
        elif op.kind == "remove":
            expected_result = picked in pending_ids
            expected_events = 1 if expected_result else 0
        elif op.kind == "replace":
            if picked not in pending_ids:
                expected_result = False
            elif inserted[0].id in pending_ids and inserted[0].id != picked:
                expected_error = DuplicateMessageError
            else:
                expected_result = True
                expected_events = 1
        elif op.kind == "splice":
            n = len(lst)
            s = op.start
            s = max(n + s, 0) if s < 0 else min(s, n)
            d = min(max(op.delete_count, 0), n - s)
            removed = lst[s : s + d]
            removed_ids = {m.id for m in removed}
            ids = [m.id for m in inserted]
            if len(set(ids)) != len(ids) or any(
                i in pending_ids and i not in removed_ids for i in ids
            ):
                expected_error = DuplicateMessageError
            else:
                expected_result = removed
                expected_events = 1 if (d or inserted) else 0
        else:  # clear
            expected_events = (1 if inbox.next_step else 0) + (
                1 if inbox.next_turn else 0
            )
    return EditPrediction(
        picked=picked,
        error=expected_error,
        result=expected_result,
        events=expected_events,
    )


def _perform_edit(inbox: Inbox, op: InboxEdit, picked: str) -> object:
    inserted = op.messages
    if op.kind == "append":
        inbox.append(op.target, inserted[0])
    elif op.kind == "prepend":
        inbox.prepend(op.target, inserted[0])
    elif op.kind == "remove":
        return inbox.remove(picked)
    elif op.kind == "replace":
        return inbox.replace(picked, inserted[0])
    elif op.kind == "splice":
        return inbox.splice(op.target, op.start, op.delete_count, inserted)
    else:
        inbox.clear()
    return None


def edit_inbox(subject: Subject, op: InboxEdit) -> None:
    """Apply the inbox edit ``op`` and check it against :func:`predict_edit`."""
    inbox = subject.agent.inbox
    subject.sync()
    events = subject.events
    before = len(events)
    want = predict_edit(subject, op)
    picked = want.picked
    try:
        result = _perform_edit(inbox, op, picked)
    except (AgentDisposedError, DuplicateMessageError) as exc:
        if want.error is None or not isinstance(exc, want.error):
            raise InvariantViolation(
                f"{op!r} (picked {picked!r}) raised {exc!r} unexpectedly"
            ) from exc
        if len(events) != before:
            raise InvariantViolation(
                f"{op!r} was refused but still appended events"
            ) from exc
        return
    if want.error is not None:
        raise InvariantViolation(
            f"{op!r} was accepted, but it should raise {want.error.__name__}"
        )
    if result != want.result:
        raise InvariantViolation(
            f"{op!r} (picked {picked!r}) returned {result!r}, expected {want.result!r}"
        )
    new = events[before:]
    if len(new) != want.events or any(e.type != "agent/inbox/spliced" for e in new):
        raise InvariantViolation(
            f"{op!r} should append {want.events} splice(s), appended {[e.type for e in new]}"
        )
    if op.kind == "clear" and (inbox.next_turn or inbox.next_step):
        raise InvariantViolation("inbox.clear() left messages pending")
