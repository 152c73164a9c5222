"""A failing machine's report shows the program, not the machine's deliberate failures.

The machine's raising listeners raise on purpose and the runtime logs each such
exception with its traceback; pytest would print every one of them (hundreds in a
run) in the failing test's report, above nothing useful. The machine keeps them out
of the log, in ``deliberate_failures``; a real failure is still logged.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.testing import AgentStateMachine
from dsh_trio.testing._strategies import Send
from dsh_trio.testing.machine._report import (
    DeliberateFailures,
    ListenerFailure,
    MaintenanceFailure,
)

ROOT = Path(__file__).resolve().parents[2]

#: A test module run by pytest in a subprocess: a runtime that loses a claimed
#: message, a machine whose every example starts with a raising listener on
#: ``agent/status`` (so the failing example has raised on purpose), and one real
#: listener failure in the run.
PLANTED = """
from hypothesis import Phase
from hypothesis.stateful import initialize, run_state_machine_as_test

from dsh_trio.loop._inbox import Inbox
from dsh_trio.testing import AgentStateMachine, machine_settings

HEARD = []
KEPT = []
REAL_BUGS = []


class Noisy(AgentStateMachine):
    @initialize()
    def listen_loudly(self):
        self.add_raising_listener(front=True, name="agent/status")
        self.runtime.events.on("agent/status", HEARD.append)  # it raised each time too

    def setup_agent(self, agent):
        def real_bug(event):
            if not REAL_BUGS:  # once in the run
                REAL_BUGS.append(event)
                raise RuntimeError("a real listener bug")

        agent.scope.on("agent/inbox/claimed", real_bug)

    def teardown(self):
        try:
            super().teardown()
        finally:
            KEPT.extend(self.deliberate_failures)


def test_planted(monkeypatch):
    original = Inbox.claim
    monkeypatch.setattr(Inbox, "claim", lambda self, t, turn: original(self, t, turn)[:-1])
    try:
        run_state_machine_as_test(
            Noisy,
            settings=machine_settings(
                "ci",
                max_examples=20,
                stateful_step_count=5,
                phases=[Phase.generate, Phase.shrink],
            ),
        )
    finally:
        print(f"DELIBERATE {len(HEARD)} KEPT {len(KEPT)}")
"""


def test_a_failing_machine_reports_its_program_without_deliberate_tracebacks(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "HYPOTHESIS_"))
    }
    env["PYTHONPATH"] = str(ROOT / "src")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-s",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 1, report
    # The machine raised on purpose in the run ...
    counts = re.search(r"^DELIBERATE (\d+) KEPT (\d+)$", report, re.MULTILINE)
    assert counts is not None, report
    assert int(counts[1]) > 0
    # ... and none of it reached the report,
    assert "ListenerFailure" not in report
    assert 'listener of event "agent/status" raised' not in report
    # which shows the invariant, the program,
    assert "was lost: claimed at" in report
    assert "state = Noisy()" in report
    assert "state.listen_loudly()" in report
    assert re.search(r"state\.(send\w*|followup|steer)\(", report), report
    assert "state.teardown()" in report
    # and the real failure, logged.
    assert 'listener of event "agent/inbox/claimed" raised' in report
    assert "RuntimeError: a real listener bug" in report
    assert report.count("Traceback (most recent call last)") == 1
    # The machine kept each deliberate failure instead (its own rule may add more).
    assert int(counts[2]) >= int(counts[1])


def test_deliberate_failures_are_kept_by_the_machine_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Raising(AgentStateMachine):
        pass

    machine = Raising()
    try:
        machine.add_raising_listener(front=False, name="agent/status")
        machine.apply(
            Send(dsh.user_message("hi", id="m0"), dsh.InboxTarget.NEXT_TURN, True)
        )
        machine.drain()
        kept = list(machine.deliberate_failures)
    finally:
        machine.teardown()
    assert kept
    assert kept[0] == (
        "listener of event \"agent/status\" raised: ListenerFailure('agent/status')"
    )
    assert not [r for r in caplog.records if r.name == "dsh_trio"]


def test_only_the_listed_kinds_are_dropped_and_only_while_installed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("dsh_trio")
    quiet = DeliberateFailures((ListenerFailure, MaintenanceFailure))

    def log(error: Exception) -> None:
        try:
            raise error
        except Exception:
            logger.exception("listener raised")

    quiet.install()
    try:
        log(ListenerFailure("a"))
        log(MaintenanceFailure(1))
        log(ValueError("real"))
        logger.error("no exception at all")
    finally:
        quiet.uninstall()
    log(ListenerFailure("after"))
    assert quiet.seen == [
        "listener raised: ListenerFailure('a')",
        "listener raised: MaintenanceFailure(1)",
    ]
    logged = [
        (r.getMessage(), type(r.exc_info[1]).__name__ if r.exc_info else None)
        for r in caplog.records
    ]
    assert logged == [
        ("listener raised", "ValueError"),
        ("no exception at all", None),
        ("listener raised", "ListenerFailure"),
    ]
    quiet.uninstall()  # idempotent
