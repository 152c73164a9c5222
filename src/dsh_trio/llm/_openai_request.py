"""Request building for OpenAI-compatible servers: dsh messages and tool schemas → chat JSON.

:func:`request_body` is the whole request of one attempt (``stream: true``, usage
included). History mapping: system, user and assistant text; assistant tool calls as
``tool_calls``; tool results (user messages from a :class:`ToolSource`, or
:class:`ToolResultBlock` content) as ``tool`` messages. Reasoning blocks are not sent
back (but see ``reasoning_passback`` below). Images become ``image_url`` parts when
their attachment has a ``url`` or inline ``data`` + ``mediaType``, else a placeholder
text.

Reasoning goes back only where a provider requires it: with ``reasoning_passback``
(DeepSeek's thinking mode), every assistant message that carries tool calls gets its
reasoning as ``reasoning_content``, whichever user turn made it; DeepSeek answers
400 when one is missing. Assistant messages without tool calls never carry it (the
server would ignore it). With ``thinking_switch``, ``ModelRequest.thinking`` becomes
DeepSeek's ``"thinking": {"type": "enabled" | "disabled"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..errors import LlmError
from ..values import (
    AssistantMessage,
    ContentBlock,
    ImageBlock,
    JsonValue,
    LlmFailure,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSource,
    UserMessage,
)
from ._types import ModelRequest

__all__ = ["request_body"]

_EMPTY_TOOL_OUTPUT: Final = "(no output)"
_IMAGE_PLACEHOLDER: Final = "[image omitted]"


def request_body(
    request: ModelRequest,
    *,
    max_tokens_field: str = "max_tokens",
    reasoning_passback: bool = False,
    thinking_switch: bool = False,
) -> dict[str, JsonValue]:
    """The JSON body of one streamed chat completion for ``request``.

    Args:
        request: what to ask.
        max_tokens_field: the body field that carries ``request.max_tokens``.
        reasoning_passback: send ``reasoning_content`` back on every assistant
            message that carries tool calls (DeepSeek thinking mode).
        thinking_switch: send ``request.thinking`` (when not ``None``) as
            ``"thinking": {"type": "enabled" | "disabled"}`` (DeepSeek).

    Raises:
        LlmError: a tool schema has no usable name (``INVALID_REQUEST``).
    """
    body: dict[str, JsonValue] = {
        "model": request.model,
        "messages": _wire_messages(request.messages, reasoning_passback),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            _wire_tool(n, schema) for n, schema in enumerate(request.tools)
        ]
    if request.max_tokens is not None:
        body[max_tokens_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop is not None:
        body["stop"] = list(request.stop)
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
    if thinking_switch and request.thinking is not None:
        body["thinking"] = {"type": "enabled" if request.thinking else "disabled"}
    return body


def _wire_tool(n: int, schema: JsonValue) -> JsonValue:
    name = schema.get("name") if isinstance(schema, dict) else None
    if not isinstance(schema, dict) or not isinstance(name, str) or not name:
        raise LlmError(
            LlmFailure(
                f"tool schema #{n} has no non-empty string 'name'", "INVALID_REQUEST"
            )
        )
    parameters = schema.get("parameters")
    function: dict[str, JsonValue] = {
        "name": name,
        "parameters": parameters
        if isinstance(parameters, dict)
        else {"type": "object", "properties": {}},
    }
    description = schema.get("description")
    if isinstance(description, str):
        function["description"] = description
    return {"type": "function", "function": function}


def _text(blocks: tuple[ContentBlock, ...]) -> str:
    """The text of ``blocks``; tool results contribute their own text."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            parts.append(_text(block.content))
        elif isinstance(block, ImageBlock):
            parts.append(_IMAGE_PLACEHOLDER)
    return "".join(parts)


def _image_url(attachment: JsonValue) -> str | None:
    """A URL for an image attachment: its ``url``, or a data URL of inline base64."""
    if not isinstance(attachment, dict):
        return None
    url = attachment.get("url")
    if isinstance(url, str) and url:
        return url
    data = attachment.get("data")
    media = attachment.get("mediaType", attachment.get("mimeType"))
    if isinstance(data, str) and data and isinstance(media, str) and media:
        return f"data:{media};base64,{data}"
    return None


def _user_content(blocks: Sequence[ContentBlock]) -> JsonValue:
    """String content for text; content parts when the message carries images."""
    if not any(isinstance(b, ImageBlock) for b in blocks):
        return _text(tuple(blocks))
    parts: list[JsonValue] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            if block.text:
                parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            url = _image_url(block.attachment)
            if url is None:
                parts.append({"type": "text", "text": _IMAGE_PLACEHOLDER})
            else:
                parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _tool_message(call_id: str, blocks: tuple[ContentBlock, ...]) -> JsonValue:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "content": _text(blocks) or _EMPTY_TOOL_OUTPUT,
    }


def _wire_messages(
    messages: Sequence[Message], reasoning_passback: bool = False
) -> list[JsonValue]:
    """dsh messages → chat messages (reasoning only as ``reasoning_passback`` says)."""
    wire: list[JsonValue] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            wire.append({"role": "system", "content": _text(message.content)})
        elif isinstance(message, AssistantMessage):
            calls: list[JsonValue] = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {"name": b.name, "arguments": b.arguments},
                }
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            # Text-less assistant turns send "" (never null): some servers refuse null.
            entry: dict[str, JsonValue] = {"role": "assistant", "content": text}
            if calls:
                entry["tool_calls"] = calls
                if reasoning_passback:
                    reasoning = [
                        b.text for b in message.content if isinstance(b, ReasoningBlock)
                    ]
                    if reasoning:
                        entry["reasoning_content"] = "".join(reasoning)
            wire.append(entry)
        else:
            wire.extend(_wire_user(message))
    return wire


def _wire_user(message: UserMessage) -> list[JsonValue]:
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    regular = [b for b in message.content if isinstance(b, (TextBlock, ImageBlock))]
    if isinstance(message.source, ToolSource) and not results:
        return [_tool_message(message.source.call_id, tuple(regular))]
    wire: list[JsonValue] = []
    if regular or not results:
        wire.append({"role": "user", "content": _user_content(regular)})
    wire.extend(_tool_message(r.tool_call_id, r.content) for r in results)
    return wire
