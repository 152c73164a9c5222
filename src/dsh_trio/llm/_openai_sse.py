"""Response decoding for OpenAI-compatible servers: SSE event payloads → stream chunks.

The provider wire format is parsed here with small explicit readers rather than the
session converter: that converter is strict and camelCase, while OpenAI-compatible
servers differ in which fields they send, send ``null`` for absent ones and add their
own (``reasoning_content``, ``prompt_cache_hit_tokens``). Each reader takes what it
understands and ignores the rest.

:class:`Translator` is on the per-chunk path: it is fed each event's data once and
returns the chunks of that event in one list.
"""

from __future__ import annotations

import json
from typing import Literal

import attrs

from ..errors import LlmError
from ..values import (
    BlockEnd,
    BlockStart,
    ContentBlock,
    Finish,
    FinishReason,
    LlmFailure,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
)
from ._openai_errors import as_str as _str, stream_failure

__all__ = ["Translator"]

_BlockKind = Literal["text", "reasoning", "tool-call"]


@attrs.define
class _OpenBlock:
    index: int
    kind: _BlockKind
    parts: list[str] = attrs.Factory(list)
    call_id: str | None = None
    name: str | None = None

    def block(self) -> ContentBlock:
        text = "".join(self.parts)
        if self.kind == "text":
            return TextBlock(text)
        if self.kind == "reasoning":
            return ReasoningBlock(text)
        return ToolCallBlock(self.call_id or "", self.name or "", text)


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _map_usage(usage: dict[str, object]) -> Usage | None:
    prompt = _int(usage.get("prompt_tokens"))
    completion = _int(usage.get("completion_tokens"))
    if prompt is None and completion is None:
        return None
    prompt_details = usage.get("prompt_tokens_details")
    cached = (
        _int(prompt_details.get("cached_tokens"))
        if isinstance(prompt_details, dict)
        else None
    )
    if cached is None:
        cached = _int(usage.get("prompt_cache_hit_tokens"))  # DeepSeek
    completion_details = usage.get("completion_tokens_details")
    reasoning = (
        _int(completion_details.get("reasoning_tokens"))
        if isinstance(completion_details, dict)
        else None
    )
    # The server's prompt count includes cache hits; dsh counts them apart.
    return Usage(
        input_tokens=max((prompt or 0) - (cached or 0), 0),
        output_tokens=completion or 0,
        cache_read_tokens=cached,
        reasoning_tokens=reasoning,
    )


def _finish_reason(reason: str | None, has_tool_calls: bool) -> FinishReason:
    if reason is None or reason == "stop":
        # Some servers report "stop" for a reply that calls tools.
        return FinishReason("tool-calls" if has_tool_calls else "stop")
    if reason == "length":
        return FinishReason("max-tokens")
    if reason in ("tool_calls", "function_call"):
        return FinishReason("tool-calls")
    code = "CONTENT_FILTER" if reason == "content_filter" else reason.upper()
    return FinishReason("error", LlmFailure(f"model stopped: {reason}", code))


