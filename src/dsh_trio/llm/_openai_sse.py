"""Response decoding for OpenAI-compatible servers: SSE event payloads → stream chunks.

The provider wire format is parsed here with small explicit readers rather than the
session converter: that converter is strict and camelCase, while OpenAI-compatible
servers differ in which fields they send, send ``null`` for absent ones and add their
own (``reasoning_content``, ``prompt_cache_hit_tokens``). Each reader takes what it
understands and ignores the rest.

:class:`Translator` is on the per-chunk path: it is fed each event's data once and
returns the chunks of that event in one list. Every string it takes from the server is
made safe on the way in (``_redact``, ``_stream_text``): streamed text through a
:class:`StreamText` per block, identities, finish reasons and the text of a malformed
event through :func:`clean`.
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
from ._redact import Secret, clean, redact, repair_unicode
from ._stream_text import StreamText

__all__ = ["Translator"]

_BlockKind = Literal["text", "reasoning", "tool-call"]

#: How much of a malformed event, or of an unknown finish reason, an error quotes.
_MAX_QUOTED = 120


@attrs.define
class _OpenBlock:
    index: int
    kind: _BlockKind
    text: StreamText
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


def _finish_reason(
    reason: str | None, has_tool_calls: bool, secret: Secret
) -> FinishReason:
    if reason is None or reason == "stop":
        # Some servers report "stop" for a reply that calls tools.
        return FinishReason("tool-calls" if has_tool_calls else "stop")
    if reason == "length":
        return FinishReason("max-tokens")
    if reason in ("tool_calls", "function_call"):
        return FinishReason("tool-calls")
    # Server text: made safe before it is quoted, and before it is upper-cased.
    quoted = clean(reason, secret)[:_MAX_QUOTED]
    code = "CONTENT_FILTER" if reason == "content_filter" else quoted.upper()
    return FinishReason("error", LlmFailure(f"model stopped: {quoted}", code))


def _part_text(value: object) -> str:
    """The text of a reasoning part's value: a string, or a list of text parts."""
    if type(value) is str:
        return value
    if not isinstance(value, list):
        return ""
    pieces: list[str] = []
    for item in value:
        if type(item) is str:
            pieces.append(item)
        elif isinstance(item, dict):
            text = item.get("text")
            if text is None:
                text = item.get("thinking")
            pieces.append(_part_text(text))
    return "".join(pieces)


