"""What one tool call settles to, before the scheduler commits it.

An :class:`Outcome` is built from whatever a body returned or raised
(:func:`invoke`), or for a call that never ran a body (unknown tool, invalid
arguments, aborted or skipped). Turning a body's exceptions and return values into
outcomes is all that happens here; ordering and logging are the scheduler's.
"""

from __future__ import annotations

import logging

import attrs

from ..errors import AgentCancelled
from ..values import (
    ContentBlock,
    DataShapeError,
    JsonValue,
    TextBlock,
    ToolErrorInfo,
    ToolResultBlock,
    UserMessage,
    builder,
    check_json,
    check_typed,
    utf8_ok,
)
from ._specs import clip
from ._tool import Tool, ToolContext, ToolResult, _to_content

__all__ = [
    "Outcome",
    "aborted",
    "crashed",
    "error_outcome",
    "invoke",
    "raised",
    "skipped",
]

_logger = logging.getLogger("dsh_trio")

_ABORTED_TEXT = "Error: tool call aborted"
_SKIPPED_TEXT = "Error: tool call aborted before dispatch"
_ABORTED_INFO = ToolErrorInfo("AbortError", "ABORTED")
_text_block = builder(TextBlock)
_SKIPPED_INFO = ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH")


@attrs.frozen(weakref_slot=False)
class Outcome:
    """A settled call, before it is committed."""

    content: tuple[ContentBlock, ...]
    is_error: bool
    error: ToolErrorInfo | None = None
    meta: JsonValue = attrs.field(default=None, hash=False)
    contexts: tuple[UserMessage, ...] = ()
    concluded: bool = False
    # The result block this outcome makes for its call passed ``check_typed`` and
    # ``meta`` is ``None``: the session's shape check of the result would find
    # nothing (see ``_append_result``).
    checked: bool = attrs.field(default=False, eq=False)


# Built for each plain result from checked parts (see ``values.builder``).
_outcome = builder(Outcome)


