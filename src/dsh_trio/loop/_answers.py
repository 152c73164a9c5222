"""The unanswered-tool-call safety net: stand-in results for calls a step left open."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from ..values import (
    SessionEvent,
    SessionId,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
)
from ._ids import new_message_id

if TYPE_CHECKING:
    from ..session import Session
    from ._signal import CancelSignal

__all__ = ["answer_calls"]

logger = logging.getLogger("dsh_trio")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _unanswered_why(exc: BaseException | None, signal: CancelSignal) -> str:
    """Why a call got no result from the executor, for the text of its stand-in."""
    if signal.cancelled or isinstance(exc, trio.Cancelled):
        return "the turn was cancelled"
    if exc is None:
        return "the tool executor returned without recording its result"
    detail = str(exc)
    name = type(exc).__name__
    if not detail:
        return f"the step failed ({name})"
    return f"the step failed ({name}: {_clip(detail, 200)})"


def _stand_in_result(
    turn: int, step: int, block: ToolCallBlock, started: bool, why: str
) -> ToolResultData:
    """The error result of a call the step ends without answering."""
    name = _clip(block.name, 120)
    if started:
        error = ToolErrorInfo("ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN")
        text = (
            f'The call to tool "{name}" got no result: {why} after the call '
            "started. Its outcome is unknown; it may have run partly or completely. "
            "Check the current state before retrying; a retry is not safe if the "
            "tool has side effects."
        )
    else:
        error = ToolErrorInfo("ToolNotStartedError", "TOOL_NOT_STARTED")
        text = (
            f'The call to tool "{name}" was not run: {why} before it started, so '
            "it had no effect. It is safe to retry."
        )
    return ToolResultData(
        turn=turn,
        step=step,
        message=UserMessage(
            id=new_message_id(),
            content=(ToolResultBlock(block.id, (TextBlock(text),), is_error=True),),
            source=ToolSource(block.id),
        ),
        error=error,
    )


def _answered(events: Sequence[SessionEvent], call_id: str) -> bool:
    """Whether ``events`` hold a ``tool/result`` answering call ``call_id``."""
    for event in events:
        data = event.data
        if data.__class__ is ToolResultData:
            source = data.message.source
            if isinstance(source, ToolSource) and source.call_id == call_id:
                return True
    return False


def answer_calls(
    session: Session,
    agent_id: SessionId,
    turn: int,
    step: int,
    calls: Sequence[ToolCallBlock],
    mark: int,
    exc: BaseException | None,
    signal: CancelSignal,
) -> None:
    """Give every call of the step's message that has no ``tool/result`` one.

    Synchronous; O(events appended since ``mark``). The tool executor answers
    every call, even when cancelled or failing, so this normally appends nothing.
    What it does append stands in for a result the executor could not record
    (``exc`` ended it, or it returned without one): ``TOOL_OUTCOME_UNKNOWN`` if the
    call's ``tool/call`` was written, else ``TOOL_NOT_STARTED``. Then the next
    request's history answers every call. Never raises: if the session refuses
    a result, that is logged and ``exc`` (if any) goes on.
    """
    events = session.events[mark:]
    if len(calls) == 1 and _answered(events, calls[0].id):
        return  # the common case: the one call has its result
    answered: Counter[str] = Counter()
    started: dict[str, list[int]] = {}
    for event in events:
        data = event.data
        if data.__class__ is ToolCallData:
            started.setdefault(data.call_id, []).append(event.seq)
        elif data.__class__ is ToolResultData:
            source = data.message.source
            if isinstance(source, ToolSource):
                answered[source.call_id] += 1
    why: str | None = None
    for block in calls:
        seqs = started.get(block.id)
        call_seq = seqs.pop(0) if seqs else None
        if answered[block.id] > 0:
            answered[block.id] -= 1
            continue
        if why is None:
            why = _unanswered_why(exc, signal)
        try:
            session.append(
                "tool/result",
                _stand_in_result(turn, step, block, call_seq is not None, why),
                surface_op="append",
                source_event_seqs=None if call_seq is None else (call_seq,),
            )
        except Exception:
            logger.warning(
                "agent %s: turn %d step %d: could not record a result for tool call %r",
                agent_id,
                turn,
                step,
                _clip(block.id, 120),
                exc_info=True,
            )
            return
