"""The fast lane: the common model attempt, read with the fewest steps per chunk.

The general path (:meth:`Attempts.run <dsh_trio.loop._attempt.Attempts.run>`) reads
each chunk, checks it (:meth:`ModelStream.checked`) and hands it to
:meth:`_Attempt.take`, which records it, assembles it and shows its live frame. This
module reads the common attempt of the common turn instead: no hook that can change
the turn is listened to (:data:`TURN_HOOKS`), the attempt is not a retry, and nothing
cancelled it. It is the only place where the attempt is read cleverly:

- The common chunk, an ASCII text delta that continues the open text run, costs one
  append to each of two lists (its text and its receive time) and one listener call.
  Its record and its block are extended once, when the run ends or the attempt
  settles (:func:`_flush`).
- Any other chunk of the kinds a plain reply is made of (:data:`_ORDINARY`: a block's
  start or end, usage, the finish, the first delta of a text block) is checked and
  taken by :meth:`_Attempt.take`, exactly as the general path takes it.
- The moment anything unusual happens (a chunk of another kind, a failure of the
  adapter, a cancel, the end of the stream) the lane stores what it kept and returns:
  the general path takes the rest of the attempt from there (:data:`END`, or the
  chunk the lane did not take, ready to take).

Whatever the lane does, it does as the general path would: the same session events
(byte for byte, times and ids aside), the same live frames in the same order and the
same hook calls. ``tests/properties/test_fast_lane_differential.py`` runs random turns
both ways to hold it to that; :func:`general_path` switches the lane off for them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from ..events import StreamChunkFrame, dispatch
from ..values import (
    BlockEnd,
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    Usage,
    builder,
)
from ._payloads import AssistantStream

if TYPE_CHECKING:
    from ..events import EventBus
    from ..llm import ModelStream
    from ..session import StreamAccumulator
    from ._attempt import _Attempt
    from ._signal import CancelSignal

__all__ = [
    "END",
    "LANE",
    "LaneEnd",
    "LaneSwitch",
    "TURN_HOOKS",
    "admits",
    "general_path",
    "read",
]

#: The hooks whose listeners can change a common turn: with any of them listened
#: to, no attempt takes the lane. ``agent/request-error`` is not one of them (the
#: runtime's retry listener always listens): it is asked only about a failed
#: attempt, whose failure the lane hands to the general path, and the attempt it
#: retries is a ``retry``, which never takes the lane.
TURN_HOOKS: Final = ("agent/pre-step", "agent/request", "agent/turn-stopping")
#: The chunk classes of a plain reply: the lane takes them; any other ends it.
_ORDINARY: Final = frozenset((BlockStart, TextDelta, BlockEnd, Usage, Finish))
_STREAM: Final = "agent/assistant-stream"
_time_ns = time.time_ns
#: No chunk's index is this object: before a text run opens, no delta continues it.
_NO_RUN: Final = object()

# ``AssistantStream(agent, StreamChunkFrame(attempt_id, revision, index, time,
# chunk))``, in one call: the payload of every chunk's live frame.
_chunk_payload = builder(AssistantStream, nested={"frame": StreamChunkFrame})


class LaneEnd:
    """The type of :data:`END`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


#: What :func:`read` returns when nothing is left for the general path to read.
END: Final = LaneEnd()


class LaneSwitch:
    """Whether the lane may be taken, and how often it was (tests read both).

    For tests only: :func:`general_path` sets :attr:`forced`; :attr:`entries`
    counts the attempts the lane read.
    """

    __slots__ = ("entries", "forced")

    def __init__(self) -> None:
        self.forced = False
        self.entries = 0


#: The process's one switch.
LANE: Final = LaneSwitch()


@contextmanager
def general_path() -> Iterator[None]:
    """For tests: inside the block every attempt takes the general path.

    Example::

        with general_path():
            trio.run(a_turn)  # the plain path, to compare with the lane's
    """
    before = LANE.forced
    LANE.forced = True
    try:
        yield
    finally:
        LANE.forced = before


