"""Each invariant of the persistence machine is able to fail.

Every test breaks the persistence layer on purpose and checks that the machine
reports it with the invariant's own message and a shrunk program.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from dsh_trio.loop._inbox import Inbox
from dsh_trio.persistence import _jsonl_load, _jsonl_writer, _persistence
from dsh_trio.persistence._recorder import SessionRecorder
from dsh_trio.session._session import Session

from .mutation import assert_caught
from .persistence_machine import PersistenceMachine


def test_a_loader_that_drops_a_flushed_event_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = _jsonl_load.scan_log

    def scan(fd: int, path: str, session_id: str | None) -> Any:
        scan = original(fd, path, session_id)
        if scan.events:  # forget the last intact event
            data = os.pread(fd, scan.good_end, 0)
            last = data.rfind(b"\n", 0, scan.good_end - 1) + 1
            seq = len(scan.events) - 1
            return type(scan)(
                header=scan.header,
                events=scan.events[:-1],
                good_end=last,
                size=scan.size,
                tail=_jsonl_load.Tail(last, seq, seq + 2, "dropped by the mutation"),
            )
        return scan

    monkeypatch.setattr(_jsonl_load, "scan_log", scan)
    assert_caught(
        PersistenceMachine,
        r"were durable before the crash; only \d+ loaded|differs from what was written",
    )


def test_a_resume_that_restarts_turn_numbers_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Session, "last_turn", property(lambda self: 0))
    assert_caught(PersistenceMachine, r"turn numbers must strictly increase")


def test_an_inbox_that_is_not_restored_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Inbox, "_replay", lambda self, event: None)
    assert_caught(PersistenceMachine, r"the splices fold to|restored inbox")


def test_an_unrepaired_interrupted_turn_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_persistence, "close_interrupted_turn", lambda session: [])
    assert_caught(
        PersistenceMachine, r"still open after the log was loaded and repaired"
    )


def test_a_recorder_that_never_fsyncs_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = SessionRecorder._write_pending

    async def write_pending(self: SessionRecorder, *, flushing: bool) -> None:
        durability = self._durability
        self._durability = "none"  # batches are written but never fsynced
        try:
            await original(self, flushing=flushing)
        finally:
            self._durability = durability

    monkeypatch.setattr(SessionRecorder, "_write_pending", write_pending)
    assert_caught(PersistenceMachine, r"durability '(turn|always)'")


def _with_durability(monkeypatch: pytest.MonkeyPatch, breach: Any) -> None:
    """Make the recorder write a batch unsynced when ``breach(self, batch)`` says so."""
    original = SessionRecorder._write_pending

    async def write_pending(self: SessionRecorder, *, flushing: bool) -> None:
        durability = self._durability
        if (not flushing) and breach(self, list(self._pending)):
            self._durability = "none"  # this batch is written but not fsynced
        try:
            await original(self, flushing=flushing)
        finally:
            self._durability = durability

    monkeypatch.setattr(SessionRecorder, "_write_pending", write_pending)


def test_an_always_recorder_that_syncs_like_turn_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "always" fsyncs only the batches that hold a turn/end, as "turn" does.
    def breach(recorder: SessionRecorder, batch: list[Any]) -> bool:
        return recorder._durability == "always" and not any(
            e.type == "turn/end" for e in batch
        )

    _with_durability(monkeypatch, breach)
    assert_caught(PersistenceMachine, r"durability 'always'")


def test_a_turn_recorder_that_syncs_only_batches_ending_in_turn_end_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def breach(recorder: SessionRecorder, batch: list[Any]) -> bool:
        return (
            recorder._durability == "turn"
            and any(e.type == "turn/end" for e in batch)
            and batch[-1].type != "turn/end"
        )

    _with_durability(monkeypatch, breach)
    assert_caught(PersistenceMachine, r"durability 'turn'")


def test_a_dispose_that_does_not_fsync_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flush_locked = SessionRecorder._flush_locked
    close_sync = _jsonl_writer.JsonlWriter._close_sync

    async def flush(self: SessionRecorder, *, closing: bool = False) -> None:
        durability = self._durability
        if closing:
            self._durability = "none"  # the last batch unsynced, no final fsync
        try:
            await flush_locked(self, closing=closing)
        finally:
            self._durability = durability

    def close(
        self: _jsonl_writer.JsonlWriter, before: _jsonl_writer.WriterState
    ) -> None:
        if before.unsynced:  # release the lease without the fsync
            before = _jsonl_writer.WriterState.SYNCED
        close_sync(self, before)

    monkeypatch.setattr(SessionRecorder, "_flush_locked", flush)
    monkeypatch.setattr(_jsonl_writer.JsonlWriter, "_close_sync", close)
    assert_caught(PersistenceMachine, r"on dispose: \d+ of \d+ written events")
