"""Content blocks, message sources and messages."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import attrs

from ._ids import JsonValue, MessageId, new_message_id

# --------------------------------------------------------------------------- blocks


@attrs.frozen(weakref_slot=False)
class TextBlock:
    """Visible text."""

    TAG: ClassVar[str] = "text"
    text: str


@attrs.frozen(weakref_slot=False)
class ReasoningBlock:
    """Model reasoning text."""

    TAG: ClassVar[str] = "reasoning"
    text: str


@attrs.frozen(weakref_slot=False)
class ImageBlock:
    """An image attachment; ``attachment`` is JSON describing it (kept verbatim)."""

    TAG: ClassVar[str] = "image"
    attachment: JsonValue = attrs.field(hash=False)


@attrs.frozen(weakref_slot=False)
class ToolCallBlock:
    """A tool call as the model wrote it; ``arguments`` is raw JSON text, unparsed."""

    TAG: ClassVar[str] = "tool-call"
    id: str
    name: str
    arguments: str


@attrs.frozen(weakref_slot=False)
class ToolResultBlock:
    """The result of one tool call."""

    TAG: ClassVar[str] = "tool-result"
    tool_call_id: str
    content: tuple[ContentBlock, ...]
    is_error: bool = False


ContentBlock: TypeAlias = (
    TextBlock | ReasoningBlock | ImageBlock | ToolCallBlock | ToolResultBlock
)

# --------------------------------------------------------------------------- sources


@attrs.frozen(weakref_slot=False)
class UserSource:
    """The message came from the user."""

    TAG: ClassVar[str] = "user"


@attrs.frozen(weakref_slot=False)
class ContextSection:
    """One named part of a runtime-context snapshot (``{"name", "text"}`` on disk)."""

    name: str
    text: str


@attrs.frozen(weakref_slot=False)
class PluginSource:
    """The message came from a plugin (``form`` names its role, e.g. ``"snapshot"``).

    A runtime-context snapshot carries its parts in ``sections``.
    """

    TAG: ClassVar[str] = "plugin"
    plugin: str
    form: str | None = None
    sections: tuple[ContextSection, ...] | None = None
    summary: str | None = None


@attrs.frozen(weakref_slot=False)
class ModelSource:
    """The message came from a model."""

    TAG: ClassVar[str] = "model"
    provider: str
    model: str
    replay_state: JsonValue = attrs.field(default=None, hash=False)


@attrs.frozen(weakref_slot=False)
class ToolSource:
    """The message carries the result of tool call ``call_id``."""

    TAG: ClassVar[str] = "tool"
    call_id: str


MessageSource: TypeAlias = UserSource | PluginSource | ModelSource | ToolSource

#: The plugin id the system-prompt projection stamps on what it writes.
SYSTEM_PROMPT_PLUGIN = "@deepseek-ai/dsh-system-prompt"

# --------------------------------------------------------------------------- messages


@attrs.frozen(weakref_slot=False)
class UserMessage:
    """A user-role message: caller input, injected context or a tool result."""

    ROLE: ClassVar[str] = "user"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = UserSource()


@attrs.frozen(weakref_slot=False)
class AssistantMessage:
    """A model's reply."""

    ROLE: ClassVar[str] = "assistant"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: ModelSource


@attrs.frozen(weakref_slot=False)
class SystemMessage:
    """A system prompt node."""

    ROLE: ClassVar[str] = "system"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = PluginSource(SYSTEM_PROMPT_PLUGIN)


Message: TypeAlias = UserMessage | AssistantMessage | SystemMessage

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
