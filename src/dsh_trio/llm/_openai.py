"""A model adapter for OpenAI-compatible chat-completions servers (SSE streaming).

One adapter call is one provider attempt: the request is POSTed to
``{base_url}/chat/completions`` with ``stream: true``, and the server-sent events are
translated into dsh_trio stream chunks as they arrive. Failures become
:class:`~dsh_trio.errors.LlmError` with the reference's failure codes; retrying is the
runtime's business, never the adapter's.

The provider wire format is parsed here with small explicit readers rather than the
session converter: that converter is strict and camelCase, while OpenAI-compatible
servers differ in which fields they send, send ``null`` for absent ones and add
their own (``reasoning_content``, ``prompt_cache_hit_tokens``). Each reader takes what
it understands and ignores the rest.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Final, Literal, Self

import attrs
import httpx  # noqa: ASYNC127  # the public contract takes an httpx.AsyncClient
import trio

from ..errors import LlmError
from ..values import (
    AssistantMessage,
    BlockEnd,
    BlockStart,
    ContentBlock,
    Finish,
    FinishReason,
    ImageBlock,
    JsonValue,
    LlmFailure,
    Message,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    SystemMessage,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolResultBlock,
    ToolSource,
    Usage,
    UserMessage,
)
from ._types import ModelRequest

__all__ = ["OpenAICompatibleAdapter"]

_DEFAULT_TIMEOUT: Final = httpx.Timeout(60.0, connect=10.0)
_REDACTED: Final = "***"
_DRAIN_SECONDS: Final = 1.0
_MAX_ERROR_TEXT: Final = 500
_EMPTY_TOOL_OUTPUT: Final = "(no output)"
_IMAGE_PLACEHOLDER: Final = "[image omitted]"

#: Lower-case fragments of provider messages that mean "the prompt is too long".
_CONTEXT_OVERFLOW_HINTS: Final = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
    "input is too long",
)

_BlockKind = Literal["text", "reasoning", "tool-call"]


@attrs.define(eq=False, init=False, repr=False)
class OpenAICompatibleAdapter:
    """Streams chat completions from an OpenAI-compatible server.

    Works with DeepSeek, OpenAI, vLLM, llama.cpp, Ollama and other servers that speak
    ``POST /chat/completions`` with server-sent events. Text, reasoning
    (``reasoning_content`` or ``reasoning``) and tool-call deltas, usage and finish
    reasons are mapped to :data:`~dsh_trio.llm.StreamChunk` values. A completed
    response with no block at all ends with ``Finish`` error ``EMPTY_RESPONSE``; a
    ``stop`` that comes with tool calls is reported as ``tool-calls``.

    History mapping: system, user and assistant text; assistant tool calls as
    ``tool_calls``; tool results (user messages from a :class:`ToolSource`, or
    :class:`ToolResultBlock` content) as ``tool`` messages. Reasoning blocks are not
    sent back. Images become ``image_url`` parts when their attachment has a
    ``url`` or inline ``data`` + ``mediaType``, else a placeholder text.

    The API key is sent only in the ``Authorization`` header; it never appears in
    this object's repr or in the messages of the errors it raises.

    Without ``client``, the adapter owns an ``httpx.AsyncClient``; close it with
    :meth:`aclose` or use the adapter as an async context manager. An injected
    client is used as is and never closed by the adapter. ``timeout`` applies to
    every request, also through an injected client.

    Example::

        async with OpenAICompatibleAdapter(
            "https://api.deepseek.com", api_key=os.environ["DEEPSEEK_API_KEY"]
        ) as deepseek:
            async with open_runtime(models={"deepseek": deepseek}) as runtime:
                ...

    Args:
        base_url: the API root, e.g. ``"https://api.openai.com/v1"``;
            ``/chat/completions`` is appended.
        api_key: the bearer token, if the server needs one.
        client: an ``httpx.AsyncClient`` to send requests with (tests pass one built
            on ``httpx.MockTransport``).
        timeout: the httpx timeout of each request.
        default_headers: extra headers sent with every request.

    Raises:
        ValueError: ``base_url`` is empty or ``api_key`` is an empty string.
    """

    _base_url: str
    _url: str
    _api_key: str | None
    _client: httpx.AsyncClient
    _owns_client: bool
    _timeout: httpx.Timeout
    _headers: httpx.Headers

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = _DEFAULT_TIMEOUT,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        raw_url: object = base_url  # callers may pass anything at runtime
        raw_key: object = api_key
        if not isinstance(raw_url, str) or not raw_url.strip():
            raise ValueError(
                f"OpenAICompatibleAdapter base_url must be a non-empty URL, got {base_url!r}"
            )
        if raw_key is not None and (not isinstance(raw_key, str) or not raw_key):
            # The value itself is never echoed: it may be a secret.
            raise ValueError("OpenAICompatibleAdapter api_key must be a non-empty str")
        headers = httpx.Headers(default_headers or {})
        headers.setdefault("accept", "text/event-stream")
        if api_key is not None:
            headers["authorization"] = f"Bearer {api_key}"
        http_timeout = (
            timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        )
        base = base_url.rstrip("/")
        self.__attrs_init__(
            base,
            f"{base}/chat/completions",
            api_key,
            client if client is not None else httpx.AsyncClient(timeout=http_timeout),
            client is None,
            http_timeout,
            headers,
        )

    def __repr__(self) -> str:
        key = _REDACTED if self._api_key is not None else None
        return f"OpenAICompatibleAdapter(base_url={self._base_url!r}, api_key={key!r})"

    async def aclose(self) -> None:
        """Close the adapter's own HTTP client (an injected client stays open).

        Idempotent. Always checkpoints.
        """
        if self._owns_client:
            await self._client.aclose()
        else:
            await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Stream one chat completion for ``request``.

        Yields block starts and deltas as the server sends them, then a ``BlockEnd``
        for every block, ``Usage`` (when the server reported it) and one ``Finish``.
        Checkpoints once per server event, so cancellation takes effect between
        events; cancelling closes the HTTP response. Close the iterator (for
        instance with ``contextlib.aclosing``) if you stop early.

        Raises:
            LlmError: the request could not be built (``INVALID_REQUEST``), the
                server answered with an HTTP error (``AUTH``, ``RATE_LIMIT``,
                ``QUOTA``, ``CONTEXT_WINDOW_EXCEEDED``, ``INVALID_REQUEST``,
                ``SERVER``), the connection failed or timed out (``TRANSPORT``,
                ``TIMEOUT``), or the stream was malformed (``MALFORMED_RESPONSE``)
                or cut short (``TRANSPORT``).
        """
        body = _request_body(request)
        await trio.lowlevel.checkpoint()
        translator = _Translator(self._redact)
        try:
            # The response stays open across the yields below; the consumer closes
            # this generator, which closes the response (ASYNC119).
            async with self._client.stream(
                "POST",
                self._url,
                json=body,
                headers=self._headers,
                timeout=self._timeout,
            ) as response:
                if not response.is_success:
                    await response.aread()
                    raise self._http_error(response)
                lines = response.aiter_lines()
                failure: LlmError | None = None
                try:
                    pending: list[str] = []
                    async for line in lines:
                        if line.startswith("data:"):
                            pending.append(
                                line[6:] if line.startswith("data: ") else line[5:]
                            )
                            continue
                        if line or not pending:
                            continue  # a comment, another SSE field, or a keep-alive
                        payload = "\n".join(pending)
                        pending.clear()
                        await trio.lowlevel.checkpoint()
                        try:
                            out = translator.feed(payload)
                        except LlmError as exc:
                            failure = exc
                            break
                        for chunk in out:
                            yield chunk  # noqa: ASYNC119, ASYNC911
                        if translator.done:
                            break
                    else:
                        if pending:
                            # Some servers end the last event without its blank line.
                            await trio.lowlevel.checkpoint()
                            for chunk in translator.feed("\n".join(pending)):
                                yield chunk  # noqa: ASYNC119, ASYNC911
                    # Read the end of the body (normally just the chunked-encoding
                    # terminator) before the closing chunks: consumers stop at
                    # Finish, and a response read to its end lets the connection
                    # be reused. A server that keeps it open costs the bound.
                    with trio.move_on_after(_DRAIN_SECONDS):
                        await _read_rest(lines)
                    if failure is not None:
                        raise failure
                    for chunk in translator.finish():
                        yield chunk  # noqa: ASYNC119, ASYNC911
                finally:
                    # httpx's body iterators are async generators; one left
                    # suspended (cancellation, an error, the consumer closing this
                    # stream) is finalized later by trio with a ResourceWarning.
                    # Finish them now: what is already buffered is read, and the
                    # first real wait raises Cancelled inside them. Never blocks.
                    with trio.move_on_after(0, shield=True):
                        await _read_rest(lines)
        except httpx.TimeoutException as exc:
            raise LlmError(
                LlmFailure(
                    f"request to {self._url} timed out ({type(exc).__name__})",
                    "TIMEOUT",
                )
            ) from exc
        except httpx.UnsupportedProtocol as exc:
            raise LlmError(
                LlmFailure(
                    f"cannot send to {self._url}: {self._redact(str(exc))}",
                    "INVALID_REQUEST",
                )
            ) from exc
        except httpx.RequestError as exc:
            detail = self._redact(str(exc)) or type(exc).__name__
            raise LlmError(
                LlmFailure(
                    f"transport error talking to {self._url}: {detail}", "TRANSPORT"
                )
            ) from exc

    # ------------------------------------------------------------------ failures

    def _redact(self, text: str) -> str:
        if self._api_key is not None and self._api_key in text:
            text = text.replace(self._api_key, _REDACTED)
        return text

    def _http_error(self, response: httpx.Response) -> LlmError:
        status = response.status_code
        message, provider_code = _error_details(response)
        message = self._redact(message)
        if len(message) > _MAX_ERROR_TEXT:
            message = message[:_MAX_ERROR_TEXT] + "..."
        lowered = f"{message} {provider_code or ''}".lower()
        if status in (401, 403):
            code = "AUTH"
        elif status == 402 or "insufficient_quota" in lowered:
            code = "QUOTA"
        elif status == 429:
            code = "RATE_LIMIT"
        elif status == 408:
            code = "TIMEOUT"
        elif status in (400, 413, 422) and any(
            h in lowered for h in _CONTEXT_OVERFLOW_HINTS
        ):
            code = "CONTEXT_WINDOW_EXCEEDED"
        elif 400 <= status < 500:
            code = "INVALID_REQUEST"
        elif status >= 500:
            code = "SERVER"
        else:
            code = "UNKNOWN"
        return LlmError(
            LlmFailure(
                f"HTTP {status} from {self._url}: {message}",
                code,
                status=status if 100 <= status <= 599 else None,
                retry_after_ms=_retry_after_ms(response.headers),
                request_id=response.headers.get("x-request-id"),
            )
        )


