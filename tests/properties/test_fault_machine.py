"""The persistence machine with faults, run under the selected profile (JSONL and PostgreSQL)."""

from __future__ import annotations

from hypothesis.stateful import run_state_machine_as_test

from dsh_trio.testing import machine_settings

from .fault_machine import FaultMachine, PgFaultMachine

#: Examples of the fault machines: a bounded share of the profile's.
EXAMPLES = 40
PG_EXAMPLES = 15


def test_fault_machine() -> None:
    profile = machine_settings()
    run_state_machine_as_test(
        FaultMachine,
        settings=machine_settings(
            max_examples=min(EXAMPLES, profile.max_examples),
            stateful_step_count=min(25, profile.stateful_step_count),
        ),
    )


def test_fault_machine_on_postgres(machine_dsn: str) -> None:
    PgFaultMachine.dsn = machine_dsn
    profile = machine_settings()
    run_state_machine_as_test(
        PgFaultMachine,
        settings=machine_settings(
            max_examples=min(PG_EXAMPLES, profile.max_examples),
            stateful_step_count=min(20, profile.stateful_step_count),
        ),
    )