class Translator:
    """Turns SSE payloads of one response into stream chunks.

    Block indexes are dense, in order of first appearance; ``BlockEnd``, usage and
    finish are held back until the stream ends so nothing follows ``Finish``.
    Text comes from ``content`` (a string, or a list of ``text`` / ``thinking`` /
    ``reasoning`` parts) and ``refusal``; reasoning from ``reasoning_content``,
    ``reasoning`` and the reasoning parts of ``content``. An ``error`` event ends
    the stream: after a finish reason it is ignored (the finish and the usage
    stand), before one it becomes :attr:`failure`.
    Streamed text is shown as :class:`StreamText` lets it through: a tail that might
    still become the API key, or half of a surrogate pair, waits for the next event
    (or the end of the stream). :attr:`repaired` counts the code points that were
    not valid Unicode and were replaced by U+FFFD.

    Args:
        secret: the API key (and the secret values of the adapter's headers),
            redacted from every string the server sends.
    """

    __slots__ = (
        "_blocks",
        "_finish",
        "_last_tool",
        "_reasoning",
        "_repaired_strings",
        "_secret",
        "_text",
        "_tools",
        "_usage",
        "done",
        "failure",
    )

    def __init__(self, secret: Secret) -> None:
        self._secret = secret
        self._blocks: list[_OpenBlock] = []
        self._text: _OpenBlock | None = None
        self._reasoning: _OpenBlock | None = None
        self._tools: dict[int | str, _OpenBlock] = {}
        self._last_tool: int | str | None = None
        self._finish: str | None = None
        self._usage: Usage | None = None
        self.done = False
        #: The error event that ended the stream before any finish reason, if any.
        self.failure: LlmError | None = None
        self._repaired_strings = 0

    @property
    def repaired(self) -> int:
        """How many code points of the server's text were replaced by U+FFFD."""
        return self._repaired_strings + sum(b.text.repaired for b in self._blocks)

    def _clean(self, text: str) -> str:
        fixed = repair_unicode(text)
        if fixed is not text:
            self._repaired_strings += fixed.count("\ufffd") - text.count("\ufffd")
        return redact(fixed, self._secret)

    def _open(self, kind: _BlockKind, out: list[StreamChunk]) -> _OpenBlock:
        block = _OpenBlock(len(self._blocks), kind, StreamText(self._secret))
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
            quoted = clean(payload, self._secret)[:_MAX_QUOTED]
            raise LlmError(
                LlmFailure(f"malformed server event: {quoted!r}", "MALFORMED_RESPONSE")
            )
        out: list[StreamChunk] = []
        finished = self._finish is not None
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
        if usage is None:
            groq = obj.get("x_groq")  # Groq reports usage inside its own object
            if isinstance(groq, dict):
                usage = groq.get("usage")
        if isinstance(usage, dict):
            self._usage = _map_usage(usage) or self._usage
        error = obj.get("error")
        if error:
            # Read after the choices and usage of the same event, so both are kept.
            # A finish that already arrived decides the outcome: a server that
            # reports "length" and then an error about the limit it hit has ended
            # the response, and its error is no failure of the attempt.
            self.done = True
            if not finished:
                self.failure = LlmError(stream_failure(error, self._secret))
        return out

    @property
    def usage(self) -> Usage | None:
        """The latest usage the server reported, from any event."""
        return self._usage

    def _show_text(self, content: str, out: list[StreamChunk]) -> None:
        block = self._text
        if block is None:
            block = self._text = self._open("text", out)
        shown = block.text.push(content)
        if shown:
            block.parts.append(shown)
            out.append(TextDelta(block.index, shown))

    def _show_reasoning(self, reasoning: str, out: list[StreamChunk]) -> None:
        block = self._reasoning
        if block is None:
            block = self._reasoning = self._open("reasoning", out)
        shown = block.text.push(reasoning)
        if shown:
            block.parts.append(shown)
            out.append(ReasoningDelta(block.index, shown))

    def _choice(self, choice: dict[str, object], out: list[StreamChunk]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content")
            if not reasoning:
                reasoning = delta.get("reasoning")  # OpenRouter, Groq, vLLM
            if reasoning and type(reasoning) is str:
                self._show_reasoning(reasoning, out)
            content = delta.get("content")
            if content:
                if type(content) is str:
                    self._show_text(content, out)
                elif isinstance(content, list):
                    self._content_parts(content, out)
            # OpenAI sends a refusal in place of content; it is the reply's text.
            refusal = delta.get("refusal")
            if refusal and type(refusal) is str:
                self._show_text(refusal, out)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        self._tool_call(call, out)
        reason = _str(choice.get("finish_reason"))
        if reason and self._finish is None:
            # The first finish stands: OpenRouter marks a later error chunk "error".
            self._finish = reason

    def _content_parts(self, parts: list[object], out: list[StreamChunk]) -> None:
        """``content`` as a list of parts (Mistral's magistral models stream this).

        ``text`` and ``refusal`` parts are text; ``thinking`` and ``reasoning``
        parts are reasoning, their value a string or a list of text parts.
        """
        for part in parts:
            if type(part) is str:
                if part:
                    self._show_text(part, out)
                continue
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind in ("thinking", "reasoning"):
                value = part.get(kind)
                if value is None:
                    value = part.get("text")
                thought = _part_text(value)
                if thought:
                    self._show_reasoning(thought, out)
            elif kind in ("text", "refusal", None):
                text = _str(part.get("text")) or _str(part.get("refusal"))
                if text:
                    self._show_text(text, out)

    def _tool_call(self, call: dict[str, object], out: list[StreamChunk]) -> None:
        raw_id = _str(call.get("id"))
        call_id = self._clean(raw_id) if raw_id else None
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
            raw_name = _str(function.get("name"))
            name = self._clean(raw_name) if raw_name else None
            arguments = function.get("arguments")
        if isinstance(arguments, (dict, list)):
            raw = json.dumps(arguments)
        else:
            raw = _str(arguments) or ""
        fragment = block.text.push(raw) if raw else ""
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
        out: list[StreamChunk] = []
        for block in self._blocks:
            # What was held back (a possible key prefix, half a surrogate pair) is
            # decided now and shown before the block ends.
            rest = block.text.flush()
            if not rest:
                continue
            block.parts.append(rest)
            if block.kind == "text":
                out.append(TextDelta(block.index, rest))
            elif block.kind == "reasoning":
                out.append(ReasoningDelta(block.index, rest))
            else:
                out.append(
                    ToolCallDelta(block.index, block.call_id or "", block.name, rest)
                )
        out.extend(BlockEnd(b.index, b.block()) for b in self._blocks)
        if self._usage is not None:
            out.append(self._usage)
        reason = _finish_reason(self._finish, bool(self._tools), self._secret)
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
