"""Settling a live session's older events into lines: where it stands, what waits.

A live session's settled events (those before the previous turn's ``turn/start``)
become lines, so its past is held as compactly as a restored one's, while the
current and the previous turn stay values (what the agent loop and the derived
history read). A session with a log takes the lines its log writer wrote, compressed
by the writer in chunks off the event loop (:meth:`Settling.offer`, through
``Session._offer_lines``, called by its recorder): nothing is encoded twice. A
session without a log keeps its events as values unless :data:`SETTLE_AFTER` is set
(it then encodes them itself, which costs about 40 % of a turn's instructions).

:class:`Settling` owns a session's settling: the seq of its latest ``turn/start``,
the seq below which its events are settled, and the writer's chunks that wait until
the events they hold are.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from ._compact import DecodedEvents

__all__ = ["SETTLE_AFTER", "Settling"]

#: How many settled events a live session keeps as values before it encodes them
#: into lines itself (at the next ``turn/start``); ``None``: never. Off: encoding
#: through the general converter costs about 40 % of a turn's instructions. A
#: session with a log settles anyway, with the lines its writer wrote.
SETTLE_AFTER: int | None = None


@attrs.define(eq=False, repr=False)
class Settling:
    """Where the settling of a session's events into lines stands.

    Each method settles what it can of the session's events, read through
    :attr:`DecodedEvents.compact_count` (how many of them, the first ones, are kept as
    lines); the session reads that count again afterwards. Never blocks. Not
    thread-safe.

    Example::

        settling = Settling()
        settling.turn_started(seq, events)  # at each turn/start
        settling.offer(chunks, events)  # a writer's chunks of lines
    """

    # The seq of the latest ``turn/start``: the events before the one preceding it
    # are settled (see the module docs); ``None`` once an event could not be.
    _turn_mark: int | None = 0
    # The events before this seq are settled; the writer's chunks of lines wait in
    # ``_offered`` until they are (``None``: none offered).
    _settled_below: int = 0
    _offered: list[tuple[int, int, bytes]] | None = attrs.field(
        default=None, init=False
    )

    def turn_started(self, seq: int, events: DecodedEvents) -> None:
        """A ``turn/start`` at ``seq`` committed: settle the events before the
        previous turn's start into lines once there are enough of them."""
        previous = self._turn_mark
        if previous is None:
            return
        self._turn_mark = seq
        self._settled_below = previous
        if self._offered:
            self._adopt_offered(events)
        count = previous - events.compact_count
        bound = SETTLE_AFTER
        if bound is not None and count >= bound and events.settle(count) < count:
            self._stop_settling()  # an event that has no faithful line stays a value

    def offer(
        self, chunks: Sequence[tuple[int, int, bytes]], events: DecodedEvents
    ) -> None:
        """Chunks of the lines a log writer wrote for the session's events:
        ``(first seq, lines, zlib bytes)``, in seq order
        (:class:`~._line_chunks.LineChunks`).

        The events a chunk holds are kept as its lines once they are all settled
        (now, or at a later ``turn/start``); chunks for events kept otherwise are
        dropped.
        """
        if self._turn_mark is None or not chunks:
            return
        if self._offered is None:
            self._offered = list(chunks)
        else:
            self._offered.extend(chunks)
        self._adopt_offered(events)

    def _adopt_offered(self, events: DecodedEvents) -> None:
        offered = self._offered
        assert offered is not None
        below = self._settled_below
        taken = 0
        for start, count, chunk in offered:
            if start + count <= events.compact_count:  # held as lines already
                taken += 1
                continue
            if start + count > below:  # not settled yet: wait
                break
            if not events.adopt_lines(start, count, chunk):
                self._stop_settling()  # a gap, or an event without a faithful line
                return
            taken += 1
        del offered[:taken]

    def _stop_settling(self) -> None:
        """An event could not be settled: it and every later one stay values."""
        self._turn_mark = None
        self._offered = None
