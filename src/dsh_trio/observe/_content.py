"""Message content as the conventions record it (``include_content=True`` only)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..llm import redact_live_secrets
from ..values import (
    AssistantMessage,
    Finish,
    ImageBlock,
    Message,
    ReasoningBlock,
    SystemMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSource,
)
from ._names import FINISH_WORDS, INPUT_MESSAGES, OUTPUT_MESSAGES

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["chat_content", "result_text"]


def chat_content(
    session: Session, message: AssistantMessage | None, finish: Finish | None
) -> dict[str, str]:
    """``gen_ai.input.messages`` (the history the attempt was sent) and
    ``gen_ai.output.messages`` (its reply), as JSON text with the secrets redacted."""
    history = list(session.derive_messages())
    if message is not None and history and history[-1] is message:
        history.pop()  # the reply itself, just appended
    sent = [{"role": _role(m), "parts": _parts(m.content)} for m in history]
    content = {INPUT_MESSAGES: redact_live_secrets(_json(sent))}
    if message is not None:
        reason = "stop"
        if finish is not None:
            kind = finish.reason.kind
            reason = FINISH_WORDS.get(kind, (kind,))[0]
        reply = [
            {
                "role": "assistant",
                "parts": _parts(message.content),
                "finish_reason": reason,
            }
        ]
        content[OUTPUT_MESSAGES] = redact_live_secrets(_json(reply))
    return content


def result_text(message: Message) -> str:
    """The text a tool result message carries (its result blocks' text)."""
    return "".join(
        _text(block.content)
        for block in message.content
        if isinstance(block, ToolResultBlock)
    )


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(blocks: Iterable[object]) -> str:
    return "".join(b.text for b in blocks if isinstance(b, TextBlock))


def _parts(blocks: Iterable[object]) -> list[dict[str, Any]]:
    """Content blocks as the conventions' message parts."""
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ReasoningBlock):
            parts.append({"type": "reasoning", "content": block.text})
        elif isinstance(block, ToolCallBlock):
            try:
                arguments: object = json.loads(block.arguments)
            except ValueError:
                arguments = block.arguments
            parts.append(
                {
                    "type": "tool_call",
                    "id": block.id,
                    "name": block.name,
                    "arguments": arguments,
                }
            )
        elif isinstance(block, ToolResultBlock):
            parts.append(
                {
                    "type": "tool_call_response",
                    "id": block.tool_call_id,
                    "response": _text(block.content),
                }
            )
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image"})  # the attachment itself is not recorded
    return parts


def _role(message: Message) -> str:
    if isinstance(message, AssistantMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message.source, ToolSource):
        return "tool"
    return "user"
