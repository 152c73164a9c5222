"""The agents under test, and the recorders that keep what the machine sees of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import outcome
import trio

from ...errors import DshError
from ...events import (
    AgentDisposed,
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
    SessionEventAppended,
)
from ...llm import ModelRequest, RetryPolicy
from ...loop import Agent
from ...nursery import AgentHandle, Runtime
from ...values import AgentStatus, CancelCause, DisposedCancel, SessionEvent
from ._checker import LogChecker
from ._report import MaintenanceFailure

__all__ = [
    "ActivityKey",
    "MaintenanceRecord",
    "Subject",
    "Waiter",
    "record_notifications",
    "run_maintenance",
    "run_waiter",
]

#: An activity a cancel aborts: ``("turn", n)`` or ``("maintenance", n)``.
ActivityKey = tuple[str, int]


@attrs.define(eq=False)
class MaintenanceRecord:
    """One maintenance task the machine started, and what became of it."""

    number: int
    mode: str
    refusal: type[Exception] | None
    release: trio.Event = attrs.field(factory=trio.Event)
    fail_on_release: bool = False
    released: bool = False
    active: bool = False
    finished: bool = False
    woken: bool = False
    result: outcome.Outcome[int] | None = None
    verified: bool = False

    def describe(self) -> str:
        """How messages name this task."""
        return f"maintenance #{self.number} ({self.mode})"


@attrs.define(eq=False)
class Waiter:
    """A background ``await agent.when_idle()`` the machine parked."""

    number: int
    parked_at: int
    returned: bool = False
    #: What the agent was doing when the waiter returned, if not idle.
    busy: str | None = None


@attrs.define(eq=False)
class Subject:
    """One agent under test and everything the machine has seen of it."""

    handle: AgentHandle
    checker: LogChecker
    status_events: list[AgentStatus] = attrs.field(factory=list)
    statuses_checked: int = 0
    #: Live inbox notifications: (kind, message id, turn).
    notices: list[tuple[str, str, int | None]] = attrs.field(factory=list)
    notices_checked: int = 0
    disposed_events: int = 0
    #: The first cancel cause issued during each activity: ("turn", n) or ("maintenance", n).
    first_cause: dict[ActivityKey, CancelCause] = attrs.field(factory=dict)
    maintenances: list[MaintenanceRecord] = attrs.field(factory=list)
    disposed: bool = False
    disposed_length: int = -1
    #: The owning agent's subject (``None`` for a root).
    parent: Subject | None = None
    #: The agents whose ``agent/status`` its scoped listener heard.
    heard_scoped: list[Agent] = attrs.field(factory=list)
    #: The log length when the first cancel was issued to each activity.
    cancel_marks: dict[ActivityKey, int] = attrs.field(factory=dict)
    #: Model requests it made: (log length when the request reached the model, request).
    requests: list[tuple[int, ModelRequest]] = attrs.field(factory=list)
    requests_checked: int = 0
    waiters: list[Waiter] = attrs.field(factory=list)
    #: The retry policy of its provider.
    retry_policy: RetryPolicy | None = None
    #: The position in the runtime-wide event order when its dispose() began.
    dispose_mark: int | None = None

    @property
    def agent(self) -> Agent:
        """The agent."""
        return self.handle.agent

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The agent's session log."""
        return self.handle.agent.session.events

    def sync(self) -> None:
        """Fold the events appended since the last call."""
        self.checker.feed(self.events)

    def active_maintenance(self) -> MaintenanceRecord | None:
        """The maintenance task running now, if any."""
        for m in self.maintenances:
            if m.active:
                return m
        return None

    def blocked_maintenance(self) -> MaintenanceRecord | None:
        """A blocked maintenance task nobody released yet, if any."""
        for m in self.maintenances:
            if m.active and m.mode == "block" and not m.released:
                return m
        return None

    def activity(self) -> ActivityKey | None:
        """The activity a cancel issued now would abort (read from the log, not the agent)."""
        self.sync()
        m = self.active_maintenance()
        if m is not None:
            return ("maintenance", m.number)
        if self.checker.open_turn is not None:
            return ("turn", self.checker.open_turn)
        return None

    def pending_ids(self) -> list[str]:
        """Ids pending in the live inbox, next-turn first."""
        inbox = self.agent.inbox
        return [m.id for m in (*inbox.next_turn, *inbox.next_step)]

    def idle_phase(self) -> bool:
        """Idle, with no maintenance and no open turn (a waking send starts a turn now)."""
        return (
            self.agent.status is AgentStatus.IDLE
            and self.active_maintenance() is None
            and self.checker.open_turn is None
            and not self.disposed
        )

    def cancel(self, cause: CancelCause, keep_inbox: bool) -> None:
        """``agent.cancel(cause, keep_inbox=...)``, recording ``cause`` if it is the first."""
        activity = self.activity()
        if activity is not None and not self.disposed:
            self.first_cause.setdefault(activity, cause)
            self.cancel_marks.setdefault(activity, len(self.events))
        self.agent.cancel(cause, keep_inbox=keep_inbox)

    def record_disposal(self) -> None:
        """Record the ``DisposedCancel`` a dispose issues to the running activity."""
        activity = self.activity()
        if activity is not None:
            self.first_cause.setdefault(activity, DisposedCancel())
            self.cancel_marks.setdefault(activity, len(self.events))

    def ancestors(self) -> list[Subject]:
        """Its owners, nearest first."""
        chain = []
        node = self.parent
        while node is not None:
            chain.append(node)
            node = node.parent
        return chain

    def busy_now(self) -> str | None:
        """What holds the agent right now (inside the run), or ``None`` when idle."""
        if self.agent.status is not AgentStatus.IDLE:
            return f"status {self.agent.status}"
        m = self.active_maintenance()
        if m is not None:
            return m.describe()
        return None