async def _read_rest(lines: AsyncIterator[str]) -> None:  # noqa: ASYNC910  # private: the scheduler around it checkpoints
    """Consume what is left of a response body; transport errors no longer matter."""
    try:
        async for _ in lines:
            pass
    except (httpx.HTTPError, httpx.StreamError):
        pass


def _error_details(response: httpx.Response) -> tuple[str, str | None]:
    """The provider's error message and code (``error.code`` or ``error.type``)."""
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        text = ""
    try:
        obj: object = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            message = _str(err.get("message")) or _str(err.get("detail"))
            code = _str(err.get("code")) or _str(err.get("type"))
            if message:
                return message, code
        elif isinstance(err, str) and err:
            return err, None
    return text.strip() or response.reason_phrase or "no details", None


def _retry_after_ms(headers: httpx.Headers) -> int | float | None:
    """``retry-after-ms``, else ``retry-after`` in seconds; HTTP dates are ignored."""
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return int(value) if value.is_integer() else value
    return None


# ----------------------------------------------------------------------- request


def _request_body(request: ModelRequest) -> dict[str, JsonValue]:
    body: dict[str, JsonValue] = {
        "model": request.model,
        "messages": _wire_messages(request.messages),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            _wire_tool(n, schema) for n, schema in enumerate(request.tools)
        ]
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.stop is not None:
        body["stop"] = list(request.stop)
    if request.reasoning_effort is not None:
        body["reasoning_effort"] = request.reasoning_effort
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


