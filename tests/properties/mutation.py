"""Run a state machine against a deliberately broken runtime and check the report."""

from __future__ import annotations

import re

import pytest
from hypothesis import Phase
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from dsh_trio.testing import machine_settings

#: A shrunk program longer than this (rules, not counting setup/teardown) fails the test.
MAX_SHRUNK_STEPS = 8


def program_of(exc: BaseException) -> list[str] | None:
    """The rule steps of the falsifying program hypothesis attached to ``exc``.

    ``None`` if no program was attached; ``[]`` for a failure in setup or teardown.
    """
    lines = "\n".join(getattr(exc, "__notes__", ())).splitlines()
    if not any(line.startswith("state = ") for line in lines):
        return None
    return [
        line
        for line in lines
        if line.startswith("state.")
        and not line.startswith(("state.teardown(", "state.check_", "state.seed_"))
    ]


def assert_caught(
    machine: type[RuleBasedStateMachine],
    match: str,
    *,
    max_examples: int = 500,
    steps: int = 10,
) -> list[str]:
    """Run ``machine``; it must fail with an error matching ``match`` and a shrunk program.

    Returns:
        The steps of the shrunk program.
    """
    settings = machine_settings(
        "ci",
        max_examples=max_examples,
        stateful_step_count=steps,
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    try:
        run_state_machine_as_test(machine, settings=settings)
    except AssertionError as exc:
        message = str(exc)
        program = program_of(exc)
        assert program is not None, f"no falsifying program was reported for: {message}"
        assert re.search(match, message), (
            f"the machine failed for another reason: {message}\n" + "\n".join(program)
        )
        assert len(program) <= MAX_SHRUNK_STEPS, (
            "the program was not shrunk:\n" + "\n".join(program)
        )
        return program
    pytest.fail(f"the machine did not report the broken runtime ({match!r})")