def admits(bus: EventBus, retry: bool) -> bool:
    """Whether an attempt may take the lane: it is not a ``retry``, no hook of
    :data:`TURN_HOOKS` has a listener and tests did not force the general path."""
    if retry or LANE.forced:
        return False
    listened = bus.listened
    return not any(hook in listened for hook in TURN_HOOKS)


async def read(
    attempt: _Attempt, stream: ModelStream, signal: CancelSignal
) -> StreamChunk | LaneEnd:
    """Read ``attempt`` from ``stream`` while it stays common (see the module).

    Checkpoints as the adapter does. Returns :data:`END` when nothing is left to
    read (the finish was taken, the stream ended, or ``signal`` was cancelled),
    else the first chunk the lane did not take, checked (or the terminal finish
    standing for the adapter's failure): the general path takes it and goes on.
    Exceptions other than the adapter's ``Exception`` (``Cancelled``) propagate,
    with the kept text stored.
    """
    LANE.entries += 1
    next_chunk, checked, take = stream.next, stream.checked, attempt.take
    records, assembler, target = attempt.records, attempt.assembler, attempt.target
    agent, attempt_id = attempt.agent, attempt.attempt_id
    # The texts of the deltas that continued the open run, not yet stored, and
    # their receive times; the block index of that run and its block's parts.
    texts: list[str] = []
    times: list[int] = []
    run_index: object = _NO_RUN
    parts: list[str] = []
    try:
        # The cause is read into a name so that the type checker does not narrow
        # the attribute: the listeners called below may cancel.
        while (_cause := signal.cause) is None:
            try:
                chunk = await next_chunk()
            except StopAsyncIteration:
                return END  # noqa: ASYNC910  # the caller checkpoints
            except Exception as exc:
                # The adapter failed: its finish is the general path's to take.
                return stream.failed(exc)  # noqa: ASYNC910  # the caller checkpoints
            cls = chunk.__class__
            if (
                chunk.__class__ is TextDelta
                and chunk.index is run_index
                and (text := chunk.text).__class__ is str
                and text.isascii()
            ):
                # Legal to keep: ``push`` of a delta that continues the open run
                # only appends its gap and text to that run (``extend_text_run``
                # does it for several), the assembler only appends its text to
                # the open block's parts, and ASCII text is never repaired. Nothing
                # reads either before ``_flush``.
                if signal.cause is not None:
                    # A chunk that arrives after the abort is not kept.
                    return END  # noqa: ASYNC910  # the caller checkpoints
                now = _time_ns() // 1_000_000
                times.append(now)
                texts.append(text)
                if target is not None:  # ``_Attempt.show``, for this chunk
                    revision = attempt.revision = attempt.revision + 1
                    if target.table.get(_STREAM) is not target.entries:
                        target.current()  # the listener set changed
                    if listeners := target.listeners:
                        dispatch(
                            _STREAM,
                            listeners,
                            _chunk_payload(
                                agent, attempt_id, revision, attempt.index, now, chunk
                            ),
                        )
                attempt.index += 1
                continue
            chunk = checked(chunk)
            if cls not in _ORDINARY:
                # Unusual: the general path takes it, and the rest, from here.
                return chunk  # noqa: ASYNC910  # the caller checkpoints
            if signal.cause is not None:
                return END  # noqa: ASYNC910  # the caller checkpoints
            if texts:
                _flush(records, parts, times, texts)
            if take(chunk):
                # Nothing after the finish is read.
                return END  # noqa: ASYNC910  # the caller checkpoints
            run_index = _NO_RUN
            if cls is TextDelta:  # may the next deltas continue its run?
                index = records.text_run()
                if index is not None:
                    open_parts = assembler.open_text(index)
                    if open_parts is not None:
                        run_index, parts = index, open_parts
        return END  # noqa: ASYNC910  # the caller checkpoints
    finally:
        if texts:
            _flush(records, parts, times, texts)


def _flush(
    records: StreamAccumulator, parts: list[str], times: list[int], texts: list[str]
) -> None:
    """Store the kept deltas of the open run: in its record and its block's parts."""
    records.extend_text_run(times, texts)
    parts += texts
    times.clear()
    texts.clear()
