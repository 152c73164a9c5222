"""A compact sequence of session events: older events kept as their JSON lines.

A long log holds hundreds of thousands of events; as decoded values they take about
ten times the bytes of their lines. :class:`DecodedEvents` keeps the events a log
decoder read as their lines instead, compressed in blocks of :data:`BLOCK_LINES`, and
decodes an event again (with :func:`decode_event`, the decoder that read it) when it
is read. Events appended as values (the live part of a session) stay values until
they settle: a live session moves the events of its older turns into lines too,
compressed in chunks, so a long-lived session holds its past as compressed lines
whatever way it was made. The lines of a session with a log are the ones its log
writer wrote, compressed in the writer's worker thread
(:class:`~._line_chunks.LineChunks`, :meth:`DecodedEvents.adopt_lines`);
:meth:`DecodedEvents.settle` encodes them itself. Reading gives values equal to the ones the decoder returned when the log
was read, or to the ones that were appended.
"""

from __future__ import annotations

import bisect
import json
import operator
import sys
import zlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Final, SupportsIndex, overload

from ..values import (
    EVENT_DATA_TYPES,
    AssistantMessage,
    SessionEvent,
    assistant_message_of,
    decode_event,
    event_to_json,
    is_known_event_type,
    parse_json_line,
)
from ._line_chunks import inflate_chunk

__all__ = ["BLOCK_LINES", "DecodedEvents"]

#: Lines per compressed block: a read decompresses one block (a few tens of µs).
BLOCK_LINES: Final = 128
_LEVEL: Final = 1  # fastest zlib level; JSON lines compress well even so
_RECENT_MAX: Final = 256  # decoded events kept for repeated reads
_UNKNOWN_TYPE: Final = 255  # the type code of an event whose type is not indexed

# The shared empty line stores of a sequence that holds no lines (never mutated).
_NO_LINES: Final[list[bytes]] = []
_NO_RECENT: Final[dict[int, SessionEvent]] = {}
_NO_TYPES: Final = bytearray()
_NO_CODES: Final[dict[str, int]] = {}
#: The read cache of a sequence that has read no block: (no block, no lines).
_NO_CACHE: Final[tuple[int, list[bytes]]] = (sys.maxsize, _NO_LINES)
_NO_STARTS: Final[list[int]] = []


#: Encodes an event's JSON as a log writer does (compact, UTF-8 kept).
_ENCODE: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
).encode


def decode_line(line: bytes, seq: int) -> SessionEvent:
    """The event of a log line already read once (so known to be valid)."""
    return decode_event(parse_json_line(line), seq)[0]


def encode_line(event: SessionEvent) -> bytes | None:
    """The log line of ``event`` (without the line end), or ``None`` when its line
    would not decode back to it: an event of a type a reader refuses (neither
    known, declared nor ignorable), or text UTF-8 cannot encode (a lone surrogate).
    """
    if not faithful(event):
        return None
    try:
        return _ENCODE(event_to_json(event)).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return None


class _Lines:
    """The events of a sequence kept as lines: the compressed blocks, the lines
    after the last full block, then the chunks a log writer compressed (each
    starting at the position in ``starts``), the block or chunk read last, the
    events decoded last, and the type of each line (one byte each: a code of
    ``type_codes``, or ``_UNKNOWN_TYPE`` when not given or past 255 types)."""

    __slots__ = (
        "blocks",
        "cached",
        "chunks",
        "lines",
        "recent",
        "starts",
        "type_codes",
        "types",
    )

    def __init__(
        self,
        blocks: list[bytes],
        lines: list[bytes],
        types: bytearray,
        type_codes: dict[str, int],
        recent: dict[int, SessionEvent],
        chunks: list[bytes],
        starts: list[int],
    ) -> None:
        self.blocks = blocks  # compressed, BLOCK_LINES lines each
        self.lines = lines
        self.chunks = chunks  # compressed by a log writer, any number of lines each
        self.starts = starts  # the position of each chunk's first line
        # The block (or chunk, as ``-1 - k``) read last and its lines.
        self.cached = _NO_CACHE
        self.recent = recent
        self.types = types
        self.type_codes = type_codes

    def copy(self) -> _Lines:
        """Stores of their own holding the same lines (the blocks themselves shared)."""
        return _Lines(
            list(self.blocks),
            list(self.lines),
            bytearray(self.types),
            dict(self.type_codes),
            {},
            list(self.chunks),
            list(self.starts),
        )

    def code(self, type_: str | None) -> int:
        """The type code of a line of type ``type_`` (a new one when there is room)."""
        if type_ is None:
            return _UNKNOWN_TYPE
        codes = self.type_codes
        code = codes.get(type_, _UNKNOWN_TYPE)
        if code == _UNKNOWN_TYPE and len(codes) < _UNKNOWN_TYPE:
            code = codes[type_] = len(codes)
        return code


