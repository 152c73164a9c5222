"""The shape rules of the reference format that annotations cannot say.

``attrs`` annotations give each field a type; the reference format adds a few rules
on top: a message id is never empty, a tool result answers the call its source names,
a ``True``-or-absent flag is never ``False``, a run of stream chunks has one time gap
fewer than members, and so on. :data:`RULES` maps a class to its extra check, which
the generated checker of :mod:`dsh_trio.values._checks` calls after the field checks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from ._chunks import ReasoningChunksRecord, TextChunksRecord, ToolCallChunksRecord
from ._content import (
    AssistantMessage,
    SystemMessage,
    ToolResultBlock,
    ToolSource,
    UserMessage,
)
from ._event_data import (
    AdapterDefaults,
    AssistantMessageData,
    EndSeed,
    EpochHeader,
    RequestHeaderData,
    ToolResultData,
)
from ._json import MAX_SAFE_INTEGER, DataShapeError

__all__ = ["RULES", "run_times_ok"]


def _tname(value: object) -> str:
    return type(value).__name__


def _true_or_absent(value: object, field: str) -> None:
    if getattr(value, field) is False:
        raise DataShapeError("must be True or None (false is written by omission)").at(
            f".{field}"
        )


def _message_id(value: Any) -> None:
    if not value.id:
        raise DataShapeError("must be a non-empty message id").at(".id")


def _class(value: object) -> type[Any]:
    """The class of ``value``, or the attrs class a typed-check struct mirrors
    (see :mod:`._typed_lines`), so a rule treats both alike."""
    cls = value.__class__
    mirrored: type[Any] = getattr(cls, "MIRRORS", cls)
    return mirrored


def _tool_result(value: ToolResultData) -> None:
    message = value.message
    source: Any = message.source  # an attrs value or a typed-check struct
    if _class(source) is not ToolSource:
        raise DataShapeError(
            f"must be a ToolSource naming the call, got {_tname(source)}"
        ).at(".message.source")
    call_id = source.call_id
    if not message.content:
        raise DataShapeError("must hold the call's result block").at(".message.content")
    blocks: tuple[Any, ...] = message.content
    for i, block in enumerate(blocks):
        if _class(block) is not ToolResultBlock:
            raise DataShapeError(f"must be a ToolResultBlock, got {_tname(block)}").at(
                f".message.content[{i}]"
            )
        if block.tool_call_id != call_id:
            raise DataShapeError(
                f"must name the call {call_id!r} of the message source, "
                f"got {block.tool_call_id!r}"
            ).at(f".message.content[{i}].tool_call_id")


def _assistant_data(value: AssistantMessageData) -> None:
    _true_or_absent(value, "interrupted")


def _end_seed(value: EndSeed) -> None:
    _true_or_absent(value, "inherited")


def _request_header(value: RequestHeaderData) -> None:
    _true_or_absent(value, "starts_series")


def _epoch_header(value: EpochHeader) -> None:
    config = value.config
    if not config.provider:
        raise DataShapeError("must be a non-empty provider").at(".config.provider")
    if not config.model:
        raise DataShapeError("must be a non-empty model").at(".config.model")
    if value.tools is not None and not value.tools:
        raise DataShapeError("must be omitted (None) when empty").at(".tools")
    defaults = value.adapter_defaults
    if defaults is not None:
        _adapter_defaults(defaults)


def _adapter_defaults(value: AdapterDefaults) -> None:
    try:
        _true_or_absent(value, "reasoning_effort")
        _true_or_absent(value, "max_tokens")
    except DataShapeError as exc:
        raise exc.at(".adapter_defaults") from None
    if value.reasoning_effort is None and value.max_tokens is None:
        raise DataShapeError("must be omitted (None) when no marker is set").at(
            ".adapter_defaults"
        )


def run_times_ok(time0: int, dt: tuple[int, ...]) -> int | None:
    """Return the index of the first member whose time leaves the safe range, or None."""
    times = list(itertools.accumulate(dt, initial=time0))
    if min(times) >= -MAX_SAFE_INTEGER and max(times) <= MAX_SAFE_INTEGER:
        return None
    return next(
        k for k, t in enumerate(times) if not -MAX_SAFE_INTEGER <= t <= MAX_SAFE_INTEGER
    )


def _run(time0: int, dt: tuple[int, ...], members: tuple[str, ...], name: str) -> None:
    if not members:
        raise DataShapeError("must not be empty").at(name)
    if len(dt) != len(members) - 1:
        raise DataShapeError(
            f"must have one entry fewer than the members ({len(members) - 1}), "
            f"got {len(dt)}"
        ).at(".dt")
    bad = run_times_ok(time0, dt)
    if bad is not None:
        raise DataShapeError(
            f"puts member {bad}'s time outside the safe integer range"
        ).at(".dt")


def _text_run(value: TextChunksRecord | ReasoningChunksRecord) -> None:
    _run(value.time0, value.dt, value.texts, ".texts")


def _tool_run(value: ToolCallChunksRecord) -> None:
    if not value.id:
        raise DataShapeError("must be a non-empty call id").at(".id")
    if value.name == "":
        raise DataShapeError("must be non-empty when present").at(".name")
    _run(value.time0, value.dt, value.args, ".args")


#: Class → the extra check its generated checker runs after the field checks.
RULES: dict[type[Any], Callable[[Any], None]] = {
    UserMessage: _message_id,
    AssistantMessage: _message_id,
    SystemMessage: _message_id,
    ToolResultData: _tool_result,
    AssistantMessageData: _assistant_data,
    EndSeed: _end_seed,
    RequestHeaderData: _request_header,
    EpochHeader: _epoch_header,
    TextChunksRecord: _text_run,
    ReasoningChunksRecord: _text_run,
    ToolCallChunksRecord: _tool_run,
}
