"""A model adapter for OpenAI-compatible chat-completions servers (SSE streaming).

One adapter call is one provider attempt: the request is POSTed to
``{base_url}/chat/completions`` with ``stream: true``, and the server-sent events are
translated into dsh_trio stream chunks as they arrive. Failures become
:class:`~dsh_trio.errors.LlmError` with the reference's failure codes; retrying is the
runtime's business, never the adapter's.

This module holds the adapter: its arguments, the client it may own, and its
documentation. An attempt on the wire (the POST, the SSE framing, the deadlines) is
``_openai_stream``'s :class:`Endpoint`; the request body is built in
``_openai_request``, event payloads become chunks in ``_openai_sse``, and failures are
classified in ``_openai_errors``; every string the server sends is made safe (API key
redacted, invalid Unicode repaired) by ``_redact`` on its way in, and every exception
that leaves :meth:`OpenAICompatibleAdapter.stream` passes ``adapter_failure`` there.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Mapping
from types import TracebackType
from typing import Final, Self

import attrs
import httpx  # noqa: ASYNC127  # the public contract takes an httpx.AsyncClient
import trio

from ..values import StreamChunk
from ._deepseek import is_deepseek_url
from ._log_guard import guard_logs
from ._openai_errors import REDACTED
from ._openai_stream import Endpoint
from ._redact import (
    header_secrets,
    secrets_of,
    shown_url,
    url_password,
)
from ._types import ModelRequest

__all__ = ["OpenAICompatibleAdapter"]

_DEFAULT_TIMEOUT: Final = httpx.Timeout(60.0, connect=10.0)
_DEFAULT_REQUEST_TIMEOUT_S: Final = 600.0
_DEFAULT_IDLE_TIMEOUT_S: Final = 300.0


def _seconds(name: str, value: object) -> float | None:
    """A timeout keyword: a positive finite number of seconds, or ``None`` (off)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(
            f"OpenAICompatibleAdapter {name} must be a positive number of seconds "
            f"or None, got {value!r}"
        )
    return float(value)


