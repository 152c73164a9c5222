"""The fast lane: the common turn, run as one coroutine with the fewest steps per chunk.

The general path (``TurnDriver._run_turn`` -> ``_run_step`` -> :meth:`Attempts.run`
-> :meth:`Attempts.finish`) is plain code: three coroutine frames, each resumed for
every streamed chunk, and every chunk checked (:meth:`ModelStream.checked`) and
handed to :meth:`_Attempt.take`, which records it, assembles it and shows its live
frame. This module runs the common turn instead (:func:`admits`: no hook that can
change the turn, :data:`TURN_HOOKS`, is listened to), and it is the only place where
a turn is run cleverly:

- The whole turn, its steps and the attempts that are not retries run in one
  coroutine (:meth:`FastTurn.run_turn`), so one frame of the library is resumed
  per chunk. Its branches are the general path's, one for one; the hooks, the
  turn's end and the tool round are the same calls.
- The common chunk, an ASCII text delta that continues the open text run, costs one
  append to each of two lists (its text and its receive time) and one listener call.
  Its record and its block are extended once, when the run ends or the attempt
  settles (:func:`_flush`).
- Any other chunk is checked, recorded, assembled and shown as
  :meth:`_Attempt.take` does it, without the calls of ``take`` and ``show``.
- The moment anything unusual happens in an attempt (a failure of the adapter, an
  exception, a cancel) or the stream ends, the lane stores what it kept and hands
  the attempt to :meth:`Attempts.finish`, the general path's reading loop, close
  and settlement: with :data:`END` when nothing is left to read, the terminal
  finish standing for the adapter's failure, or the exception that ended the
  reading. A retried attempt is the general path's from its start.

Whatever the lane does, it does as the general path would: the same session events
(byte for byte, times and ids aside), the same live frames in the same order and the
same hook calls. ``tests/properties/test_fast_lane_differential.py`` runs random turns
both ways to hold it to that; :func:`general_path` switches the lane off for them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

import trio

from ..errors import LlmError
from ..events import StreamChunkFrame, dispatch
from ..values import (
    DisposedCancel,
    Enter,
    Finish,
    LlmFailure,
    MaxTokens,
    StepEnd,
    StepStart,
    StreamChunk,
    TextDelta,
    ToolCallBlock,
    TurnEndReason,
    builder,
)
from ._answers import answer_calls
from ._context import render_prompt
from ._payloads import AssistantStream
from ._steps import COMPLETED

if TYPE_CHECKING:
    from ..events import EventBus
    from ..session import StreamAccumulator
    from ._agent import Agent
    from ._attempt import Attempts
    from ._driver import OpenedTurn, TurnDriver
    from ._services import AgentServices
    from ._steps import StepRequests

__all__ = [
    "END",
    "LANE",
    "FastTurn",
    "LaneEnd",
    "LaneSwitch",
    "TURN_HOOKS",
    "admits",
    "boundary",
    "general_path",
]

#: The hooks whose listeners can change a common turn: with any of them listened
#: to, no attempt takes the lane. ``agent/request-error`` is not one of them (the
#: runtime's retry listener always listens): it is asked only about a failed
#: attempt, whose failure the lane hands to the general path, and the attempt it
#: retries is a ``retry``, which never takes the lane.
TURN_HOOKS: Final = ("agent/pre-step", "agent/request", "agent/turn-stopping")
_STREAM: Final = "agent/assistant-stream"
_time_ns = time.time_ns
#: No chunk's index is this object: before a text run opens, no delta continues it.
_NO_RUN: Final = object()
#: The listener table of an attempt that shows no frames (never read).
_NO_TABLE: Final[dict[str, object]] = {}

# ``AssistantStream(agent, StreamChunkFrame(attempt_id, revision, index, time,
# chunk))``, in one call: the payload of every chunk's live frame.
_chunk_payload = builder(AssistantStream, nested={"frame": StreamChunkFrame})
_step_start = builder(StepStart)
_step_end = builder(StepEnd)


class LaneEnd:
    """The type of :data:`END`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


#: What the lane hands :meth:`Attempts.finish` when nothing is left to read.
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


def admits(bus: EventBus, retry: bool = False) -> bool:
    """Whether a turn, or an attempt, may take the lane: not a ``retry``, no hook of
    :data:`TURN_HOOKS` has a listener and tests did not force the general path."""
    if retry or LANE.forced:
        return False
    listened = bus.listened
    # :data:`TURN_HOOKS`, spelled out: this runs for every turn and attempt.
    return (
        "agent/pre-step" not in listened
        and "agent/request" not in listened
        and "agent/turn-stopping" not in listened
    )


