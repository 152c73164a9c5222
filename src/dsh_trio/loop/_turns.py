"""Turn results: what ``Agent.run`` and ``Agent.stream`` hand back, and how they wait.

A :class:`TurnWatch` follows one queued message: the turn that claims it, that turn's
``turn/end``, and (for a stream) the live frames of its attempts. The agent feeds it
synchronously from its inbox notifications and its session subscription; whoever waits
parks on the watch's :class:`trio.lowlevel.ParkingLot`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

import attrs
import trio

from ..events import StreamChunkFrame, StreamFrame, StreamStartFrame
from ..values import (
    Aborted,
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Errored,
    Message,
    RawChunkRecord,
    StreamRecord,
    SystemMessageData,
    TextBlock,
    TextDelta,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    Usage,
    UserCancel,
    UserMessage,
)

if TYPE_CHECKING:
    from ..session import Session
    from ..values import SessionEvent
    from ._output import TurnOutput
    from ._payloads import AssistantStream
    from ._waits import TurnWaits

__all__ = [
    "OpenTurnStream",
    "TurnResult",
    "TurnStream",
    "TurnWatch",
    "text_of",
    "turn_result",
]


def text_of(message: Message) -> str:
    """The text of ``message``: its text blocks joined, in order (``""`` if none).

    Reasoning, tool-call, tool-result and image blocks are skipped.

    Example::

        dsh.text_of(dsh.user_message("hello"))  # "hello"
    """
    return "".join(b.text for b in message.content if b.__class__ is TextBlock)


@attrs.frozen(kw_only=True)
class TurnResult:
    """How one turn ended, what it added to the history and what it cost.

    Returned by :meth:`Agent.run` and :meth:`TurnStream.result`, and carried by
    :class:`~dsh_trio.errors.TurnFailedError`.

    Attributes:
        turn: the turn's number, or ``None`` when the message was discarded from the
            inbox before any turn claimed it (``reason`` is then ``Aborted``).
        reason: the turn's ``turn/end`` reason: ``Completed()``, ``MaxTokens()``,
            ``Blocked()``, ``Aborted(cause)`` or ``Errored(failure)``.
        text: the text of the turn's last assistant message (``""`` if it has none).
        messages: the messages the turn appended to the history, in order: its user
            messages (the prompt, steering input), system-prompt updates, assistant
            messages and tool results.
        usage: token usage summed over every model attempt of the turn (failed and
            retried attempts included); ``None`` if no attempt reported any.
        output: the typed output, an instance of the ``output_type`` the turn was
            asked for (see :meth:`Agent.run`): the value of its accepted
            ``final_result`` call; ``None`` without one, or when no call was
            accepted.
    """

    turn: int | None
    reason: TurnEndReason
    text: str
    messages: tuple[Message, ...]
    usage: Usage | None
    output: Any = None

    @property
    def failed(self) -> bool:
        """Whether the turn errored or was aborted (what ``check=True`` raises for)."""
        return isinstance(self.reason, (Errored, Aborted))


def _add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    if total is None:
        return more

    def plus(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    return Usage(
        total.input_tokens + more.input_tokens,
        total.output_tokens + more.output_tokens,
        plus(total.cache_read_tokens, more.cache_read_tokens),
        plus(total.cache_write_tokens, more.cache_write_tokens),
        plus(total.reasoning_tokens, more.reasoning_tokens),
    )


def _attempt_usage(stream: Sequence[StreamRecord]) -> Usage | None:
    """The last usage chunk a failed attempt's stream recorded (what the model billed)."""
    found: Usage | None = None
    for record in stream:
        if record.__class__ is RawChunkRecord and isinstance(record.chunk, Usage):
            found = record.chunk
    return found


def _appended(data: object) -> Message | None:
    """The message a surface ``append`` event adds to the derived history, if any."""
    if data.__class__ is UserMessage:
        return data
    if data.__class__ is ToolResultData:
        return data.message
    if data.__class__ is AssistantMessageData or data.__class__ is SystemMessageData:
        message: Message = data.message
        return message if message.content else None
    return None


