"""One model attempt: stream the reply, then settle it as exactly one durable event."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

import trio

from ..events import (
    Abandoned,
    Committed,
    StreamChunkFrame,
    StreamEndFrame,
    StreamStartFrame,
    dispatch,
)
from ..llm import BlockAssembler, ModelRequest, ModelStream
from ..session import StreamAccumulator
from ..values import (
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    Finish,
    FinishReason,
    JsonValue,
    LlmFailure,
    ModelSource,
    SessionEvent,
    StreamChunk,
    builder,
)
from ._ids import new_message_id
from ._lane import END, LaneEnd
from ._payloads import AssistantStream

if TYPE_CHECKING:
    from ..events import EventBus
    from ..events._target import EmitTarget
    from ..llm import ModelRegistry
    from ._agent import Agent
    from ._signal import CancelSignal

__all__ = ["Attempts"]

_STREAM = "agent/assistant-stream"
_time_ns = time.time_ns


class Attempts:
    """The model attempts of one agent: numbering, live frames and settlement.

    Attempt ids (``"<agent id>:<n>"``) and frame revisions count across the agent's
    life, so one instance lives as long as its agent; so does the emit target of its
    live frames, renewed as each attempt opens. Each attempt reads that shared state
    from these attributes and writes its numbering back.
    """

    __slots__ = ("agent", "bus", "count", "models", "revision", "target")

    def __init__(self, agent: Agent, bus: EventBus, models: ModelRegistry) -> None:
        self.agent = agent
        self.bus = bus
        self.models = models
        #: Attempts opened so far, and the last frame revision (written back by
        #: each attempt as it numbers its frames).
        self.count = 0
        self.revision = 0
        #: The emit target of the live frames, renewed as each attempt opens.
        self.target: EmitTarget | None = None

    async def run(
        self, turn: int, step: int, request: ModelRequest, signal: CancelSignal
    ) -> tuple[AssistantMessage, FinishReason] | LlmFailure | None:
        """Stream one model attempt and settle it durably (exactly one event).

        Checkpoints while streaming. Returns the message and its finish reason, or the
        failure the model reported. Whatever ends the attempt otherwise, its event is
        written first (on cancellation the interrupted prefix, if any). A cancel
        issued while no chunk was awaited (by a listener of a frame, say) ends the
        attempt before it asks the adapter for more: its prefix is settled and
        ``None`` returned, with no :class:`trio.Cancelled` to unwind (the caller
        leaves the cancelled scope without a checkpoint). The same holds when the
        turn's cancel reaches the stream at a checkpoint: the ``Cancelled`` out of
        the adapter ends here, with ``None``; any other exception, and a
        ``Cancelled`` while the turn itself was not cancelled (its owner's), is
        raised.

        The adapter's chunks are read through :class:`ModelStream`, which applies
        the rules of :func:`~dsh_trio.llm.stream_model`, one by one (:meth:`finish`).
        The fast lane (``loop/_lane.py``) opens its attempts with :meth:`open`,
        reads the common chunks itself and hands the rest to :meth:`finish`.
        """
        attempt, stream = self.open(turn, step, request)
        return await self.finish(attempt, stream, signal, None)

    def open(
        self, turn: int, step: int, request: ModelRequest
    ) -> tuple[_Attempt, ModelStream]:
        """Number a new attempt, show its start frame and open the adapter's stream."""
        self.count += 1
        attempt = _Attempt(self, turn, step, request)
        return attempt, ModelStream(self.models.get(request.provider), request)

    async def finish(
        self,
        attempt: _Attempt,
        stream: ModelStream,
        signal: CancelSignal,
        found: StreamChunk | LaneEnd | BaseException | None,
    ) -> tuple[AssistantMessage, FinishReason] | LlmFailure | None:
        """Read the rest of ``attempt`` from ``stream``, close it and settle it.

        ``found`` is what the fast lane handed over: ``None`` when it read nothing
        (the whole attempt is read here), :data:`~._lane.END` when nothing is left to
        read, the next chunk to take (checked), or the exception that ended its
        reading. Returns as :meth:`run` does.
        """
        try:
            try:
                handed: StreamChunk | None = None  # by the lane, to take first
                done = found is END
                if found is not None and not done:
                    if isinstance(found, BaseException):
                        raise found
                    handed = cast("StreamChunk", found)
                # Until cancelled (``cancelled``, without the call). The cause is read
                # into a name so that the type checker does not narrow the attribute:
                # the listeners of a frame may cancel, and the check below sees it.
                while not done and (_cause := signal.cause) is None:
                    if handed is not None:
                        chunk, handed = handed, None
                    else:
                        try:
                            chunk = await stream.next()
                        except StopAsyncIteration:
                            break
                        except Exception as exc:  # the adapter failed: a finish
                            chunk = stream.failed(exc)
                        else:
                            chunk = stream.checked(chunk)
                    if signal.cause is not None:
                        break  # a chunk that arrives after the abort is not kept
                    if attempt.take(chunk):
                        break  # nothing after the finish is read
            finally:
                await stream.aclose()
            if signal.cause is None:
                await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            attempt.abandon(exc, signal)
            if exc.__class__ is trio.Cancelled and signal.cause is not None:
                # The turn's own cancel reached the stream at a checkpoint: ended as
                # a cancel between two chunks ends (see above), here rather than by
                # unwinding the driver's frames to the turn's scope. The caller
                # leaves that scope without a checkpoint, so a cancel of an outer
                # scope is still delivered at the next checkpoint outside it.
                return None  # noqa: ASYNC104, ASYNC910  # the turn's scope is cancelled and left at once
            raise
        if signal.cause is not None:
            attempt.abandon(None, signal)
            return None
        return attempt.conclude()


class _Attempt:
    """The synchronous side of one attempt: its record, blocks, frames and settlement."""

    __slots__ = (
        "agent",
        "assembler",
        "attempt_id",
        "index",
        "owner",
        "records",
        "request",
        "revision",
        "step",
        "target",
        "turn",
    )

    def __init__(
        self, owner: Attempts, turn: int, step: int, request: ModelRequest
    ) -> None:
        agent = owner.agent
        self.owner = owner
        self.agent = agent
        self.turn = turn
        self.step = step
        self.request = request
        self.attempt_id = f"{agent.id}:{owner.count}"
        self.records = StreamAccumulator()
        self.assembler = BlockAssembler()
        self.index = 0
        self.revision = owner.revision
        bus = owner.bus
        # Frames are built for this attempt only if someone listened when it opened.
        self.target: EmitTarget | None = None
        if _STREAM in bus.listened:
            target = owner.target
            if target is None:
                target = owner.target = bus._target(_STREAM, agent)
            else:
                target.renew()
            self.target = target
            self._frame(_stream_start(self.attempt_id, self._next(), turn, step))

    def _next(self) -> int:
        self.revision += 1
        self.owner.revision = self.revision
        return self.revision

    def _frame(
        self, frame: StreamStartFrame | StreamChunkFrame | StreamEndFrame
    ) -> None:
        """Emit ``frame`` to the listeners of ``agent/assistant-stream`` admitted now."""
        target = self.target
        if target is not None:
            if target.table.get(_STREAM) is not target.entries:
                target.current()  # the listener set changed
            if listeners := target.listeners:
                dispatch(_STREAM, listeners, _assistant_stream(self.agent, frame))

    def show(self, chunk: StreamChunk, now: int) -> None:
        """Emit the chunk frame of ``chunk``, received at ``now``, and count it."""
        target = self.target
        if target is not None:
            # The agent's revision count is written back with the end frame.
            self.revision += 1
            self._frame(
                _stream_chunk(self.attempt_id, self.revision, self.index, now, chunk)
            )
        self.index += 1

    def take(self, chunk: StreamChunk) -> bool:
        """Record, assemble and show ``chunk``; True for the finish."""
        now = _time_ns() // 1_000_000
        self.records.push(chunk, now)
        self.assembler.push(chunk)
        self.show(chunk, now)
        # The record accepts only the exact chunk classes, so no subclass gets here.
        return chunk.__class__ is Finish

    def abandon(self, exc: BaseException | None, signal: CancelSignal) -> None:
        """Settle an attempt ``exc`` ended, or (``None``) one ``signal`` cancelled
        without an exception (its visible prefix, if cancelled)."""
        settled: SessionEvent | None = None
        try:
            settled = self._settle(
                _prefix(self.request, self.assembler, exc, signal), True
            )
        finally:
            self._end_frame(settled)

    def conclude(self) -> tuple[AssistantMessage, FinishReason] | LlmFailure:
        """Settle an attempt that streamed to its end: the failure it reported, or
        its reply; then its end frame."""
        settled: SessionEvent | None = None
        assembler = self.assembler
        finish = assembler.finish
        try:
            if finish.kind in ("error", "aborted"):
                settled = self._settle(None)
                return finish.failure or LlmFailure(
                    message="model call failed", code="UNKNOWN"
                )
            message = _reply(self.request, assembler)
            settled = self._settle(message)
            return message, finish
        finally:
            self._end_frame(settled)

    def _settle(
        self, message: AssistantMessage | None, interrupted: bool = False
    ) -> SessionEvent:
        """Append the attempt's one event: ``assistant/message``, or ``assistant/attempt``.

        Synchronous. With no ``message`` only the stream is kept (the attempt failed, or
        it was cancelled before it produced visible content).
        """
        session = self.agent.session
        if message is None:
            return session.append_trusted(
                "assistant/attempt",
                AssistantAttemptData(
                    turn=self.turn, step=self.step, stream=self.records.records()
                ),
            )
        return session.append_trusted(
            "assistant/message",
            _message_data(
                self.turn,
                self.step,
                message,
                self.records.records(),
                self.assembler.usage,
                True if interrupted else None,
            ),
            surface_op="append",
        )

    def _end_frame(self, settled: SessionEvent | None) -> None:
        if self.target is None:
            return
        outcome = (
            _committed(settled.type, settled.seq)
            if settled is not None
            else Abandoned()
        )
        self._frame(_stream_end(self.attempt_id, self._next(), self.index, outcome))


_assistant_message = builder(AssistantMessage)
_model_source = builder(ModelSource)
_message_data = builder(AssistantMessageData)
_committed = builder(Committed)
_stream_start = builder(StreamStartFrame)
_stream_end = builder(StreamEndFrame)
_stream_chunk = builder(StreamChunkFrame)
_assistant_stream = builder(AssistantStream)


#: The source of the last reply without replay state: the next reply of the same
#: model shares it (a frozen value), so a long session's history holds one source
#: per model rather than one per reply.
_last_source: list[ModelSource] = [ModelSource("", "")]


def _source(request: ModelRequest, replay_state: JsonValue) -> ModelSource:
    """``ModelSource(request.provider, request.model, replay_state)``, shared when
    it equals the last one without replay state."""
    if replay_state is not None:
        return _model_source(request.provider, request.model, replay_state)
    source = _last_source[0]
    if source.model != request.model or source.provider != request.provider:
        source = _last_source[0] = _model_source(request.provider, request.model, None)
    return source


def _reply(request: ModelRequest, assembler: BlockAssembler) -> AssistantMessage:
    """The message of a stream that finished normally (with its replay state)."""
    return _assistant_message(
        new_message_id(), assembler.blocks(), _source(request, assembler.replay_state)
    )


def _prefix(
    request: ModelRequest,
    assembler: BlockAssembler,
    exc: BaseException | None,
    signal: CancelSignal,
) -> AssistantMessage | None:
    """The visible prefix worth keeping when ``exc`` ended the stream (cancellation only)."""
    if signal.cause is None and not isinstance(exc, trio.Cancelled):
        return None
    content = assembler.interrupted_blocks()
    if not content:
        return None
    # ``AssistantMessage(id, content, ModelSource(provider, model))``: the parts are
    # the request's route and blocks the assembler built.
    return _assistant_message(new_message_id(), content, _source(request, None))
