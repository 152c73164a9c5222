"""The garbage-collector settings for a process that holds many live agents.

CPython's cyclic collector walks every tracked object of the oldest generation once
the objects promoted since its last full walk reach a quarter of it. Thousands of
live agents are hundreds of thousands of long-lived objects; many concurrent turns
keep their short-lived objects alive long enough to be promoted, so full walks come
often and each walks every agent again, and the walks can cost as much as the turns.

A runtime holding at least :data:`MANY_AGENTS` live agents raises the generation
thresholds itself (:class:`RuntimeCollector`) and puts them back once it holds fewer
than half as many, or when it closes: what the turns' promoted short-lived objects cost
in full walks mostly goes away. Nothing is frozen; a disposed agent, which only a full
collection frees, is freed by one the runtime runs once a quarter of its agents have
been disposed since the last.

:func:`agent_collector` moves what is alive when it starts (or when its
:meth:`~AgentCollector.freeze` is called, after the agents are created) out of the
collector's sight (``gc.freeze()``) and raises the generation thresholds, and puts
both back when it exits. Freezing hides garbage cycles from the collector until the
objects are unfrozen, so a library never does it on its own: the application opts in.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import attrs

__all__ = ["AgentCollector", "RuntimeCollector", "agent_collector"]

#: The thresholds :func:`agent_collector` sets by default: a young collection every
#: 10,000 net allocations (CPython's default is 700), the middle one every 20 young
#: ones, and a full walk at most every 100 middle ones (plus CPython's own 25 % rule).
DEFAULT_THRESHOLDS: Final = (10_000, 20, 100)


@attrs.define(eq=False)
class AgentCollector:
    """The setting :func:`agent_collector` holds; call :meth:`freeze` after start-up."""

    #: The thresholds in force while the block runs.
    thresholds: tuple[int, int, int]

    def freeze(self) -> int:
        """Collect once, then move every object alive now out of the collector's
        sight; returns how many objects are frozen in all. Call it after creating
        the agents a process will hold (and again after creating many more).

        Synchronous: a full collection (tens of milliseconds per 100,000 objects).
        """
        gc.collect()
        gc.freeze()
        return gc.get_freeze_count()


@contextmanager
def agent_collector(
    thresholds: tuple[int, int, int] = DEFAULT_THRESHOLDS, *, freeze: bool = True
) -> Iterator[AgentCollector]:
    """Tune the garbage collector for many live agents while the block runs.

    Sets ``gc.set_threshold(*thresholds)`` and, with ``freeze``, freezes what is
    alive at entry (:meth:`AgentCollector.freeze`); on exit, also when the block
    raised, the frozen objects are unfrozen and the previous thresholds restored.
    Process-wide: enter it once, around the part of the application that runs the
    agents (``dsh-trio chat`` and the benchmarks do). Not reentrant across threads.

    Example::

        with dsh.nursery.agent_collector() as collector:
            async with dsh.open_runtime(models=models) as runtime:
                handles = [await runtime.agents.create(options=opts) for _ in range(10_000)]
                collector.freeze()  # the agents' long-lived objects, once
                ...

    Raises:
        ValueError: a threshold is not a positive int.
    """
    raw: object = thresholds  # callers may pass anything at runtime
    if not (
        isinstance(raw, tuple)
        and len(raw) == 3
        and all(t.__class__ is int and t > 0 for t in raw)
    ):
        raise ValueError(
            f"agent_collector thresholds must be three positive ints, got {thresholds!r}"
        )
    previous = gc.get_threshold()
    collector = AgentCollector(thresholds)
    gc.set_threshold(*thresholds)
    try:
        if freeze:
            collector.freeze()
        yield collector
    finally:
        gc.unfreeze()
        gc.set_threshold(*previous)


#: Live agents of one runtime from which it raises the collector's thresholds.
MANY_AGENTS: Final = 1_000
#: What a runtime holding many agents raises the thresholds to (each one only
#: raised, never lowered): young and middle collections ten times rarer than
#: CPython's default, a full walk at most every 100 middle ones.
RUNTIME_THRESHOLDS: Final = (10_000, 20, 100)


class _Raised:
    """The process-wide record of the runtimes that hold the thresholds raised.

    Several runtimes (in one trio run, or in several threads) share the one
    collector: the first holder raises the thresholds, the last one to let go puts
    back what was there before, unless the application set thresholds of its own
    meanwhile (those stay).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._before: tuple[int, int, int] | None = None
        self._set: tuple[int, int, int] | None = None

    def hold(self, thresholds: tuple[int, int, int]) -> None:
        with self._lock:
            self._holders += 1
            if self._holders > 1:
                return
            before = gc.get_threshold()
            if before[0] == 0:  # automatic collection is off: leave it so
                return
            raised = (
                max(before[0], thresholds[0]),
                max(before[1], thresholds[1]),
                max(before[2], thresholds[2]),
            )
            if raised != before:
                gc.set_threshold(*raised)
                self._before, self._set = before, raised

    def let_go(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders > 0 or self._set is None:
                return
            before, raised = self._before, self._set
            self._before = self._set = None
            if before is not None and gc.get_threshold() == raised:
                gc.set_threshold(*before)


_RAISED = _Raised()


def _full_collections() -> int:
    """How many full collections this process has run so far."""
    return int(gc.get_stats()[2]["collections"])


class RuntimeCollector:
    """One runtime's part in the collector setting: raised while it holds many agents.

    Runtime use only: the agent registry reports each agent it registers
    (:meth:`added`) and removes (:meth:`removed`), and calls :meth:`close` once the
    runtime starts closing; the runtime calls it again when it exits, also when its
    block raised or was cancelled. From ``many`` live agents on, the thresholds are
    raised to ``thresholds`` (each one only raised: an application's higher
    setting, or a collector turned off, is kept); below ``many // 2`` they are put
    back. Nothing is frozen, but with the oldest threshold raised a full collection
    comes rarely, and a disposed agent is a cycle only a full collection frees: so
    while the thresholds are raised, once the agents disposed since the last full
    collection reach a quarter of the live ones, the runtime runs one itself.
    Process-wide: the first runtime to raise the thresholds and the last to let go
    decide, and thresholds the application set while they were raised stay.

    Example::

        collector = RuntimeCollector(many=2)
        collector.added(2)  # the thresholds are raised
        collector.close()  # and put back
    """

    __slots__ = ("_closed", "_disposed", "_full", "_holding", "_many", "_thresholds")

    def __init__(
        self,
        many: int = MANY_AGENTS,
        thresholds: tuple[int, int, int] = RUNTIME_THRESHOLDS,
    ) -> None:
        self._many = many
        self._thresholds = thresholds
        self._holding = False
        self._closed = False
        #: Agents disposed since the full collection counted in ``_full``.
        self._disposed = 0
        self._full = 0

    @property
    def holding(self) -> bool:
        """Whether this runtime holds the thresholds raised now."""
        return self._holding

    def added(self, live: int) -> None:
        """An agent was registered: the runtime holds ``live`` agents now."""
        if live >= self._many and not self._holding and not self._closed:
            self._holding = True
            self._disposed = 0
            self._full = _full_collections()
            _RAISED.hold(self._thresholds)

    def removed(self, live: int) -> None:
        """An agent was removed (disposed): the runtime holds ``live`` agents now.

        May run a full collection (see the class); synchronous.
        """
        if not self._holding:
            return
        if live < self._many // 2:
            self._holding = False
            _RAISED.let_go()
            return
        full = _full_collections()
        if full != self._full:  # one ran since: it freed the agents disposed before it
            self._full, self._disposed = full, 0
        self._disposed += 1
        if self._disposed * 4 >= live:
            gc.collect()
            self._full, self._disposed = _full_collections(), 0

    def close(self) -> None:
        """The runtime is closing: put the thresholds back (if this was the last
        holder) and raise them no more. Idempotent."""
        self._closed = True
        if self._holding:
            self._holding = False
            _RAISED.let_go()