def _wire_messages(messages: Sequence[Message]) -> list[JsonValue]:
    """dsh messages → chat messages (reasoning blocks are not sent back)."""
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


# ---------------------------------------------------------------------- response


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


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


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


class _Translator:
    """Turns SSE payloads of one response into stream chunks.

    Block indexes are dense, in order of first appearance; ``BlockEnd``, usage and
    finish are held back until the stream ends so nothing follows ``Finish``.
    """

    __slots__ = (
        "_blocks",
        "_finish",
        "_last_tool",
        "_reasoning",
        "_redact",
        "_text",
        "_tools",
        "_usage",
        "done",
    )

    def __init__(self, redact: Callable[[str], str]) -> None:
        self._redact = redact
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
            raise LlmError(_stream_failure(error, self._redact))
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


def _stream_failure(error: object, redact: Callable[[str], str]) -> LlmFailure:
    """An error event inside a 200 stream (vLLM, OpenRouter and others send these)."""
    message: str | None = None
    code: str | None = None
    if isinstance(error, dict):
        message = _str(error.get("message"))
        code = _str(error.get("code")) or _str(error.get("type"))
    elif isinstance(error, str):
        message = error
    text = redact(message or "the server reported an error in the stream")
    lowered = f"{text} {code or ''}".lower()
    if any(h in lowered for h in _CONTEXT_OVERFLOW_HINTS):
        return LlmFailure(text[:_MAX_ERROR_TEXT], "CONTEXT_WINDOW_EXCEEDED")
    return LlmFailure(text[:_MAX_ERROR_TEXT], "SERVER")
