"""Fresh message ids, and the user messages that take one.

An id is uuid4 text. The ids are made in batches from one read of ``os.urandom`` and
kept in a process-wide pool until handed out; that pool is the only state here, and
it lives with the code that makes messages (the agent loop, the tools, the presets),
not among the values.
"""

from __future__ import annotations

import os
from typing import Any, Final

from ..values import (
    ContentBlock,
    ImageBlock,
    MessageId,
    MessageSource,
    ModelSource,
    PluginSource,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSource,
    UserMessage,
    UserSource,
)

__all__ = ["new_message_id", "user_message"]

_urandom = os.urandom
#: How many ids one read of ``os.urandom`` makes.
_BATCH: Final = 64
_SIZE: Final = 16 * _BATCH


def _every_id(mask: int) -> int:
    """``mask`` (the 128 bits of one uuid) repeated for every id of a batch."""
    return int.from_bytes(mask.to_bytes(16, "big") * _BATCH, "big")


#: A uuid4 keeps every random bit but the version nibble (set to 4) and the two high
#: bits of the variant (set to ``10``, RFC 4122): for the whole batch at once.
_KEEP: Final = _every_id(~((0xF000 << 64) | (0xC000 << 48)) & ((1 << 128) - 1))
_SET: Final = _every_id((0x4000 << 64) | (0x8000 << 48))
#: Where each of the five dash-separated groups of every id lies in the batch's hex.
_GROUPS: Final = tuple(
    tuple(slice(k + a, k + b) for k in range(0, 2 * _SIZE, 32))
    for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
)
_join = "-".join
#: Ids made and not yet handed out. ``list.pop`` hands each out once, whichever
#: thread asks; a forked child starts with none, so it never repeats its parent's.
_unused: list[MessageId] = []
os.register_at_fork(after_in_child=_unused.clear)


def _made() -> list[MessageId]:
    """``_BATCH`` fresh ids from one read of ``os.urandom``.

    The version and variant bits of all of them are set in one integer operation
    and the dashes put in by ``map`` (no Python code runs per id).
    """
    bits = int.from_bytes(_urandom(_SIZE), "big") & _KEEP | _SET
    cut = bits.to_bytes(_SIZE, "big").hex().__getitem__
    g1, g2, g3, g4, g5 = _GROUPS
    ids: list[Any] = list(
        map(
            _join,
            zip(
                map(cut, g1),
                map(cut, g2),
                map(cut, g3),
                map(cut, g4),
                map(cut, g5),
                strict=True,
            ),
        )
    )
    return ids


def new_message_id() -> MessageId:
    """Return a fresh random message id (uuid4 text).

    The same text as ``str(uuid.uuid4())`` (16 bytes of ``os.urandom``, version and
    variant bits set), built from the hex digits without a :class:`uuid.UUID`: a
    turn makes several, so the bytes of ``_BATCH`` ids are read at once.
    """
    try:
        return _unused.pop()
    except IndexError:
        made = _made()
        _unused.extend(made[1:])
        return made[0]


_USER = UserSource()  # shared: a frozen value with no fields
_BLOCK_TYPES = (TextBlock, ReasoningBlock, ImageBlock, ToolCallBlock, ToolResultBlock)
_SOURCE_TYPES = (UserSource, PluginSource, ModelSource, ToolSource)


def user_message(
    text_or_blocks: str | ContentBlock | tuple[ContentBlock, ...] | list[ContentBlock],
    *,
    source: MessageSource | None = None,
    id: str | None = None,
) -> UserMessage:
    """Build a :class:`UserMessage` with a fresh id.

    Example::

        >>> m = user_message("hello")
        >>> m.content
        (TextBlock(text='hello'),)

    Args:
        text_or_blocks: plain text (one text block), one block, or a sequence of blocks.
        source: where the message comes from; :class:`UserSource` by default.
        id: an explicit message id; a uuid4 by default.

    Raises:
        TypeError: ``text_or_blocks`` is none of these (``None``, say), a sequence
            holds something that is not a content block, ``source`` is not a
            message source or ``id`` is not a string.
    """
    raw: object = text_or_blocks  # callers may pass anything at runtime
    if isinstance(raw, str):
        content: tuple[ContentBlock, ...] = (TextBlock(raw),)
    elif isinstance(raw, (tuple, list)):
        content = tuple(raw)
        for i, block in enumerate(content):
            if not isinstance(block, _BLOCK_TYPES):
                raise TypeError(
                    f"user_message() content[{i}] must be a content block "
                    f"(TextBlock, ImageBlock, ...), got {type(block).__name__} {block!r}"
                )
    elif isinstance(raw, _BLOCK_TYPES):
        content = (raw,)
    else:
        raise TypeError(
            "user_message() takes text, a content block or a sequence of content "
            f"blocks, got {type(raw).__name__} {raw!r}"
        )
    raw_source: object = source
    if raw_source is not None and not isinstance(raw_source, _SOURCE_TYPES):
        raise TypeError(
            "user_message() source must be a message source (UserSource(), "
            f"PluginSource(...), ...), got {type(raw_source).__name__} {raw_source!r}"
        )
    raw_id: object = id
    if raw_id is not None and not isinstance(raw_id, str):
        raise TypeError(
            f"user_message() id must be a str, got {type(raw_id).__name__} {raw_id!r}"
        )
    return UserMessage(
        id=MessageId(id) if id is not None else new_message_id(),
        content=content,
        source=source if source is not None else _USER,
    )