class Translator:
    """Turns SSE payloads of one response into stream chunks.

    Block indexes are dense, in order of first appearance; ``BlockEnd``, usage and
    finish are held back until the stream ends so nothing follows ``Finish``.

    Args:
        secret: the API key, redacted from the provider's in-stream error messages.
    """

    __slots__ = (
        "_blocks",
        "_finish",
        "_last_tool",
        "_reasoning",
        "_secret",
        "_text",
        "_tools",
        "_usage",
        "done",
    )

    def __init__(self, secret: str | None) -> None:
        self._secret = secret
        self._blocks: list[_OpenBlock] = []
        self._text: _OpenBlock | None = None
        self._reasoning: _OpenBlock | None = None
        self._tools: dict[int | str, _OpenBlock] = {}
        self._last_tool: int | str | None = None
        self._finish: str | None = None
        self._usage: Usage | None = None
        self.done = False

    def _open(self, kind: _BlockKind, out: list[StreamChunk]) -> _OpenBlock:
        block = _OpenBlock(len(self._blocks), kind)
        self._blocks.append(block)
        out.append(BlockStart(block.index, kind))
        return block

    def feed(self, payload: str) -> list[StreamChunk]:
        """Translate one event's data; ``[DONE]`` marks the end of the stream."""
        if payload.strip() == "[DONE]":
            self.done = True
            return []
        try:
            obj: object = json.loads(payload)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise LlmError(
                LlmFailure(
                    f"malformed server event: {payload[:120]!r}", "MALFORMED_RESPONSE"
                )
            )
        error = obj.get("error")
        if error:
            raise LlmError(stream_failure(error, self._secret))
        out: list[StreamChunk] = []
        choices = obj.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                # One completion is requested (n=1); other choices are ignored.
                if isinstance(choice, dict) and _int(choice.get("index", 0)) in (
                    0,
                    None,
                ):
                    self._choice(choice, out)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage = _map_usage(usage) or self._usage
        return out

    def _choice(self, choice: dict[str, object], out: list[StreamChunk]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = _str(delta.get("reasoning_content")) or _str(
                delta.get("reasoning")
            )
            if reasoning:
                if self._reasoning is None:
                    self._reasoning = self._open("reasoning", out)
                self._reasoning.parts.append(reasoning)
                out.append(ReasoningDelta(self._reasoning.index, reasoning))
            content = _str(delta.get("content"))
            if content:
                if self._text is None:
                    self._text = self._open("text", out)
                self._text.parts.append(content)
                out.append(TextDelta(self._text.index, content))
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        self._tool_call(call, out)
        reason = _str(choice.get("finish_reason"))
        if reason:
            self._finish = reason

    def _tool_call(self, call: dict[str, object], out: list[StreamChunk]) -> None:
        call_id = _str(call.get("id")) or None
        wire_index = _int(call.get("index"))
        # Servers that omit `index` send the id with each new call and nothing
        # with its continuations.
        key: int | str
        if wire_index is not None:
            key = wire_index
        elif call_id is not None:
            key = call_id
        else:
            key = self._last_tool if self._last_tool is not None else 0
        block = self._tools.get(key)
        first = block is None
        if block is None:
            block = self._tools[key] = self._open("tool-call", out)
        self._last_tool = key
        function = call.get("function")
        name: str | None = None
        arguments: object = None
        if isinstance(function, dict):
            name = _str(function.get("name")) or None
            arguments = function.get("arguments")
        if isinstance(arguments, (dict, list)):
            fragment = json.dumps(arguments)
        else:
            fragment = _str(arguments) or ""
        # `id` and `name` are identity, sent once; an empty or null repeat is no update.
        new_identity = (call_id is not None and call_id != block.call_id) or (
            name is not None and name != block.name
        )
        block.call_id = call_id or block.call_id
        block.name = name or block.name
        if fragment or first or new_identity:
            block.parts.append(fragment)
            out.append(
                ToolCallDelta(block.index, block.call_id or "", block.name, fragment)
            )

    def finish(self) -> list[StreamChunk]:
        """The closing chunks: a ``BlockEnd`` per block, usage, then ``Finish``."""
        if not self.done and self._finish is None:
            raise LlmError(
                LlmFailure(
                    "the server closed the stream before the response completed",
                    "TRANSPORT",
                )
            )
        out: list[StreamChunk] = [BlockEnd(b.index, b.block()) for b in self._blocks]
        if self._usage is not None:
            out.append(self._usage)
        reason = _finish_reason(self._finish, bool(self._tools))
        if reason.kind == "stop" and not self._blocks:
            reason = FinishReason(
                "error",
                LlmFailure(
                    "the model returned a completed response with no content",
                    "EMPTY_RESPONSE",
                ),
            )
        out.append(Finish(reason))
        return out