class TurnWatch:
    """One queued message followed to the end of the turn that claims it.

    Runtime use only. Fed synchronously by the agent: :meth:`claimed`,
    :meth:`discarded`, :meth:`ended`, :meth:`frame`; every change unparks the waiters.
    """

    __slots__ = (
        "attempts",
        "cancel_hint",
        "closed",
        "end",
        "frames",
        "gone",
        "lot",
        "message_id",
        "output",
        "start_seq",
        "turn",
    )

    def __init__(
        self,
        message_id: str,
        *,
        frames: bool = False,
        output: TurnOutput | None = None,
    ) -> None:
        self.message_id = message_id
        #: The typed output asked of the claiming turn, if any.
        self.output = output
        #: The claiming turn, once claimed.
        self.turn: int | None = None
        #: The seq of that turn's ``turn/start``.
        self.start_seq = 0
        #: The turn's ``turn/end`` event data and seq, once written.
        self.end: tuple[TurnEnd, int] | None = None
        #: How the wait ended without a ``turn/end`` (discarded, disposed, lost).
        self.gone: TurnEndReason | None = None
        #: The cause of a ``cancel`` clearing the inbox right now.
        self.cancel_hint: Aborted | None = None
        #: The turn's live frames (streams only): an unbounded, append-only buffer.
        self.frames: list[StreamFrame] | None = [] if frames else None
        self.attempts: set[str] = set()
        #: The stream's block was left: nothing more is buffered.
        self.closed = False
        self.lot = trio.lowlevel.ParkingLot()

    @property
    def settled(self) -> bool:
        """Whether the wait is over (the turn ended, or it never will)."""
        return self.end is not None or self.gone is not None

    def poke(self) -> None:
        """Wake every waiter to look again. Never blocks."""
        if self.lot:
            self.lot.unpark_all()

    def claimed(self, turn: int, session: Session) -> None:
        self.turn = turn
        events = session.events
        for seq in range(len(events) - 1, -1, -1):
            event = events[seq]
            if event.type == "turn/start" and getattr(event.data, "turn", None) == turn:
                self.start_seq = seq
                break
        self.poke()

    def discarded(self) -> None:
        self.gone = self.cancel_hint or Aborted(UserCancel())
        self.poke()

    def ended(self, data: TurnEnd, seq: int) -> None:
        self.end = (data, seq)
        self.poke()

    def frame(self, event: AssistantStream) -> None:
        """Buffer ``event``'s frame if it belongs to this watch's turn."""
        frames = self.frames
        if frames is None or self.turn is None or self.settled:
            return
        f = event.frame
        if f.__class__ is StreamStartFrame:
            if f.turn != self.turn:
                return
            self.attempts.add(f.attempt_id)
        elif f.attempt_id not in self.attempts:
            return
        frames.append(f)
        self.poke()


def turn_result(session: Session, watch: TurnWatch) -> TurnResult:
    """The result of ``watch``'s turn, read from the session log. Synchronous."""
    turn = watch.turn
    if watch.end is not None:
        reason: TurnEndReason = watch.end[0].reason
        stop = watch.end[1] + 1
    else:
        assert watch.gone is not None
        reason = watch.gone
        stop = session.next_seq
    if turn is None:
        return TurnResult(turn=None, reason=reason, text="", messages=(), usage=None)
    output = watch.output
    return result_of_events(
        session.events[watch.start_seq : stop],
        turn,
        reason,
        output=None if output is None else output.value,
    )


def result_of_events(
    events: Sequence[SessionEvent],
    turn: int,
    reason: TurnEndReason,
    *,
    output: object = None,
) -> TurnResult:
    """The :class:`TurnResult` of one turn's events (``turn/start`` .. ``turn/end``).

    The one reading of a turn's log: ``Agent.run`` reads it from memory, a
    ``wait`` on a stored session from the store. Synchronous.
    """
    messages: list[Message] = []
    usage: Usage | None = None
    last: AssistantMessage | None = None
    for event in events:
        data: Any = event.data
        if event.surface_op == "append":
            message = _appended(data)
            if message is not None:
                messages.append(message)
        if data.__class__ is AssistantMessageData:
            usage = _add_usage(usage, data.usage)
            last = data.message
        elif data.__class__ is AssistantAttemptData:
            usage = _add_usage(usage, _attempt_usage(data.stream))
    return TurnResult(
        turn=turn,
        reason=reason,
        text="" if last is None else text_of(last),
        messages=tuple(messages),
        usage=usage,
        output=output,
    )


class _Frames:
    """An async iterator over a stream's buffered frames, from its first one."""

    __slots__ = ("_next", "_text", "_watch")

    def __init__(self, watch: TurnWatch, *, text: bool) -> None:
        self._watch = watch
        self._text = text
        self._next = 0

    def __aiter__(self) -> Self:
        return self

    def _find(self, frames: list[StreamFrame]) -> int:
        i = self._next
        if self._text:
            while i < len(frames):
                f = frames[i]
                if f.__class__ is StreamChunkFrame and f.chunk.__class__ is TextDelta:
                    return i
                i += 1
            self._next = i  # nothing of interest before here
            return -1
        return i if i < len(frames) else -1

    async def _step(self) -> StreamFrame:
        watch = self._watch
        frames = watch.frames
        assert frames is not None
        while True:
            i = self._find(frames)
            if i >= 0:
                await trio.lowlevel.checkpoint()
                self._next = (
                    i + 1
                )  # only once delivered: a cancelled step loses nothing
                return frames[i]
            if watch.settled or watch.closed:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            await watch.lot.park()


class _TextIterator(_Frames):
    async def __anext__(self) -> str:
        # _find picked a text-delta chunk frame.
        frame = cast("StreamChunkFrame", await self._step())
        return cast("TextDelta", frame.chunk).text


class _FrameIterator(_Frames):
    async def __anext__(self) -> StreamFrame:
        return await self._step()