def _valid(text: str) -> str:
    """``text`` with what UTF-8 cannot encode (a lone surrogate) replaced by U+FFFD."""
    if text.isascii() or utf8_ok(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def error_outcome(
    text: str, info: ToolErrorInfo | None, contexts: tuple[UserMessage, ...] = ()
) -> Outcome:
    """An error result with ``text`` as its content.

    ``text`` and ``info`` come from an exception's message, class name and
    ``code``: text UTF-8 cannot encode (a lone surrogate, say from bytes decoded
    with ``surrogateescape``) is replaced by U+FFFD, with a warning on the
    ``dsh_trio`` logger, so the result can be recorded and the turn goes on.
    """
    repaired = False
    if not (text.isascii() or utf8_ok(text)):
        text, repaired = _valid(text), True
    if info is not None and not (utf8_ok(info.name) and utf8_ok(info.code)):
        info, repaired = ToolErrorInfo(_valid(info.name), _valid(info.code)), True
    if repaired:
        _logger.warning(
            "a tool call's error held text that UTF-8 cannot encode (a lone "
            "surrogate); it is recorded with U+FFFD in its place"
        )
    return Outcome(
        content=(TextBlock(text),), is_error=True, error=info, contexts=contexts
    )


def aborted(contexts: tuple[UserMessage, ...]) -> Outcome:
    """The result of a started call that the turn's cancellation interrupted."""
    return error_outcome(_ABORTED_TEXT, _ABORTED_INFO, contexts)


def skipped() -> Outcome:
    """The result of a call that never started because the turn was cancelled."""
    return error_outcome(_SKIPPED_TEXT, _SKIPPED_INFO)


def _failure(exc: Exception, contexts: tuple[UserMessage, ...]) -> Outcome:
    code = getattr(exc, "code", None)
    text = str(exc) or type(exc).__name__
    return error_outcome(
        f"Error: {text}",
        ToolErrorInfo(
            type(exc).__name__, code if isinstance(code, str) and code else "TOOL_ERROR"
        ),
        contexts,
    )


def crashed(
    name: str, exc: BaseException, contexts: tuple[UserMessage, ...]
) -> Outcome:
    """The result of a call to tool ``name`` whose body escaped with ``exc``.

    ``exc`` is not an ``Exception`` (those are results, see :func:`invoke`) and it
    still propagates, ending the turn; this is what the history keeps, so the call
    is not left without a result.
    """
    why = str(exc)
    return error_outcome(
        f"Error: tool {name!r} was stopped by {type(exc).__name__}"
        + (f": {clip(why, 300)}" if why else "")
        + "; the turn ended",
        ToolErrorInfo(type(exc).__name__, "TOOL_ERROR"),
        contexts,
    )


def _invalid_output(tool: Tool, why: str, contexts: tuple[UserMessage, ...]) -> Outcome:
    return error_outcome(
        f"Error: tool {tool.name!r} returned an invalid result: {why}",
        ToolErrorInfo("ToolOutputError", "INVALID_TOOL_OUTPUT"),
        contexts,
    )


def _settle(tool: Tool, ctx: ToolContext, value: object) -> Outcome:
    """Turn what a body returned into an outcome (invalid output → an error outcome)."""
    call_id = ctx.call_id
    if (
        type(value) is str
        and value.isascii()
        and call_id.__class__ is str
        and call_id.isascii()
    ):
        # Plain ASCII text (the common return): its block passes the check of
        # ``_settle_checked`` (ASCII strs are loggable), so it is built without it.
        return _outcome(
            (_text_block(value),),
            False,
            None,
            None,
            tuple(ctx._deferred),
            ctx._concluded,
            True,
        )
    return _settle_checked(tool, ctx, value)


def _settle_plain(call_id: str, value: object) -> Outcome | None:
    """The outcome of plain ASCII text returned by a body given no context.

    What :func:`_settle` makes of it with the body's (untouched) context: no
    deferred contexts, not concluded. ``None`` for any other value: :func:`_settle`
    decides those.
    """
    if (
        type(value) is str
        and value.isascii()
        and call_id.__class__ is str
        and call_id.isascii()
    ):
        return _outcome((_text_block(value),), False, None, None, (), False, True)
    return None


def _settle_checked(tool: Tool, ctx: ToolContext, value: object) -> Outcome:
    """:func:`_settle` for any value: its result block is checked before use."""
    contexts = ctx.deferred
    meta: JsonValue = None
    is_error = False
    try:
        if isinstance(value, ToolResult):
            content, is_error = value.content, value.is_error
            if type(is_error) is not bool:
                raise TypeError(f"ToolResult.is_error must be a bool, got {is_error!r}")
            meta = check_json(value.meta, "meta")
        else:
            content = _to_content(value)  # type: ignore[arg-type]
        check_typed(ToolResultBlock, ToolResultBlock(ctx.call_id, content, is_error))
    except TypeError as exc:
        return _invalid_output(tool, clip(str(exc), 300), contexts)
    except DataShapeError as exc:
        return _invalid_output(tool, clip(exc.describe("result"), 300), contexts)
    except Exception as exc:  # e.g. RecursionError from a too-deep meta: a result still
        return _invalid_output(
            tool, f"{type(exc).__name__}: {clip(str(exc), 300)}", contexts
        )
    return Outcome(
        content=content,
        is_error=is_error,
        meta=meta,
        contexts=contexts,
        concluded=ctx.concludes_turn and not is_error,
        checked=meta is None,
    )


def raised(ctx: ToolContext, exc: Exception) -> Outcome:
    """The outcome of a body that raised ``exc``: a failing body is a result, not a crash.

    An :class:`AgentCancelled` raised while the turn is cancelled is an abort.
    """
    if isinstance(exc, AgentCancelled) and ctx.signal.cancelled:
        return aborted(ctx.deferred)
    return _failure(exc, ctx.deferred)


async def invoke(tool: Tool, ctx: ToolContext, kwargs: dict[str, object]) -> Outcome:
    """Run the body of one call; every ``Exception`` it raises becomes an error outcome."""
    try:
        if tool._takes_context:
            value = await tool.fn(ctx, **kwargs)
        else:
            value = await tool.fn(**kwargs)
    except Exception as exc:
        return raised(ctx, exc)  # noqa: ASYNC910  # private: the scheduler around it checkpoints
    return _settle(tool, ctx, value)
