"""Drive one trio run (guest mode) from synchronous code, one settled step at a time.

A :class:`GuestLoop` hosts a trio run whose scheduler only turns inside
:meth:`GuestLoop.call`, :meth:`GuestLoop.run_sync` and :meth:`GuestLoop.close`.
Between two calls nothing in trio executes, so a stateful test (one hypothesis rule
per call) always looks at a quiescent runtime, and an operation that stays blocked
after every task went idle is reported as a :class:`Deadlock` instead of hanging
the test. Time is virtual: the loop runs on the clock it is given (normally a
:class:`trio.testing.MockClock` with ``rate=0``) and only moves when a test moves it
with :func:`advance_by`.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import queue
import sys
import typing
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar, TypeVarTuple, Unpack

import outcome
import trio
import trio.testing

__all__ = ["Deadlock", "GuestLoop", "advance_by", "advance_to_next_deadline", "settle"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Real seconds every task must stay blocked before a driven operation counts as
# stuck. Longer than any settle() the operation itself performs (those use 0), so
# the watchdog only fires once the operation is done or waits on something else.
_WATCHDOG_CUSHION = 0.001
# How many stuck waits close() breaks open before it abandons the run.
_MAX_FORCED_ABORTS = 8


class Deadlock(AssertionError):
    """A driven operation stayed blocked after every task of the run went idle."""


async def settle(cushion: float = 0.0) -> None:
    """Return once no task is runnable and no worker thread is running.

    Blocks until the run is quiescent; cancelling it only stops the wait. Like
    :func:`trio.testing.wait_all_tasks_blocked`, it cannot tell quiescence apart
    from another task waiting there with the same ``cushion`` (both wake at
    once), so code under test should not wait that way itself.

    Args:
        cushion: real seconds every task must stay blocked (see
            :func:`trio.testing.wait_all_tasks_blocked`).
    """
    while True:
        await trio.testing.wait_all_tasks_blocked(cushion)
        if trio.testing.active_thread_count() == 0:
            return
        await trio.testing.wait_all_threads_completed()


async def advance_by(clock: trio.testing.MockClock, seconds: float) -> None:
    """Move virtual time forward by ``seconds``, firing each deadline in order.

    Between two deadlines the run settles, so whatever a timeout wakes runs (and
    may set new deadlines) before time moves on. Blocks until done.

    Raises:
        ValueError: ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError(f"advance_by() needs seconds >= 0, got {seconds!r}")
    target = trio.current_time() + seconds
    while True:
        await settle()
        step = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if trio.current_time() + step > target:
            clock.jump(max(target - trio.current_time(), 0.0))
            await settle()
            return
        clock.jump(max(step, 0.0))


async def advance_to_next_deadline(clock: trio.testing.MockClock) -> bool:
    """Settle, then move virtual time to the next deadline (if any) and settle again.

    Blocks until done. Returns whether there was a deadline to move to.
    """
    await settle()
    step = trio.lowlevel.current_statistics().seconds_to_next_deadline
    if step == float("inf"):
        return False
    await advance_by(clock, max(step, 0.0))
    return True


def _walk(task: trio.lowlevel.Task, out: list[trio.lowlevel.Task]) -> None:
    out.append(task)
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            _walk(child, out)


