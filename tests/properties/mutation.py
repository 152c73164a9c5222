"""Run a state machine against a deliberately broken runtime and check the report.

The verdict never depends on machine speed: generation is derandomized and bounded by an
example count and a step count, and there is no shrink phase (shrinking is bounded only
by wall-clock time in hypothesis, so a loaded machine would shrink less). What is checked
is that the machine fails with the invariant's own message and reports the program that
shows it; ``DSH_MUTATION_VERBOSE=1`` prints that program.
"""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import Phase
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from dsh_trio.testing import machine_settings


def _rule_names(machine: type[RuleBasedStateMachine]) -> set[str]:
    """Names of the machine's ``@rule`` methods (not invariants, not initialize rules)."""
    return {
        name
        for klass in machine.__mro__
        for name, value in vars(klass).items()
        if getattr(value, "hypothesis_stateful_rule", None) is not None
    }


def program_of(
    exc: BaseException, machine: type[RuleBasedStateMachine]
) -> list[str] | None:
    """The rule steps of the falsifying program hypothesis attached to ``exc``.

    Each step is one string (a step printed over several lines is joined).
    ``None`` if no program was attached; ``[]`` for a failure in setup or teardown.
    """
    lines = "\n".join(getattr(exc, "__notes__", ())).splitlines()
    if not any(line.startswith("state = ") for line in lines):
        return None
    steps: list[list[str]] = []
    for line in lines:
        if line.startswith("state."):
            steps.append([line])
        elif steps and line.startswith(" "):
            steps[-1].append(line.strip())
    rules = _rule_names(machine)
    return [" ".join(step) for step in steps if step[0][6:].split("(")[0] in rules]


def assert_caught(
    machine: type[RuleBasedStateMachine],
    match: str,
    *,
    max_examples: int = 500,
    steps: int = 15,
) -> list[str]:
    """Run ``machine``; it must fail with an error matching ``match`` and report its program.

    Returns:
        The rule steps of the reported program.
    """
    salt = os.environ.get("DSH_MUTATION_SALT")
    if salt:  # another derandomized seed: hypothesis derives it from the class
        machine = type(f"{machine.__name__}{salt}", (machine,), {})
    settings = machine_settings(
        "ci",
        max_examples=max_examples,
        stateful_step_count=steps,
        phases=[Phase.generate],
        report_multiple_bugs=False,
    )
    try:
        run_state_machine_as_test(machine, settings=settings)
    except AssertionError as exc:
        message = str(exc)
        program = program_of(exc, machine)
        assert program is not None, f"no falsifying program was reported for: {message}"
        assert re.search(match, message), (
            f"the machine failed for another reason: {message}\n" + "\n".join(program)
        )
        if os.environ.get("DSH_MUTATION_VERBOSE"):
            print(f"\n{len(program)} steps: {match}\n  " + "\n  ".join(program))
        return program
    pytest.fail(f"the machine did not report the broken runtime ({match!r})")
