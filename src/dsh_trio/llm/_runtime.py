"""Run one adapter stream, turning adapter failures into a terminal finish chunk."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

import trio

from ..errors import LlmError
from ..values import Finish, FinishKind, FinishReason, LlmFailure, StreamChunk
from ._types import ModelAdapter, ModelRequest

__all__ = ["error_chain", "failure_of", "stream_model"]

_logger = logging.getLogger("dsh_trio")

#: How long closing an adapter's stream may take (it runs shielded from cancellation).
_CLOSE_TIMEOUT_S = 5.0


def _render(exc: BaseException) -> str:
    try:
        text = str(exc.message) if isinstance(exc, BaseExceptionGroup) else str(exc)
    except Exception:  # a hostile __str__ must not break the rendering
        return "<unrenderable value>"
    return text or type(exc).__name__


def _chain(exc: BaseException, seen: set[int]) -> str:
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        if id(current) in seen:
            parts.append("<circular cause>")
            break
        seen.add(id(current))
        text = _render(current)
        if isinstance(current, BaseExceptionGroup):
            members = "; ".join(_chain(member, seen) for member in current.exceptions)
            text = f"{text} [{members}]"
        parts.append(text)
        current = current.__cause__
    return ": ".join(parts)


def error_chain(exc: BaseException) -> str:
    """Render ``exc`` and its explicit causes as ``message: cause: ...``.

    Exception-group members are listed in brackets after the group's message. An
    exception with an empty message shows its type name; one whose ``str`` fails shows
    ``<unrenderable value>``; a cause seen before ends the text with
    ``<circular cause>``.

    Example::

        >>> try:
        ...     raise RuntimeError("request failed") from OSError("connection reset")
        ... except RuntimeError as exc:
        ...     error_chain(exc)
        'request failed: connection reset'
    """
    return _chain(exc, set())


def failure_of(exc: Exception) -> LlmFailure:
    """The :class:`LlmFailure` an adapter exception stands for.

    An :class:`LlmError` keeps its own failure; any other exception becomes an
    ``UNKNOWN`` failure whose message is :func:`error_chain` of it.
    """
    if isinstance(exc, LlmError):
        return exc.failure
    return LlmFailure(error_chain(exc), "UNKNOWN")


def _finish_for(failure: LlmFailure) -> Finish:
    kind: FinishKind = "aborted" if failure.code == "ABORTED" else "error"
    return Finish(FinishReason(kind, failure))


async def stream_model(
    adapter: ModelAdapter | None, request: ModelRequest
) -> AsyncGenerator[StreamChunk, None]:
    """Stream one attempt of ``request`` from ``adapter``.

    Yields the adapter's chunks unchanged up to and including its :class:`Finish`, and
    nothing after it. Any ``Exception`` raised while creating or iterating the adapter's
    stream ends the stream with one terminal ``Finish`` chunk instead: an
    :class:`LlmError` contributes its own ``failure``, anything else an ``UNKNOWN``
    failure with the error chain as message; the kind is ``"aborted"`` for the code
    ``ABORTED`` and ``"error"`` otherwise. ``adapter=None`` yields a single
    ``NO_ADAPTER`` error finish. A stream that simply ends without a finish chunk ends
    here too (the assembler then reports ``stop``).

    Blocks while the adapter waits. Cancellation (and every ``BaseException`` that is
    not an ``Exception``) propagates unchanged. Closing this generator early (use
    :func:`contextlib.aclosing`) closes the adapter's iterator.

    Example::

        async with contextlib.aclosing(stream_model(adapter, request)) as stream:
            async for chunk in stream:
                assembler.push(chunk)
    """
    if adapter is None:
        await trio.lowlevel.checkpoint()
        yield Finish(
            FinishReason(
                "error",
                LlmFailure(
                    f'no model adapter is registered for provider "{request.provider}"',
                    "NO_ADAPTER",
                ),
            )
        )
        return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
    try:
        iterator = aiter(adapter.stream(request))
    except Exception as exc:  # every adapter failure becomes a finish chunk
        await trio.lowlevel.checkpoint()
        yield _finish_for(failure_of(exc))
        return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
    try:
        while True:
            try:
                chunk = await anext(iterator)
            except StopAsyncIteration:
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            except Exception as exc:  # as above
                yield _finish_for(failure_of(exc))  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            yield chunk  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            if isinstance(chunk, Finish):
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
    finally:
        aclose = getattr(iterator, "aclose", None)
        # An async generator that already finished (ran to its end, or an exception
        # such as Cancelled came out of it) has nothing left to close: skip the
        # shielded close and its deadline on that common path.
        finished = getattr(iterator, "ag_frame", True) is None
        if aclose is not None and not finished:
            try:
                # The adapter may hold a connection; release it even while the consumer
                # is being cancelled, but never wait on it without bound.
                with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                    await aclose()
            except Exception:
                # Everything the stream had to say was said; a failing close must not
                # replace the outcome the consumer already has.
                _logger.warning(
                    'closing the model stream of provider "%s" failed',
                    request.provider,
                    exc_info=True,
                )