#: The line stores of every sequence that holds no lines: the shared empty ones
#: above (never mutated), so a live session pays nothing for them.
_NO_STORE: Final = _Lines(
    _NO_LINES, _NO_LINES, _NO_TYPES, _NO_CODES, _NO_RECENT, _NO_LINES, _NO_STARTS
)


def faithful(event: SessionEvent) -> bool:
    """Whether the log line of ``event`` reads back (its type is known, declared or
    ignorable: a reader refuses any other)."""
    type_ = event.type
    return event.ignorable or type_ in EVENT_DATA_TYPES or is_known_event_type(type_)


class DecodedEvents(Sequence[SessionEvent]):
    """The events of a log in order: a prefix kept as lines, then values.

    A log decoder adds each event it read as its line (:meth:`append_line`), after
    decoding and checking it; events handed over as values go through
    :meth:`append` / :meth:`extend` and are kept as they are (once one is, no line
    can follow). ``unchecked`` holds the positions whose data did not pass the
    checkers while being decoded; ``Session.restore`` checks those (and only those)
    again.

    Reading (indexing, negative indices, slicing to a tuple, iteration, ``len``,
    ``==`` against lists and tuples) works as on a tuple of the events; an event
    kept as a line is decoded when read (a small cache keeps the last ones). Never
    blocks. Not thread-safe.

    Example::

        events = DecodedEvents()
        events.append_line(b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}')
        events[0].data  # TurnStart(turn=1)
    """

    __slots__ = ("_compact", "_store", "_unchecked", "_values")

    def __init__(self, events: Iterable[SessionEvent] = ()) -> None:
        # A live session never holds lines: until the first line the line stores are
        # the shared empty ones (never mutated), so an idle agent pays nothing for
        # them; ``_hold_lines`` gives this sequence its own.
        self._unchecked: set[int] | None = None  # made when first asked for
        self._store = _NO_STORE
        self._compact = 0  # how many events are kept as lines
        self._values: list[SessionEvent] = list(events)

    @property
    def _blocks(self) -> list[bytes]:
        """The compressed blocks (read-only; ``_NO_LINES`` while no line is held)."""
        return self._store.blocks

    @property
    def _lines(self) -> list[bytes]:
        """The lines after the last full block (read-only; ``_NO_LINES`` while no
        line is held)."""
        return self._store.lines

    @property
    def unchecked(self) -> set[int]:
        """The positions whose data did not pass the checkers while decoding (mutable)."""
        if self._unchecked is None:
            self._unchecked = set()
        return self._unchecked

    @unchecked.setter
    def unchecked(self, positions: set[int]) -> None:
        self._unchecked = positions

    def _hold_lines(self) -> None:
        """Give this sequence its own line stores (before its first line)."""
        self._store = self._store.copy()

    # ------------------------------------------------------------------ building

    def append_line(self, line: bytes, type_: str | None = None) -> None:
        """Add the next event as its log line (without the line end).

        The caller has decoded the line into the event at this position; ``type_``
        is its type, if known (:meth:`of_types` then skips it without decoding).

        Raises:
            ValueError: an event was already added as a value.
        """
        if self._values or self._store.starts:
            raise ValueError(
                f"event lines must come before event values and adopted chunks; "
                f"position {len(self)} already holds one"
            )
        store = self._store
        if store is _NO_STORE:
            self._hold_lines()
            store = self._store
        store.types.append(store.code(type_))
        lines = store.lines
        lines.append(line)
        self._compact += 1
        if len(lines) == BLOCK_LINES:
            store.blocks.append(zlib.compress(b"\n".join(lines), _LEVEL))
            lines.clear()

    def append(self, event: SessionEvent) -> None:
        """Add the next event as a value."""
        self._values.append(event)

    def extend(self, events: Iterable[SessionEvent]) -> None:
        """Add the next events as values."""
        self._values.extend(events)

    def settle(self, count: int) -> int:
        """Keep the first ``count`` events held as values as their lines instead.

        Each is encoded as a log writer encodes it (:func:`encode_line`), and reads
        decode it again to an equal value; the lines are compressed as one chunk.
        Stops before an event whose line would not decode back to it (see
        :func:`encode_line`): that event and the ones after it stay values. Returns
        how many events were settled. Never blocks.

        Example::

            events = DecodedEvents([event0, event1])
            events.settle(1)  # 1: events[0] is now kept as its line
            events[0] == event0  # True
        """
        lines: list[bytes] = []
        for event in self._values[: max(count, 0)]:
            line = encode_line(event)
            if line is None:
                break
            lines.append(line)
        if not lines:
            return 0
        chunk = zlib.compress(b"\n".join(lines), _LEVEL)
        return len(lines) if self.adopt_lines(self._compact, len(lines), chunk) else 0

    def adopt_lines(self, start: int, count: int, chunk: bytes) -> bool:
        """Keep the ``count`` events from position ``start`` as the lines that
        ``chunk`` holds compressed (zlib, one line each, joined by ``\n``; with or
        without the preset dictionary of a log writer's chunks).

        What a log writer wrote for them (:class:`~._line_chunks.LineChunks`), or what
        :meth:`settle` encodes: reads decode each line again, to a value equal to
        the event. Taken only when those events are the first ones held as values
        and each has a line that reads back (:func:`faithful`); returns whether it
        was. Never blocks.
        """
        values = self._values
        if start != self._compact or not 0 < count <= len(values):
            return False
        settled = values[:count]
        for event in settled:
            if not faithful(event):
                return False
        store = self._store
        if store is _NO_STORE:
            self._hold_lines()
            store = self._store
        code = store.code
        store.types.extend([code(event.type) for event in settled])
        store.starts.append(start)
        store.chunks.append(chunk)
        del values[:count]  # the same list: a session's alias stays valid
        self._compact += count
        return True

    @property
    def values(self) -> list[SessionEvent]:
        """The list of the events kept as values (after the lines); appending to
        it appends to this sequence."""
        return self._values

    @property
    def compact_count(self) -> int:
        """How many events (the first ones) are kept as lines."""
        return self._compact

    def share(self) -> DecodedEvents:
        """A new sequence of the same events, sharing the compressed blocks.

        O(number of blocks); appending to one never shows in the other.
        """
        other = DecodedEvents(self._values)
        if self._unchecked:
            other._unchecked = set(self._unchecked)
        if self._store is not _NO_STORE:
            other._store = self._store.copy()
            other._compact = self._compact
        return other

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._compact + len(self._values)

    def _line(self, index: int) -> bytes:
        store = self._store
        starts = store.starts
        if starts and index >= starts[0]:
            k = bisect.bisect_right(starts, index) - 1
            cached = store.cached
            if cached[0] != -1 - k:
                lines = inflate_chunk(store.chunks[k]).split(b"\n")
                cached = store.cached = (-1 - k, lines)
            return cached[1][index - starts[k]]
        block, offset = divmod(index, BLOCK_LINES)
        if block == len(store.blocks):
            return store.lines[offset]
        cached = store.cached
        if cached[0] != block:
            lines = zlib.decompress(store.blocks[block]).split(b"\n")
            cached = store.cached = (block, lines)
        return cached[1][offset]

    def assistant_message(self, index: int) -> AssistantMessage | None:
        """The message of the ``assistant/message`` event at ``index`` when it is
        kept as a line, decoded without the rest of the event (its stream records);
        ``None`` for any other event, or when only a whole decode gives it. Equal to
        ``self[index].data.message``. What a history fold reads after a resume.
        """
        store = self._store
        if (
            index >= self._compact
            or index in store.recent
            or store.types[index] != store.type_codes.get("assistant/message")
        ):
            return None
        return assistant_message_of(self._line(index))

    def _decoded(self, index: int) -> SessionEvent:
        """The event at ``0 <= index < compact_count``, decoded (or cached)."""
        recent = self._store.recent
        event = recent.get(index)
        if event is None:
            event = decode_line(self._line(index), index)
            if len(recent) >= _RECENT_MAX:
                recent.clear()
            recent[index] = event
        return event

    @overload
    def __getitem__(self, index: SupportsIndex) -> SessionEvent: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[SessionEvent, ...]: ...
    def __getitem__(
        self, index: SupportsIndex | slice
    ) -> SessionEvent | tuple[SessionEvent, ...]:
        if isinstance(index, slice):
            return self._slice(index)
        i = operator.index(index)
        compact = self._compact
        if i >= compact:
            return self._values[i - compact]
        if i < 0:
            i += len(self)
            if i >= compact:
                return self._values[i - compact]
            if i < 0:
                raise IndexError("session event index out of range")
        return self._decoded(i)

    def _slice(self, index: slice) -> tuple[SessionEvent, ...]:
        compact = self._compact
        start, stop, step = index.indices(compact + len(self._values))
        if step > 0 and start >= compact:  # values only (a live session's reads)
            return tuple(self._values[start - compact : stop - compact : step])
        return tuple([self[i] for i in range(start, stop, step)])

    def __iter__(self) -> Iterator[SessionEvent]:
        # Block by block without the cache: a full pass must not evict what
        # indexed reads keep.
        seq = 0
        store = self._store
        for block in store.blocks:
            for line in zlib.decompress(block).split(b"\n"):
                yield decode_line(line, seq)
                seq += 1
        for line in store.lines:
            yield decode_line(line, seq)
            seq += 1
        # Then position by position: follows appends made while iterating, and
        # events that settle meanwhile (they move from the values to the lines).
        while True:
            compact = self._compact
            if seq >= compact:
                k = seq - compact
                values = self._values
                if k >= len(values):
                    return
                yield values[k]
            else:
                yield decode_line(self._line(seq), seq)
            seq += 1

    def of_types(
        self, types: Collection[str], *, reverse: bool = False
    ) -> Iterator[SessionEvent]:
        """The events whose type is in ``types``, in order (last first with
        ``reverse``); events kept as lines of other types are not decoded.

        Follows appends made while iterating forwards, as iteration does.
        """
        wanted = set(types)
        codes = bytearray(256)  # codes[c]: events of type code c are wanted
        store = self._store
        for name, code in store.type_codes.items():
            codes[code] = name in wanted
        codes[_UNKNOWN_TYPE] = 1  # the type is known only once decoded
        kinds = store.types
        order = range(self._compact - 1, -1, -1) if reverse else range(self._compact)
        values = self._values
        if reverse:
            for event in reversed(values):
                if event.type in wanted:
                    yield event
        for i in order:
            if codes[kinds[i]]:
                event = decode_line(self._line(i), i)
                if event.type in wanted:
                    yield event
        if not reverse:
            k = 0
            while k < len(values):
                event = values[k]
                if event.type in wanted:
                    yield event
                k += 1

    def __reversed__(self) -> Iterator[SessionEvent]:
        yield from reversed(self._values)
        for i in range(self._compact - 1, -1, -1):
            yield self._decoded(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (DecodedEvents, list, tuple)):
            return len(self) == len(other) and all(
                a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<DecodedEvents: {len(self)} events, {self._compact} kept as lines>"
