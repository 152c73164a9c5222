"""Content blocks, message sources and messages."""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import attrs

from ._ids import JsonValue, MessageId

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
