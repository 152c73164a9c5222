"""The session events of one tool call: its ``tool/call`` and its ``tool/result``.

Both are built and appended here for the scheduler. An event whose every part is
known to pass the session's shape check is built from those parts as they are and
appended without the second check; any other goes through the checked append.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..loop import new_message_id
from ..values import (
    MAX_SAFE_INTEGER,
    SessionEvent,
    ToolCallBlock,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
    builder,
    utf8_ok,
)
from ._outcome import Outcome

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["append_call", "append_result", "loggable"]

# Built for each call from checked parts (see ``values.builder``).
_tool_call = builder(ToolCallData)
_tool_result = builder(ToolResultData)
_user_message = builder(UserMessage)
_result_block = builder(ToolResultBlock)
_tool_source = builder(ToolSource)


def loggable(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (as is, if it has none)."""
    if utf8_ok(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def append_call(
    session: Session, turn: int, step: int, block: ToolCallBlock
) -> SessionEvent:
    """Append the ``tool/call`` of ``block``.

    A lone surrogate cannot be logged; such a call is refused (INVALID_ARGS,
    UNKNOWN_TOOL) and recorded with U+FFFD in its place.
    """
    call_id, name, arguments = block.id, block.name, block.arguments
    if (
        turn.__class__ is int
        and step.__class__ is int
        and 0 <= turn <= MAX_SAFE_INTEGER
        and 0 <= step <= MAX_SAFE_INTEGER
        and call_id.__class__ is str
        and call_id.isascii()
        and name.__class__ is str
        and arguments.__class__ is str
    ):
        # Every field is a safe int or a loggable str: the shape check would
        # find nothing.
        return session.append_trusted(
            "tool/call",
            _tool_call(
                turn,
                step,
                call_id,
                name if name.isascii() else loggable(name),
                arguments if arguments.isascii() else loggable(arguments),
            ),
        )
    return session.append(
        "tool/call",
        ToolCallData(
            turn=turn,
            step=step,
            call_id=call_id,
            name=loggable(name),
            arguments=loggable(arguments),
        ),
    )


def append_result(
    session: Session,
    turn: int,
    step: int,
    call_id: str,
    call_seq: int,
    outcome: Outcome,
    trusted: bool,
) -> None:
    """Append the ``tool/result`` of call ``call_id`` (its ``tool/call`` is ``call_seq``).

    ``trusted``: the outcome is ``checked`` with no ``error``, the turn and step are
    safe ints and ``call_seq`` an earlier seq, so the shape check would find nothing
    (the block passed ``check_typed`` when the body's value settled, ``meta`` is
    None, the message id is a fresh one).
    """
    if trusted:
        session.append_trusted(
            "tool/result",
            _tool_result(
                turn,
                step,
                _user_message(
                    new_message_id(),
                    (_result_block(call_id, outcome.content, outcome.is_error),),
                    _tool_source(call_id),
                ),
                None,
                None,
            ),
            surface_op="append",
            source_event_seqs=(call_seq,),
        )
        return
    session.append(
        "tool/result",
        ToolResultData(
            turn=turn,
            step=step,
            message=UserMessage(
                id=new_message_id(),
                content=(
                    ToolResultBlock(
                        call_id, outcome.content, is_error=outcome.is_error
                    ),
                ),
                source=ToolSource(call_id),
            ),
            error=outcome.error,
            meta=outcome.meta,
        ),
        surface_op="append",
        source_event_seqs=(call_seq,),
    )
