"""Bugs the machines used to miss: each is put into the runtime by hand and reported.

Every test breaks the runtime on purpose (``monkeypatch``), runs a machine bounded by
example and step counts, and checks the report names the broken invariant.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

import dsh_trio as dsh
from dsh_trio.events._bus import _FROM_PAYLOAD, EventBus
from dsh_trio.loop import _driver, _lane
from dsh_trio.loop._agent import Agent
from dsh_trio.loop._inbox import Inbox
from dsh_trio.nursery import _retry
from dsh_trio.nursery._registry import AgentHandle, AgentRegistry
from dsh_trio.persistence._recorder import SessionRecorder
from dsh_trio.session._history import HistoryFold
from dsh_trio.testing import AgentStateMachine

from .mutation import assert_caught
from .persistence_machine import PersistenceMachine


@pytest.fixture(autouse=True)
def _quiet_listener_failures() -> Iterator[None]:
    """The raising listeners are logged by design; keep the output short."""
    logger = logging.getLogger("dsh_trio")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


# ------------------------------------------------------------------ claims and the log


def test_a_step_boundary_claim_that_takes_a_next_turn_message_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = Inbox.claim

    def claim(self: Inbox, target: dsh.InboxTarget, turn: int) -> list[dsh.UserMessage]:
        return original(self, dsh.InboxTarget.NEXT_TURN, turn)  # every boundary

    monkeypatch.setattr(Inbox, "claim", claim)
    assert_caught(AgentStateMachine, r"a step boundary claims only next-step")


def test_derived_messages_that_repeat_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = HistoryFold.snapshot

    def snapshot(self: HistoryFold) -> Any:
        self._folded = 0  # folds the whole surface again onto what it holds
        return original(self)

    monkeypatch.setattr(HistoryFold, "snapshot", snapshot)
    assert_caught(AgentStateMachine, r"carries \d+ messages but the log folds to \d+")


def _driver_without(
    monkeypatch: pytest.MonkeyPatch, *, checkpoint: bool, if_cancelled: bool
) -> None:
    """Run the driver (the general path and the fast lane) with
    ``trio.lowlevel.checkpoint`` and/or ``checkpoint_if_cancelled`` replaced by
    no-ops."""

    async def nothing() -> None:
        return None

    lowlevel = types.SimpleNamespace(
        checkpoint=nothing if checkpoint else trio.lowlevel.checkpoint,
        checkpoint_if_cancelled=(
            nothing if if_cancelled else trio.lowlevel.checkpoint_if_cancelled
        ),
    )
    fake_trio = types.SimpleNamespace(lowlevel=lowlevel, Cancelled=trio.Cancelled)
    monkeypatch.setattr(_driver, "trio", fake_trio)
    monkeypatch.setattr(_lane, "trio", fake_trio)


def test_a_driver_that_does_not_check_for_a_cancel_after_its_claim_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _driver_without(monkeypatch, checkpoint=True, if_cancelled=True)
    assert_caught(
        AgentStateMachine,
        r"after a cancel was issued to it|although a cancel was issued to it",
    )


def test_a_fresh_driver_that_does_not_check_for_a_cancel_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A driver task's start is the yield after the claim that opened its first
    # turn, so that boundary only checks for a cancel; without the check, a cancel
    # issued before the task started lets the turn start a step.
    _driver_without(monkeypatch, checkpoint=False, if_cancelled=True)
    assert_caught(
        AgentStateMachine,
        r"after a cancel was issued to it|although a cancel was issued to it",
    )


def test_one_retry_fewer_than_the_policy_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _retry._on_request_error

    async def on_request_error(payload: Any, next_: Any, *, random: Any) -> Any:
        policy = payload.retry_policy
        if policy is not None:
            short = attrs.evolve(policy, max_retries=policy.max_retries - 1)
            payload = attrs.evolve(payload, retry_policy=short)
        return await original(payload, next_, random=random)

    monkeypatch.setattr(_retry, "_on_request_error", on_request_error)
    assert_caught(
        AgentStateMachine,
        r"after 4 llm/retry events in step \d+; the policy retries it max_retries=5",
    )


# ------------------------------------------------------------------ idleness and disposal


def test_when_idle_that_returns_at_the_first_activity_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def when_idle(self: Agent) -> None:
        done = self._work.phase.done
        if done is None:
            await trio.lowlevel.checkpoint()
            return
        await done.wait()  # does not follow a replacement driver

    monkeypatch.setattr(Agent, "when_idle", when_idle)
    assert_caught(
        AgentStateMachine,
        r"returned while the agent was busy",
        max_examples=500,
        steps=30,  # the waiter must outlive one driver and see the next one start
        seeds=2,
    )


def test_dispose_that_is_not_idempotent_under_concurrent_callers_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentHandle.dispose

    async def dispose(self: AgentHandle) -> None:
        if self._disposal is None:
            await trio.lowlevel.checkpoint()  # a window before the teardown is recorded
            self._disposal = self._registry.dispose_soon(self._work)
        await original(self)

    monkeypatch.setattr(AgentHandle, "dispose", dispose)
    assert_caught(
        AgentStateMachine,
        r"agent/disposed must be emitted exactly once; it was [23] times",
    )


def test_disposing_a_parent_before_its_children_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def teardown(self: AgentRegistry, work: Any, disposal: Any) -> None:
        errors = disposal.errors
        agent = work.agent
        with trio.CancelScope(shield=True):
            entry = self._entry_of(agent)
            errors.extend(await work.drain())  # drained before the children
            for child in self._children_of(agent):
                await child.dispose()
            if entry is not None and entry.recorder is not None:
                await entry.recorder.aclose()
            self._remove(agent)
            if entry is not None and entry.announced:
                self._bus.emit("agent/disposed", dsh.AgentDisposed(agent), scope=agent)
            work.finish_dispose()
            self._forget_session(agent.session)
        disposal.done.set()

    monkeypatch.setattr(AgentRegistry, "_teardown", teardown)
    assert_caught(AgentStateMachine, r"drained it before its descendant")


# ------------------------------------------------------------------ the event bus


def test_a_raising_listener_that_stops_the_emit_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def emit(
        self: EventBus, name: str, payload: Any, *, scope: object | None = _FROM_PAYLOAD
    ) -> None:
        if scope is _FROM_PAYLOAD:
            scope = getattr(payload, "agent", None)
        for listener in self._resolve(name, self._listeners.get(name, ()), scope):
            try:
                listener(payload)
            except Exception:
                return  # the rest of the chain never runs

    monkeypatch.setattr(EventBus, "emit", emit)
    assert_caught(
        AgentStateMachine,
        r"live inbox notifications diverge from the log|agent/status events must alternate"
        r"|agent\.status is \w+ but the last agent/status event said",
    )


def test_an_emit_that_skips_the_scope_filter_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def emit(
        self: EventBus, name: str, payload: Any, *, scope: object | None = _FROM_PAYLOAD
    ) -> None:
        for entry in self._listeners.get(name, ()):
            try:
                entry.listener(payload)  # scoped listeners hear every agent
            except Exception:
                continue

    monkeypatch.setattr(EventBus, "emit", emit)
    assert_caught(AgentStateMachine, r"a listener scoped to .* heard agent/status of")


# ------------------------------------------------------------------ durability


def test_a_turn_end_synced_only_at_the_end_of_its_batch_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = SessionRecorder._write_pending

    async def write_pending(self: SessionRecorder, *, flushing: bool) -> None:
        durability = self._durability
        if (
            not flushing
            and durability == "turn"
            and self._pending
            and self._pending[-1].type != "turn/end"
        ):
            self._durability = "none"  # a turn/end inside the batch is not synced
        try:
            await original(self, flushing=flushing)
        finally:
            self._durability = durability

    monkeypatch.setattr(SessionRecorder, "_write_pending", write_pending)
    assert_caught(PersistenceMachine, r"durability 'turn'")
