"""The shipped strategies, operation replay and the hypothesis profiles."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

import dsh_trio as dsh
from dsh_trio.loop import AgentWork
from dsh_trio.testing import (
    AgentStateMachine,
    Answer,
    Cancel,
    InvariantViolation,
    Send,
    answers,
    cancels,
    inbox_edits,
    machine_settings,
    operation_sequences,
    sends,
    user_messages,
)
from dsh_trio.testing._strategies import MESSAGES
from dsh_trio.testing.machine import profile_name


@settings(max_examples=25, deadline=None, database=None)
@given(operation_sequences(max_size=8))
def test_any_operation_sequence_replays_with_every_invariant(ops: list[object]) -> None:
    AgentStateMachine.check_operations(ops)  # type: ignore[arg-type]


def test_a_replayed_program_reports_a_broken_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(AgentWork, "claimed", lambda self, message, turn: None)
    hello = dsh.user_message("hello", id="m0")
    with pytest.raises(InvariantViolation, match="notifications diverge"):
        AgentStateMachine.check_operations(
            [Send(hello, "next-turn", True), Answer("reply")]
        )


@settings(max_examples=50, deadline=None, database=None)
@given(user_messages(), sends(), inbox_edits(), cancels())
def test_drawn_values_are_valid_runtime_input(
    message: dsh.UserMessage, send: Send, edit: object, cancel: Cancel
) -> None:
    assert isinstance(message, dsh.UserMessage)
    assert message.content
    assert send.method in ("followup", "steer", "inject", "send")
    assert isinstance(cancel.cause, dsh.CancelCause)
    assert all(isinstance(item, (Send, Cancel)) for item in cancel.then)


def test_message_menu_has_duplicate_ids_and_every_source() -> None:
    ids = [m.id for m in MESSAGES]
    assert len(set(ids)) < len(ids)
    assert {type(m.source) for m in MESSAGES} == {dsh.UserSource, dsh.PluginSource}


@settings(max_examples=10, database=None)
@given(answers("hang", "gate"))
def test_answers_filter_by_kind(answer: Answer) -> None:
    assert answer.kind in ("hang", "gate")


def test_answers_refuse_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="no answer kind"):
        answers("nonsense")  # type: ignore[arg-type]


def test_profiles_meet_their_budgets() -> None:
    ci = machine_settings("ci")
    assert ci.derandomize and ci.max_examples >= 200 and ci.stateful_step_count >= 30
    assert ci.deadline is None and ci.database is None
    deep = machine_settings("deep")
    assert deep.max_examples * deep.stateful_step_count >= 10**5
    with pytest.raises(KeyError, match="unknown hypothesis profile"):
        machine_settings("nightly")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "dev"),
        ({"CI": "true"}, "ci"),
        ({"CI": "0"}, "dev"),
        ({"CI": "true", "HYPOTHESIS_PROFILE": "deep"}, "deep"),
        ({"HYPOTHESIS_PROFILE": "ci"}, "ci"),
    ],
)
def test_the_profile_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("HYPOTHESIS_PROFILE", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert profile_name() == expected
