"""The machinery under :class:`AgentStateMachine`'s rules: agents, operations, waiting, teardown.

:class:`MachineCore` builds the runtime and its agents, applies one operation
through its oracle (``_inbox_oracles``, ``_activity_oracles``), drains, checks the
invariants (``_invariants``), tears down and replays operation lists; the rules
themselves live in ``_rules``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import trio
import trio.testing
from hypothesis.stateful import RuleBasedStateMachine

from ...events import AgentStatusChanged
from ...llm import ModelRequest
from ...loop import Agent
from ...nursery import AgentHandle, Runtime
from ...values import (
    AgentOptions,
    CancelCause,
    SessionEvent,
    TurnEndReason,
)
from .._guest import GuestLoop, advance_by, advance_to_next_deadline
from .._strategies import (
    Advance,
    Answer,
    Cancel,
    Dispose,
    InboxEdit,
    Maintenance,
    Operation,
    ReleaseGate,
    ReleaseMaintenance,
    SelectPreset,
    Send,
    WaitIdle,
)
from . import (
    _activity_oracles as activity_oracles,
    _inbox_oracles as inbox_oracles,
    _invariants as invariants,
    _preset_oracle as preset_oracle,
)
from ._checker import LogChecker
from ._harness import ModelDesk, RuntimeHost, release_one
from ._report import DeliberateFailures, ListenerFailure, MaintenanceFailure
from ._subject import Subject, record_notifications

__all__ = ["MachineCore"]


class MachineCore(RuleBasedStateMachine):
    """Everything of :class:`AgentStateMachine` but its rules and invariant (see there)."""

    #: Options of the agents under test (their route is the desk's model).
    options: ClassVar[AgentOptions] = AgentOptions(
        provider="scripted", model="scripted-model"
    )
    #: The runtime's persona section.
    system_prompt: ClassVar[str | None] = "You are the agent under test."
    #: Names the model's tool calls use, in turn.
    tool_names: ClassVar[tuple[str, ...]] = ("lookup",)
    #: Whether to check the scheduling the base runtime promises (synchronous
    #: prefix, wake latch, parking, maintenance replay); turn it off if your hooks
    #: drive turns themselves.
    predict_scheduling: ClassVar[bool] = True
    #: Session ids are this prefix and a number.
    session_prefix: ClassVar[str] = "agent-under-test"

    def __init__(self) -> None:
        super().__init__()
        self.clock = trio.testing.MockClock()  # rate 0, no autojump: time is a rule
        self.loop = GuestLoop(clock=self.clock)
        #: The machine's own deliberate failures the runtime logged (raising
        #: listeners, failing maintenance), kept here instead of in the log so that
        #: a failing test's report shows the program, not hundreds of tracebacks.
        self._deliberate = DeliberateFailures((ListenerFailure, MaintenanceFailure))
        self._deliberate.install()
        try:
            self.desk = ModelDesk()
            kwargs: dict[str, Any] = {
                "models": {"scripted": self.desk.model},
                "system_prompt": self.system_prompt,
                "presets": preset_oracle.MACHINE_PRESETS,
            }
            kwargs.update(self.runtime_options())
            self.host = RuntimeHost(self.loop, **kwargs)
            self.runtime: Runtime = self.host.start()
            self.subjects: list[Subject] = []
            self._by_agent: dict[Agent, Subject] = {}
            #: Every appended session event, in runtime-wide order.
            self.event_order: list[tuple[Subject, SessionEvent]] = []
            #: Subjects in the order of their ``agent/disposed``.
            self.disposal_order: list[Subject] = []
            self._raising: list[str] = []
            self._waiters = 0
            record_notifications(
                self.runtime, self._by_agent, self.event_order, self.disposal_order
            )
            self.desk.on_request = self._on_request
            self.subject: Subject = self._new_subject()
        except BaseException:
            self._close_loop()  # a half-built example must not poison the next one
            raise

    # ------------------------------------------------------------------ extension points

    def runtime_options(self) -> dict[str, Any]:
        """Extra ``open_runtime`` keyword arguments (``tools``, ...). Default: none."""
        return {}

    def setup_agent(self, agent: Agent) -> None:
        """Register hooks and listeners on a fresh agent (runs inside the trio run)."""

    def unblock(self) -> None:
        """Release whatever your own hooks hold; called (inside trio) while waiting for idleness."""

    def tool_arguments(self, name: str) -> str:
        """The JSON arguments the model passes to tool ``name``. Default ``"{}"``."""
        return "{}"

    def cancel_agent(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """``agent.cancel(cause, keep_inbox=...)``, recorded for the first-cause check.

        Synchronous; call it inside the trio run (rules do; hooks already are).
        """
        self.subject.cancel(cause, keep_inbox)

    # ------------------------------------------------------------------ agents

    @property
    def agent(self) -> Agent:
        """The agent under test now."""
        return self.subject.agent

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The session log of the agent under test."""
        return self.subject.events

    @property
    def deliberate_failures(self) -> Sequence[str]:
        """What the runtime logged of the machine's deliberate failures, in order.

        Each is ``"<log message>: <exception>"``, e.g. ``'listener of event
        "agent/status" raised: ListenerFailure('agent/status')'``. These records
        stay out of the ``dsh_trio`` log while the machine runs; any other record
        (a real failure) is logged as usual.
        """
        return self._deliberate.seen

    def _new_subject(self, parent: Subject | None = None) -> Subject:
        session_id = f"{self.session_prefix}-{len(self.subjects)}"
        holder: list[Subject] = []

        def check_turn_end(
            turn: int, reason: TurnEndReason, event: SessionEvent
        ) -> None:
            invariants.check_turn_end(holder[0], turn, reason, event)

        async def create() -> AgentHandle:
            return await self.runtime.agents.create(
                session_id,
                options=self.options,
                parent=None if parent is None else parent.agent,
            )

        handle = self.loop.call(create)
        subject = Subject(handle, LogChecker(on_turn_end=check_turn_end), parent=parent)
        subject.retry_policy = self.runtime.models.retry_policy(
            self.options.provider or ""
        )
        holder.append(subject)
        self.subjects.append(subject)
        self._by_agent[handle.agent] = subject

        def heard(e: AgentStatusChanged) -> None:
            subject.heard_scoped.append(e.agent)

        self.runtime.events.on("agent/status", heard, scope=handle.agent)
        self.loop.run_sync(self.setup_agent, handle.agent)
        return subject

    def _on_request(self, request: ModelRequest) -> None:
        for s in self.subjects:
            if s.agent.id == request.session_id and not s.disposed:
                s.requests.append((len(s.events), request))
                return

    def live_subjects(self) -> list[Subject]:
        """Every agent of the tree that is not disposed (the agent under test first)."""
        return [s for s in self.subjects if not s.disposed]

    def _descendants(self, node: Subject) -> list[Subject]:
        """``node``'s descendants, deepest first."""
        below = [s for s in self.subjects if node in s.ancestors()]
        return sorted(below, key=lambda s: -len(s.ancestors()))

    # ------------------------------------------------------------------ applying operations

    def applicable(self, op: Operation) -> bool:
        """Whether ``op`` can be applied now (its rule's precondition)."""
        if isinstance(op, Answer):
            return bool(self.desk.unanswered)
        if isinstance(op, ReleaseGate):
            return self.desk.held_gate() is not None
        if isinstance(op, ReleaseMaintenance):
            return self.subject.blocked_maintenance() is not None
        return True

    def apply(self, op: Operation) -> None:
        """Apply one operation to the agent under test and check what it promises.

        Raises:
            InvariantViolation: the agent's reaction broke a rule.
            Deadlock: an awaited operation stayed blocked with every task idle.
            LookupError: the operation is not applicable now (see :meth:`applicable`).
        """
        self.apply_to(self.subject, op)

    def apply_to(self, subject: Subject, op: Operation) -> None:
        """:meth:`apply` for a given (possibly disposed) agent."""
        predict = self.predict_scheduling
        if isinstance(op, Send):
            self.loop.run_sync(
                lambda: inbox_oracles.send(
                    subject, op, after_abort=False, predict_scheduling=predict
                )
            )
        elif isinstance(op, InboxEdit):
            self.loop.run_sync(inbox_oracles.edit_inbox, subject, op)
        elif isinstance(op, Cancel):
            activity_oracles.cancel(self.loop, subject, op, predict_scheduling=predict)
        elif isinstance(op, Maintenance):
            activity_oracles.maintenance(self.loop, subject, op)
        elif isinstance(op, ReleaseMaintenance):
            activity_oracles.release_maintenance(
                self.loop, subject, op, predict_scheduling=predict
            )
        elif isinstance(op, Answer):
            script = self.desk.script_for(op, self.tool_names, self.tool_arguments)
            self.loop.run_sync(
                lambda: self.desk.answer(script, hangs=op.kind == "hang")
            )
        elif isinstance(op, ReleaseGate):
            self.loop.run_sync(self.desk.open_gate, op.fail_code)
        elif isinstance(op, Advance):
            self.loop.call(advance_by, self.clock, op.seconds)
        elif isinstance(op, WaitIdle):
            if subject is self.subject:
                self.drain()
            activity_oracles.wait_idle(self.loop, subject)
        elif isinstance(op, Dispose):
            self._dispose(subject, revive=subject is self.subject)
        elif isinstance(op, SelectPreset):
            preset_oracle.select_preset(self.loop, self.runtime, subject, op.preset)
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"not an operation: {op!r}")

    def _dispose(self, subject: Subject, *, revive: bool, callers: int = 1) -> None:
        below = self._descendants(subject)
        if not subject.disposed:
            subject.dispose_mark = len(self.event_order)
        others = [
            s for s in self.live_subjects() if s is not subject and s not in below
        ]
        first = activity_oracles.dispose(
            self.loop,
            self.runtime,
            self.host,
            subject,
            callers=callers,
            descendants=below,
            others_idle=all(s.busy_now() is None for s in others),
        )
        invariants.check_disposal_order(
            subject, self.subjects, self.event_order, self.disposal_order
        )
        if first and revive:
            self.subject = self._new_subject()

    # ------------------------------------------------------------------ waiting

    def drain(self, *, limit: int = 500) -> None:
        """Release everything that holds the agent until it is idle or nothing is left to do.

        Answers every waiting model request with a plain reply, opens held gates,
        cancels (``keep_inbox``) a turn stuck in a hanging stream, releases blocked
        maintenance, calls :meth:`unblock`, and moves virtual time to the next
        deadline when nothing else is left.
        """
        for _ in range(limit):
            if self.loop.run_sync(self._release_one):
                continue
            if all(s.idle_phase() for s in self.live_subjects()):
                return
            if not self.loop.call(advance_to_next_deadline, self.clock):
                return

    def _release_one(self) -> bool:
        for subject in self.live_subjects():
            if release_one(self.desk, subject):
                return True
        self.unblock()
        return False

    # ------------------------------------------------------------------ invariants

    def assert_invariants(self) -> None:
        """Check every invariant of every agent now (between steps).

        Raises:
            InvariantViolation: the first broken invariant.
        """
        for subject in self.subjects:
            invariants.check_subject(subject)
            invariants.check_scoped_listener(subject, self._by_agent)
            preset_oracle.check_preset_binding(self.runtime, subject)
        invariants.check_tree(self.runtime, self.subjects)
        invariants.check_idle_holds_no_task(self.live_subjects(), self.host)

    # ------------------------------------------------------------------ teardown

    def teardown(self) -> None:
        """Release the model, wait for idleness, dispose, close the runtime, check no task is left."""
        if sys.exc_info()[1] is not None:
            self._close_quietly()  # a failure is already propagating: it is the report
            return
        try:
            self.apply(WaitIdle())
            self._dispose(self.subject, revive=False)
            self.assert_invariants()
            self.host.stop()
            invariants.check_no_task_outlives_the_runtime(self.loop)
        except BaseException:
            self._close_quietly()
            raise
        self._close_loop()

    def _close_loop(self) -> None:
        try:
            self.loop.close()
        finally:
            self._deliberate.uninstall()

    def _close_quietly(self) -> None:
        # Only while another failure propagates: that failure is the report, not
        # what closing a broken run raises on top of it.
        with contextlib.suppress(Exception):
            self._close_loop()

    # ------------------------------------------------------------------ replay

    @classmethod
    def check_operations(cls, operations: Iterable[Operation]) -> None:
        """Run ``operations`` on a fresh machine, checking the invariants after each.

        Operations that are not applicable at their turn are skipped. Blocks until
        done (the trio run is hosted in this thread).

        Example::

            AgentStateMachine.check_operations([
                Send(user_message("hi", id="m0"), "next-turn", True),
                Answer("reply", text="hello"),
                Cancel(UserCancel(), keep_inbox=True),
            ])

        Raises:
            InvariantViolation: an invariant broke.
            Deadlock: an operation got stuck.
        """
        machine = cls()
        try:
            machine.assert_invariants()
            for op in operations:
                if machine.applicable(op):
                    machine.apply(op)
                    machine.assert_invariants()
        finally:
            machine.teardown()
