"""The persistence state machine, run under the selected profile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis.stateful import run_state_machine_as_test
from hypothesis.strategies._internal.core import RandomSeeder

import dsh_trio as dsh
from dsh_trio.session import _line_chunks
from dsh_trio.testing import machine_settings
from dsh_trio.testing._strategies import Send

from .mutation import Step, recording, replay
from .persistence_machine import (
    Batch,
    Durable,
    FsyncLog,
    PersistenceMachine,
    PostgresPersistenceMachine,
)

TestPersistenceMachine = PersistenceMachine.TestCase
TestPersistenceMachine.settings = machine_settings()


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Writers hand their lines over every 2 lines, so the machine's short lives
    settle their sessions' older turns as the written lines too."""
    monkeypatch.setattr(_line_chunks, "CHUNK_LINES", 2)
    yield


# ------------------------------------------------------------------ the recording writer


def _batch(first: int, *types: str) -> Batch:
    return Batch(first, types)


def test_always_requires_each_batch_synced_before_the_next() -> None:
    durable = Durable("always", FsyncLog())
    durable.unsynced.append(_batch(0, "turn/start"))
    durable.before_write(_batch(1, "step/start"))
    message = (
        "durability 'always': batch 0-0 ['turn/start'] was not fsynced before "
        "batch 1-1 ['step/start'] was written"
    )
    assert durable.breaches == [message]
    durable.breaches.clear()
    durable.synced()
    durable.before_write(_batch(1, "step/start"))
    assert durable.breaches == []


def test_turn_requires_a_batch_with_a_turn_end_synced_before_the_next() -> None:
    durable = Durable("turn", FsyncLog())
    durable.unsynced.append(_batch(0, "agent/inbox/spliced"))
    durable.before_write(_batch(1, "turn/start"))
    assert durable.breaches == []  # no turn/end: it may wait
    durable.unsynced.append(_batch(1, "turn/end", "turn/start"))  # not last in it
    durable.before_write(_batch(3, "step/start"))
    assert len(durable.breaches) == 1
    assert (
        "batch 1-2 ['turn/end', 'turn/start'] holds a turn/end" in durable.breaches[0]
    )


def test_none_requires_nothing() -> None:
    durable = Durable("none", FsyncLog())
    durable.unsynced.append(_batch(0, "turn/end"))
    durable.before_write(_batch(1, "turn/start"))
    assert durable.breaches == []


def test_an_armed_crash_snapshots_the_log_at_the_counted_fsync(tmp_path: Any) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"header\nevent\n")
    fsyncs = FsyncLog(crash_in=1)
    fsyncs.passed(1, str(path), 7, 0)
    assert fsyncs.snapshot is None and fsyncs.crash_in == 0
    fsyncs.passed(1, str(path), 13, 1)
    assert fsyncs.snapshot == (b"header\nevent\n", 13, 1)
    assert fsyncs.crash_in is None


def test_a_crash_at_an_fsync_loses_only_the_unsynced_tail() -> None:
    """A turn runs, the power fails at its fsync; the resumed log is checked."""
    machine = recording(PersistenceMachine)
    seed = RandomSeeder(0)  # type: ignore[no-untyped-call]
    program = [
        Step("start", True, {"durability": "turn", "seed": seed}),
        Step(
            "send",
            False,
            {
                "op": Send(
                    dsh.user_message("hi", id="m0"), dsh.InboxTarget.NEXT_TURN, True
                )
            },
        ),
        Step("crash_at_fsync", False, {"skip": 0}),
        Step("wait_idle", False, {}),
    ]
    result = replay(machine, program)
    assert result.error is None, result.error
    state: Any = getattr(machine, "last")  # noqa: B009
    assert state.fsync_crashes == 1
    assert state.fsyncs.count >= 1


# ------------------------------------------------------------------ on PostgreSQL


#: Examples of the PostgreSQL machine: a bounded share of the profile's, since each
#: step waits on a real server.
PG_EXAMPLES = 30


def test_persistence_machine_on_postgres(machine_dsn: str) -> None:
    """Every invariant of the JSONL machine, with the writer process killed as the crash."""
    PostgresPersistenceMachine.dsn = machine_dsn
    profile = machine_settings()
    run_state_machine_as_test(
        PostgresPersistenceMachine,
        settings=machine_settings(
            max_examples=min(PG_EXAMPLES, profile.max_examples),
            stateful_step_count=min(20, profile.stateful_step_count),
        ),
    )


def test_a_killed_writer_loses_nothing_it_committed_on_postgres(
    machine_dsn: str,
) -> None:
    """A turn runs, the writer dies right after its synchronous commit; the log is checked."""
    PostgresPersistenceMachine.dsn = machine_dsn
    machine = recording(PostgresPersistenceMachine)
    seed = RandomSeeder(0)  # type: ignore[no-untyped-call]
    program = [
        Step("start", True, {"durability": "turn", "seed": seed}),
        Step(
            "send",
            False,
            {
                "op": Send(
                    dsh.user_message("hi", id="m0"), dsh.InboxTarget.NEXT_TURN, True
                )
            },
        ),
        Step("crash_at_fsync", False, {"skip": 0}),
        Step("crash", False, {"cut": 0}),
        Step("wait_idle", False, {}),
    ]
    result = replay(machine, program)
    assert result.error is None, result.error
    state: Any = getattr(machine, "last")  # noqa: B009
    assert state.fsync_crashes == 1
