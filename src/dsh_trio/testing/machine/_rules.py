"""The rules of :class:`AgentStateMachine`: what hypothesis may do to the agents, and when it checks.

The class only wires things together: each rule applies one operation through
:class:`MachineCore` (``_machine_core``), which runs its oracle (``_inbox_oracles``,
``_activity_oracles``), and the invariant runs the invariant functions
(``_invariants``) over every agent.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, rule

from ...values import AgentStatus, InboxTarget, UserMessage
from .._guest import advance_to_next_deadline
from .._strategies import (
    Advance,
    Answer,
    Cancel,
    Dispose,
    InboxEdit,
    Maintenance,
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
from ._machine_core import MachineCore
from ._preset_oracle import select_preset
from ._report import ListenerFailure
from ._subject import Subject, Waiter, run_waiter

__all__ = ["AgentStateMachine"]


class AgentStateMachine(MachineCore):
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

    # ------------------------------------------------------------------ the tree

    def _node(self, pick: int) -> Subject:
        """A live node of the tree (``pick`` modulo their number): the agent under test or a child."""
        live = self.live_subjects()
        return live[pick % len(live)]

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
        recorders among them); the machine keeps these records out of the log, in
        :attr:`deliberate_failures`.
        """
        if len(self._raising) >= 2:
            return
        self._raising.append(name)

        def raising(payload: object) -> None:
            raise ListenerFailure(name)

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

    @rule(pick=st.integers(0, 3), which=st.integers(0, 1))
    def select_preset(self, pick: int, which: int) -> None:
        """``presets.select`` on a node: refused once it started a turn, else one durable
        ``agent-preset/selected`` and one live event, and the agent is rebound."""
        presets = [i.id for i in self.runtime.presets.list() if i.broken is None]
        if presets:
            preset = presets[which % len(presets)]
            select_preset(self.loop, self.runtime, self._node(pick), preset)

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

    # ------------------------------------------------------------------ invariants

    @invariant()
    def check_agent_invariants(self) -> None:
        """Run :meth:`assert_invariants` after every step."""
        self.assert_invariants()
