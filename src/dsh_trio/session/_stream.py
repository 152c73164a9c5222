"""The compact stream record of one model attempt.

Each settled attempt (``assistant/message`` or ``assistant/attempt``) carries the
chunks it received as a tuple of :data:`~dsh_trio._values.StreamRecord`:

* consecutive text deltas of one block pack into a :class:`TextChunksRecord`
  (``time0``, ``index``, ``dt`` gaps, one string per delta); reasoning deltas
  likewise into a :class:`ReasoningChunksRecord`;
* consecutive tool-call deltas of one block, call id and name (same presence and
  value) pack into a :class:`ToolCallChunksRecord`;
* everything else (block start/end, usage, finish, a tool-call delta with an empty
  id or an empty-string name) is a :class:`RawChunkRecord`, and ends any run.

Runs have no minimum length; ``dt`` has one entry fewer than the members; every
time is an epoch-millisecond safe integer. :func:`expand_stream` restores the exact
chunks and times.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import sub as _sub
from typing import Any, Final, TypeVar

from ..errors import InvalidStreamChunkError, SessionCorruptError
from ..values import (
    MAX_SAFE_INTEGER,
    BlockEnd,
    BlockStart,
    DataShapeError,
    Finish,
    FinishReason,
    RawChunkRecord,
    ReasoningBlock,
    ReasoningChunksRecord,
    ReasoningDelta,
    StreamChunk,
    StreamRecord,
    TextBlock,
    TextChunksRecord,
    TextDelta,
    ToolCallBlock,
    ToolCallChunksRecord,
    ToolCallDelta,
    Usage,
    builder,
    checker,
    utf8_ok,
)

__all__ = [
    "StreamAccumulator",
    "expand_stream",
    "stream_text",
    "first_token_time",
    "has_visible_content",
    "last_raw_chunk",
]

_MAX: Final = MAX_SAFE_INTEGER
_NONE: Final = 0
_TEXT: Final = 1
_REASONING: Final = 2
_TOOL: Final = 3

C = TypeVar("C")

_check_chunk = checker(StreamChunk)
_check_record = checker(StreamRecord)
_raw_record = builder(RawChunkRecord)
# The run records hold what ``push`` checked, so they are built without re-checking.
_text_record = builder(TextChunksRecord)
_reasoning_record = builder(ReasoningChunksRecord)
_tool_record = builder(ToolCallChunksRecord)


class StreamAccumulator:
    """Packs the chunks of one model attempt into compact stream records.

    ``push`` is synchronous, never blocks, and is cheap (it runs once per streamed
    chunk); ``records()`` snapshots what was pushed so far, the open run included,
    and pushing may continue afterwards.

    Example::

        acc = StreamAccumulator()
        acc.push(TextDelta(0, "h"), 1000)
        acc.push(TextDelta(0, "i"), 1004)
        acc.records()  # (TextChunksRecord(time0=1000, index=0, dt=(4,), texts=("h", "i")),)
    """

    __slots__ = (
        "_count",
        "_done",
        "_dt",
        "_id",
        "_index",
        "_kind",
        "_last",
        "_name",
        "_parts",
        "_time0",
    )

    def __init__(self) -> None:
        # A plain slotted class: one is made for every model attempt.
        self._done: list[StreamRecord] = []
        self._kind = _NONE
        self._index = 0
        self._id = ""
        self._name: str | None = None
        self._time0 = 0
        self._last = 0
        self._dt: list[int] = []
        self._parts: list[str] = []
        self._count = 0

    def push(self, chunk: StreamChunk, time_ms: int) -> None:
        """Record ``chunk``, received at ``time_ms`` (epoch milliseconds).

        Raises:
            InvalidStreamChunkError: ``time_ms`` is not a safe integer, or the chunk
                is not a stream chunk with JSON-representable fields. Nothing is
                recorded then.
        """
        if time_ms.__class__ is not int or not -_MAX <= time_ms <= _MAX:
            raise InvalidStreamChunkError(
                f"stream chunk {self._count}: receive time must be a safe integer "
                f"(epoch ms), got {time_ms!r:.40}"
            )
        if chunk.__class__ is TextDelta or chunk.__class__ is ReasoningDelta:
            kind = _TEXT if chunk.__class__ is TextDelta else _REASONING
            index = chunk.index
            text = chunk.text
            if (
                index.__class__ is not int
                or not -_MAX <= index <= _MAX
                or text.__class__ is not str
                or not (text.isascii() or utf8_ok(text))
            ):
                self._check(chunk)  # names the problem (str subclasses pass)
            if self._kind == kind and self._index == index:
                gap = time_ms - self._last
                if -_MAX <= gap <= _MAX:
                    self._dt.append(gap)
                    self._parts.append(text)
                    self._last = time_ms
                    self._count += 1
                    return
            if self._kind != _NONE:
                self._close()
            self._open(kind, index, "", None, time_ms, text)
            return
        if chunk.__class__ is ToolCallDelta:
            index = chunk.index
            call_id = chunk.id
            name = chunk.name
            args = chunk.arguments_delta
            if (
                index.__class__ is not int
                or not -_MAX <= index <= _MAX
                or call_id.__class__ is not str
                or (name is not None and name.__class__ is not str)
                or args.__class__ is not str
                or not (args.isascii() or utf8_ok(args))
            ):
                self._check(chunk)  # names the problem (str subclasses pass)
            if not call_id or name == "":
                self._close()
                self._done.append(_raw_record(time_ms, chunk))
                self._count += 1
                return
            if (
                self._kind == _TOOL
                and self._index == index
                and self._id == call_id
                and self._name == name
            ):
                gap = time_ms - self._last
                if -_MAX <= gap <= _MAX:
                    self._dt.append(gap)
                    self._parts.append(args)
                    self._last = time_ms
                    self._count += 1
                    return
            if self._kind != _NONE:
                self._close()
            self._open(_TOOL, index, call_id, name, time_ms, args)
            return
        if not _plain_raw(chunk):
            self._check(chunk)  # names the problem
        if self._kind != _NONE:
            self._close()
        self._done.append(_raw_record(time_ms, chunk))
        self._count += 1

    def text_run(self) -> int | None:
        """The block index of the open text run, if the last chunk pushed was a text
        delta (so :meth:`extend_text_run` may continue it)."""
        return self._index if self._kind == _TEXT else None

    def extend_text_run(self, times: list[int], texts: list[str]) -> None:
        """Append text deltas to the open text run (see :meth:`text_run`): the text
        ``texts[k]``, received at ``times[k]``, for each ``k``. Hot path.

        Records what :meth:`push` of each delta of the run's block would. The caller
        vouches that every text is an ASCII ``str`` and every time an
        epoch-millisecond safe integer.
        """
        if not times:
            return
        # Each time less the one before it (the run's last time before the first).
        gaps = list(map(_sub, times, (self._last, *times[:-1])))
        if min(gaps) < -_MAX or max(gaps) > _MAX:
            # A gap too large for the record: ``push`` starts a new run there.
            index = self._index
            for time_ms, text in zip(times, texts, strict=True):
                self.push(TextDelta(index, text), time_ms)
            return
        self._dt += gaps
        self._parts += texts
        self._last = times[-1]
        self._count += len(texts)

    def records(self) -> tuple[StreamRecord, ...]:
        """The records of everything pushed so far (the open run included)."""
        if self._kind == _NONE:
            return tuple(self._done)
        return (*self._done, self._run())

    @property
    def chunk_count(self) -> int:
        """How many chunks were pushed."""
        return self._count

    def _open(
        self,
        kind: int,
        index: int,
        call_id: str,
        name: str | None,
        time: int,
        part: str,
    ) -> None:
        self._kind = kind
        self._index = index
        self._id = call_id
        self._name = name
        self._time0 = time
        self._last = time
        self._parts.append(part)
        self._count += 1

    def _close(self) -> None:
        if self._kind != _NONE:
            self._done.append(self._run())
            self._kind = _NONE
            self._dt.clear()
            self._parts.clear()

    def _run(self) -> StreamRecord:
        kind = self._kind
        if kind == _TEXT:
            return _text_record(
                self._time0, self._index, tuple(self._dt), tuple(self._parts)
            )
        if kind == _REASONING:
            return _reasoning_record(
                self._time0, self._index, tuple(self._dt), tuple(self._parts)
            )
        return _tool_record(
            self._time0,
            self._index,
            tuple(self._dt),
            self._id,
            tuple(self._parts),
            self._name,
        )

    def _check(self, chunk: object) -> None:
        try:
            _check_chunk(chunk)
        except DataShapeError as exc:
            raise InvalidStreamChunkError(
                f"stream chunk {self._count} cannot be recorded: {exc.describe('chunk')}"
            ) from None


def _plain_raw(chunk: Any) -> bool:
    """Whether ``chunk`` is one of the common raw chunks, plainly valid (hot path).

    True only where the full check would pass: safe ints, ASCII strings, the block
    types a stream usually closes with and a finish without failure or replay state.
    Anything else gets the full check. (The tests are spelled out inline: this runs
    for every raw chunk of every attempt.)
    """
    cls = chunk.__class__
    if cls is BlockStart:
        index, block_type = chunk.index, chunk.block_type
        return (
            index.__class__ is int
            and -_MAX <= index <= _MAX
            and block_type.__class__ is str
            and block_type.isascii()
        )
    if cls is BlockEnd:
        index, block = chunk.index, chunk.block
        if index.__class__ is not int or not -_MAX <= index <= _MAX:
            return False
        if block.__class__ is TextBlock or block.__class__ is ReasoningBlock:
            text = block.text
            return text.__class__ is str and text.isascii()
        if block.__class__ is not ToolCallBlock:
            return False
        call_id, name, arguments = block.id, block.name, block.arguments
        return (
            call_id.__class__ is str
            and call_id.isascii()
            and name.__class__ is str
            and name.isascii()
            and arguments.__class__ is str
            and arguments.isascii()
        )
    if cls is Usage:
        tokens_in, tokens_out = chunk.input_tokens, chunk.output_tokens
        return (
            tokens_in.__class__ is int
            and -_MAX <= tokens_in <= _MAX
            and tokens_out.__class__ is int
            and -_MAX <= tokens_out <= _MAX
            and chunk.cache_read_tokens is None
            and chunk.cache_write_tokens is None
            and chunk.reasoning_tokens is None
        )
    if cls is Finish:
        reason = chunk.reason
        if reason.__class__ is not FinishReason or reason.failure is not None:
            return False
        kind: Any = reason.kind
        return (
            kind.__class__ is str
            and kind in _PLAIN_KINDS
            and chunk.replay_state is None
        )
    return False


_PLAIN_KINDS: Final = frozenset({"stop", "tool-calls", "max-tokens"})


def _corrupt(k: int, record: object, what: str) -> SessionCorruptError:
    tag = getattr(record, "TAG", type(record).__name__)
    return SessionCorruptError(f"stream record {k} ({tag}) {what}")


def _validated(records: Sequence[StreamRecord]) -> Sequence[StreamRecord]:
    if not isinstance(records, (tuple, list)):
        raise SessionCorruptError(
            f"a stream must be a tuple of stream records, got {type(records).__name__}"
        )
    for k, record in enumerate(records):
        try:
            _check_record(record)
        except DataShapeError as exc:
            raise _corrupt(k, record, exc.describe("")[1:]) from None
    return records


def expand_stream(records: Sequence[StreamRecord]) -> list[tuple[int, StreamChunk]]:
    """Expand compact stream records back into the ``(time, chunk)`` pairs pushed.

    Validates strictly: every record is a well-typed stream record, member lists
    are non-empty, ``len(dt) == members - 1``, every reconstructed time is a safe
    integer, and a tool-call run has a non-empty ``id`` and a non-empty ``name``
    when one is present.

    Raises:
        SessionCorruptError: naming the first bad record (``stream record 3
            (text-chunks) ...``).
    """
    out: list[tuple[int, StreamChunk]] = []
    for record in _validated(records):
        # ``_validated`` checked every record's exact class; ``__class__ is``
        # narrows as ``isinstance`` would, and is the cheapest test.
        if record.__class__ is RawChunkRecord:
            out.append((record.time, record.chunk))
        elif record.__class__ is ToolCallChunksRecord:
            t, dt = record.time0, record.dt
            index, call_id, name = record.index, record.id, record.name
            for k, part in enumerate(record.args):
                if k:
                    t += dt[k - 1]
                out.append((t, ToolCallDelta(index, call_id, name, part)))
        elif (
            record.__class__ is TextChunksRecord
            or record.__class__ is ReasoningChunksRecord
        ):
            t, dt, index = record.time0, record.dt, record.index
            delta = (
                TextDelta if record.__class__ is TextChunksRecord else ReasoningDelta
            )
            for k, text in enumerate(record.texts):
                if k:
                    t += dt[k - 1]
                out.append((t, delta(index, text)))
    return out


def stream_text(records: Sequence[StreamRecord]) -> str:
    """All streamed text (text deltas only, not reasoning), joined."""
    parts: list[str] = []
    for record in records:
        if record.__class__ is TextChunksRecord:
            parts.extend(record.texts)
        elif record.__class__ is RawChunkRecord and isinstance(
            record.chunk,
            TextDelta,
        ):
            parts.append(record.chunk.text)
    return "".join(parts)


_DELTAS = (TextDelta, ReasoningDelta, ToolCallDelta)


def first_token_time(records: Sequence[StreamRecord]) -> int | None:
    """Receive time of the first content delta (text, reasoning or tool call), if any."""
    for record in records:
        if isinstance(record, RawChunkRecord):
            if isinstance(record.chunk, _DELTAS):
                return record.time
        else:
            return record.time0
    return None


def has_visible_content(records: Sequence[StreamRecord]) -> bool:
    """Whether any text or reasoning with a non-whitespace character streamed.

    Counts text/reasoning deltas and completed text/reasoning blocks; tool-call
    arguments are not visible content.
    """
    for record in records:
        if (
            record.__class__ is TextChunksRecord
            or record.__class__ is ReasoningChunksRecord
        ):
            if any(not t.isspace() and t for t in record.texts):
                return True
        elif record.__class__ is RawChunkRecord:
            chunk = record.chunk
            if isinstance(chunk, (TextDelta, ReasoningDelta)):
                text = chunk.text
            elif isinstance(chunk, BlockEnd) and isinstance(
                chunk.block, (TextBlock, ReasoningBlock)
            ):
                text = chunk.block.text
            else:
                continue
            if text and not text.isspace():
                return True
    return False


def last_raw_chunk(records: Sequence[StreamRecord], chunk_type: type[C]) -> C | None:
    """The last raw chunk of ``chunk_type`` (e.g. :class:`Finish`, :class:`Usage`)."""
    for record in reversed(records):
        if record.__class__ is RawChunkRecord:
            chunk = record.chunk
            if isinstance(chunk, chunk_type):
                return chunk
    return None
