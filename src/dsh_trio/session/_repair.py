"""Crash repair: the events that close a turn a stopped process left open."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias

from ..values import (
    AssistantMessageData,
    EventData,
    Interrupted,
    MessageId,
    StepEnd,
    StepStart,
    SurfaceOp,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    UserMessage,
)

if TYPE_CHECKING:
    from ..values import SessionEvent
    from ._session import Session

__all__ = ["Closer", "interrupted_turn_closers", "close_interrupted_turn"]

#: ``(type, data, surface_op, source_event_seqs)``, ready for ``Session.append``.
Closer: TypeAlias = tuple[str, EventData, SurfaceOp | None, tuple[int, ...] | None]


def _unknown_text(name: str) -> str:
    return (
        f'The call to tool "{name}" was interrupted: the process stopped after the '
        "call started and before its result was recorded. Its outcome is unknown; "
        "it may have run partly or completely. Check the current state before "
        "retrying; a retry is not safe if the tool has side effects."
    )


def _not_started_text(name: str) -> str:
    return (
        f'The call to tool "{name}" was not started: the process stopped before it '
        "ran, so it had no effect. It is safe to retry."
    )


def interrupted_turn_closers(
    events: Sequence[SessionEvent], *, start: int = 0
) -> list[Closer]:
    """The events that close a turn left open at the end of ``events``.

    ``start``: the seq of the last ``turn/start`` when known (or any earlier seq),
    so that only the events from there on are read.

    Pure; never blocks. For a log ending inside a turn, returns in order:

    1. for each tool-call block of the open step's ``assistant/message`` events
       that has no ``tool/result`` (in call order), an error ``tool/result``:
       ``ToolOutcomeUnknownError``/``TOOL_OUTCOME_UNKNOWN`` citing the call's
       ``tool/call`` seq if one was recorded, else
       ``ToolNotStartedError``/``TOOL_NOT_STARTED`` without sources; its message id
       is ``interrupted-tool-result-<callId>-<seq>`` (the seq it will get when the
       closers are appended in order right after ``events``);
    2. ``step/end`` if a step is open;
    3. ``turn/end`` with reason :class:`Interrupted`.

    A balanced or empty log gives ``[]``. Existing events are never rewritten.
    """
    turn: int | None = None
    step: tuple[int, int] | None = None
    pending: dict[str, str] = {}  # call id -> tool name, in call order
    call_seqs: dict[str, int] = {}
    for event in events[start:] if start else events:
        data = event.data
        # Exact-class tests narrow ``data``; validated data has the exact class of
        # its type.
        if data.__class__ is TurnStart:
            turn = data.turn
            step = None
            pending.clear()
            call_seqs.clear()
        elif data.__class__ is TurnEnd:
            turn = None
            step = None
            pending.clear()
            call_seqs.clear()
        elif data.__class__ is StepStart:
            step = (data.turn, data.step)
            pending.clear()
            call_seqs.clear()
        elif data.__class__ is StepEnd:
            step = None
            pending.clear()
            call_seqs.clear()
        elif data.__class__ is AssistantMessageData:
            for block in data.message.content:
                if isinstance(block, ToolCallBlock):
                    pending.setdefault(block.id, block.name)
        elif data.__class__ is ToolCallData:
            call_seqs[data.call_id] = event.seq
        elif data.__class__ is ToolResultData:
            source = data.message.source
            if isinstance(source, ToolSource):
                pending.pop(source.call_id, None)
    if turn is None:
        return []
    closers: list[Closer] = []
    seq = len(events)
    if step is not None:
        step_turn, step_no = step
        for call_id, name in pending.items():
            call_seq = call_seqs.get(call_id)
            if call_seq is not None:
                error = ToolErrorInfo("ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN")
                text = _unknown_text(name)
                sources: tuple[int, ...] | None = (call_seq,)
            else:
                error = ToolErrorInfo("ToolNotStartedError", "TOOL_NOT_STARTED")
                text = _not_started_text(name)
                sources = None
            message = UserMessage(
                id=MessageId(f"interrupted-tool-result-{call_id}-{seq}"),
                content=(
                    ToolResultBlock(
                        tool_call_id=call_id,
                        content=(TextBlock(text),),
                        is_error=True,
                    ),
                ),
                source=ToolSource(call_id),
            )
            closers.append(
                (
                    "tool/result",
                    ToolResultData(
                        turn=step_turn, step=step_no, message=message, error=error
                    ),
                    "append",
                    sources,
                )
            )
            seq += 1
        closers.append(("step/end", StepEnd(step_turn, step_no), None, None))
    closers.append(("turn/end", TurnEnd(turn, Interrupted()), None, None))
    return closers


def close_interrupted_turn(session: Session) -> list[SessionEvent]:
    """Append :func:`interrupted_turn_closers` of ``session`` to it.

    Synchronous, never blocks; listeners see each closer like any append.

    Returns:
        The appended events (``[]`` when no turn was open).

    Raises:
        InvalidEventError: a closer was refused (only possible for a log whose
            surface disagrees with the scan; nothing after it is appended).
    """
    start = session._open_turn_start
    if start is None:  # no turn is open: nothing to read
        return []
    return [
        session.append(type_, data, surface_op=op, source_event_seqs=sources)
        for type_, data, op, sources in interrupted_turn_closers(
            session.events, start=start
        )
    ]
