"""A hypothesis state machine that drives live agents and checks their invariants.

:class:`AgentStateMachine` hosts one trio run per example in guest mode (see
:class:`~dsh_trio.testing.GuestLoop`): each rule is one settled step, time is
virtual, and an operation that stays blocked is reported as a deadlock. Its rules
send input, edit the inbox, cancel, run maintenance, answer the scripted model, move
time, wait for idleness and dispose (after which a fresh agent takes over, and the
disposed one stays under watch). After every step it checks:

* every message ever inserted into the inbox is in exactly one state: pending,
  claimed by exactly one claim splice (then written as at most one ``user/message``,
  or dropped by a turn that was aborted, failed or blocked), or discarded;
* the live inbox equals the fold of the durable ``agent/inbox/spliced`` events, and
  the live inserted/claimed/discarded notifications match that fold;
* ``agent/status`` events alternate and match ``agent.status``; the agent runs
  exactly while a turn is open;
* turn numbers strictly increase; every turn and step is opened and closed once;
* an aborted turn records the first cause issued during it, and a cancelled
  maintenance task raises ``AgentCancelled`` with that cause;
* waking input after an abort goes to next-turn and is latched (never under
  ``DisposedCancel``); ``keep_inbox`` parks;
* ``when_idle()`` completes once the model is released;
* after dispose nothing more is appended and ``agent/disposed`` was emitted once;
* an idle agent holds no task, and no task outlives the runtime.

Subclass it to add your own hooks, tools or listeners (:meth:`setup_agent`,
:meth:`runtime_options`) and your own rules and invariants; the checks above keep
running.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any, ClassVar, Final

import attrs
import outcome
import trio
import trio.testing
from hypothesis import HealthCheck, event, settings, strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ..errors import (
    AgentBusyError,
    AgentCancelled,
    AgentDisposedError,
    DshError,
    DuplicateMessageError,
)
from ..events import (
    AgentDisposed,
    AgentStatusChanged,
    InboxClaimed,
    InboxDiscarded,
    InboxInserted,
)
from ..llm import ModelRequest
from ..loop import Agent
from ..nursery import AgentHandle, Runtime, open_runtime
from ..values import (
    Aborted,
    AgentOptions,
    AgentStatus,
    AssistantAttemptData,
    AssistantMessageData,
    Blocked,
    CancelCause,
    DisposedCancel,
    Errored,
    InboxSplice,
    InboxTarget,
    Interrupted,
    SessionEvent,
    StreamChunk,
    SystemMessageData,
    ToolCallData,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    UserCancel,
    UserMessage,
)
from ._guest import Deadlock, GuestLoop, advance_by, advance_to_next_deadline
from ._scripted import (
    Gate,
    Script,
    ScriptedModel,
    custom,
    fail,
    gate,
    hang,
    max_tokens,
    reply,
    tool_calls,
)
from ._strategies import (
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

__all__ = [
    "AgentStateMachine",
    "InvariantViolation",
    "LogChecker",
    "MaintenanceFailure",
    "ModelDesk",
    "RuntimeHost",
    "Subject",
    "machine_settings",
    "register_profiles",
]

_NEXT_TURN: Final = InboxTarget.NEXT_TURN
_NEXT_STEP: Final = InboxTarget.NEXT_STEP


class InvariantViolation(AssertionError):
    """The agent under test broke one of the machine's invariants (the message says which)."""


class MaintenanceFailure(Exception):
    """What a maintenance task of the machine raises when told to fail."""


# --------------------------------------------------------------------------- profiles

#: The hypothesis settings of each profile, by name.
PROFILES: Final[Mapping[str, Mapping[str, Any]]] = {
    # CI: reproducible and bounded (>= 200 examples x 30 steps per machine).
    "ci": {"max_examples": 200, "stateful_step_count": 30, "derandomize": True},
    # Local default: quick feedback.
    "dev": {"max_examples": 25, "stateful_step_count": 20},
    # HYPOTHESIS_PROFILE=deep: >= 10**5 steps per machine, random seeds.
    "deep": {"max_examples": 2000, "stateful_step_count": 60},
}


def profile_name() -> str:
    """The selected profile: ``$HYPOTHESIS_PROFILE``, else ``ci`` when ``$CI`` is set, else ``dev``."""
    chosen = os.environ.get("HYPOTHESIS_PROFILE")
    if chosen:
        return chosen
    ci = os.environ.get("CI", "").strip().lower()
    return "ci" if ci not in ("", "0", "false", "no") else "dev"


def register_profiles() -> None:
    """Register the ``ci``, ``dev`` and ``deep`` hypothesis profiles (idempotent).

    They can then be loaded with ``settings.load_profile(name)`` or pytest's
    ``--hypothesis-profile``. :func:`machine_settings` does not depend on this.
    """
    for name in PROFILES:
        settings.register_profile(name, machine_settings(name))


def machine_settings(profile: str | None = None, **overrides: Any) -> settings:
    """Hypothesis settings for the state machines under a profile.

    Every profile has no deadline (guest-mode steps take real time), no example
    database and no health checks (a machine example is slow by design).

    Example::

        TestMyMachine = MyMachine.TestCase
        TestMyMachine.settings = machine_settings()

    Args:
        profile: ``"ci"``, ``"dev"`` or ``"deep"``; default :func:`profile_name`.
        **overrides: further :class:`hypothesis.settings` arguments.

    Raises:
        KeyError: unknown profile name.
    """
    name = profile if profile is not None else profile_name()
    if name not in PROFILES:
        raise KeyError(
            f"unknown hypothesis profile {name!r} (known: {', '.join(PROFILES)})"
        )
    values: dict[str, Any] = {
        "deadline": None,
        "database": None,
        "suppress_health_check": list(HealthCheck),
        **PROFILES[name],
        **overrides,
    }
    return settings(**values)


