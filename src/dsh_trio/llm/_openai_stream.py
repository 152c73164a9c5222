"""One attempt of an :class:`~dsh_trio.llm.OpenAICompatibleAdapter`, on the wire.

:class:`Endpoint` is where and how an adapter's requests go: the client, the URL, the
headers, the two deadlines of an attempt, the request-body switches, and the secrets
redacted from everything that comes back (and, through its log guard, from the HTTP
stack's own log records for as long as it lives). :meth:`Endpoint.stream` is one
attempt: the POST, the SSE framing of the response body, the deadlines, and the one
exit every failure passes. The adapter returns that generator as it is, so reading a
chunk resumes no frame of the adapter's own.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

import attrs
import httpx  # noqa: ASYNC127  # the public contract takes an httpx.AsyncClient
import trio

from ..errors import LlmError
from ..values import LlmFailure, StreamChunk
from ._deepseek import check_deepseek_model
from ._log_guard import LogGuard
from ._openai_errors import adapter_failure, http_error, scrub_exception
from ._openai_request import request_body
from ._openai_sse import Translator
from ._redact import Secret
from ._types import ModelRequest

__all__ = ["Endpoint"]

_DRAIN_SECONDS: Final = 1.0

_logger = logging.getLogger("dsh_trio")


@attrs.frozen(eq=False, repr=False)
class Endpoint:
    """Where and how one adapter's attempts are sent; built once by the adapter.

    No repr of its own: the headers carry the API key.
    """

    #: The API root, without a trailing ``/`` (DeepSeek's retired models are refused
    #: when it is DeepSeek's).
    base_url: str
    #: ``{base_url}/chat/completions``, and the same with its secrets shown as ``***``.
    url: str
    shown_url: str
    client: httpx.AsyncClient
    timeout: httpx.Timeout
    headers: httpx.Headers
    #: What is redacted from everything the server or the transport sends.
    secret: Secret
    #: The most one attempt may take (``math.inf`` for no limit), and the longest wait
    #: for the next line of the body (``None`` for no limit), in seconds.
    request_timeout: float
    idle_timeout: float | None
    max_tokens_field: str
    reasoning_passback: bool
    thinking_switch: bool
    #: Redacts the secrets from the HTTP stack's log records while the endpoint lives.
    log_guard: LogGuard | None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """One attempt of ``request``: what :meth:`OpenAICompatibleAdapter.stream` yields."""
        check_deepseek_model(self.base_url, request.model)
        body = request_body(
            request,
            max_tokens_field=self.max_tokens_field,
            reasoning_passback=self.reasoning_passback,
            thinking_switch=self.thinking_switch,
        )
        await trio.lowlevel.checkpoint()
        secret = self.secret
        translator = Translator(secret)
        idle = self.idle_timeout
        deadline = trio.current_time() + self.request_timeout
        failed: LlmError | None = None
        try:
            # The response stays open across the yields below; the consumer closes
            # this generator, which closes the response (ASYNC119). No cancel scope
            # is held across a yield: each wait gets its own deadline.
            async with contextlib.AsyncExitStack() as stack:
                with trio.move_on_at(deadline) as opening:
                    response = await stack.enter_async_context(
                        self.client.stream(
                            "POST",
                            self.url,
                            json=body,
                            headers=self.headers,
                            timeout=self.timeout,
                        )
                    )
                    if not response.is_success:
                        await response.aread()
                if opening.cancelled_caught:
                    raise LlmError(self._overdue())
                if not response.is_success:
                    raise http_error(
                        response,
                        self.shown_url,
                        secret,
                        reasoning_passback=self.reasoning_passback,
                    )
                lines = response.aiter_lines()
                failure: LlmError | None = None
                try:
                    # SSE framing stays inline: this loop is the per-chunk path, and a
                    # helper generator would add a frame to every chunk.
                    pending: list[str] = []
                    ended = False
                    while True:
                        limit = deadline
                        if idle is not None:
                            limit = min(limit, trio.current_time() + idle)
                        with trio.move_on_at(limit) as waiting:
                            line = await anext(lines, None)
                        if waiting.cancelled_caught:
                            failure = LlmError(
                                self._overdue() if limit == deadline else self._idle()
                            )
                            break
                        if line is None:
                            ended = True
                            break
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
                    if ended and pending:
                        # Some servers end the last event without its blank line.
                        await trio.lowlevel.checkpoint()
                        for chunk in translator.feed("\n".join(pending)):
                            yield chunk  # noqa: ASYNC119, ASYNC911
                    if failure is None or failure.failure.code != "TIMEOUT":
                        # Read the end of the body (normally just the chunked-encoding
                        # terminator) before the closing chunks: consumers stop at
                        # Finish, and a response read to its end lets the connection
                        # be reused. A server that keeps it open costs the bound.
                        drain = min(deadline, trio.current_time() + _DRAIN_SECONDS)
                        with trio.move_on_at(drain):
                            await _read_rest(lines)
                    if failure is None:
                        failure = translator.failure
                    if failure is not None:
                        # Usage the server reported before failing is still spent.
                        usage = translator.usage
                        if usage is not None:
                            yield usage  # noqa: ASYNC119, ASYNC911
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
        except Exception as exc:
            # Whatever its type (a transport error, a custom transport's or a proxy
            # library's exception, a bug), its text is redacted here, the one exit.
            failed = adapter_failure(exc, self.shown_url, secret)
            if failed is exc:
                raise
        except (
            BaseException
        ) as exc:  # Cancelled, GeneratorExit...: as they are, scrubbed
            scrub_exception(exc, secret)
            raise
        finally:
            if translator.repaired:
                _logger.warning(
                    "the stream from %s carried %d code point(s) that are not valid "
                    "Unicode (lone surrogates); they were replaced by U+FFFD",
                    self.shown_url,
                    translator.repaired,
                )
        if failed is not None:
            # Raised here, outside the handler, so the original exception is not
            # its hidden context: it is the cause only when it renders without the key.
            raise failed
        return  # noqa: ASYNC911  # only after the response's `async with` exited (a checkpoint)

    def _overdue(self) -> LlmFailure:
        return LlmFailure(
            f"the request to {self.shown_url} took longer than "
            f"request_timeout_s={self.request_timeout:g}",
            "TIMEOUT",
        )

    def _idle(self) -> LlmFailure:
        return LlmFailure(
            f"the stream from {self.shown_url} sent nothing for "
            f"idle_timeout_s={self.idle_timeout:g} seconds",
            "TIMEOUT",
        )


async def _read_rest(lines: AsyncIterator[str]) -> None:  # noqa: ASYNC910  # private: the scheduler around it checkpoints
    """Consume what is left of a response body; transport errors no longer matter."""
    try:
        async for _ in lines:
            pass
    except (httpx.HTTPError, httpx.StreamError):
        pass
