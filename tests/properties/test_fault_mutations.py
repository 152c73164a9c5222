"""Each invariant of the fault machine is able to fail.

Every test breaks the runtime or the persistence layer on purpose, in a way a
plausible bug would, and checks that the fault machine reports it with the
invariant's own message and a shrunk program. Two or more different bugs per
invariant: the invariant is aimed at the class of bug, not at one line.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.errors import PersistenceError
from dsh_trio.loop._inbox import Inbox
from dsh_trio.loop._recording import RecordingGate
from dsh_trio.loop._work import AgentWork
from dsh_trio.persistence import _jsonl, _jsonl_writer, _pg_lease, _pg_writer
from dsh_trio.persistence._recorder import SessionRecorder
from dsh_trio.session import _repair
from dsh_trio.tools import _scheduler

from .fault_machine import FaultMachine, PgFaultMachine
from .mutation import assert_caught

FLUSHED = r"flush\(\) returned, but|flush\(\) returned with durability"
UNWRITTEN = r"over an unwritten event"
FENCED = r"a fenced writer appended"
UNANSWERED = r"unanswered: every tool call needs a tool/result"
DISPOSAL = r"disposal (lost message|did not durably discard)"

#: Budget of each run: derandomized, counted in examples and steps, never timed.
BUDGET: dict[str, Any] = {"max_examples": 300, "steps": 20}


# ------------------------------------------------------------------ durability after flush


def test_a_flush_that_returns_while_writes_fail_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "The background task retries a failing log; flush() need not wait for it."
    original = SessionRecorder.flush

    async def flush(self: SessionRecorder) -> None:
        if self.fault is not None:
            await trio.lowlevel.checkpoint()
            return
        await original(self)

    monkeypatch.setattr(SessionRecorder, "flush", flush)
    assert_caught(FaultMachine, FLUSHED, **BUDGET)


def test_a_flush_that_leaves_a_failed_fsync_to_a_later_write_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "The fsync failed and was reported; the next write will sync again."
    original = SessionRecorder._flush_locked

    async def flush_locked(self: SessionRecorder, *, closing: bool = False) -> None:
        if self.fault is not None and not self._pending and not closing:
            self._unsynced = False
        await original(self, closing=closing)

    monkeypatch.setattr(SessionRecorder, "_flush_locked", flush_locked)
    assert_caught(FaultMachine, FLUSHED, **BUDGET)


# ------------------------------------------------------------------ success over an unwritten event


def test_a_turn_that_does_not_wait_for_its_writes_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def wait_written(self: RecordingGate) -> None:
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(RecordingGate, "wait_written", wait_written)
    assert_caught(FaultMachine, UNWRITTEN, **BUDGET)


def test_a_turn_that_ignores_a_failed_write_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "The fault was reported already (agent/error); the turn itself went fine."
    original = SessionRecorder.wait_written

    async def wait_written(self: SessionRecorder) -> None:
        with contextlib.suppress(PersistenceError):
            await original(self)

    monkeypatch.setattr(SessionRecorder, "wait_written", wait_written)
    assert_caught(FaultMachine, UNWRITTEN, **BUDGET)


# ------------------------------------------------------------------ fencing


def test_a_jsonl_writer_that_does_not_check_its_file_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def open_log(self: _jsonl_writer.JsonlWriter) -> int:
        fd, _st = _jsonl_writer.open_file(self.path, os.O_WRONLY | os.O_APPEND)
        return fd

    monkeypatch.setattr(_jsonl_writer.JsonlWriter, "_open_log", open_log)
    assert_caught(FaultMachine, FENCED, **BUDGET)


def test_a_jsonl_writer_that_knows_its_file_by_size_only_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def by_size(st: os.stat_result) -> tuple[int, int, int]:
        return st.st_dev, 0, 0

    monkeypatch.setattr(_jsonl_writer, "stamp", by_size)
    monkeypatch.setattr(_jsonl, "stamp", by_size)
    assert_caught(FaultMachine, FENCED, **BUDGET)


# ------------------------------------------------------------------ tool calls


def test_a_repair_that_leaves_started_calls_unanswered_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _repair.interrupted_turn_closers

    def closers(*args: Any, **kwargs: Any) -> list[Any]:
        return [
            c
            for c in original(*args, **kwargs)
            if not (c[0] == "tool/result" and c[3] is not None)
        ]

    monkeypatch.setattr(_repair, "interrupted_turn_closers", closers)
    assert_caught(FaultMachine, UNANSWERED, **BUDGET)


def test_a_cancelled_step_that_skips_unstarted_calls_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The close-out commits the started calls only, and the driver's safety net
    # is not run when the step is cancelled (on either path: the plain driver's and
    # the fast lane's).
    def close_out(self: Any) -> None:
        while self.committed < self.started:
            self._commit(self.calls[self.committed])

    from dsh_trio.loop import _answers, _driver, _lane

    original = _answers.answer_calls

    def answer_calls(*args: Any) -> None:
        exc = args[6]
        if exc is None or isinstance(exc, Exception):
            original(*args)

    monkeypatch.setattr(_scheduler._Run, "_close_out", close_out)
    monkeypatch.setattr(_driver, "answer_calls", answer_calls)
    monkeypatch.setattr(_lane, "answer_calls", answer_calls)
    assert_caught(FaultMachine, UNANSWERED, **BUDGET)


def test_a_repair_that_answers_only_the_first_call_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _repair.interrupted_turn_closers

    def closers(*args: Any, **kwargs: Any) -> list[Any]:
        made = original(*args, **kwargs)
        results = [c for c in made if c[0] == "tool/result"]
        return [c for c in made if c[0] != "tool/result" or c is results[0]]

    monkeypatch.setattr(_repair, "interrupted_turn_closers", closers)
    assert_caught(FaultMachine, UNANSWERED, **BUDGET)


# ------------------------------------------------------------------ the inbox on dispose


def test_a_disposal_that_keeps_the_inbox_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = AgentWork.cancel

    def cancel(self: AgentWork, cause: dsh.CancelCause, keep_inbox: bool) -> None:
        original(self, cause, keep_inbox or isinstance(cause, dsh.DisposedCancel))

    monkeypatch.setattr(AgentWork, "cancel", cancel)
    assert_caught(FaultMachine, DISPOSAL, **BUDGET)


def test_a_discard_that_leaves_next_step_mail_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "Next-step mail belongs to the step the cancel ends: only next-turn mail goes."
    def discard_all(self: Inbox) -> None:
        n = len(self.next_turn)
        if n:
            self._mutate(dsh.InboxTarget.NEXT_TURN, 0, n, (), discard=True)

    monkeypatch.setattr(Inbox, "discard_all", discard_all)
    assert_caught(FaultMachine, DISPOSAL, **BUDGET)


# ------------------------------------------------------------------ on PostgreSQL


#: PostgreSQL steps wait on a real server: fewer examples.
PG_BUDGET: dict[str, Any] = {"max_examples": 100, "steps": 20}


def test_a_pg_writer_that_does_not_compare_tokens_is_reported(
    monkeypatch: pytest.MonkeyPatch, machine_dsn: str
) -> None:
    PgFaultMachine.dsn = machine_dsn
    original = _pg_lease.check_lease_sync

    def check(pool: Any, conn: Any, session_id: str, token: int, *, sync: bool) -> Any:
        row = conn.execute(
            "SELECT token FROM dsh_trio.leases WHERE session_id = %s", (session_id,)
        ).fetchone()
        held = token if row is None else int(row[0])
        return original(pool, conn, session_id, held, sync=sync)

    monkeypatch.setattr(_pg_writer, "check_lease_sync", check)
    assert_caught(PgFaultMachine, FENCED, **PG_BUDGET)


def test_a_pg_writer_that_ignores_a_lapsed_lease_is_reported(
    monkeypatch: pytest.MonkeyPatch, machine_dsn: str
) -> None:
    PgFaultMachine.dsn = machine_dsn
    original = _pg_lease.check_lease_sync

    def check(pool: Any, conn: Any, session_id: str, token: int, *, sync: bool) -> Any:
        conn.execute(  # "renew on write": the writer revives its own expired lease
            "UPDATE dsh_trio.owners SET expires_at = clock_timestamp() + interval '30 s'"
            " WHERE owner = (SELECT owner FROM dsh_trio.leases WHERE session_id = %s"
            " AND token = %s)",
            (session_id, token),
        )
        return original(pool, conn, session_id, token, sync=sync)

    monkeypatch.setattr(_pg_writer, "check_lease_sync", check)
    assert_caught(PgFaultMachine, FENCED, **PG_BUDGET)