def record_notifications(
    runtime: Runtime,
    by_agent: Mapping[Agent, Subject],
    order: list[tuple[Subject, SessionEvent]] | None = None,
    disposals: list[Subject] | None = None,
) -> None:
    """Record the runtime's status, inbox and disposal events on their subjects.

    With ``order``, every appended session event in runtime-wide order; with
    ``disposals``, the subjects in the order of their ``agent/disposed``.
    """
    bus = runtime.events

    def on_event(e: SessionEventAppended) -> None:
        for s in by_agent.values():
            if s.agent.session is e.session:
                assert order is not None
                order.append((s, e.event))
                return

    def on_status(e: AgentStatusChanged) -> None:
        s = by_agent.get(e.agent)
        if s is not None:
            s.status_events.append(e.status)

    def on_inserted(e: InboxInserted) -> None:
        s = by_agent.get(e.agent)
        if s is not None:
            s.notices.append(("inserted", e.message.id, None))

    def on_discarded(e: InboxDiscarded) -> None:
        s = by_agent.get(e.agent)
        if s is not None:
            s.notices.append(("discarded", e.message.id, None))

    def on_claimed(e: InboxClaimed) -> None:
        s = by_agent.get(e.agent)
        if s is not None:
            s.notices.append(("claimed", e.message.id, e.turn))

    def on_disposed(e: AgentDisposed) -> None:
        s = by_agent.get(e.agent)
        if s is not None:
            s.disposed_events += 1
            if disposals is not None:
                disposals.append(s)

    bus.on("agent/status", on_status)
    bus.on("agent/inbox/inserted", on_inserted)
    bus.on("agent/inbox/discarded", on_discarded)
    bus.on("agent/inbox/claimed", on_claimed)
    bus.on("agent/disposed", on_disposed)
    if order is not None:
        bus.on("session/event", on_event)


async def run_waiter(subject: Subject, waiter: Waiter) -> None:
    """``await agent.when_idle()`` in the background; record what the agent does when it returns."""
    await subject.agent.when_idle()
    waiter.returned = True
    waiter.busy = subject.busy_now()


async def run_maintenance(subject: Subject, record: MaintenanceRecord) -> None:  # noqa: ASYNC910  # a private task around run_maintenance, which checkpoints
    """Run ``record``'s task through ``agent.run_maintenance`` and record its outcome."""

    async def task(signal: object) -> int:
        record.active = True
        if record.mode == "block":
            await record.release.wait()
            if record.fail_on_release:
                raise MaintenanceFailure(record.number)
            return record.number
        await trio.lowlevel.checkpoint()
        if record.mode == "fail":
            raise MaintenanceFailure(record.number)
        return record.number

    try:
        record.result = outcome.Value(await subject.agent.run_maintenance(task))
    except (DshError, MaintenanceFailure) as exc:
        record.result = outcome.Error(exc)
    finally:
        record.active = False
        record.finished = True
