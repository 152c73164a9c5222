"""SessionRecorder: write-behind batching, one task at a time, sync policy, failures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from dsh_trio import user_message
from dsh_trio.errors import PersistenceError, PersistenceSeqError, SessionLockedError
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._persistence import Durability
from dsh_trio.persistence._recorder import SessionRecorder, persist_new_session
from dsh_trio.session import Session
from dsh_trio.values import (
    Completed,
    SessionEvent,
    SessionHeader,
    StepEnd,
    StepStart,
    TurnEnd,
    TurnStart,
)

from ..support import ticking_clock


@attrs.define(eq=False)
class FakeWriter:
    """A SessionWriter that records its calls; it can block on a gate and fail."""

    header: SessionHeader
    durable_seq: int = 0
    calls: list[tuple[list[int], bool]] = attrs.field(factory=list)
    fail_next: int = 0
    gate: trio.Event | None = None
    closed: int = 0
    written: list[SessionEvent] = attrs.field(factory=list)

    async def append(self, events: Sequence[SessionEvent], *, sync: bool) -> None:
        await trio.lowlevel.checkpoint()
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append(([ev.seq for ev in events], sync))
        if self.fail_next:
            self.fail_next -= 1
            raise OSError(28, "No space left on device")
        for i, ev in enumerate(events):
            if ev.seq != self.durable_seq + i:
                raise PersistenceSeqError(
                    "gap", expected=self.durable_seq + i, got=ev.seq
                )
        self.written.extend(events)
        self.durable_seq += len(events)

    async def close(self) -> None:
        await trio.lowlevel.checkpoint()
        self.closed += 1


@attrs.define(eq=False)
class Spawner:
    """Starts tasks in a nursery, counting them and how many run at once."""

    nursery: trio.Nursery
    spawned: int = 0
    running: int = 0
    most: int = 0

    def __call__(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.spawned += 1

        async def tracked() -> None:
            self.running += 1
            self.most = max(self.most, self.running)
            try:
                await fn()
            finally:
                self.running -= 1

        self.nursery.start_soon(tracked)


def new_session() -> Session:
    return Session.create("rec", clock=ticking_clock(10**12))


def open_turn(s: Session, turn: int) -> None:
    s.append("turn/start", TurnStart(turn))
    s.append("step/start", StepStart(turn, 1))
    s.append("user/message", user_message("x"), surface_op="append")


def close_turn(s: Session, turn: int) -> None:
    s.append("step/end", StepEnd(turn, 1))
    s.append("turn/end", TurnEnd(turn, Completed()))


def recorder_for(
    s: Session,
    nursery: trio.Nursery,
    durability: Durability = "turn",
    *,
    on_fault: Any = None,
    on_recover: Any = None,
    **kw: Any,
) -> tuple[SessionRecorder, FakeWriter, Spawner]:
    writer = FakeWriter(header=s.header, **kw)
    spawn = Spawner(nursery)
    hooks = {"on_fault": on_fault, "on_recover": on_recover}
    rec = SessionRecorder(
        s,
        writer,
        durability=durability,
        spawn=spawn,
        **{k: v for k, v in hooks.items() if v is not None},
    )
    return rec, writer, spawn


async def test_events_are_written_in_batches_by_one_task() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, spawn = recorder_for(s, nursery, gate=trio.Event())
        open_turn(s, 1)  # three events queued, one task spawned
        assert (spawn.spawned, rec.pending_count) == (1, 3)
        await trio.testing.wait_all_tasks_blocked()  # the task waits inside append
        close_turn(s, 1)
        assert spawn.spawned == 1  # the running task will take these too
        assert writer.gate is not None
        writer.gate.set()
        await trio.testing.wait_all_tasks_blocked()
        assert writer.calls == [([0, 1, 2], False), ([3, 4], True)]
        assert (spawn.spawned, spawn.most, spawn.running) == (1, 1, 0)
        assert rec.pending_count == 0
        # An idle session holds no task at all.
        assert nursery.child_tasks == frozenset()
        open_turn(s, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert spawn.spawned == 2 and spawn.most == 1
        assert writer.calls[-1] == ([5, 6, 7], False)
        await rec.aclose()
    assert writer.written == list(s.events)


@pytest.mark.parametrize(
    ("durability", "flags", "flush_sync"),
    [
        ("turn", [False, True, False], True),
        ("always", [True, True, True], None),
        ("none", [False, False, False], None),
    ],
)
async def test_durability_policies(
    durability: Durability, flags: list[bool], flush_sync: bool | None
) -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(s, nursery, durability)
        open_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()
        close_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()
        open_turn(s, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert [sync for _, sync in writer.calls] == flags
        await rec.flush()
        # Only unsynced writes need a final empty sync, and only if durability asks.
        if flush_sync is None:
            assert len(writer.calls) == 3
        else:
            assert writer.calls[3] == ([], True)
        await rec.flush()  # nothing more to do
        assert len(writer.calls) == (3 if flush_sync is None else 4)
        await rec.aclose()
        assert writer.closed == 1


async def test_flush_writes_what_is_queued_with_sync() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(s, nursery, "turn")
        open_turn(s, 1)
        await rec.flush()  # before the task got to run
        assert writer.calls == [([0, 1, 2], True)]
        assert rec.pending_count == 0
        await trio.testing.wait_all_tasks_blocked()
        assert writer.calls == [([0, 1, 2], True)]  # the task found nothing left
        await rec.aclose()


async def test_a_failed_write_is_kept_reported_by_flush_and_retried() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, spawn = recorder_for(s, nursery, fail_next=1)
        open_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()
        # The background write failed: its task is gone, its events still queued.
        assert writer.calls == [([0, 1, 2], False)]
        assert rec.pending_count == 3
        assert nursery.child_tasks == frozenset()
        # flush retries once and reports the failure while the fault lasts.
        writer.fail_next = 1
        with pytest.raises(OSError, match="No space"):
            await rec.flush()
        assert rec.pending_count == 3
        # The fault clears: the next flush writes everything, exactly once.
        await rec.flush()
        assert rec.pending_count == 0
        assert writer.written == list(s.events)
        # A later failure is retried by the next append's task.
        writer.fail_next = 1
        close_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert rec.pending_count == 2
        s.append("plugin/note", {"n": 1}, ignorable=True)
        await trio.testing.wait_all_tasks_blocked()
        assert rec.pending_count == 0
        assert writer.calls[-1] == ([3, 4, 5], True)
        assert spawn.most == 1
        await rec.aclose()
    assert writer.written == list(s.events)


async def test_events_the_writer_lacks_are_queued_at_construction() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        open_turn(s, 1)
        rec, writer, spawn = recorder_for(s, nursery, durable_seq=1)
        assert rec.pending_count == 2 and spawn.spawned == 1
        await trio.testing.wait_all_tasks_blocked()
        assert writer.calls == [([1, 2], False)]
        await rec.aclose()


async def test_aclose_flushes_closes_and_stops_listening() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(s, nursery, "turn")
        open_turn(s, 1)
        await rec.aclose()
        assert writer.written == list(s.events)
        assert writer.calls[-1] == ([0, 1, 2], True)
        assert writer.closed == 1
        close_turn(s, 1)  # no longer heard
        assert rec.pending_count == 0
        await rec.aclose()  # idempotent
        assert writer.closed == 1
        await trio.testing.wait_all_tasks_blocked()
        assert len(writer.calls) == 1


async def test_aclose_closes_the_writer_even_when_the_flush_fails() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(s, nursery, fail_next=5)
        open_turn(s, 1)
        with pytest.raises(OSError, match="No space"):
            await rec.aclose()
        assert writer.closed == 1
        assert rec.pending_count == 3


async def test_aclose_is_shielded_from_cancellation() -> None:
    s = new_session()
    gate = trio.Event()
    writer = FakeWriter(header=s.header, gate=gate)
    # Drop background tasks, so aclose itself must do the (gated) write.
    rec = SessionRecorder(s, writer, durability="turn", spawn=lambda fn: None)
    open_turn(s, 1)

    async def release_when_blocked() -> None:
        await trio.testing.wait_all_tasks_blocked()
        gate.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_when_blocked)
        with trio.CancelScope() as scope:
            scope.cancel()
            await rec.aclose()
    assert writer.written == list(s.events)
    assert writer.closed == 1


async def test_a_closed_nursery_leaves_the_queue_to_flush() -> None:
    s = new_session()
    async with trio.open_nursery() as nursery:
        pass
    writer = FakeWriter(header=s.header)
    rec = SessionRecorder(s, writer, durability="turn", spawn=nursery.start_soon)
    open_turn(s, 1)
    assert rec.pending_count == 3
    await rec.aclose()
    assert writer.written == list(s.events)


# --------------------------------------------------------------------------- with JSONL


async def test_recording_through_jsonl_end_to_end(tmp_path: Path) -> None:
    persistence = JsonlPersistence(tmp_path)
    s = new_session()
    s.append("plugin/seeded-before-publication", {"k": "v"}, ignorable=True)
    async with trio.open_nursery() as nursery:
        writer = await persist_new_session(persistence, s)
        assert writer.durable_seq == 1
        rec = SessionRecorder(s, writer, durability="turn", spawn=nursery.start_soon)
        for turn in range(1, 4):
            open_turn(s, turn)
            close_turn(s, turn)
            await trio.testing.wait_all_tasks_blocked()
        open_turn(s, 4)
        await rec.flush()
        with pytest.raises(SessionLockedError):  # the recorder's writer holds it
            await JsonlPersistence(tmp_path).open("rec")
        await rec.aclose()
    reader, events = await JsonlPersistence(tmp_path).open("rec")
    await reader.close()
    assert events == list(s.events)


# --------------------------------------------------------------------------- faults


async def test_a_fault_is_reported_once_at_the_failed_write_and_ends_at_a_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults: list[PersistenceError] = []
    recoveries: list[int] = []
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(
            s,
            nursery,
            fail_next=3,
            on_fault=faults.append,
            on_recover=lambda: recoveries.append(1),
        )
        open_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()
        # Reported by the background write itself: no flush was needed.
        assert len(faults) == 1 and rec.fault is faults[0]
        fault = faults[0]
        assert fault.session_id == "rec"
        assert isinstance(fault.__cause__, OSError) and fault.errno == 28
        assert str(fault).startswith('session "rec": writing events 0-2 to its log')
        assert [r.levelname for r in caplog.records] == ["ERROR"]
        assert "No space left" in caplog.records[0].getMessage()
        # Retries while the fault lasts raise, but do not report it again.
        s.append(
            "plugin/note", {"n": 1}, ignorable=True
        )  # the next append retries in the background
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(PersistenceError, match="No space"):
            await rec.wait_written()
        assert len(faults) == 1 and recoveries == []
        assert rec.pending_count == 4
        # A write that succeeds ends the fault.
        await rec.wait_written()
        assert rec.fault is None and recoveries == [1]
        assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
        await rec.aclose()
    assert writer.written == list(s.events)


async def test_wait_written_writes_after_a_write_in_flight_with_the_policy() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, writer, _ = recorder_for(s, nursery, gate=trio.Event())
        open_turn(s, 1)
        await trio.testing.wait_all_tasks_blocked()  # the task waits inside append
        s.append("step/end", StepEnd(1, 1))
        done = trio.Event()

        async def barrier() -> None:
            await rec.wait_written()
            done.set()

        nursery.start_soon(barrier)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()  # it waits for the write in flight
        assert writer.gate is not None
        writer.gate.set()
        await done.wait()
        # Everything before the call is written; no fsync (no turn/end in it).
        assert writer.calls == [([0, 1, 2], False), ([3], False)]
        assert rec.pending_count == 0
        await rec.aclose()


async def test_flush_after_aclose() -> None:
    async with trio.open_nursery() as nursery:
        s = new_session()
        rec, _, _ = recorder_for(s, nursery)
        open_turn(s, 1)
        await rec.aclose()
        await rec.flush()  # everything was written: nothing to report
        s2 = new_session()
        rec2, _, _ = recorder_for(s2, nursery, fail_next=10)
        open_turn(s2, 1)
        with pytest.raises(PersistenceError):
            await rec2.aclose()
        with pytest.raises(PersistenceError, match="closed with 3 events not written"):
            await rec2.flush()