@attrs.define(eq=False, init=False, repr=False)
class OpenAICompatibleAdapter:
    """Streams chat completions from an OpenAI-compatible server.

    Works with DeepSeek, OpenAI, vLLM, llama.cpp, Ollama and other servers that speak
    ``POST /chat/completions`` with server-sent events. Text, reasoning
    (``reasoning_content`` or ``reasoning``) and tool-call deltas, usage and finish
    reasons are mapped to :data:`~dsh_trio.llm.StreamChunk` values. ``content``
    may also be a list of parts: ``text`` parts are text, ``thinking`` and
    ``reasoning`` parts (Mistral's magistral models) are reasoning. A ``refusal``
    (OpenAI) is the reply's text, so a refused request ends the step with the
    refusal and is not retried. A completed response with no block at all ends
    with ``Finish`` error ``EMPTY_RESPONSE``; a ``stop`` that comes with tool calls
    is reported as ``tool-calls``.

    An ``error`` event inside the stream is classified like an HTTP status (its
    ``code``/``status`` number, or its ``type``: ``invalid_request_error`` is
    ``INVALID_REQUEST``, not retried). An error event after a finish reason does
    not fail the attempt: a stream that reports ``length``, then an error about
    the limit and the usage, ends ``max-tokens`` with the usage kept. Usage the
    server reported is yielded before any failure is raised.

    History mapping: system, user and assistant text; assistant tool calls as
    ``tool_calls``; tool results (user messages from a :class:`ToolSource`, or
    :class:`ToolResultBlock` content) as ``tool`` messages. Reasoning blocks are
    sent back only with ``reasoning_passback`` (below). Images become
    ``image_url`` parts when their attachment has a ``url`` or inline ``data`` +
    ``mediaType``, else a placeholder text.

    DeepSeek (its API documentation as of late 2026): the models are
    ``deepseek-flash`` (served by DeepSeek-V4.1-Flash), ``deepseek-v4-pro``, and
    ``deepseek-v4-flash``, the older name still served by V4.1 Flash. Thinking is on
    by default (effort ``high``). ``ModelRequest.thinking`` (from
    ``AgentOptions.thinking``) switches it: ``True`` sends ``"thinking": {"type":
    "enabled"}``, ``False`` sends ``{"type": "disabled"}``, ``None`` sends nothing
    and leaves DeepSeek's default (``thinking_switch``, below, says which servers get
    the field). ``reasoning_effort`` is passed through as given; DeepSeek knows
    ``low``, ``high`` and ``max`` and maps the others: ``minimal`` and ``low`` to
    ``low``, ``medium``, ``high`` and ``xhigh`` to ``high``, ``max`` and ``ultra``
    to ``max``. In thinking mode DeepSeek ignores ``temperature``,
    ``presence_penalty`` and ``frequency_penalty``. An assistant message that made
    tool calls must carry its ``reasoning_content`` in every later request, or
    DeepSeek answers 400 ("The reasoning_content in the thinking mode must be
    passed back to the API"); that is what ``reasoning_passback`` does. The retired
    names ``deepseek-chat`` and ``deepseek-reasoner`` (aliases of V4 Flash with
    thinking off and on, retired on 2026-07-24) are refused on DeepSeek's API before
    anything is sent: :meth:`stream` raises ``LlmError`` ``INVALID_REQUEST`` naming
    the replacement, ``deepseek-flash`` with thinking off or on. Other base URLs
    (a proxy, vLLM) get whatever model name they are asked for.

    Providers whose stream shapes are replayed in the tests
    (``tests/llm/fixtures/``), and their quirks:

    ============  ====================================================================
    DeepSeek      ``reasoning_content`` deltas; usage in a last chunk with empty
                  ``choices`` (``prompt_cache_hit_tokens``); thinking mode needs the
                  reasoning of tool calls passed back (``reasoning_passback``, on
                  by default); ``thinking`` switch (``thinking_switch``)
    OpenAI        ``refusal`` deltas; ``max_completion_tokens`` for newer models
                  (``max_tokens_field``); usage chunk with ``choices: []``
    OpenRouter    ``reasoning`` deltas; ``: OPENROUTER PROCESSING`` comments; error
                  events after a ``length`` finish
    Groq          ``reasoning`` deltas; usage under ``x_groq``; ``invalid_request_error``
                  error events in a 200 stream
    Mistral       ``content`` as a list of ``thinking`` / ``text`` parts (magistral)
    ============  ====================================================================

    The API key is sent only in the ``Authorization`` header; it never appears in
    this object's repr. Every string the server or the transport supplies (error
    messages and codes, ``x-request-id``, the reason phrase, finish reasons, the
    text of a malformed event, streamed text and tool calls) has the key redacted
    before it reaches an error, a chunk, the log or the session; a key shorter than
    8 characters is redacted only where it stands as a whole token, and a key cut
    off at the end of a string (8 characters of its start or more: a server that
    truncates what it echoes) is redacted too. Streamed text is the model's output,
    and it is redacted as well: a model that repeats the key it was shown must not
    store it (the cost, one character test per event, is paid only with a key).
    Any exception that ends a stream, whatever its type (an ``httpx`` error, a
    custom transport's or a proxy library's exception, a bug), leaves as an
    :class:`~dsh_trio.errors.LlmError` with its text redacted (``UNKNOWN`` for
    one that is not an ``httpx`` or dsh_trio error); the original is kept as the
    cause only when it renders without the key. URLs in messages and the repr
    show the key and a ``user:password@`` password as ``***``. While the adapter
    lives, a filter on the ``httpx``, ``httpcore`` and ``hpack`` loggers (added
    once, levels left alone) redacts the key and the URL's password from their
    records, which quote URLs, reason phrases and headers. The values of
    ``default_headers`` whose names look secret (``X-Api-Key``, ``Authorization``,
    ``Cookie``, a name with ``key``, ``token``, ``secret``, ``auth``, ``passw``,
    ``credential`` or ``signature`` in it) are redacted everywhere the key is, and
    so are the credentials after their scheme (``Bearer ...``) and a cookie's
    values; values shorter than 4 characters are not taken for secrets.

    Streamed text that is not valid Unicode (a lone surrogate such as
    ``"\\ud800"``) is repaired with U+FFFD, and a surrogate pair split across two
    events is joined; a repair is logged as a warning on the ``dsh_trio`` logger.

    Without ``client``, the adapter owns an ``httpx.AsyncClient``; close it with
    :meth:`aclose` or use the adapter as an async context manager. An injected
    client is used as is and never closed by the adapter. ``timeout`` applies to
    every request, also through an injected client.

    The adapter bounds each attempt with two deadlines of its own, whatever the
    transport: ``request_timeout_s`` from sending the request to the end of the
    response (a server that trickles keep-alives or streams without end is
    stopped), and ``idle_timeout_s`` for each line of the response body once the
    headers arrived. Either ends the attempt with an ``LlmError`` of code
    ``TIMEOUT``, which the default retry policy retries.

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
        default_headers: extra headers sent with every request; secret-looking
            values are redacted as the key is (above).
        request_timeout_s: the most one attempt may take, in seconds, from sending
            the request to the end of the response (default 600, ten minutes);
            ``None`` for no limit.
        idle_timeout_s: the longest wait for the next line of a streaming response,
            in seconds (default 300); ``None`` for no limit.
        max_tokens_field: the request field that carries ``max_tokens``
            (``"max_completion_tokens"`` for OpenAI's newer models, which refuse
            ``max_tokens``).
        reasoning_passback: send the assistant's reasoning back as
            ``reasoning_content`` on every assistant message that carries tool
            calls, in all later requests (across user turns, resumes and forks), as
            DeepSeek's thinking mode requires; assistant messages without tool
            calls never carry it. ``None`` (the default) turns it on for DeepSeek's
            own API (a ``*.deepseek.com`` URL) only; pass ``True`` for a proxy in
            front of DeepSeek. Servers that refuse unknown message fields (Groq,
            Mistral) need it off. When a server answers 400 about a missing
            ``reasoning_content``, the failure's message names this option.
        thinking_switch: send ``ModelRequest.thinking`` as DeepSeek's
            ``"thinking": {"type": "enabled" | "disabled"}`` field. ``None`` (the
            default) turns it on for DeepSeek's own API only; pass ``True`` for a
            proxy in front of DeepSeek. Off, ``thinking`` is ignored (no other
            server is known to take that field).

    Raises:
        ValueError: ``base_url`` is empty, ``api_key`` is an empty string, a
            timeout is not a positive number of seconds (or ``None``),
            ``max_tokens_field`` is not a non-empty string, or
            ``reasoning_passback`` or ``thinking_switch`` is not a bool or
            ``None``.
    """

    _endpoint: Endpoint
    _api_key: str | None
    _owns_client: bool

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float = _DEFAULT_TIMEOUT,
        default_headers: Mapping[str, str] | None = None,
        request_timeout_s: float | None = _DEFAULT_REQUEST_TIMEOUT_S,
        idle_timeout_s: float | None = _DEFAULT_IDLE_TIMEOUT_S,
        max_tokens_field: str = "max_tokens",
        reasoning_passback: bool | None = None,
        thinking_switch: bool | None = None,
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
        raw_field: object = max_tokens_field
        if not isinstance(raw_field, str) or not raw_field.strip():
            raise ValueError(
                "OpenAICompatibleAdapter max_tokens_field must be a non-empty field "
                f"name such as 'max_completion_tokens', got {max_tokens_field!r}"
            )
        switches: tuple[tuple[str, object], ...] = (
            ("reasoning_passback", reasoning_passback),
            ("thinking_switch", thinking_switch),
        )
        for name, raw in switches:
            if raw is not None and not isinstance(raw, bool):
                raise ValueError(
                    f"OpenAICompatibleAdapter {name} must be True, False or "
                    f"None (decided by the server), got {raw!r}"
                )
        request_timeout = _seconds("request_timeout_s", request_timeout_s)
        idle_timeout = _seconds("idle_timeout_s", idle_timeout_s)
        headers = httpx.Headers(default_headers or {})
        headers.setdefault("accept", "text/event-stream")
        if api_key is not None:
            headers["authorization"] = f"Bearer {api_key}"
        http_timeout = (
            timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        )
        base = base_url.rstrip("/")
        deepseek = is_deepseek_url(base)
        if reasoning_passback is None:
            reasoning_passback = deepseek
        if thinking_switch is None:
            thinking_switch = deepseek
        url = f"{base}/chat/completions"
        # Everything redacted from what leaves the adapter: the key, and the
        # secret-looking values of the headers given (a key sent as X-Api-Key).
        secret = secrets_of(api_key, *header_secrets(default_headers or {}))
        endpoint = Endpoint(
            base,
            url,
            shown_url(url, secret),
            client if client is not None else httpx.AsyncClient(timeout=http_timeout),
            http_timeout,
            headers,
            secret,
            math.inf if request_timeout is None else request_timeout,
            idle_timeout,
            max_tokens_field,
            reasoning_passback,
            thinking_switch,
            # httpx logs every request's URL and reason phrase: the secrets, and
            # a password in base_url, are redacted there while this adapter (or a
            # stream of it) lives.
            guard_logs(
                *(secret if isinstance(secret, tuple) else (secret,)),
                url_password(base),
            ),
        )
        self.__attrs_init__(endpoint, api_key, client is None)

    def __repr__(self) -> str:
        key = REDACTED if self._api_key is not None else None
        endpoint = self._endpoint
        shown = shown_url(endpoint.base_url, endpoint.secret)
        return f"OpenAICompatibleAdapter(base_url={shown!r}, api_key={key!r})"

    async def aclose(self) -> None:
        """Close the adapter's own HTTP client (an injected client stays open).

        Idempotent. Always checkpoints.
        """
        if self._owns_client:
            await self._endpoint.client.aclose()
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

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Stream one chat completion for ``request``.

        Yields block starts and deltas as the server sends them, then a ``BlockEnd``
        for every block, ``Usage`` (when the server reported it) and one ``Finish``.
        Checkpoints once per server event, so cancellation takes effect between
        events; cancelling closes the HTTP response. Close the iterator (for
        instance with ``contextlib.aclosing``) if you stop early.

        Raises:
            LlmError: the request could not be built, or names a model DeepSeek
                retired while ``base_url`` is DeepSeek's (``INVALID_REQUEST``,
                before anything is sent), the server answered with an HTTP error (``AUTH``, ``RATE_LIMIT``,
                ``QUOTA``, ``CONTEXT_WINDOW_EXCEEDED``, ``INVALID_REQUEST``,
                ``SERVER``), the connection failed or timed out (``TRANSPORT``,
                ``TIMEOUT``; also when ``request_timeout_s`` or ``idle_timeout_s``
                ran out), or the stream was malformed (``MALFORMED_RESPONSE``) or
                cut short (``TRANSPORT``); any other exception (a custom
                transport's) is ``UNKNOWN``, its text redacted.
        """
        return self._endpoint.stream(request)
