"""The rules of :class:`AgentStateMachine`: what hypothesis may do to the agents, and when it checks.

The class only wires things together: each rule applies one operation through its
oracle (``_inbox_oracles``, ``_activity_oracles``), and the invariant runs the
invariant functions (``_invariants``) over every agent.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import trio
import trio.testing
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ...events import AgentStatusChanged
from ...llm import ModelRequest
from ...loop import Agent
from ...nursery import AgentHandle, Runtime
from ...values import (
    AgentOptions,
    AgentStatus,
    CancelCause,
    InboxTarget,
    SessionEvent,
    TurnEndReason,
    UserMessage,
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
    Send,
    WaitIdle,
    answers,
    cancels,
    inbox_edits,
    maintenances,
    sends,
    user_messages,
)
from . import (
    _activity_oracles as activity_oracles,
    _inbox_oracles as inbox_oracles,
    _invariants as invariants,
)
from ._checker import LogChecker
from ._harness import ModelDesk, RuntimeHost, release_one
from ._subject import Subject, Waiter, record_notifications, run_waiter

__all__ = ["AgentStateMachine"]


class _ListenerFailure(Exception):
    """What the machine's raising listeners raise."""


class AgentStateMachine(RuleBasedStateMachine):
    """A state machine driving the agents of a fresh runtime, one example per trio run.

    Each example opens a runtime inside a :class:`GuestLoop` (its scripted model,
    a :class:`ModelDesk`, is the provider ``"scripted"``) and creates an agent.
    Rules send input, edit the inbox, cancel, run maintenance, answer the model,
    move virtual time, wait for idleness and dispose; after a dispose the machine
    keeps checking the disposed agent and carries on with a fresh one. The
    invariants (:meth:`assert_invariants`) run after every step; teardown releases
    the model, waits for idleness, disposes, closes the runtime and checks that no
    task is left.

    Subclass it to check your own code against these invariants:

    * :meth:`setup_agent` registers hooks and listeners on each fresh agent;
    * :meth:`runtime_options` passes extra ``open_runtime`` arguments (tools, ...),
      and :attr:`tool_names`/:meth:`tool_arguments` shape the model's tool calls;
    * :meth:`unblock` releases whatever your hooks hold when the machine waits for
      idleness;
    * hooks that cancel call :meth:`cancel_agent`, so the first-cause check knows;
    * set :attr:`predict_scheduling` to ``False`` if your hooks start, stop or
      cancel turns themselves (every structural invariant keeps running);
    * add your own ``@rule``/``@invariant`` methods; :attr:`agent` is the agent
      under test.

    Example::

        class MyHookMachine(AgentStateMachine):
            def setup_agent(self, agent):
                agent.scope.on("agent/pre-step", my_pre_step_hook)

        TestMyHook = MyHookMachine.TestCase
        TestMyHook.settings = machine_settings()
    """

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
        try:
            self.desk = ModelDesk()
            kwargs: dict[str, Any] = {
                "models": {"scripted": self.desk.model},
                "system_prompt": self.system_prompt,
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
            self.loop.close()  # a half-built example must not poison the next one
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

    def _node(self, pick: int) -> Subject:
        """A live node of the tree (``pick`` modulo their number): the agent under test or a child."""
        live = self.live_subjects()
        return live[pick % len(live)]

    def _descendants(self, node: Subject) -> list[Subject]:
        """``node``'s descendants, deepest first."""
        below = [s for s in self.subjects if node in s.ancestors()]
        return sorted(below, key=lambda s: -len(s.ancestors()))

    def _graveyard(self) -> Subject | None:
        disposed = [s for s in self.subjects if s.disposed]
        return disposed[-1] if disposed else None

    def _busy(self) -> bool:
        s = self.subject
        return (
            s.agent.status is AgentStatus.RUNNING or s.active_maintenance() is not None
        )

    # ------------------------------------------------------------------ rules

    @initialize(seed=st.random_module())
    def seed_scheduler(self, seed: object) -> None:
        """Seed trio's scheduler and ``random`` (reproducibly, per example)."""

    @initialize(children=st.sampled_from((0, 1, 2)), nested=st.booleans())
    def grow_tree(self, children: int, nested: bool) -> None:
        """Start with ``children`` child agents of the agent under test (``nested``: a chain)."""
        for _ in range(children):
            self.spawn_child(nested)

    @rule(message=user_messages())
    def followup(self, message: UserMessage) -> None:
        """``agent.followup(message)``."""
        self.apply(Send(message, InboxTarget.NEXT_TURN, True))

    @rule(message=user_messages())
    def steer(self, message: UserMessage) -> None:
        """``agent.steer(message)``."""
        self.apply(Send(message, InboxTarget.NEXT_STEP, True))

    @rule(op=sends())
    def send(self, op: Send) -> None:
        """``inject`` or ``send`` with any target and wakeup (fresh or duplicate ids)."""
        self.apply(op)

    @rule(op=inbox_edits())
    def edit_inbox(self, op: InboxEdit) -> None:
        """A public inbox edit: remove, replace, splice, clear, append, prepend."""
        self.apply(op)

    @rule(op=cancels())
    def cancel(self, op: Cancel) -> None:
        """Cancel with a cause and ``keep_inbox``, then send in the same tick."""
        self.apply(op)

    @rule(op=maintenances())
    def maintenance(self, op: Maintenance) -> None:
        """Start a maintenance task that blocks, completes or fails."""
        self.apply(op)

    # Rules with nothing to act on do nothing rather than carry a precondition:
    # hypothesis's shrinker deletes such steps, where a precondition would keep it
    # from deleting any step of a long program.

    @rule(op=cancels())
    def interrupt(self, op: Cancel) -> None:
        """Cancel (then send in the same tick) while a turn or maintenance task runs, if one does."""
        if self._busy():
            self.apply(op)

    @rule(fail=st.booleans())
    def release_maintenance(self, fail: bool) -> None:
        """Let the blocked maintenance task return, or fail (if one is blocked)."""
        if self.subject.blocked_maintenance() is not None:
            self.apply(ReleaseMaintenance(fail))

    @rule(op=answers("reply", "max-tokens", "tool-calls"))
    def answer_model(self, op: Answer) -> None:
        """Answer the held model request with text, max-tokens or tool calls (if one is held)."""
        if self.desk.unanswered:
            self.apply(op)

    @rule(op=answers("fail", "fail-in-band", "raise", "hang", "gate"))
    def answer_model_badly(self, op: Answer) -> None:
        """Fail the held model request, or answer with a stream that hangs or holds at a gate."""
        if self.desk.unanswered:
            self.apply(op)

    @rule(fail_code=st.sampled_from((None, "AUTH", "SERVER")))
    def release_gate(self, fail_code: str | None) -> None:
        """Release or fail the gate a model stream waits at (if one does)."""
        if self.desk.held_gate() is not None:
            self.apply(ReleaseGate(fail_code))

    @rule(seconds=st.sampled_from((15.0, 1.0, 0.25)))
    def advance(self, seconds: float) -> None:
        """Move virtual time (retry back-offs wake up)."""
        self.apply(Advance(seconds))

    @rule()
    def wait_idle(self) -> None:
        """Release the model and wait for the agent to go idle."""
        self.apply(WaitIdle())

    @rule(callers=st.sampled_from((1, 2, 3)), twice=st.booleans())
    def dispose(self, callers: int, twice: bool) -> None:
        """Dispose the agent from ``callers`` concurrent tasks (``twice``: again, which
        must change nothing), then use a fresh one."""
        subject = self.subject
        self._dispose(subject, revive=True, callers=callers)
        if twice:
            self.apply_to(subject, Dispose())

    @rule(pick=st.integers(0, 3))
    def park_waiter(self, pick: int) -> None:
        """Park a background ``await agent.when_idle()`` on a node of the tree.

        It must return only once no driver or maintenance task remains, and it must
        return once the agent is idle.
        """
        node = self._node(pick)
        self._waiters += 1
        waiter = Waiter(self._waiters, len(node.events))
        node.waiters.append(waiter)
        self.loop.run_sync(
            lambda: self.loop.nursery.start_soon(run_waiter, node, waiter)
        )

    @rule(
        front=st.booleans(),
        name=st.sampled_from(
            ("agent/status", "agent/inbox/inserted", "agent/inbox/claimed")
        ),
    )
    def add_raising_listener(self, front: bool, name: str) -> None:
        """Register a listener that raises, at the front or the back of ``name``'s chain.

        ``emit`` logs it and still calls every other listener (the machine's own
        recorders among them).
        """
        if len(self._raising) >= 2:
            return
        self._raising.append(name)

        def raising(payload: object) -> None:
            raise _ListenerFailure(name)

        self.runtime.events.on(name, raising, prepend=front)

    @rule(code=st.sampled_from(("SERVER", "RATE_LIMIT")))
    def fail_persistently(self, code: str) -> None:
        """Fail the held model request, and every retry of it, until the policy gives up."""
        if not self.desk.unanswered:
            return
        for _ in range(12):
            if self.desk.unanswered:
                self.apply(Answer("fail", code=code))
            elif not self.loop.call(advance_to_next_deadline, self.clock):
                return

    # ------------------------------------------------------------------ the ownership tree

    @rule(nested=st.booleans())
    def spawn_child(self, nested: bool) -> None:
        """Create a child agent owned by the agent under test (``nested``: by its youngest child)."""
        live = self.live_subjects()
        if len(live) >= 4:
            return
        parent = live[-1] if nested else self.subject
        self._new_subject(parent)

    @rule(pick=st.integers(1, 3), op=sends())
    def send_to_node(self, pick: int, op: Send) -> None:
        """Send to a child of the tree (if there is one)."""
        live = self.live_subjects()
        if len(live) > 1:
            self.apply_to(live[1 + pick % (len(live) - 1)], op)

    @rule(pick=st.integers(1, 3), op=cancels())
    def cancel_node(self, pick: int, op: Cancel) -> None:
        """Cancel a child of the tree with any cause (if there is one)."""
        live = self.live_subjects()
        if len(live) > 1:
            self.apply_to(live[1 + pick % (len(live) - 1)], op)

    @rule(pick=st.integers(1, 3), callers=st.sampled_from((1, 2)))
    def dispose_node(self, pick: int, callers: int) -> None:
        """Dispose a child of the tree (and so its descendants), from concurrent callers."""
        live = self.live_subjects()
        if len(live) > 1:
            self._dispose(
                live[1 + pick % (len(live) - 1)], revive=False, callers=callers
            )

    @rule(op=st.one_of(sends(), inbox_edits(), cancels(), maintenances()))
    def touch_disposed(self, op: Send | InboxEdit | Cancel | Maintenance) -> None:
        """Use the last disposed agent (if any): mutations are refused, nothing is appended."""
        graveyard = self._graveyard()
        if graveyard is not None:
            self.apply_to(graveyard, op)

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

    @invariant()
    def check_agent_invariants(self) -> None:
        """Run :meth:`assert_invariants` after every step."""
        self.assert_invariants()

    def assert_invariants(self) -> None:
        """Check every invariant of every agent now (between steps).

        Raises:
            InvariantViolation: the first broken invariant.
        """
        for subject in self.subjects:
            invariants.check_subject(subject)
            invariants.check_scoped_listener(subject, self._by_agent)
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
        self.loop.close()

    def _close_quietly(self) -> None:
        # Only while another failure propagates: that failure is the report, not
        # what closing a broken run raises on top of it.
        with contextlib.suppress(Exception):
            self.loop.close()

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
