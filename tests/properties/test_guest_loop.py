"""The guest-mode driver: settled steps, deadlocks instead of hangs, virtual time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio
import trio.testing

from dsh_trio.testing import Deadlock, GuestLoop, advance_by, advance_to_next_deadline


@pytest.fixture
def loop() -> Iterator[GuestLoop]:
    loop = GuestLoop(clock=trio.testing.MockClock())
    yield loop
    loop.close()


def test_call_returns_the_result_and_raises_the_error(loop: GuestLoop) -> None:
    async def double(x: int) -> int:
        await trio.lowlevel.checkpoint()
        return 2 * x

    async def boom() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("boom")

    assert loop.call(double, 21) == 42
    with pytest.raises(KeyError):
        loop.call(boom)
    assert loop.call(double, 1) == 2  # still usable


def test_a_stuck_operation_is_a_deadlock_not_a_hang(loop: GuestLoop) -> None:
    event = trio.Event()
    with pytest.raises(Deadlock, match="blocked while every task was idle"):
        loop.call(event.wait)
    assert (
        loop.run_sync(lambda: 7) == 7
    )  # the stuck call was cancelled; the run goes on


def test_run_sync_runs_inside_the_run_and_settles_what_it_started(
    loop: GuestLoop,
) -> None:
    seen: list[str] = []

    async def child() -> None:
        await trio.lowlevel.checkpoint()
        seen.append("child ran")

    def start() -> str:
        loop.nursery.start_soon(child)  # needs the trio run
        return trio.lowlevel.current_task().name

    name = loop.run_sync(start)
    assert "job" in name
    assert seen == ["child ran"]  # it ran before run_sync returned


def test_nothing_runs_between_calls_and_time_is_virtual(loop: GuestLoop) -> None:
    clock = loop.clock
    assert isinstance(clock, trio.testing.MockClock)
    ticks: list[float] = []

    async def sleeper() -> None:
        for _ in range(3):
            await trio.sleep(1.0)
            ticks.append(trio.current_time())

    loop.run_sync(lambda: loop.nursery.start_soon(sleeper))
    assert ticks == []  # no virtual time passed
    loop.call(advance_by, clock, 2.5)
    assert ticks == [1.0, 2.0]
    loop.call(advance_by, clock, 10.0)
    assert ticks == [1.0, 2.0, 3.0]
    assert loop.live_tasks() == []


def test_a_background_crash_is_raised_from_the_call_it_happened_in() -> None:
    loop = GuestLoop()

    async def crash() -> None:
        await trio.lowlevel.checkpoint()
        raise ValueError("background failure")

    with pytest.RaisesGroup(ValueError):
        loop.run_sync(lambda: loop.nursery.start_soon(crash))
    with pytest.RaisesGroup(ValueError):
        loop.close()


def test_live_tasks_lists_what_is_left_running(loop: GuestLoop) -> None:
    loop.run_sync(lambda: loop.nursery.start_soon(trio.sleep_forever, name="left-over"))
    assert [t.name for t in loop.live_tasks()] == ["left-over"]


def test_close_unblocks_a_shielded_wait_with_a_deadlock() -> None:
    loop = GuestLoop()

    async def stubborn() -> None:
        with trio.CancelScope(shield=True):
            await trio.Event().wait()

    loop.run_sync(lambda: loop.nursery.start_soon(stubborn, name="stubborn"))
    with pytest.RaisesGroup(
        pytest.RaisesExc(Deadlock, match="'stubborn' was still blocked")
    ):
        loop.close()


def test_close_abandons_a_run_that_cannot_finish_and_the_thread_stays_usable() -> None:
    loop = GuestLoop()

    async def retries_forever() -> None:
        with trio.CancelScope(shield=True):
            while True:
                try:
                    await trio.Event().wait()
                except Deadlock:
                    continue  # a cleanup loop that never gives up

    loop.run_sync(lambda: loop.nursery.start_soon(retries_forever))
    with pytest.raises(Deadlock, match="could not finish after it was cancelled"):
        loop.close()
    # The abandoned run released the thread: another run starts normally.
    again = GuestLoop()
    assert again.run_sync(lambda: "fine") == "fine"
    again.close()


def test_close_fires_deadlines_of_shielded_cleanup() -> None:
    loop = GuestLoop(clock=trio.testing.MockClock())
    cleaned: list[float] = []

    async def careful() -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5.0)  # virtual: close() moves the clock
                cleaned.append(trio.current_time())

    loop.run_sync(lambda: loop.nursery.start_soon(careful))
    loop.close()
    assert cleaned == [5.0]


def test_advance_to_next_deadline_moves_exactly_to_it(loop: GuestLoop) -> None:
    woke: list[float] = []

    async def sleeper() -> None:
        await trio.sleep(7.5)
        woke.append(trio.current_time())

    clock = loop.clock
    assert isinstance(clock, trio.testing.MockClock)
    loop.run_sync(lambda: loop.nursery.start_soon(sleeper))
    assert loop.call(advance_to_next_deadline, clock) is True
    assert woke == [7.5]
    assert (
        loop.call(advance_to_next_deadline, clock) is False
    )  # nothing left to wait for
