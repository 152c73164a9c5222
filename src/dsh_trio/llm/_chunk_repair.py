"""The repair of what an adapter streams before a session records it.

Text that UTF-8 cannot encode (lone surrogates) in a delta, a block or a failure is
replaced by U+FFFD (:func:`repaired_chunk`), and a :class:`~dsh_trio.values.Usage` count
outside ``0..MAX_SAFE_INTEGER`` is clamped into that range (:func:`clamped_usage`); each
is noted on the ``dsh_trio`` logger. The runtime's model stream applies these to every
chunk that passes it, whatever the adapter.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import attrs

from ..values import (
    MAX_SAFE_INTEGER,
    BlockEnd,
    Finish,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
    utf8_ok,
)
from ._redact import repair_unicode

__all__ = [
    "all_ascii",
    "clamped_usage",
    "repaired_chunk",
    "warn_repaired",
    "warn_usage",
]

_logger = logging.getLogger("dsh_trio")


def _bad(text: object) -> bool:
    """Whether ``text`` is a string UTF-8 cannot encode (other types are left alone)."""
    return isinstance(text, str) and not text.isascii() and not utf8_ok(text)


def all_ascii(first: Any, second: Any, third: Any) -> bool:
    """Whether all three are ASCII ``str`` (so none needs a repair). Hot path."""
    return (
        first.__class__ is str
        and second.__class__ is str
        and third.__class__ is str
        and first.isascii()
        and second.isascii()
        and third.isascii()
    )


def _fix(text: str) -> str:
    return repair_unicode(text) if _bad(text) else text


def repaired_chunk(chunk: StreamChunk) -> StreamChunk | None:
    """``chunk`` with its invalid text repaired, or ``None`` when it needs no repair."""
    # Hot path: a text delta costs one class test and one ``isascii``.
    if isinstance(chunk, (TextDelta, ReasoningDelta)):
        text = chunk.text
        if text.__class__ is not str or text.isascii() or utf8_ok(text):
            return None
        return attrs.evolve(chunk, text=repair_unicode(text))
    if isinstance(chunk, ToolCallDelta):
        if _bad(chunk.id) or _bad(chunk.name) or _bad(chunk.arguments_delta):
            name = chunk.name
            return ToolCallDelta(
                chunk.index,
                _fix(chunk.id),
                None if name is None else _fix(name),
                _fix(chunk.arguments_delta),
            )
    elif isinstance(chunk, BlockEnd):
        block = chunk.block
        if isinstance(block, (TextBlock, ReasoningBlock)):
            if _bad(block.text):
                return BlockEnd(chunk.index, attrs.evolve(block, text=_fix(block.text)))
        elif isinstance(block, ToolCallBlock) and (
            _bad(block.id) or _bad(block.name) or _bad(block.arguments)
        ):
            fixed = ToolCallBlock(
                _fix(block.id), _fix(block.name), _fix(block.arguments)
            )
            return BlockEnd(chunk.index, fixed)
    elif isinstance(chunk, Finish):
        failure = chunk.reason.failure
        if failure is not None and (
            _bad(failure.message) or _bad(failure.code) or _bad(failure.request_id)
        ):
            request_id = failure.request_id
            failure = attrs.evolve(
                failure,
                message=_fix(failure.message),
                code=_fix(failure.code),
                request_id=None if request_id is None else _fix(request_id),
            )
            return attrs.evolve(
                chunk, reason=attrs.evolve(chunk.reason, failure=failure)
            )
    return None


_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def clamped_usage(usage: Usage) -> Usage | None:
    """``usage`` with every count outside ``0..MAX_SAFE_INTEGER`` clamped into it, or
    ``None`` when every count fits (a session records safe integers only)."""
    fixed: dict[str, int] = {}
    for name in _USAGE_FIELDS:
        value = getattr(usage, name)
        if value.__class__ is int and not 0 <= value <= MAX_SAFE_INTEGER:
            fixed[name] = 0 if value < 0 else MAX_SAFE_INTEGER
    return attrs.evolve(usage, **fixed) if fixed else None


def warn_usage(provider: str, got: Usage, kept: Usage) -> None:
    for name in _USAGE_FIELDS:
        before, after = getattr(got, name), getattr(kept, name)
        if before != after:
            # Never str() the value: a huge integer may exceed Python's digit limit.
            size = abs(before)
            digits = math.floor(math.log10(size)) + 1
            if 10 ** (digits - 1) > size:  # log10 rounded up to a power of ten
                digits -= 1
            sign = "negative " if before < 0 else ""
            _logger.warning(
                'the model stream of provider "%s" reported usage %s as a %s%d-digit '
                "number, outside 0..%d; it is recorded as %d",
                provider,
                name,
                sign,
                digits,
                MAX_SAFE_INTEGER,
                after,
            )


def warn_repaired(provider: str, repaired: int) -> None:
    if repaired:
        _logger.warning(
            'the model stream of provider "%s" carried text that is not valid '
            "Unicode; %d chunk(s) were repaired with U+FFFD",
            provider,
            repaired,
        )