# --------------------------------------------------------------------------- the model desk


@attrs.define(eq=False)
class _Request:
    """One model request the desk holds."""

    request: ModelRequest
    answered: trio.Event = attrs.field(factory=trio.Event)
    answer: Script | None = None
    hanging: bool = False
    gate: Gate | None = None
    gate_opened: bool = False


class _Crash:
    """A model stream that raises a plain exception (not an ``LlmError``) at once."""

    def __aiter__(self) -> _Crash:
        return self

    async def __anext__(self) -> StreamChunk:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the adapter crashed")


def _crash(request: ModelRequest) -> _Crash:
    return _Crash()


class ModelDesk:
    """A :class:`ScriptedModel` whose every request waits until the test answers it.

    Each request stops at the desk; :meth:`answer` gives the oldest unanswered one
    its script entry (a reply, tool calls, a failure, a hang, a :class:`Gate`...).
    All methods are synchronous and must run inside the trio run.
    """

    def __init__(self) -> None:
        self.model = ScriptedModel(default=custom(self._serve))
        self.active: list[_Request] = []
        self._calls = 0

    async def _serve(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        held = _Request(request)
        self.active.append(held)
        try:
            await held.answered.wait()
            assert held.answer is not None
            async with aclosing(held.answer.stream(request)) as inner:
                async for chunk in inner:
                    # The consumer closes this stream (and so the inner one).
                    yield chunk  # noqa: ASYNC119
        finally:
            self.active.remove(held)

    @property
    def unanswered(self) -> list[_Request]:
        """Requests waiting for an answer, oldest first."""
        return [r for r in self.active if r.answer is None]

    def held_gate(self) -> _Request | None:
        """The oldest request whose stream waits at a gate nobody opened yet."""
        for r in self.active:
            if r.gate is not None and r.gate.reached.is_set() and not r.gate_opened:
                return r
        return None

    def hanging(self) -> list[_Request]:
        """Requests answered with a hang whose stream is still open."""
        return [r for r in self.active if r.hanging]

    def script_for(
        self, answer: Answer, tool_names: Sequence[str], arguments: Callable[[str], str]
    ) -> Script:
        """The script entry that plays ``answer``."""
        kind = answer.kind
        if kind == "reply":
            return reply(answer.text)
        if kind == "tool-calls":
            calls = []
            for i in range(max(answer.calls, 1)):
                self._calls += 1
                name = tool_names[i % len(tool_names)]
                calls.append((f"call-{self._calls}", name, arguments(name)))
            return tool_calls(*calls)
        if kind == "max-tokens":
            return max_tokens(answer.text)
        if kind == "fail":
            return fail(answer.code)
        if kind == "fail-in-band":
            return fail(answer.code, in_band=True)
        if kind == "raise":
            return custom(_crash)
        if kind == "hang":
            return hang(answer.text or None)
        return gate(reply(answer.text), after=answer.after)

    def answer(self, script: Script, *, hangs: bool = False) -> _Request:
        """Answer the oldest unanswered request with ``script``.

        Raises:
            LookupError: no request is waiting.
        """
        waiting = self.unanswered
        if not waiting:
            raise LookupError("no model request is waiting for an answer")
        held = waiting[0]
        held.answer = script
        held.hanging = hangs
        held.gate = script if isinstance(script, Gate) else None
        held.answered.set()
        return held

    def open_gate(self, fail_code: str | None = None) -> None:
        """Release the held gate, or fail it with ``fail_code``.

        Raises:
            LookupError: no stream waits at a gate.
        """
        held = self.held_gate()
        if held is None or held.gate is None:
            raise LookupError("no model stream waits at a gate")
        held.gate_opened = True
        if fail_code is None:
            held.gate.release()
        else:
            held.gate.fail(fail_code)


# --------------------------------------------------------------------------- the runtime host


class RuntimeHost:
    """Keeps one ``open_runtime`` block open in a task of a :class:`GuestLoop`."""

    def __init__(self, loop: GuestLoop, **runtime_kwargs: Any) -> None:
        self._loop = loop
        self._kwargs = runtime_kwargs
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._task: trio.lowlevel.Task | None = None
        self.error: Exception | None = None
        self.runtime: Runtime | None = None

    def start(self) -> Runtime:
        """Open the runtime (in the loop) and return it.

        Raises:
            Exception: what opening the runtime raised.
        """
        return self._loop.call(self._start)

    async def _start(self) -> Runtime:
        ready = trio.Event()
        self._loop.nursery.start_soon(self._serve, ready)
        await ready.wait()
        if self.runtime is None:
            assert self.error is not None
            error, self.error = self.error, None
            raise error
        return self.runtime

    async def _serve(self, ready: trio.Event) -> None:  # noqa: ASYNC910  # a private task; the runtime block checkpoints
        self._task = trio.lowlevel.current_task()
        try:
            async with open_runtime(**self._kwargs) as runtime:
                self.runtime = runtime
                ready.set()
                await self._stop.wait()
        except Exception as exc:
            # Kept for start() and stop(): the rule that waits for them reports it.
            self.error = exc
        finally:
            ready.set()
            self._stopped.set()

    @property
    def running(self) -> bool:
        """Whether the ``open_runtime`` block is still open."""
        return self._task is not None and not self._stopped.is_set()

    def runtime_tasks(self) -> list[trio.lowlevel.Task]:
        """The tasks living in the runtime's nursery right now."""
        if not self.running or self._task is None:
            return []
        return [t for n in self._task.child_nurseries for t in n.child_tasks]

    def stop(self) -> None:
        """Leave the ``open_runtime`` block (disposing what is live) and wait for it.

        Raises:
            Exception: what leaving the block raised.
            Deadlock: leaving the block got stuck.
        """
        if self._task is not None and not self._stopped.is_set():
            self._loop.call(self._stop_now)
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    async def _stop_now(self) -> None:
        self._stop.set()
        await self._stopped.wait()


# --------------------------------------------------------------------------- the log checker


@attrs.define(eq=False)
class Occurrence:
    """One insertion of a message into the inbox, and what became of it."""

    message: UserMessage
    inserted_at: int
    state: str = "pending"  # pending | claimed | written | dropped | discarded
    turn: int | None = None
    claimed_at: int | None = None
    ended_at: int | None = None


_STEP_DATA: Final = (
    SystemMessageData,
    AssistantMessageData,
    AssistantAttemptData,
    ToolCallData,
    ToolResultData,
)


def _violation(event: SessionEvent, what: str) -> InvariantViolation:
    return InvariantViolation(f"session event #{event.seq} ({event.type}): {what}")


class LogChecker:
    """An independent fold of a session log that checks its structure as it goes.

    It rebuilds the inbox from the durable splices, follows every inserted message
    through claim, ``user/message`` and turn end, and checks turn and step
    bracketing. :meth:`feed` consumes new events incrementally and raises
    :class:`InvariantViolation` at the first broken rule.

    Args:
        allow_interrupted: accept ``turn/end`` with :class:`Interrupted` (written by
            crash repair only).
        on_turn_end: called with ``(turn, reason, event)`` for every ``turn/end``.
    """

    def __init__(
        self,
        *,
        allow_interrupted: bool = False,
        on_turn_end: Callable[[int, TurnEndReason, SessionEvent], None] | None = None,
    ) -> None:
        self.lists: dict[InboxTarget, list[Occurrence]] = {
            _NEXT_TURN: [],
            _NEXT_STEP: [],
        }
        self.occurrences: list[Occurrence] = []
        self.ever_inserted: set[str] = set()
        self.pending: dict[str, Occurrence] = {}
        self.open_turn: int | None = None
        self.open_step: int | None = None
        self.last_turn = 0
        self.last_step = 0
        self.turn_claims: list[Occurrence] = []
        self.turn_ends: dict[int, TurnEndReason] = {}
        self.turn_starts: list[int] = []
        #: The live notifications the log implies: (kind, message id, turn).
        self.notices: list[tuple[str, str, int | None]] = []
        self.count = 0
        self._allow_interrupted = allow_interrupted
        self._on_turn_end = on_turn_end

    def pending_messages(self, target: InboxTarget) -> tuple[UserMessage, ...]:
        """The fold's pending messages on ``target``."""
        return tuple(o.message for o in self.lists[target])

    def feed(self, events: Sequence[SessionEvent]) -> None:
        """Consume ``events[self.count:]``."""
        while self.count < len(events):
            event = events[self.count]
            if event.seq != self.count:
                raise _violation(event, f"expected seq {self.count}")
            self._event(event)
            self.count += 1

    def _event(self, event: SessionEvent) -> None:
        kind = event.type
        data = event.data
        if kind == "turn/start":
            turn = data.turn  # type: ignore[union-attr]
            if self.open_turn is not None:
                raise _violation(
                    event,
                    f"turn {turn} starts while turn {self.open_turn} is still open",
                )
            if turn != self.last_turn + 1:
                raise _violation(
                    event,
                    f"turn numbers must strictly increase by one: turn {turn} follows turn {self.last_turn}",
                )
            self.open_turn = self.last_turn = turn
            self.turn_starts.append(turn)
            self.open_step = None
            self.last_step = 0
            self.turn_claims = []
        elif kind == "turn/end":
            self._turn_end(event)
        elif kind == "step/start":
            turn, step = data.turn, data.step  # type: ignore[union-attr]
            if self.open_turn != turn:
                raise _violation(
                    event,
                    f"step {turn}/{step} starts outside its turn (open turn: {self.open_turn})",
                )
            if self.open_step is not None:
                raise _violation(
                    event,
                    f"step {turn}/{step} starts while step {self.open_step} is open",
                )
            if step != self.last_step + 1:
                raise _violation(
                    event,
                    f"step numbers must increase by one: step {step} follows {self.last_step}",
                )
            self.open_step = self.last_step = step
        elif kind == "step/end":
            turn, step = data.turn, data.step  # type: ignore[union-attr]
            if self.open_turn != turn or self.open_step != step:
                raise _violation(
                    event,
                    f"step/end {turn}/{step} does not close the open step ({self.open_turn}/{self.open_step})",
                )
            self.open_step = None
        elif kind == "user/message":
            self._user_message(event)
        elif kind == "agent/inbox/spliced":
            self._splice(event)
        elif isinstance(data, _STEP_DATA) and (data.turn, data.step) != (
            self.open_turn,
            self.open_step,
        ):
            raise _violation(
                event,
                f"belongs to step {data.turn}/{data.step} but the open step is {self.open_turn}/{self.open_step}",
            )

    def _turn_end(self, event: SessionEvent) -> None:
        data = event.data
        assert isinstance(data, TurnEnd)
        turn, reason = data.turn, data.reason
        if self.open_turn != turn:
            raise _violation(
                event,
                f"turn/end {turn} does not close the open turn ({self.open_turn})",
            )
        if self.open_step is not None:
            raise _violation(
                event, f"turn {turn} ends while step {self.open_step} is still open"
            )
        if isinstance(reason, Interrupted) and not self._allow_interrupted:
            raise _violation(event, "only crash repair may end a turn Interrupted()")
        dropping = isinstance(reason, (Aborted, Errored, Blocked, Interrupted))
        for occ in self.turn_claims:
            if occ.state != "claimed":
                continue
            if not dropping:
                raise _violation(
                    event,
                    f"message {occ.message.id!r} was lost: claimed at #{occ.claimed_at} into turn {turn}, "
                    f"never written as a user/message, and the turn ended {reason!r}",
                )
            occ.state = "dropped"
            occ.ended_at = event.seq
        self.turn_ends[turn] = reason
        _note(f"turn ended {type(reason).__name__}")
        self.open_turn = None
        self.turn_claims = []
        if self._on_turn_end is not None:
            self._on_turn_end(turn, reason, event)

    def _user_message(self, event: SessionEvent) -> None:
        message = event.data
        assert isinstance(message, UserMessage)
        if self.open_turn is None or self.open_step is None:
            raise _violation(
                event, f"user/message {message.id!r} written outside a step"
            )
        for occ in self.turn_claims:
            if occ.state == "claimed" and occ.message.id == message.id:
                occ.state = "written"
                occ.ended_at = event.seq
                return
        if message.id in self.ever_inserted:
            raise _violation(
                event,
                f"message {message.id!r} was duplicated: this user/message has no claimed, unwritten "
                f"occurrence in turn {self.open_turn}",
            )

    def _splice(self, event: SessionEvent) -> None:
        data = event.data
        if not isinstance(data, InboxSplice):
            raise _violation(event, "data is not an inbox splice")
        lst = self.lists[data.target]
        n = len(lst)
        count = data.removed_count or 0
        if data.removed_count is not None and data.removed_count < 1:
            raise _violation(event, "removedCount is written only when positive")
        if not 0 <= data.start <= n or data.start + count > n:
            raise _violation(
                event,
                f"coordinates start={data.start} removed={count} do not fit {data.target} of length {n}",
            )
        if not count and not data.inserted:
            raise _violation(event, "a splice that changes nothing must not be written")
        if data.outcome is not None and not count:
            raise _violation(event, f"outcome {data.outcome!r} without removals")
        removed = lst[data.start : data.start + count]
        for occ in removed:
            del self.pending[occ.message.id]
        if count and data.outcome is None:
            self._claim(event, data, removed, n)
        else:
            for occ in removed:
                occ.state = "discarded"
                occ.ended_at = event.seq
                self.notices.append(("discarded", occ.message.id, None))
        fresh: list[Occurrence] = []
        for m in data.inserted:
            if m.id in self.pending or any(o.message.id == m.id for o in fresh):
                raise _violation(
                    event, f"inserts message {m.id!r}, which is already pending"
                )
            occ = Occurrence(m, event.seq)
            fresh.append(occ)
            self.occurrences.append(occ)
            self.ever_inserted.add(m.id)
            self.notices.append(("inserted", m.id, None))
        for occ in fresh:
            self.pending[occ.message.id] = occ
        lst[data.start : data.start + count] = fresh

    def _claim(
        self, event: SessionEvent, data: InboxSplice, removed: list[Occurrence], n: int
    ) -> None:
        if data.inserted or data.start != 0:
            raise _violation(
                event, "a claim takes messages from the front and inserts nothing"
            )
        if data.target is _NEXT_STEP and len(removed) != n:
            raise _violation(
                event, f"a claim takes all of next-step ({n}), not {len(removed)}"
            )
        if data.target is _NEXT_TURN and len(removed) != 1:
            raise _violation(
                event, f"a claim takes one next-turn message, not {len(removed)}"
            )
        if self.open_turn is None:
            raise _violation(event, "messages were claimed outside a turn")
        for occ in removed:
            occ.state = "claimed"
            occ.turn = self.open_turn
            occ.claimed_at = event.seq
            self.turn_claims.append(occ)
            self.notices.append(("claimed", occ.message.id, self.open_turn))


# --------------------------------------------------------------------------- per-agent bookkeeping


@attrs.define(eq=False)
class _Maintenance:
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
        return f"maintenance #{self.number} ({self.mode})"


ActivityKey = tuple[str, int]


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
    maintenances: list[_Maintenance] = attrs.field(factory=list)
    disposed: bool = False
    disposed_length: int = -1

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

    def active_maintenance(self) -> _Maintenance | None:
        """The maintenance task running now, if any."""
        for m in self.maintenances:
            if m.active:
                return m
        return None

    def blocked_maintenance(self) -> _Maintenance | None:
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


def _fail(what: str) -> InvariantViolation:
    return InvariantViolation(what)


def _note(label: str) -> None:
    """Count ``label`` in hypothesis's statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        event(label)


# --------------------------------------------------------------------------- the machine


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
            self._listen(self.runtime)
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

    # ------------------------------------------------------------------ agents

    @property
    def agent(self) -> Agent:
        """The agent under test now."""
        return self.subject.agent

    @property
    def events(self) -> Sequence[SessionEvent]:
        """The session log of the agent under test."""
        return self.subject.events

    def _new_subject(self) -> Subject:
        session_id = f"{self.session_prefix}-{len(self.subjects)}"
        holder: list[Subject] = []

        def check_turn_end(
            turn: int, reason: TurnEndReason, event: SessionEvent
        ) -> None:
            self._check_turn_end(holder[0], turn, reason, event)

        async def create() -> AgentHandle:
            return await self.runtime.agents.create(session_id, options=self.options)

        handle = self.loop.call(create)
        subject = Subject(handle, LogChecker(on_turn_end=check_turn_end))
        holder.append(subject)
        self.subjects.append(subject)
        self._by_agent[handle.agent] = subject
        self.loop.run_sync(self.setup_agent, handle.agent)
        return subject

    def _listen(self, runtime: Runtime) -> None:
        bus = runtime.events
        by_agent = self._by_agent

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

        bus.on("agent/status", on_status)
        bus.on("agent/inbox/inserted", on_inserted)
        bus.on("agent/inbox/discarded", on_discarded)
        bus.on("agent/inbox/claimed", on_claimed)
        bus.on("agent/disposed", on_disposed)

    def _graveyard(self) -> Subject | None:
        return self.subjects[-2] if len(self.subjects) > 1 else None

    def _busy(self) -> bool:
        s = self.subject
        return (
            s.agent.status is AgentStatus.RUNNING or s.active_maintenance() is not None
        )

    # ------------------------------------------------------------------ cancel helper

    def cancel_agent(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        """``agent.cancel(cause, keep_inbox=...)``, recorded for the first-cause check.

        Synchronous; call it inside the trio run (rules do; hooks already are).
        """
        self._cancel(self.subject, cause, keep_inbox)

    def _cancel(self, subject: Subject, cause: CancelCause, keep_inbox: bool) -> None:
        activity = subject.activity()
        if activity is not None and not subject.disposed:
            subject.first_cause.setdefault(activity, cause)
        subject.agent.cancel(cause, keep_inbox=keep_inbox)

    # ------------------------------------------------------------------ rules

    @initialize(seed=st.random_module())
    def seed_scheduler(self, seed: object) -> None:
        """Seed trio's scheduler and ``random`` (reproducibly, per example)."""

    @rule(message=user_messages())
    def followup(self, message: UserMessage) -> None:
        """``agent.followup(message)``."""
        self.apply(Send(message, _NEXT_TURN, True))

    @rule(message=user_messages())
    def steer(self, message: UserMessage) -> None:
        """``agent.steer(message)``."""
        self.apply(Send(message, _NEXT_STEP, True))

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

    @rule(twice=st.booleans())
    def dispose(self, twice: bool) -> None:
        """Dispose the agent (``twice``: again, which must change nothing), then use a fresh one."""
        subject = self.subject
        self.apply(Dispose())
        if twice:
            self.apply_to(subject, Dispose())

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
        if isinstance(op, Send):
            self.loop.run_sync(self._send_now, subject, op, False)
        elif isinstance(op, InboxEdit):
            self.loop.run_sync(self._edit_now, subject, op)
        elif isinstance(op, Cancel):
            self._apply_cancel(subject, op)
        elif isinstance(op, Maintenance):
            self._apply_maintenance(subject, op)
        elif isinstance(op, ReleaseMaintenance):
            self._apply_release_maintenance(subject, op)
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
            self._apply_wait_idle(subject)
        elif isinstance(op, Dispose):
            self._apply_dispose(subject, revive=subject is self.subject)
        else:  # pragma: no cover - exhaustive
            raise TypeError(f"not an operation: {op!r}")

    # ---- send

    def _send_now(self, subject: Subject, op: Send, after_abort: bool) -> bool:
        """Send inside the run; returns whether a waking send was accepted."""
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
            method = op.method
            if method == "followup":
                agent.followup(op.message)
            elif method == "steer":
                agent.steer(op.message)
            elif method == "inject":
                agent.inject(op.message)
            else:
                agent.send(op.message, op.target, op.wakeup)
        except (AgentDisposedError, DuplicateMessageError) as exc:
            if expected is None or not isinstance(exc, expected):
                raise _fail(
                    f"{op!r} raised {exc!r}, but nothing made it invalid"
                ) from exc
            if len(events) != before:
                raise _fail(
                    f"{op!r} was refused ({type(exc).__name__}) but still appended events"
                ) from exc
            return False
        if expected is not None:
            raise _fail(f"{op!r} was accepted, but it should raise {expected.__name__}")
        new = events[before:]
        resolved = _NEXT_TURN if (after_abort and op.wakeup) else target
        if not new or new[0].type != "agent/inbox/spliced":
            raise _fail(f"{op!r} did not append its insertion splice first")
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
            raise _fail(
                f"{op!r} should insert exactly its message at the end of {resolved}{redirect}; got {splice!r}"
            )
        opened = agent.status is AgentStatus.RUNNING and any(
            e.type == "turn/start" for e in new
        )
        if self.predict_scheduling and op.wakeup and idle and not opened:
            raise _fail(
                f"{op!r} on an idle agent must open a turn before it returns (status {agent.status}, "
                f"appended {[e.type for e in new]})"
            )
        if op.wakeup and maintenance is not None:
            maintenance.woken = True
        return op.wakeup

    # ---- inbox edits

    def _edit_now(self, subject: Subject, op: InboxEdit) -> None:
        inbox = subject.agent.inbox
        subject.sync()
        events = subject.events
        before = len(events)
        pending_ids = subject.pending_ids()
        target = InboxTarget(op.target)
        lst = list(inbox.next_turn if target is _NEXT_TURN else inbox.next_step)
        expected_events = 0
        expected_error: type[Exception] | None = (
            AgentDisposedError if subject.disposed else None
        )
        expected_result: object = None
        picked = (
            pending_ids[op.pick] if op.pick < len(pending_ids) else f"absent-{op.pick}"
        )
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
        try:
            result: object = None
            if op.kind == "append":
                inbox.append(op.target, inserted[0])
            elif op.kind == "prepend":
                inbox.prepend(op.target, inserted[0])
            elif op.kind == "remove":
                result = inbox.remove(picked)
            elif op.kind == "replace":
                result = inbox.replace(picked, inserted[0])
            elif op.kind == "splice":
                result = inbox.splice(op.target, op.start, op.delete_count, inserted)
            else:
                inbox.clear()
        except (AgentDisposedError, DuplicateMessageError) as exc:
            if expected_error is None or not isinstance(exc, expected_error):
                raise _fail(
                    f"{op!r} (picked {picked!r}) raised {exc!r} unexpectedly"
                ) from exc
            if len(events) != before:
                raise _fail(f"{op!r} was refused but still appended events") from exc
            return
        if expected_error is not None:
            raise _fail(
                f"{op!r} was accepted, but it should raise {expected_error.__name__}"
            )
        if result != expected_result:
            raise _fail(
                f"{op!r} (picked {picked!r}) returned {result!r}, expected {expected_result!r}"
            )
        new = events[before:]
        if len(new) != expected_events or any(
            e.type != "agent/inbox/spliced" for e in new
        ):
            raise _fail(
                f"{op!r} should append {expected_events} splice(s), appended {[e.type for e in new]}"
            )
        if op.kind == "clear" and (inbox.next_turn or inbox.next_step):
            raise _fail("inbox.clear() left messages pending")

    # ---- cancel

    def _apply_cancel(self, subject: Subject, op: Cancel) -> None:
        start = len(subject.events)
        plan = self.loop.run_sync(self._cancel_now, subject, op)
        if not self.predict_scheduling or plan is None:
            return
        activity, latched, parked = plan
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
                raise _fail(f"turn {number} is still open after {op!r} and a settle")
            after = new[ends[0] + 1 :]
        else:
            m = subject.maintenances[number]
            if not m.finished:
                raise _fail(
                    f"{m.describe()} is still running after {op!r} and a settle"
                )
            after = new
        restarted = any(e.type == "turn/start" for e in after)
        _note(
            f"cancel of a {kind}: {'latched wake replayed' if latched else 'nothing latched'}"
        )
        if restarted != latched:
            if latched:
                why = "waking input sent after the abort is latched: a turn must start once the activity wound down"
            elif isinstance(subject.first_cause.get(activity), DisposedCancel):
                why = "a DisposedCancel never latches a wake"
            else:
                why = "no wake is latched (keep_inbox parks, a later cancel drops the latch): nothing may start"
            raise _fail(
                f"after {op!r} on {kind} {number}: {why}; a turn started: {restarted}"
            )
        if not restarted:
            pending = set(subject.pending_ids())
            lost = [i for i in parked if i not in pending]
            if lost:
                raise _fail(
                    f"after {op!r} nothing ran, so what was pending must stay parked; gone: {lost}"
                )

    def _cancel_now(
        self, subject: Subject, op: Cancel
    ) -> tuple[ActivityKey, bool, list[str]] | None:
        """Run the tick's cancels and sends in order; return what the settle must show.

        Returns ``(activity, latched, parked)`` for the activity the tick aborted:
        whether a wake is latched for when it wound down, and the ids that must stay
        pending if it is not.
        """
        aborted: ActivityKey | None = None
        latch = False
        for item in (op, *op.then):
            activity = subject.activity()
            if isinstance(item, Cancel):
                self._cancel_once(subject, item)
                if activity is None or subject.disposed:
                    continue
                if aborted is not None and activity != aborted:
                    raise _fail(
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
                if self._send_now(subject, item, after_abort) and after_abort:
                    latch = True
        if aborted is None or subject.disposed:
            return None
        cause = subject.first_cause.get(aborted)
        pending = subject.agent.inbox.has_pending
        latched = latch and pending and not isinstance(cause, DisposedCancel)
        return aborted, latched, [] if latched else subject.pending_ids()

    def _cancel_once(self, subject: Subject, op: Cancel) -> None:
        inbox = subject.agent.inbox
        events = subject.events
        before = len(events)
        steps, turns = len(inbox.next_step), len(inbox.next_turn)
        pending_before = subject.pending_ids()
        self._cancel(subject, op.cause, op.keep_inbox)
        new = events[before:]
        what = f"cancel({op.cause!r}, keep_inbox={op.keep_inbox})"
        if op.keep_inbox or subject.disposed:
            if new or subject.pending_ids() != pending_before:
                raise _fail(
                    f"{what} must leave the inbox as it was (appended {[e.type for e in new]})"
                )
            return
        if inbox.next_step or inbox.next_turn:
            raise _fail(f"{what} must discard everything pending")
        expected = [c for c in (steps, turns) if c]
        got = [
            e.data.removed_count if isinstance(e.data, InboxSplice) else e.type
            for e in new
        ]
        canceled = all(
            isinstance(e.data, InboxSplice) and e.data.outcome == "canceled"
            for e in new
        )
        if got != expected or not canceled:
            raise _fail(
                f"{what} must write canceled splices, next-step then next-turn {expected}; got {got}"
            )

    # ---- maintenance

    def _apply_maintenance(self, subject: Subject, op: Maintenance) -> None:
        subject.sync()
        refusal: type[Exception] | None = None
        if subject.disposed:
            refusal = AgentDisposedError
        elif not subject.idle_phase():
            refusal = AgentBusyError
        record = _Maintenance(len(subject.maintenances), op.mode, refusal)
        subject.maintenances.append(record)
        self.loop.call(self._start_maintenance, subject, record)
        if refusal is None and record.mode == "block" and not record.active:
            raise _fail(f"{record.describe()} should be running, but it is not")
        if refusal is None and subject.agent.status is not AgentStatus.IDLE:
            raise _fail(f"the status must stay idle during {record.describe()}")
        self._verify_maintenances(subject)

    async def _start_maintenance(self, subject: Subject, record: _Maintenance) -> None:
        self.loop.nursery.start_soon(self._maintain, subject, record)
        await trio.lowlevel.checkpoint()

    async def _maintain(self, subject: Subject, record: _Maintenance) -> None:  # noqa: ASYNC910  # a private task around run_maintenance, which checkpoints
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

    def _apply_release_maintenance(
        self, subject: Subject, op: ReleaseMaintenance
    ) -> None:
        record = subject.blocked_maintenance()
        if record is None:
            raise LookupError("no maintenance task is blocked")
        start = len(subject.events)
        replay = record.woken and subject.agent.inbox.has_pending
        record.fail_on_release = op.fail
        record.released = True
        self.loop.run_sync(record.release.set)
        if not record.finished:
            raise _fail(f"{record.describe()} did not finish once released")
        self._verify_maintenances(subject)
        if self.predict_scheduling:
            restarted = any(e.type == "turn/start" for e in subject.events[start:])
            if restarted != replay:
                raise _fail(
                    f"{record.describe()} ended; waking input during it was "
                    f"{'latched' if record.woken else 'absent'} and the inbox was "
                    f"{'not ' if not subject.agent.inbox.has_pending and not restarted else ''}empty: "
                    f"a turn must start iff a wake was latched and work is pending (a turn started: {restarted})"
                )

    def _verify_maintenances(self, subject: Subject) -> None:
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
                ok = (
                    isinstance(result, outcome.Value)
                    and result.unwrap() == record.number
                )
                want = f"the task's result {record.number}"
            if not ok:
                got = (
                    result.error
                    if isinstance(result, outcome.Error)
                    else result.unwrap()
                )
                raise _fail(f"{record.describe()} ended with {got!r}; expected {want}")
            label = (
                type(result.error).__name__
                if isinstance(result, outcome.Error)
                else "a result"
            )
            _note(f"maintenance ended with {label}")

    # ---- waiting, disposal

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
            if self.subject.idle_phase() or self.subject.disposed:
                return
            if not self.loop.call(advance_to_next_deadline, self.clock):
                return

    def _release_one(self) -> bool:
        desk = self.desk
        subject = self.subject
        if desk.unanswered:
            desk.answer(reply("done"))
            return True
        if desk.held_gate() is not None:
            desk.open_gate()
            return True
        blocked = subject.blocked_maintenance()
        if blocked is not None:
            blocked.released = True
            blocked.release.set()
            return True
        if desk.hanging() and subject.activity() is not None:
            self._cancel(subject, UserCancel(), True)
            return True
        self.unblock()
        return False

    def _apply_wait_idle(self, subject: Subject) -> None:
        if subject is self.subject:
            self.drain()
        try:
            self.loop.call(subject.agent.when_idle)
        except Deadlock as exc:
            raise _fail(
                f"when_idle() never completed although the model was released: {exc}"
            ) from exc
        subject.sync()
        self._verify_maintenances(subject)
        if (
            subject.agent.status is not AgentStatus.IDLE
            or subject.checker.open_turn is not None
        ):
            raise _fail(
                f"when_idle() returned while the agent is {subject.agent.status} "
                f"(open turn: {subject.checker.open_turn})"
            )

    def _apply_dispose(self, subject: Subject, *, revive: bool) -> None:
        first = not subject.disposed
        if first:
            self.loop.run_sync(self._note_disposal, subject)
        before = len(subject.events)
        self.loop.call(subject.handle.dispose)
        subject.sync()
        subject.disposed = True
        self._verify_maintenances(subject)
        agent = subject.agent
        if not first and len(subject.events) != before:
            raise _fail("a second dispose() appended events")
        if not agent.disposed or self.runtime.agents.get(agent.id) is not None:
            raise _fail(
                "after dispose() the agent must be disposed and gone from the registry"
            )
        if (
            subject.checker.open_turn is not None
            or agent.status is not AgentStatus.IDLE
        ):
            raise _fail(
                "after dispose() no turn may stay open and the agent must be idle"
            )
        if agent.inbox.next_turn or agent.inbox.next_step:
            raise _fail("dispose() must durably discard the pending inbox")
        if first:
            subject.disposed_length = len(subject.events)
        leftovers = self.host.runtime_tasks()
        if leftovers:
            raise _fail(
                f"tasks still run in the runtime after dispose(): {[t.name for t in leftovers]}"
            )
        self._check_subject(subject)
        if first and revive:
            self.subject = self._new_subject()

    def _note_disposal(self, subject: Subject) -> None:
        activity = subject.activity()
        if activity is not None:
            subject.first_cause.setdefault(activity, DisposedCancel())

    # ------------------------------------------------------------------ invariants

    def _check_turn_end(
        self, subject: Subject, turn: int, reason: TurnEndReason, event: SessionEvent
    ) -> None:
        cause = subject.first_cause.get(("turn", turn))
        if cause is not None:
            if reason != Aborted(cause):
                raise _violation(
                    event,
                    f"turn {turn} should end Aborted({cause!r}), the first cause issued during it; got {reason!r}",
                )
        elif isinstance(reason, Aborted):
            raise _violation(
                event,
                f"turn {turn} ended {reason!r}, but no cancel was issued during it",
            )

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
            self._check_subject(subject)
        s = self.subject
        if s.agent.status is AgentStatus.IDLE and s.active_maintenance() is None:
            busy = self.host.runtime_tasks()
            if busy:
                raise _fail(
                    f"an idle agent must hold no task; running: {[t.name for t in busy]}"
                )

    def _check_subject(self, subject: Subject) -> None:
        agent = subject.agent
        subject.sync()
        checker = subject.checker
        # The inbox is the fold of the durable splices.
        for target, live in (
            (_NEXT_TURN, agent.inbox.next_turn),
            (_NEXT_STEP, agent.inbox.next_step),
        ):
            folded = checker.pending_messages(target)
            if tuple(live) != folded:
                raise _fail(
                    f"{agent.id}: inbox {target} is {[m.id for m in live]} but the durable splices fold to "
                    f"{[m.id for m in folded]}"
                )
        if agent.inbox.has_pending != bool(checker.pending):
            raise _fail(
                f"{agent.id}: inbox.has_pending is {agent.inbox.has_pending}, the fold says otherwise"
            )
        # Live notifications match the fold (both only grow: compare what is new).
        heard, logged, seen = subject.notices, checker.notices, subject.notices_checked
        if len(heard) != len(logged) or heard[seen:] != logged[seen:]:
            n = next(
                (
                    i
                    for i in range(seen, min(len(heard), len(logged)))
                    if heard[i] != logged[i]
                ),
                min(len(heard), len(logged)),
            )
            raise _fail(
                f"{agent.id}: live inbox notifications diverge from the log at #{n}: heard "
                f"{heard[n : n + 3]}, from the log {logged[n : n + 3]}"
            )
        subject.notices_checked = len(heard)
        # Status events alternate and match the status.
        events = subject.status_events
        for i in range(subject.statuses_checked, len(events)):
            want = AgentStatus.RUNNING if i % 2 == 0 else AgentStatus.IDLE
            if events[i] is not want:
                raise _fail(
                    f"{agent.id}: agent/status events must alternate running/idle; got {events}"
                )
        subject.statuses_checked = len(events)
        last = events[-1] if events else AgentStatus.IDLE
        if agent.status is not last:
            raise _fail(
                f"{agent.id}: agent.status is {agent.status} but the last agent/status event said {last}"
            )
        if (agent.status is AgentStatus.RUNNING) != (checker.open_turn is not None):
            raise _fail(
                f"{agent.id}: between steps an agent runs exactly while a turn is open; status {agent.status}, "
                f"open turn {checker.open_turn}"
            )
        # Disposal.
        if subject.disposed:
            if len(subject.events) != subject.disposed_length:
                extra = [e.type for e in subject.events[subject.disposed_length :]]
                raise _fail(
                    f"{agent.id}: events were appended after dispose(): {extra}"
                )
            if subject.disposed_events != 1:
                raise _fail(
                    f"{agent.id}: agent/disposed must be emitted exactly once; it was {subject.disposed_events} times"
                )
        elif subject.disposed_events:
            raise _fail(
                f"{agent.id}: agent/disposed was emitted although dispose() was never called"
            )
        self._verify_maintenances(subject)

    # ------------------------------------------------------------------ teardown

    def teardown(self) -> None:
        """Release the model, wait for idleness, dispose, close the runtime, check no task is left."""
        if sys.exc_info()[1] is not None:
            self._close_quietly()  # a failure is already propagating: it is the report
            return
        try:
            self.apply(WaitIdle())
            self._apply_dispose(self.subject, revive=False)
            self.assert_invariants()
            self.host.stop()
            leaked = self.loop.live_tasks()
            if leaked:
                raise _fail(f"tasks outlived the runtime: {[t.name for t in leaked]}")
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
