"""Each invariant of the agent machine is able to fail.

Every test breaks the runtime on purpose (``monkeypatch`` on a runtime class),
runs the machine, and checks that it reports the breakage with the invariant's
own message and a shrunk program of a few steps.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio

import dsh_trio as dsh
from dsh_trio.loop._agent import Agent
from dsh_trio.loop._inbox import Inbox
from dsh_trio.loop._phase import Idle, Running
from dsh_trio.loop._signal import CancelSignal
from dsh_trio.loop._work import AgentWork
from dsh_trio.nursery._registry import AgentRegistry
from dsh_trio.session._session import Session
from dsh_trio.testing import AgentStateMachine

from .mutation import assert_caught

#: For breakages that only a running turn cancelled and followed by waking input
#: in the same tick can show: longer programs, more of them.
RARE = {"steps": 25, "max_examples": 1000}


class StructuralMachine(AgentStateMachine):
    """Only the structural invariants: no scheduling predictions."""

    predict_scheduling = False


# ------------------------------------------------------------------ message accounting


def test_a_claimed_message_the_inbox_drops_is_reported_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Inbox.claim

    def claim(self: Inbox, target: dsh.InboxTarget, turn: int) -> list[dsh.UserMessage]:
        return original(self, target, turn)[
            :-1
        ]  # the splice happened; the message vanishes

    monkeypatch.setattr(Inbox, "claim", claim)
    assert_caught(
        AgentStateMachine, r"was lost: claimed at #\d+ into turn \d+, never written"
    )


def test_a_claimed_message_written_twice_is_reported_duplicated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Inbox.claim

    def claim(self: Inbox, target: dsh.InboxTarget, turn: int) -> list[dsh.UserMessage]:
        batch = original(self, target, turn)
        return batch + batch[:1]

    monkeypatch.setattr(Inbox, "claim", claim)
    assert_caught(AgentStateMachine, r"was duplicated")


def test_an_inbox_change_that_bypasses_the_log_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Inbox.insert

    def insert(self: Inbox, target: dsh.InboxTarget, message: dsh.UserMessage) -> None:
        original(self, target, message)
        items = self._list(target)
        if len(items) >= 2:
            self._set(target, items[1:])  # the oldest one vanishes without a splice

    monkeypatch.setattr(Inbox, "insert", insert)
    assert_caught(
        AgentStateMachine,
        r"but the durable splices fold to|a claim takes all of next-step|was duplicated",
    )


def test_a_claim_without_its_notification_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AgentWork, "claimed", lambda self, message, turn: None)
    assert_caught(AgentStateMachine, r"live inbox notifications diverge from the log")


# ------------------------------------------------------------------ status


def test_a_repeated_status_event_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = AgentWork._emit_status

    def emit_twice(self: AgentWork, status: dsh.AgentStatus) -> None:
        original(self, status)
        original(self, status)

    monkeypatch.setattr(AgentWork, "_emit_status", emit_twice)
    assert_caught(AgentStateMachine, r"agent/status events must alternate")


def test_a_status_that_disagrees_with_its_events_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Agent, "status", property(lambda self: dsh.AgentStatus.IDLE))
    assert_caught(
        StructuralMachine,
        r"agent\.status is idle but the last agent/status event said running",
    )


# ------------------------------------------------------------------ turns and steps


def test_a_reused_turn_number_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = AgentWork.open_turn

    def open_turn(self: AgentWork, fresh: bool = False) -> Any:
        opened = original(self, fresh)
        if opened is not None and opened.turn > 1:
            phase = self._phase  # the next turn reuses this number
            assert isinstance(phase, Running)
            self._enter(attrs.evolve(phase, turn=phase.turn - 1))
        return opened

    monkeypatch.setattr(AgentWork, "open_turn", open_turn)
    assert_caught(AgentStateMachine, r"turn numbers must strictly increase")


def _drop_events(
    monkeypatch: pytest.MonkeyPatch, kind: str, when: Callable[[Any], bool]
) -> None:
    """Make the session silently skip some appends of ``kind`` (every append path)."""
    for name in ("append", "append_trusted"):
        original = getattr(Session, name, None)
        if original is None:
            continue

        def append(
            self: Session,
            type: str,
            data: Any,
            *args: Any,
            _original: Any = original,
            **kwargs: Any,
        ) -> Any:
            if type == kind and when(data):
                return None
            return _original(self, type, data, *args, **kwargs)

        monkeypatch.setattr(Session, name, append)


def test_a_missing_turn_end_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _drop_events(
        monkeypatch, "turn/end", lambda data: isinstance(data.reason, dsh.Aborted)
    )
    assert_caught(
        StructuralMachine,
        r"no turn may stay open|runs exactly while a turn is open|starts while turn \d+ is still open",
    )


def test_a_missing_step_end_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    _drop_events(monkeypatch, "step/end", lambda data: True)
    # A bracketing check or the claim check sees the missing step/end first,
    # depending on the program.
    assert_caught(
        AgentStateMachine,
        r"ends while step \d+ is still open|starts while step \d+ is open"
        r"|claimed inside step \d+/\d+",
    )


# ------------------------------------------------------------------ causes and scheduling


def test_a_cancel_that_overwrites_the_first_cause_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cancel(self: CancelSignal, cause: dsh.CancelCause) -> bool:
        self.cause = cause  # last cause wins instead of the first
        self.scope.cancel()
        return True

    monkeypatch.setattr(CancelSignal, "cancel", cancel)
    assert_caught(AgentStateMachine, r"the first cause issued during it")


def test_a_cancel_that_aborts_nothing_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Agent.cancel

    def cancel(
        self: Agent, cause: dsh.CancelCause, *, keep_inbox: bool = False
    ) -> None:
        if not isinstance(cause, dsh.DisposedCancel):
            keep_inbox = keep_inbox or False
            if not keep_inbox:
                self.inbox.discard_all()
            return  # the activity goes on
        original(self, cause, keep_inbox=keep_inbox)

    monkeypatch.setattr(Agent, "cancel", cancel)
    assert_caught(
        AgentStateMachine,
        r"should end Aborted|still open after|still running after|expected AgentCancelled"
        r"|when_idle\(\) never completed|waking input after an abort goes to next-turn",
    )


def test_a_lost_wake_latch_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = AgentWork.wake

    def wake(self: AgentWork, after_abort: bool = False) -> None:
        original(self, False)  # never latch a wake sent after an abort

    monkeypatch.setattr(AgentWork, "wake", wake)
    assert_caught(
        AgentStateMachine, r"waking input sent after the abort is latched", **RARE
    )


def test_a_disposed_cause_that_latches_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentWork.wake

    def wake(self: AgentWork, after_abort: bool = False) -> None:
        phase = self.phase
        if not isinstance(phase, Idle) and isinstance(
            phase.signal.cause, dsh.DisposedCancel
        ):
            self._set_wake(True)  # latches under DisposedCancel too
            return
        original(self, after_abort)

    monkeypatch.setattr(AgentWork, "wake", wake)
    assert_caught(AgentStateMachine, r"a DisposedCancel never latches a wake", **RARE)


def test_waking_input_after_an_abort_that_is_not_redirected_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def accept(
        self: AgentWork, message: dsh.UserMessage, target: Any, wakeup: bool
    ) -> None:
        self.check_alive()
        phase = self.phase
        after_abort = wakeup and not isinstance(phase, Idle) and phase.signal.cancelled
        self.inbox.insert(
            dsh.InboxTarget(target), message
        )  # the redirection is missing
        if wakeup:
            self.wake(after_abort)

    monkeypatch.setattr(AgentWork, "accept", accept)
    assert_caught(
        AgentStateMachine, r"waking input after an abort goes to next-turn", **RARE
    )


def test_keep_inbox_that_does_not_park_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Agent.cancel

    def cancel(
        self: Agent, cause: dsh.CancelCause, *, keep_inbox: bool = False
    ) -> None:
        original(self, cause, keep_inbox=False)  # keep_inbox ignored

    monkeypatch.setattr(Agent, "cancel", cancel)
    assert_caught(AgentStateMachine, r"must leave the inbox as it was")


def test_a_maintenance_that_forgets_its_latched_wake_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentWork.maintain

    async def maintain(self: AgentWork, task: Any) -> Any:
        async def forgetful(signal: Any) -> Any:
            try:
                return await task(signal)
            finally:
                self._set_wake(False)  # the latch is dropped when the task ends

        return await original(self, forgetful)

    monkeypatch.setattr(AgentWork, "maintain", maintain)
    assert_caught(
        AgentStateMachine,
        r"a turn must start iff a wake was latched|waking input sent after the abort is latched",
        **RARE,
    )


# ------------------------------------------------------------------ idleness, disposal, tasks


def test_when_idle_that_never_completes_is_reported_as_a_deadlock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentWork.drive

    async def drive(self: AgentWork, done: trio.Event, opened: Any) -> None:
        await original(self, trio.Event(), opened)  # the activity's event is never set

    monkeypatch.setattr(AgentWork, "drive", drive)
    assert_caught(
        AgentStateMachine,
        r"when_idle\(\) never completed|blocked while every task was idle"
        r"|when_idle\(\) waiter #\d+ \(parked after \d+ events\) never returned",
    )


def test_a_suppressed_agent_disposed_event_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = dsh.EventBus.emit

    def emit(self: dsh.EventBus, name: str, payload: Any, **kwargs: Any) -> None:
        if name != "agent/disposed":
            original(self, name, payload, **kwargs)

    monkeypatch.setattr(dsh.EventBus, "emit", emit)
    assert_caught(
        AgentStateMachine,
        r"agent/disposed must be emitted exactly once; it was 0 times",
    )


def test_a_repeated_agent_disposed_event_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = dsh.EventBus.emit

    def emit(self: dsh.EventBus, name: str, payload: Any, **kwargs: Any) -> None:
        original(self, name, payload, **kwargs)
        if name == "agent/disposed":
            original(self, name, payload, **kwargs)

    monkeypatch.setattr(dsh.EventBus, "emit", emit)
    assert_caught(
        AgentStateMachine,
        r"agent/disposed must be emitted exactly once; it was 2 times",
    )


def test_input_accepted_after_dispose_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AgentWork, "check_alive", lambda self: None)
    # A disposed agent that accepts input shows as an accepted send or edit, events
    # after dispose, or a maintenance task that runs (and ends, or never ends).
    assert_caught(
        AgentStateMachine,
        r"should raise AgentDisposedError|appended after dispose"
        r"|expected AgentDisposedError|tasks outlived the runtime: \['[\w.]*maintenance",
    )


def test_a_task_that_outlives_the_runtime_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentRegistry._teardown

    async def teardown(self: AgentRegistry, *args: Any) -> None:
        await original(self, *args)
        trio.lowlevel.spawn_system_task(trio.sleep_forever, name="leaked-writer")

    monkeypatch.setattr(AgentRegistry, "_teardown", teardown)
    assert_caught(AgentStateMachine, r"tasks outlived the runtime: \['leaked-writer'")


def test_an_idle_agent_that_holds_a_task_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentWork.drive

    async def drive(self: AgentWork, done: trio.Event, opened: Any) -> None:
        await original(self, done, opened)
        await trio.sleep_forever()  # the driver task lingers after going idle

    monkeypatch.setattr(AgentWork, "drive", drive)
    assert_caught(
        AgentStateMachine,
        r"an idle agent must hold no task|tasks still run in the runtime",
    )


def test_the_mutation_helper_fails_on_a_correct_runtime() -> None:
    with pytest.raises(pytest.fail.Exception, match=re.escape("did not report")):
        assert_caught(AgentStateMachine, r".", max_examples=3)
