"""Content blocks, message sources and messages."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import attrs

from ._ids import JsonValue, MessageId, new_message_id

# --------------------------------------------------------------------------- blocks


@attrs.frozen
class TextBlock:
    """Visible text."""

    TAG: ClassVar[str] = "text"
    text: str


@attrs.frozen
class ReasoningBlock:
    """Model reasoning text."""

    TAG: ClassVar[str] = "reasoning"
    text: str


@attrs.frozen
class ImageBlock:
    """An image attachment; ``attachment`` is JSON describing it (kept verbatim)."""

    TAG: ClassVar[str] = "image"
    attachment: JsonValue = attrs.field(hash=False)


@attrs.frozen
class ToolCallBlock:
    """A tool call as the model wrote it; ``arguments`` is raw JSON text, unparsed."""

    TAG: ClassVar[str] = "tool-call"
    id: str
    name: str
    arguments: str


@attrs.frozen
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


@attrs.frozen
class UserSource:
    """The message came from the user."""

    TAG: ClassVar[str] = "user"


@attrs.frozen
class PluginSource:
    """The message came from a plugin (``form`` names its role, e.g. ``"snapshot"``)."""

    TAG: ClassVar[str] = "plugin"
    plugin: str
    form: str | None = None
    sections: tuple[str, ...] | None = None
    summary: str | None = None


@attrs.frozen
class ModelSource:
    """The message came from a model."""

    TAG: ClassVar[str] = "model"
    provider: str
    model: str
    replay_state: JsonValue = attrs.field(default=None, hash=False)


@attrs.frozen
class ToolSource:
    """The message carries the result of tool call ``call_id``."""

    TAG: ClassVar[str] = "tool"
    call_id: str


MessageSource: TypeAlias = UserSource | PluginSource | ModelSource | ToolSource

#: The plugin id the system-prompt projection stamps on what it writes.
SYSTEM_PROMPT_PLUGIN = "@deepseek-ai/dsh-system-prompt"

# --------------------------------------------------------------------------- messages


@attrs.frozen
class UserMessage:
    """A user-role message: caller input, injected context or a tool result."""

    ROLE: ClassVar[str] = "user"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = UserSource()


@attrs.frozen
class AssistantMessage:
    """A model's reply."""

    ROLE: ClassVar[str] = "assistant"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: ModelSource


@attrs.frozen
class SystemMessage:
    """A system prompt node."""

    ROLE: ClassVar[str] = "system"
    id: MessageId
    content: tuple[ContentBlock, ...]
    source: MessageSource = PluginSource(SYSTEM_PROMPT_PLUGIN)


Message: TypeAlias = UserMessage | AssistantMessage | SystemMessage


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
    """
    if isinstance(text_or_blocks, str):
        content: tuple[ContentBlock, ...] = (TextBlock(text_or_blocks),)
    elif isinstance(text_or_blocks, (tuple, list)):
        content = tuple(text_or_blocks)
    else:
        content = (text_or_blocks,)
    return UserMessage(
        id=MessageId(id) if id is not None else new_message_id(),
        content=content,
        source=source if source is not None else UserSource(),
    )
