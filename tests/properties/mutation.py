"""Run a state machine against a deliberately broken runtime and check the report.

The verdict never depends on machine speed: generation is derandomized and bounded by
an example count and a step count, and hypothesis's own shrink phase is off (it is
bounded by wall-clock time, so a loaded machine would shrink less). Instead the
failing example's rule calls are recorded as they run, and :func:`shrink` replays
sub-programs of them on fresh machines (delete a chunk of steps, keep the result
while the failure still matches), bounded by a replay count. What is checked is that
the machine fails with the invariant's own message and that the shrunk program is
short; ``DSH_MUTATION_VERBOSE=1`` prints that program.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import Phase
from hypothesis.internal.entropy import deterministic_PRNG, get_seeder_and_restorer
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test
from hypothesis.strategies._internal.core import RandomSeeder

from dsh_trio.testing import machine_settings

_RULE = "hypothesis_stateful_rule"
_INITIALIZE = "hypothesis_stateful_initialize_rule"

#: The longest shrunk program (rule steps) a mutation test accepts.
MAX_PROGRAM = 8
#: How many sub-programs :func:`shrink` may replay.
MAX_REPLAYS = 200


@dataclasses.dataclass(frozen=True)
class Step:
    """One executed rule call: the rule's name, whether it is an initialize rule, its arguments."""

    name: str
    initialize: bool
    arguments: dict[str, Any]

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"state.{self.name}({args})"