def boundary(fresh: bool) -> Callable[[], Awaitable[None]]:
    """What a step boundary awaits after its claim: a checkpoint, or only a check for
    a cancel when nothing but synchronous code ran since the last yield: the first
    boundary of a driver task that just started (its start was that yield), and the
    boundary after a tool round (``ToolRegistry.execute`` returns right after a
    checkpoint; the step's remaining bookkeeping is synchronous)."""
    lowlevel = trio.lowlevel
    return lowlevel.checkpoint_if_cancelled if fresh else lowlevel.checkpoint


class FastTurn:
    """The common turn of one agent, run as one coroutine (see the module).

    Made by the agent's :class:`~._driver.TurnDriver`, which hands it the turns
    :func:`admits` lets through (:meth:`run_turn`) and does the rest of the work
    through its named methods: the step boundaries, the hooks, the turn's end.
    """

    __slots__ = ("_agent", "_attempts", "_driver", "_requests", "_services")

    def __init__(
        self,
        driver: TurnDriver,
        agent: Agent,
        services: AgentServices,
        attempts: Attempts,
        requests: StepRequests,
    ) -> None:
        self._driver = driver
        self._agent = agent
        self._services = services
        self._attempts = attempts
        self._requests = requests

    async def run_turn(self, opened: OpenedTurn) -> bool:
        """``TurnDriver.run_turn`` of the common turn: the same events, frames and
        hook calls, in one coroutine frame.

        The turn's boundaries are the plain path's own, shared with
        ``TurnDriver._run_turn``: :meth:`~._driver.TurnDriver.next_step` before
        each step, :meth:`~._driver.TurnDriver.step_ended` after it and
        :meth:`~._driver.TurnDriver.close_turn` at the end (awaited between steps,
        so none of them is on the stack while a stream is read). Each step goes as
        ``TurnDriver._run_step``, whose branches this follows one for one, calling
        the driver for the hooks; each attempt that :func:`admits` (not a retry)
        is read here, chunk by chunk, until anything unusual happens
        (:meth:`Attempts.finish` takes the rest and settles it); a retry is the
        plain path's (:meth:`Attempts.run`).
        """
        driver, agent = self._driver, self._agent
        services, attempts, requests = self._services, self._attempts, self._requests
        bus, session = services.bus, agent.session
        signal, turn = opened.signal, opened.turn
        driver.step = 0
        failure: Exception | None = None
        outer: BaseException | None = None
        try:
            with signal.scope:
                try:
                    while (decision := await driver.next_step(opened)) is not None:
                        step, entered = driver.step + 1, opened.entered
                        # ---- the step (``TurnDriver._run_step``)
                        session.append_trusted("step/start", _step_start(turn, step))
                        driver.step = step
                        step_end: TurnEndReason | None = None
                        calls: list[ToolCallBlock] = []
                        mark = (
                            0  # the seq from which the step's tool events are appended
                        )
                        try:
                            rendered = render_prompt(services, agent)
                            tools = services.tools.schemas(agent)
                            entering: Enter | None = decision  # first attempt only
                            retry = False
                            while True:
                                if bus.has_listeners("agent/request"):
                                    config = await driver.requested(turn, step, signal)
                                else:
                                    config = requests.seed()
                                request = requests.next_request(
                                    turn,
                                    step,
                                    config,
                                    entering,
                                    entered,
                                    rendered,
                                    tools,
                                )
                                entering = None
                                await trio.lowlevel.checkpoint_if_cancelled()
                                if not admits(bus, retry):
                                    outcome = await attempts.run(
                                        turn, step, request, signal
                                    )
                                else:
                                    # ---- the attempt, read here until anything unusual
                                    attempt, stream = attempts.open(turn, step, request)
                                    LANE.entries += 1
                                    next_chunk, checked = stream.next, stream.checked
                                    records, assembler = (
                                        attempt.records,
                                        attempt.assembler,
                                    )
                                    shown, attempt_id = (
                                        attempt.target,
                                        attempt.attempt_id,
                                    )
                                    # The texts of the deltas that continued the open run, not yet
                                    # stored, and their receive times; the run's block index and the
                                    # parts of its block.
                                    texts: list[str] = []
                                    times: list[int] = []
                                    run_index: object = _NO_RUN
                                    parts: list[str] = []
                                    found: StreamChunk | LaneEnd | BaseException = END
                                    # The attempt's chunk count and frame revision, kept in locals
                                    # and written back as the reading ends: nothing reads
                                    # them from the attempt before ``finish``.
                                    position, revision = attempt.index, attempt.revision
                                    # The bus's table (one dict for its life), read here once:
                                    # a listener set changed since the last frame is noticed
                                    # per chunk by one lookup.
                                    table_get = (
                                        _NO_TABLE if shown is None else shown.table
                                    ).get
                                    try:
                                        # The cause is read into a name so that the type
                                        # checker does not narrow the attribute: the
                                        # listeners called may cancel.
                                        while (_cause := signal.cause) is None:
                                            try:
                                                chunk = await next_chunk()
                                            except StopAsyncIteration:
                                                break
                                            except Exception as exc:
                                                # The adapter failed: ``finish`` takes it.
                                                found = stream.failed(exc)
                                                break
                                            cls = chunk.__class__
                                            if (
                                                chunk.__class__ is TextDelta
                                                and chunk.index is run_index
                                                and (text := chunk.text).__class__
                                                is str
                                                and text.isascii()
                                            ):
                                                # It continues the open run: kept (see ``_flush``).
                                                if signal.cause is not None:
                                                    break  # a chunk after the abort is not kept
                                                now = _time_ns() // 1_000_000
                                                times.append(now)
                                                texts.append(text)
                                            else:
                                                # Any other chunk: as ``_Attempt.take`` takes it.
                                                chunk = checked(chunk)
                                                if signal.cause is not None:
                                                    break
                                                if texts:
                                                    _flush(records, parts, times, texts)
                                                now = _time_ns() // 1_000_000
                                                records.push(chunk, now)
                                                assembler.push(chunk)
                                                run_index = _NO_RUN
                                                if (
                                                    cls is TextDelta
                                                ):  # may the next deltas continue its run?
                                                    index = records.text_run()
                                                    if index is not None:
                                                        open_parts = (
                                                            assembler.open_text(index)
                                                        )
                                                        if open_parts is not None:
                                                            run_index, parts = (
                                                                index,
                                                                open_parts,
                                                            )
                                            if shown is not None:  # ``_Attempt.show``
                                                revision += 1
                                                if (
                                                    table_get(_STREAM)
                                                    is not shown.entries
                                                ):
                                                    shown.current()  # the listener set changed
                                                if listeners := shown.listeners:
                                                    dispatch(
                                                        _STREAM,
                                                        listeners,
                                                        _chunk_payload(
                                                            agent,
                                                            attempt_id,
                                                            revision,
                                                            position,
                                                            now,
                                                            chunk,
                                                        ),
                                                    )
                                            position += 1
                                            if cls is Finish:
                                                break  # nothing after the finish is read
                                    except BaseException as exc:  # noqa: ASYNC103  # ``finish`` raises it
                                        found = exc
                                    finally:
                                        attempt.index, attempt.revision = (
                                            position,
                                            revision,
                                        )
                                        if texts:
                                            _flush(records, parts, times, texts)
                                    outcome = await attempts.finish(
                                        attempt, stream, signal, found
                                    )
                                if outcome is None:  # cancelled, prefix settled
                                    break
                                if isinstance(outcome, LlmFailure):
                                    if await driver.retry_requested(
                                        turn, step, config, outcome, signal
                                    ):
                                        retry = True
                                        continue
                                    raise LlmError(outcome)
                                message, finish = outcome
                                if finish.kind == "max-tokens":
                                    step_end = MaxTokens()
                                    break
                                for block in message.content:
                                    if isinstance(block, ToolCallBlock):
                                        break
                                else:  # no tool call
                                    step_end = COMPLETED
                                    break
                                calls = [
                                    b
                                    for b in message.content
                                    if isinstance(b, ToolCallBlock)
                                ]
                                mark = session.next_seq
                                concluded = await services.tools.execute(
                                    agent,
                                    turn=turn,
                                    step=step,
                                    calls=calls,
                                    signal=signal,
                                )
                                answer_calls(
                                    session,
                                    agent.id,
                                    turn,
                                    step,
                                    calls,
                                    mark,
                                    None,
                                    signal,
                                )
                                step_end = COMPLETED if concluded else None
                                break
                        except BaseException as exc:
                            if calls:
                                answer_calls(
                                    session,
                                    agent.id,
                                    turn,
                                    step,
                                    calls,
                                    mark,
                                    exc,
                                    signal,
                                )
                            raise
                        finally:
                            session.append_trusted("step/end", _step_end(turn, step))
                        # ---- the step ended
                        if not await driver.step_ended(opened, step_end):
                            break
                    # No success is reported for events the log has not taken.
                    if signal.cause is None:
                        await driver.wait_written()
                except Exception as exc:
                    failure = exc
        except BaseException as exc:  # noqa: ASYNC103  # raised after turn/end
            outer = exc
            signal.cancel(DisposedCancel())
        return driver.close_turn(opened, failure, outer)  # noqa: ASYNC910


def _flush(
    records: StreamAccumulator, parts: list[str], times: list[int], texts: list[str]
) -> None:
    """Store the kept deltas of the open run: in its record and its block's parts.

    Legal to keep them until here: ``push`` of a delta that continues the open run
    only appends its gap and text to that run (``extend_text_run`` does it for
    several), the assembler only appends its text to the open block's parts, and
    ASCII text is never repaired. Nothing reads either before this call.
    """
    records.extend_text_run(times, texts)
    parts += texts
    times.clear()
    texts.clear()