class GuestLoop:
    """A trio run hosted by a loop that only turns inside :meth:`call` and :meth:`close`.

    Between two calls nothing in trio executes, so each hypothesis rule sees a
    quiescent runtime and the schedule depends only on the rules and on the seed
    hypothesis gives trio's scheduler. Not thread-safe; use it from one thread.

    Example::

        clock = trio.testing.MockClock()
        loop = GuestLoop(clock=clock)
        try:
            loop.call(trio.sleep, 0)          # returns once everything settled
            loop.call(advance_by, clock, 5.0)  # virtual time
        finally:
            loop.close()

    Args:
        clock: the run's clock; a :class:`~trio.testing.MockClock` (``rate=0``, no
            autojump) keeps time still unless a test moves it.
    """

    def __init__(self, *, clock: trio.abc.Clock | None = None) -> None:
        self._todo: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._clock = clock if clock is not None else trio.testing.MockClock()
        self._done = False
        self._error: BaseException | None = None
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._root: trio.lowlevel.Task | None = None
        self._baseline: frozenset[trio.lowlevel.Task] = frozenset()
        self._stuck: str | None = None
        self._job: Callable[[], Awaitable[None]] | None = None
        trio.lowlevel.start_guest_run(
            self._main,
            run_sync_soon_threadsafe=self._todo.put,
            done_callback=self._on_done,
            clock=self._clock,
            strict_exception_groups=True,
        )
        self._pump_until(lambda: self._nursery is not None)
        self._baseline = frozenset(self._all_tasks())

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._token = trio.lowlevel.current_trio_token()
            self._root = trio.lowlevel.current_root_task()
            self._nursery = nursery
            nursery.start_soon(self._work, name="dsh_trio.testing.GuestLoop.worker")
            await trio.sleep_forever()

    async def _work(self) -> None:
        """Start each submitted job in its own task and wait for it.

        Between jobs it only passes checkpoints, so the run's next tick waits in
        the host's queue, which nobody pumps between two calls: nothing runs then,
        and the next call needs no wake-up through trio's I/O thread.
        """
        while True:
            job = self._job
            if job is None:
                await trio.lowlevel.checkpoint()
                continue
            self._job = None
            done = trio.Event()

            async def run(
                job: Callable[[], Awaitable[None]] = job, done: trio.Event = done
            ) -> None:
                try:
                    await job()
                finally:
                    done.set()

            self.nursery.start_soon(run, name="dsh_trio.testing.GuestLoop.job")
            await done.wait()

    def _on_done(self, result: outcome.Outcome[None]) -> None:
        self._done = True
        if isinstance(result, outcome.Error):
            self._error = result.error

    def _raise_if_crashed(self) -> None:
        if self._error is not None:
            raise self._error

    def _pump_until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            if self._done:
                self._raise_if_crashed()  # a background task crashed: raise it in this rule
                raise RuntimeError("the trio run ended while a rule was waiting on it")
            self._todo.get()()

    @property
    def nursery(self) -> trio.Nursery:
        """A nursery of the run for background tasks; cancelled by :meth:`close`."""
        assert self._nursery is not None
        return self._nursery

    @property
    def clock(self) -> trio.abc.Clock:
        """The run's clock."""
        return self._clock

    @property
    def finished(self) -> bool:
        """Whether the run has ended."""
        return self._done

    def _all_tasks(self) -> list[trio.lowlevel.Task]:
        out: list[trio.lowlevel.Task] = []
        if self._root is not None and not self._done:
            _walk(self._root, out)
        return out

    def live_tasks(self) -> list[trio.lowlevel.Task]:
        """Every task of the run except the loop's own (system tasks included).

        Call it between calls; it reads the task tree without running anything.
        """
        return [t for t in self._all_tasks() if t not in self._baseline]

    def _submit(
        self, job: Callable[[], Awaitable[None]], finished: Callable[[], bool]
    ) -> None:
        if self._done:
            self._raise_if_crashed()
            raise RuntimeError("the trio run has already finished")
        self._job = job
        self._pump_until(lambda: finished() or self.nursery.cancel_scope.cancel_called)

    def _finish_call(self) -> None:
        if self.nursery.cancel_scope.cancel_called:
            # A background task crashed and took the run down: finish the run so
            # its exception is raised from the rule that triggered it.
            self._pump_until(lambda: self._done)
            self._raise_if_crashed()
            raise RuntimeError("the trio run was cancelled")

    def call(self, afn: Callable[[Unpack[Ts]], Awaitable[T]], *args: *Ts) -> T:
        """Run ``afn(*args)`` in the trio run, let everything settle, return its result.

        Blocks the calling thread until ``afn`` returned and no task is runnable.
        Exceptions of ``afn`` propagate. A background task that crashes the run is
        raised from here.

        Raises:
            Deadlock: ``afn`` was still blocked after every task went idle; it was
                cancelled.
        """
        box: list[outcome.Outcome[T]] = []
        finished = False
        deadlocked = False

        async def runner() -> None:
            nonlocal finished
            try:
                async with trio.open_nursery() as nursery:

                    async def op() -> None:
                        result = await outcome.acapture(afn, *args)
                        box.append(result)
                        nursery.cancel_scope.cancel()  # the watchdog is not needed now

                    async def watchdog() -> None:
                        nonlocal deadlocked
                        await settle(cushion=_WATCHDOG_CUSHION)
                        if not box:
                            deadlocked = True
                            nursery.cancel_scope.cancel(reason="deadlock")

                    nursery.start_soon(op)
                    nursery.start_soon(watchdog)
                if not deadlocked:
                    await settle()  # let whatever the operation started run too
            finally:
                finished = True

        self._submit(runner, lambda: finished)
        self._finish_call()
        if deadlocked:
            raise Deadlock(
                f"{getattr(afn, '__qualname__', afn)!s} blocked while every task was idle"
            )
        return box[0].unwrap()

    def run_sync(self, fn: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
        """Call the synchronous ``fn(*args)`` inside the trio run, then settle.

        For the runtime's synchronous methods that start tasks (``followup``,
        ``cancel``, ...), which must run inside the trio run. Exceptions of ``fn``
        propagate after the run settled.
        """
        box: list[outcome.Outcome[T]] = []
        finished = False

        async def runner() -> None:
            nonlocal finished
            try:
                box.append(outcome.capture(fn, *args))
                await settle()
            finally:
                finished = True

        self._submit(runner, lambda: finished)
        self._finish_call()
        return box[0].unwrap()

    def close(self) -> None:
        """Cancel everything and finish the run; always call this (e.g. in teardown).

        Cleanup code that shields itself from the cancellation still runs; virtual
        time jumps from deadline to deadline while it does. A task that then stays
        blocked with nothing left to wake it (a shielded wait that can never end)
        gets :class:`Deadlock` raised into it. If the run still cannot finish after
        a few of those, it is abandoned: trio's run loop and every task are closed
        where they stand, and :class:`Deadlock` is raised. Closing never hangs.
        Idempotent.

        Raises:
            Deadlock: the run had to be abandoned.
            BaseException: what crashed the run, if anything did (an
                :class:`ExceptionGroup` holding :class:`Deadlock` for a stuck task).
        """
        if not self._done and self._token is not None:

            def begin() -> None:
                trio.lowlevel.spawn_system_task(
                    self._reap, name="dsh_trio.testing.GuestLoop.reaper"
                )
                self.nursery.cancel_scope.cancel(reason="GuestLoop.close()")

            self._token.run_sync_soon(begin)
            self._pump_until(lambda: self._done or self._stuck is not None)
            if not self._done:
                stuck = self._stuck
                self._abandon()
                raise Deadlock(
                    f"the trio run could not finish after it was cancelled: {stuck}"
                )
        self._raise_if_crashed()

    async def _reap(self) -> None:
        """Unstick the run during :meth:`close`: fire deadlines, then abort stuck waits."""
        me = trio.lowlevel.current_task()
        aborted: list[str] = []
        while True:
            await settle()
            step = trio.lowlevel.current_statistics().seconds_to_next_deadline
            if step != float("inf"):
                if isinstance(self._clock, trio.testing.MockClock):
                    self._clock.jump(max(step, 0.0))
                else:
                    await trio.sleep(step)
                continue
            stuck = [
                t
                for t in self._all_tasks()
                if t is not me
                and t not in self._baseline
                and not t.child_nurseries
                and getattr(t, "_abort_func", None) is not None
            ]
            if not stuck or len(aborted) >= _MAX_FORCED_ABORTS:
                # Nothing more to try: hand the run to close() for abandonment. Spin
                # on checkpoints so the next tick waits on the host, not in a thread.
                self._stuck = ", ".join(aborted) or "no task could be woken"
                while True:  # noqa: ASYNC110 - spinning is the point (see above)
                    await trio.lowlevel.checkpoint()
            victim = stuck[0]
            aborted.append(victim.name)
            error = Deadlock(
                f"task {victim.name!r} was still blocked after the run was cancelled"
            )

            def raise_deadlock(error: Deadlock = error) -> typing.NoReturn:
                raise error

            # A shielded wait that nothing will ever end: deliver the error the way
            # trio delivers a cancellation (the wait's own abort hook cleans up).
            victim._attempt_abort(raise_deadlock)

    def _abandon(self) -> None:
        """Close a run that cannot finish: its run loop first, then every task's coroutine.

        The abandoned run's objects complain as they are finalised (nurseries with
        children, async generators that cannot finish, closed file descriptors).
        Those complaints are about a run being thrown away on purpose, so its remains
        are kept aside and finalised in batches with the complaints dropped, rather
        than surfacing later in an unrelated test.
        """
        tasks = self._all_tasks()
        nurseries = [n for t in tasks for n in t.child_nurseries]
        while True:
            item = self._todo.get()
            state = getattr(item, "__self__", None)
            run_loop = getattr(state, "unrolled_run_gen", None)
            if run_loop is not None:
                break
            item()  # a callback on its way to the next tick
        self._done = True
        self._root = self._nursery = self._token = None
        self._baseline = frozenset()
        with _quiet_finalisation():
            run_loop.close()
            for task in tasks:
                # Cleanup code now runs outside any trio run and may fail; the
                # Deadlock close() raises next is the report.
                with contextlib.suppress(Exception):
                    task.coro.close()
            for nursery in nurseries:
                # Its tasks will never finish; let it be finalised quietly.
                nursery._children.clear()
            _ABANDONED.append((state, tasks, nurseries))
            if len(_ABANDONED) >= _ABANDONED_BATCH:
                _ABANDONED.clear()
                gc.collect()


#: Remains of abandoned runs, finalised in batches (see GuestLoop._abandon).
_ABANDONED: list[object] = []
_ABANDONED_BATCH = 32


@atexit.register
def _finalise_abandoned() -> None:
    if _ABANDONED:
        with _quiet_finalisation():
            _ABANDONED.clear()
            gc.collect()


@contextlib.contextmanager
def _quiet_finalisation() -> Iterator[None]:
    """Drop warnings and unraisable-exception reports while an abandoned run is finalised."""
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _drop_unraisable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "guest run got abandoned": the point here
            yield
    finally:
        sys.unraisablehook = previous_hook


def _drop_unraisable(unraisable: typing.Any) -> None:
    return None
