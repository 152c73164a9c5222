"""An opt-in garbage-collector setting for a process that holds many live agents.

CPython's cyclic collector walks every tracked object of the oldest generation once
the objects promoted since its last full walk reach a quarter of it. Thousands of
live agents are hundreds of thousands of long-lived objects; many concurrent turns
keep their short-lived objects alive long enough to be promoted, so full walks come
often and each walks every agent again, and the walks can cost as much as the turns.
:func:`agent_collector` moves what is alive when it starts (or when its
:meth:`~AgentCollector.freeze` is called, after the agents are created) out of the
collector's sight (``gc.freeze()``) and raises the generation thresholds, and puts
both back when it exits. It changes process-wide state, so a library never does it
on its own: the application opts in.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import attrs

__all__ = ["AgentCollector", "agent_collector"]

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
