"""The machine's preset-select rule is able to fail.

Each test breaks ``presets.select`` on purpose and checks that the machine reports it
with the rule's own message.
"""

from __future__ import annotations

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.composition import PresetRegistry
from dsh_trio.events import PresetSelected
from dsh_trio.testing import (
    AgentStateMachine,
    Answer,
    InvariantViolation,
    Operation,
    SelectPreset,
    Send,
    WaitIdle,
)

from .mutation import assert_caught


def test_a_select_after_the_first_turn_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def select(self: PresetRegistry, agent: dsh.Agent, id: str) -> str:
        await trio.lowlevel.checkpoint()  # no lock check: always rebinds and appends
        self.recompose(agent, id)
        agent.session.append("agent-preset/selected", {"agentPreset": id})
        self._bus.emit("agent-preset/selected", PresetSelected(str(agent.id), id))
        return id

    monkeypatch.setattr(PresetRegistry, "select", select)
    assert_caught(AgentStateMachine, r"succeeded after a turn had started")


def test_a_locked_select_that_appends_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = PresetRegistry.select

    async def select(self: PresetRegistry, agent: dsh.Agent, id: str) -> str:
        try:
            return await original(self, agent, id)
        except dsh.PresetLockedError:
            agent.session.append("agent-preset/selected", {"agentPreset": id})
            raise

    monkeypatch.setattr(PresetRegistry, "select", select)
    assert_caught(AgentStateMachine, r"a refused select\(.*\) on .* still appended 1")


def test_a_select_announced_twice_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = PresetRegistry.select

    async def select(self: PresetRegistry, agent: dsh.Agent, id: str) -> str:
        result = await original(self, agent, id)
        self._bus.emit("agent-preset/selected", PresetSelected(str(agent.id), id))
        return result

    monkeypatch.setattr(PresetRegistry, "select", select)
    assert_caught(AgentStateMachine, r"announced .*, not exactly once")


def test_a_select_that_does_not_rebind_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(PresetRegistry, "recompose", lambda self, agent, preset: preset)
    assert_caught(AgentStateMachine, r"is bound to preset None, but its log names")


#: A select before the first turn, a turn, then a select the lock must refuse.
SELECT_AROUND_A_TURN: list[Operation] = [
    SelectPreset("alpha"),
    Send(dsh.user_message("hi", id="m0"), "next-turn", True),
    Answer("reply", text="hello"),
    WaitIdle(),
    SelectPreset("beta"),
]


def test_select_operations_replay_through_check_operations() -> None:
    AgentStateMachine.check_operations(SELECT_AROUND_A_TURN)


def test_a_replayed_select_after_the_first_turn_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def select(self: PresetRegistry, agent: dsh.Agent, id: str) -> str:
        await trio.lowlevel.checkpoint()  # no lock check
        self.recompose(agent, id)
        agent.session.append("agent-preset/selected", {"agentPreset": id})
        self._bus.emit("agent-preset/selected", PresetSelected(str(agent.id), id))
        return id

    monkeypatch.setattr(PresetRegistry, "select", select)
    with pytest.raises(InvariantViolation, match="succeeded after a turn had started"):
        AgentStateMachine.check_operations(SELECT_AROUND_A_TURN)