def _rule_names(machine: type[RuleBasedStateMachine]) -> set[str]:
    """Names of the machine's ``@rule`` methods (not invariants, not initialize rules)."""
    return {
        name
        for klass in machine.__mro__
        for name, value in vars(klass).items()
        if getattr(value, _RULE, None) is not None
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


# ------------------------------------------------------------------ recording


def _recorded(function: Callable[..., Any], name: str, initialize: bool) -> Any:
    @functools.wraps(function)
    def record(self: Any, *args: Any, **arguments: Any) -> Any:
        if self.recording_depth == 0:  # not a rule the machine calls from another
            self.recorded_steps.append(Step(name, initialize, dict(arguments)))
        self.recording_depth += 1
        try:
            return function(self, *args, **arguments)
        finally:
            self.recording_depth -= 1

    return record


def recording(machine: type[RuleBasedStateMachine]) -> type[RuleBasedStateMachine]:
    """A subclass of ``machine`` whose instances record each rule call as it runs.

    Each instance has ``recorded_steps`` (a list of :class:`Step`), and the class
    keeps the last instance built in ``last``. Name, qualified name and module are
    the machine's own, so hypothesis derives the same derandomized seed from it.
    """
    namespace: dict[str, Any] = {
        "__module__": machine.__module__,
        "__qualname__": machine.__qualname__,
    }
    if hasattr(machine, "__firstlineno__"):
        namespace["__firstlineno__"] = machine.__firstlineno__
    for klass in reversed(machine.__mro__):
        for name, value in vars(klass).items():
            for marker, initialize in ((_RULE, False), (_INITIALIZE, True)):
                rule = getattr(value, marker, None)
                if rule is None:
                    continue
                wrapper = _recorded(rule.function, name, initialize)
                setattr(wrapper, marker, dataclasses.replace(rule, function=wrapper))
                other = _INITIALIZE if marker == _RULE else _RULE
                if hasattr(wrapper, other):  # copied by functools.wraps
                    delattr(wrapper, other)
                namespace[name] = wrapper

    def __init__(self: Any) -> None:
        self.recorded_steps = []
        self.recording_depth = 0
        type(self).last = self
        machine.__init__(self)

    namespace["__init__"] = __init__
    namespace["last"] = None
    return type(machine.__name__, (machine,), namespace)


# ------------------------------------------------------------------ replaying


@dataclasses.dataclass
class Replay:
    """What replaying a program did: the failure (if any) and the step it happened in."""

    error: BaseException | None
    #: The index of the step whose call or invariant check failed; ``len(program)``
    #: for a failure in teardown, ``-1`` for one building the machine.
    at: int


def replay(machine: type[RuleBasedStateMachine], program: Sequence[Step]) -> Replay:
    """Run ``program`` on a fresh ``machine`` the way hypothesis runs an example.

    The random generators hypothesis manages are seeded as it seeds them; the
    invariants run after each step once the initialize steps have run; teardown
    runs last (also after a failure).
    """
    # By name, the most derived first: an invariant a subclass overrides runs once,
    # as the subclass wrote it (as hypothesis runs it).
    by_name: dict[str, Any] = {}
    for klass in machine.__mro__:
        for name, value in vars(klass).items():
            if name not in by_name:
                by_name[name] = value
    invariants = [
        value
        for value in by_name.values()
        if getattr(value, "hypothesis_stateful_invariant", None) is not None
    ]

    def check(state: RuleBasedStateMachine) -> None:
        for function in invariants:
            invariant = function.hypothesis_stateful_invariant
            if all(precondition(state) for precondition in invariant.preconditions):
                invariant.function(state)

    initializing = max(
        (i for i, step in enumerate(program) if step.initialize), default=-1
    )
    with deterministic_PRNG():
        try:
            state = machine()
        except Exception as exc:
            return Replay(exc, -1)
        at = len(program)
        try:
            try:
                if initializing < 0:
                    check(state)
                for at, step in enumerate(program):
                    for value in step.arguments.values():
                        if isinstance(value, RandomSeeder):
                            get_seeder_and_restorer(value.seed)[0]()
                    getattr(type(state), step.name).__wrapped__(state, **step.arguments)
                    if at >= initializing:  # hypothesis checks once they all ran
                        check(state)
                at = len(program)
            finally:
                state.teardown()
        except Exception as exc:
            return Replay(exc, at)
    return Replay(None, at)


def shrink(
    machine: type[RuleBasedStateMachine],
    program: Sequence[Step],
    fails: Callable[[BaseException], bool],
    *,
    max_replays: int = MAX_REPLAYS,
) -> list[Step] | None:
    """The shortest sub-program of ``program`` found that still fails as ``fails`` says.

    Delta debugging by replay: drop everything after the failing step, then try
    deleting chunks of steps (halves, quarters, ... single steps, from the end
    backwards), keeping each deletion that still fails. Deterministic and bounded
    by ``max_replays`` replays, never by time.

    Returns:
        The shrunk program, or ``None`` if ``program`` itself does not fail on replay.
    """
    replays = 0

    def attempt(candidate: list[Step]) -> list[Step] | None:
        nonlocal replays
        replays += 1
        result = replay(machine, candidate)
        if result.error is None or not fails(result.error):
            return None
        return candidate[: result.at + 1]

    shrunk = attempt(list(program))
    if shrunk is None:
        return None
    size = max(len(shrunk) // 2, 1)
    while replays < max_replays:
        progress = False
        start = len(shrunk) - size
        while start >= 0 and replays < max_replays:
            found = attempt(shrunk[:start] + shrunk[start + size :])
            if found is not None:
                shrunk, progress = found, True
                start = min(start, len(shrunk)) - size
            else:
                start -= 1
        if size > 1:
            size = max(min(size // 2, len(shrunk) // 2), 1)
        elif not progress:
            break
    return shrunk


# ------------------------------------------------------------------ the check


def assert_caught(
    machine: type[RuleBasedStateMachine],
    match: str,
    *,
    max_examples: int = 500,
    steps: int = 15,
    max_program: int = MAX_PROGRAM,
    seeds: int = 1,
) -> list[str]:
    """Run ``machine``; it must fail with an error matching ``match`` and a short program.

    The machine runs with up to ``seeds`` derandomized seeds (``max_examples`` each),
    stopping at the first failure: a bug that only rare interleavings reach is then
    looked for in more than one fixed sequence of programs, still counted, never timed.
    The failing example is shrunk by :func:`shrink`; its rule steps (initialize
    rules left out) must number at most ``max_program``.

    Returns:
        The rule steps of the shrunk program.
    """
    salt = os.environ.get("DSH_MUTATION_SALT") or ""
    settings = machine_settings(
        "ci",
        max_examples=max_examples,
        stateful_step_count=steps,
        phases=[Phase.generate],
        report_multiple_bugs=False,
    )
    failure: AssertionError | None = None
    recorder = recording(machine)
    for seed in range(seeds):
        # Another derandomized seed: hypothesis derives it from the class.
        suffix = salt + (f"seed{seed}" if seed else "")
        salted = (
            type(f"{machine.__name__}{suffix}", (machine,), {}) if suffix else machine
        )
        recorder = recording(salted)
        try:
            run_state_machine_as_test(recorder, settings=settings)
        except AssertionError as exc:
            failure = exc
            machine = salted
            break
    if failure is None:
        pytest.fail(f"the machine did not report the broken runtime ({match!r})")
    # Shrunk outside the except block: a machine's teardown tells a failure that
    # is propagating (``sys.exc_info()``) from a clean end.
    message = str(failure)
    reported = program_of(failure, machine)
    assert reported is not None, f"no falsifying program was reported for: {message}"
    assert re.search(match, message), (
        f"the machine failed for another reason: {message}\n" + "\n".join(reported)
    )
    last = getattr(recorder, "last", None)
    assert last is not None
    shrunk = shrink(
        recorder,
        last.recorded_steps,
        lambda e: isinstance(e, AssertionError) and bool(re.search(match, str(e))),
    )
    if shrunk is None:
        again = replay(recorder, last.recorded_steps)
        pytest.fail(
            f"the failing program does not fail again on replay: {message}\n"
            f"replayed, it gave {again.error!r} at step {again.at}:\n"
            + "\n".join(str(step) for step in last.recorded_steps)
        )
    program = [str(step) for step in shrunk if not step.initialize]
    if os.environ.get("DSH_MUTATION_VERBOSE"):
        print(
            f"\n{len(program)} steps: {match}\n  "
            + "\n  ".join(str(step) for step in shrunk)
        )
    assert len(program) <= max_program, (
        f"the shrunk program has {len(program)} steps (at most {max_program}): "
        f"{message}\n" + "\n".join(program)
    )
    return program
