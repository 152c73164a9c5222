"""One model attempt: stream the reply, then settle it as exactly one durable event."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from ..events import (
    Abandoned,
    Committed,
    StreamChunkFrame,
    StreamEndFrame,
    StreamStartFrame,
)
from ..llm import BlockAssembler, ModelRequest, stream_model
from ..session import StreamAccumulator
from ..values import (
    AssistantAttemptData,
    AssistantMessage,
    AssistantMessageData,
    FinishReason,
    LlmFailure,
    ModelSource,
    SessionEvent,
    new_message_id,
    now_ms,
)
from ._payloads import AssistantStream

if TYPE_CHECKING:
    from ..events import EventBus
    from ..llm import ModelRegistry
    from ._agent import Agent
    from ._signal import CancelSignal

__all__ = ["Attempts"]


class Attempts:
    """The model attempts of one agent: numbering, live frames and settlement.

    Attempt ids (``"<agent id>:<n>"``) and frame revisions count across the agent's
    life, so one instance lives as long as its agent.
    """

    __slots__ = ("_agent", "_bus", "_count", "_models", "_revision")

    def __init__(self, agent: Agent, bus: EventBus, models: ModelRegistry) -> None:
        self._agent = agent
        self._bus = bus
        self._models = models
        self._count = 0
        self._revision = 0

    async def run(
        self, turn: int, step: int, request: ModelRequest, signal: CancelSignal
    ) -> tuple[AssistantMessage, FinishReason] | LlmFailure:
        """Stream one model attempt and settle it durably (exactly one event).

        Checkpoints while streaming. Returns the message and its finish reason, or the
        failure the model reported. Whatever ends the attempt otherwise, its event is
        written first (on cancellation the interrupted prefix, if any).
        """
        attempt_id, frames = self._open(turn, step)
        bus = self._bus
        adapter = self._models.get(request.provider)
        records = StreamAccumulator()
        assembler = BlockAssembler()
        index = 0
        settled: SessionEvent | None = None
        # Hot path: everything below runs once per streamed chunk.
        record, assemble, agent, emit = (
            records.push,
            assembler.push,
            self._agent,
            bus.emit,
        )
        try:
            stream = stream_model(adapter, request)
            try:
                async for chunk in stream:
                    if signal.cancelled:
                        break  # a chunk that arrives after the abort is not kept
                    now = now_ms()
                    record(chunk, now)
                    assemble(chunk)
                    if frames:
                        self._revision += 1
                        emit(
                            "agent/assistant-stream",
                            AssistantStream(
                                agent,
                                StreamChunkFrame(
                                    attempt_id, self._revision, index, now, chunk
                                ),
                            ),
                            scope=agent,
                        )
                    index += 1
            finally:
                await stream.aclose()
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            try:
                prefix = _prefix(request, assembler, exc, signal)
                settled = self._settle(turn, step, records, assembler, prefix, True)
            finally:
                if frames:
                    self._end_frame(attempt_id, index, settled)
            raise
        return self._conclude(
            turn, step, request, records, assembler, (attempt_id, index, frames)
        )

    def _open(self, turn: int, step: int) -> tuple[str, bool]:
        """Number a new attempt and emit its start frame if anyone listens."""
        self._count += 1
        attempt_id = f"{self._agent.id}:{self._count}"
        frames = self._bus.has_listeners("agent/assistant-stream")
        if frames:
            self._revision += 1
            self._frame(StreamStartFrame(attempt_id, self._revision, turn, step))
        return attempt_id, frames

    def _conclude(
        self,
        turn: int,
        step: int,
        request: ModelRequest,
        records: StreamAccumulator,
        assembler: BlockAssembler,
        stream: tuple[str, int, bool],
    ) -> tuple[AssistantMessage, FinishReason] | LlmFailure:
        """Settle an attempt that streamed to its end: the failure it reported, or its
        reply; then its end frame (``stream`` is attempt id, frame count, frames on)."""
        attempt_id, index, frames = stream
        settled: SessionEvent | None = None
        finish = assembler.finish
        try:
            if finish.kind in ("error", "aborted"):
                settled = self._settle(turn, step, records, assembler, None)
                return finish.failure or LlmFailure(
                    message="model call failed", code="UNKNOWN"
                )
            message = _reply(request, assembler)
            settled = self._settle(turn, step, records, assembler, message)
            return message, finish
        finally:
            if frames:
                self._end_frame(attempt_id, index, settled)

    def _settle(
        self,
        turn: int,
        step: int,
        records: StreamAccumulator,
        assembler: BlockAssembler,
        message: AssistantMessage | None,
        interrupted: bool = False,
    ) -> SessionEvent:
        """Append the attempt's one event: ``assistant/message``, or ``assistant/attempt``.

        Synchronous. With no ``message`` only the stream is kept (the attempt failed, or
        it was cancelled before it produced visible content).
        """
        session = self._agent.session
        if message is None:
            return session._append_trusted(
                "assistant/attempt",
                AssistantAttemptData(turn=turn, step=step, stream=records.records()),
            )
        return session._append_trusted(
            "assistant/message",
            AssistantMessageData(
                turn=turn,
                step=step,
                message=message,
                stream=records.records(),
                usage=assembler.usage,
                interrupted=True if interrupted else None,
            ),
            surface_op="append",
        )

    def _frame(
        self, frame: StreamStartFrame | StreamChunkFrame | StreamEndFrame
    ) -> None:
        agent = self._agent
        self._bus.emit(
            "agent/assistant-stream", AssistantStream(agent, frame), scope=agent
        )

    def _end_frame(
        self, attempt_id: str, index: int, settled: SessionEvent | None
    ) -> None:
        self._revision += 1
        outcome = (
            Committed(settled.type, settled.seq) if settled is not None else Abandoned()
        )
        self._frame(StreamEndFrame(attempt_id, self._revision, index, outcome))


def _reply(request: ModelRequest, assembler: BlockAssembler) -> AssistantMessage:
    """The message of a stream that finished normally (with its replay state)."""
    return AssistantMessage(
        id=new_message_id(),
        content=assembler.blocks(),
        source=ModelSource(request.provider, request.model, assembler.replay_state),
    )


def _prefix(
    request: ModelRequest,
    assembler: BlockAssembler,
    exc: BaseException,
    signal: CancelSignal,
) -> AssistantMessage | None:
    """The visible prefix worth keeping when ``exc`` ended the stream (cancellation only)."""
    interrupted = signal.cancelled or isinstance(exc, trio.Cancelled)
    content = assembler.interrupted_blocks() if interrupted else ()
    if not content:
        return None
    return AssistantMessage(
        id=new_message_id(),
        content=content,
        source=ModelSource(request.provider, request.model),
    )