class TurnStream:
    """The live view of one turn started by :meth:`Agent.stream`.

    Created by ``agent.stream(message)``; there is no public constructor. The frames
    of the turn's model attempts are buffered from the moment the message is queued,
    in an **unbounded** buffer: the turn never waits for a slow or absent reader, and
    the buffer holds at most one frame per streamed chunk of this turn (it is freed
    with the stream). Leaving the ``async with`` block stops the buffering; left
    before the turn ended, it cancels the turn and waits for it to wind down (see
    :meth:`Agent.stream`), unless the stream was opened with ``detach=True``.

    Example::

        async with agent.stream(dsh.user_message("hi")) as turn:
            async for delta in turn.text():
                print(delta, end="", flush=True)
            result = await turn.result()
    """

    __slots__ = ("_message", "_waits", "_watch")

    def __init__(
        self, waits: TurnWaits, message: UserMessage, watch: TurnWatch
    ) -> None:
        self._waits = waits
        self._message = message
        self._watch = watch

    def __repr__(self) -> str:
        return f"<TurnStream message={self._message.id!r} turn={self._watch.turn}>"

    @property
    def message(self) -> UserMessage:
        """The queued message this stream follows."""
        return self._message

    @property
    def turn(self) -> int | None:
        """The turn that claimed the message, or ``None`` while it is still queued."""
        return self._watch.turn

    def text(self) -> AsyncIterator[str]:
        """Iterate the turn's text deltas as they stream, in order.

        Each call starts at the turn's first delta; deltas already buffered come at
        once (one checkpoint each), then the iterator waits for more and ends when
        the turn ends. The deltas of every attempt are included: when a failed
        attempt is retried, the retry's text follows the failed attempt's partial
        text (:meth:`frames` shows where each attempt starts and how it ended).
        Cancelling a wait loses no delta. Reasoning and tool-call deltas are not
        text.
        """
        return _TextIterator(self._watch, text=True)

    def frames(self) -> AsyncIterator[StreamFrame]:
        """Iterate every live frame of the turn (``agent/assistant-stream``), in order.

        ``StreamStartFrame``, ``StreamChunkFrame`` and ``StreamEndFrame`` of each of
        the turn's model attempts; like :meth:`text`, each call starts at the first
        frame and the iterator ends when the turn ends.
        """
        return _FrameIterator(self._watch, text=False)

    async def result(self, *, check: bool = True) -> TurnResult:
        """Wait for the turn to end and return its :class:`TurnResult`, as ``Agent.run``.

        Blocks until the turn's ``turn/end`` is written (returns at once, after a
        checkpoint, if it already is). Cancelling the caller only cancels this
        wait; the turn is cancelled when the exception leaves the ``async with``
        block. Idempotent: every call returns an equal result, also after the
        block (a turn the block cancelled is ``Aborted(UserCancel())``).

        Raises:
            TurnFailedError: ``check`` and the turn errored or was aborted.
            RuntimeError: the block of a ``detach=True`` stream was left before
                the turn ended (it was not followed to its end).
        """
        return await self._waits.outcome(self._watch, check=check)


class OpenTurnStream:
    """What ``Agent.stream(message)`` returns: ``async with`` it to queue and follow a turn.

    Runtime use only; see :meth:`Agent.stream`.
    """

    __slots__ = (
        "_detach",
        "_dispose",
        "_message",
        "_output",
        "_stream",
        "_waits",
        "_watch",
    )

    def __init__(
        self,
        waits: TurnWaits,
        message: UserMessage,
        *,
        detach: bool = False,
        output: TurnOutput | None = None,
    ) -> None:
        self._waits = waits
        self._message = message
        self._detach = detach
        self._output = output
        self._stream: TurnStream | None = None
        self._watch: TurnWatch | None = None
        self._dispose: Callable[[], None] | None = None

    async def __aenter__(self) -> TurnStream:
        if self._stream is not None:
            raise RuntimeError("an agent.stream(...) context can be entered only once")
        waits = self._waits
        waits.refuse_reentry("stream()")
        await trio.lowlevel.checkpoint_if_cancelled()
        watch = TurnWatch(self._message.id, frames=True, output=self._output)
        # Registered before the message is queued: an idle agent claims it inline.
        dispose = waits.watch_frames(watch)
        try:
            waits.follow(self._message, watch)
        except BaseException:
            dispose()
            raise
        self._dispose = dispose
        self._watch = watch
        self._stream = TurnStream(waits, self._message, watch)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return self._stream

    async def __aexit__(  # noqa: ASYNC910  # an exception leaving the block is not delayed by a checkpoint
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        watch = self._watch
        assert watch is not None and self._dispose is not None
        try:
            if not watch.settled and not self._detach:
                # Left before the turn ended: cancel it and wait (shielded) for its
                # turn/end. Returning None lets ``exc`` propagate as it is.
                await self._waits.wind_down(watch)  # noqa: ASYNC102  # shielded inside; bounded: the turn's scope is cancelled
        finally:
            self._dispose()
            self._waits.unfollow(watch)
            watch.closed = True
            watch.poke()
        if exc_type is None:
            await trio.lowlevel.cancel_shielded_checkpoint()
