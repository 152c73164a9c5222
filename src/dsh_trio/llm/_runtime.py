"""Run one adapter stream, turning adapter failures into a terminal finish chunk.

This is the boundary between any adapter and the runtime: what passes it is recorded
in the session, so text that UTF-8 cannot encode and a usage count a session cannot
hold are repaired here (whatever the adapter) instead of failing the attempt later.
This module owns the two readings of an adapter stream, :func:`stream_model` (a
generator) and :class:`ModelStream` (the runtime's, without one), and the shielded,
bounded close of the adapter's iterator; the repairs are ``_chunk_repair``'s, and how
an adapter's exception is told is ``_error_chain``'s.
"""

from __future__ import annotations

import logging
import types
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any

import trio

from ..values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishKind,
    FinishReason,
    LlmFailure,
    ReasoningBlock,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    Usage,
)
from ._chunk_repair import (
    all_ascii,
    clamped_usage,
    repaired_chunk,
    warn_repaired,
    warn_usage,
)
from ._error_chain import failure_of
from ._types import ModelAdapter, ModelRequest

__all__ = ["ModelStream", "stream_model"]

_logger = logging.getLogger("dsh_trio")
_AsyncGenerator = types.AsyncGeneratorType

#: How long closing an adapter's stream may take (it runs shielded from cancellation).
_CLOSE_TIMEOUT_S = 5.0


def _finish_for(failure: LlmFailure) -> Finish:
    kind: FinishKind = "aborted" if failure.code == "ABORTED" else "error"
    finish = Finish(FinishReason(kind, failure))
    fixed = repaired_chunk(finish)
    return fixed if isinstance(fixed, Finish) else finish


async def _close(aclose: Callable[[], Awaitable[object]], iterator: object) -> None:
    """Close the adapter's stream: shielded, and for at most ``_CLOSE_TIMEOUT_S``.

    An async generator suspended at a plain ``yield`` (adapters usually stop right
    after their ``Finish``) is closed by starting ``aclose()`` synchronously: when its
    body has no exception handler at all, closing runs none of its code, so it needs
    no cancel scope. Otherwise the close starts inside a shielded scope whose deadline
    is set only if the close turns out to wait, and trio sees each of its checkpoints
    in that scope, exactly as with ``move_on_after(..., shield=True)``.
    """
    if (
        getattr(iterator, "ag_await", False) is not None
        or getattr(iterator, "ag_running", True) is not False
    ):
        with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
            await aclose()
        return
    closing: Any = aclose()
    code = getattr(iterator, "ag_code", None)
    if code is not None and not code.co_exceptiontable:
        try:
            trap = closing.send(None)
        except StopIteration:
            return  # noqa: ASYNC910  # closing ran none of the adapter's code
        # Not reached for a body without handlers; stay correct regardless.
        with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
            await _resume(closing, trap)
        return
    with trio.CancelScope(shield=True) as scope:
        try:
            trap = closing.send(None)
        except StopIteration:
            return  # noqa: ASYNC910  # the close did not wait: nothing to checkpoint
        scope.deadline = trio.current_time() + _CLOSE_TIMEOUT_S
        await _resume(closing, trap)


@types.coroutine
def _resume(coro: Any, trap: object) -> Generator[object, object, None]:
    """Go on running ``coro``, already started and suspended on ``trap``: hand each
    of its traps to trio and trio's answers back to it, until it returns."""
    while True:
        try:
            value = yield trap
        except BaseException as exc:  # noqa: ASYNC103, ASYNC104  # handed to coro, which raises it
            try:
                trap = coro.throw(exc)
            except StopIteration:
                return  # noqa: ASYNC104  # coro handled what trio threw and returned
        else:
            try:
                trap = coro.send(value)
            except StopIteration:
                return


class _Once:
    """The reading of a stream that is one ``Finish`` (no adapter, or it failed to start)."""

    __slots__ = ("_finish",)

    def __init__(self, finish: Finish) -> None:
        self._finish: Finish | None = finish

    async def __call__(self) -> StreamChunk:
        await trio.lowlevel.checkpoint()
        finish = self._finish
        if finish is None:
            raise StopAsyncIteration
        self._finish = None
        return finish


class ModelStream:
    """One adapter stream read as :func:`stream_model` reads it, without a generator.

    Runtime use only: the model attempt reads chunks straight from the adapter (one
    coroutine frame fewer to resume per chunk) and applies the same rules through
    these methods. ``next`` is the adapter's ``__anext__``; an ``Exception`` it raises
    becomes :meth:`failed`'s terminal finish; every chunk other than an ASCII
    :class:`TextDelta` goes through :meth:`checked`; the reader stops after a
    :class:`Finish`; :meth:`aclose` ends it (warning about repaired chunks, closing
    the adapter's iterator shielded and bounded).
    """

    __slots__ = ("_iterator", "_provider", "_repaired", "next")

    def __init__(self, adapter: ModelAdapter | None, request: ModelRequest) -> None:
        self._provider = request.provider
        self._repaired = 0
        self._iterator: object = None
        self.next: Callable[[], Awaitable[StreamChunk]]
        if adapter is None:
            self.next = _Once(
                Finish(
                    FinishReason(
                        "error",
                        LlmFailure(
                            "no model adapter is registered for provider "
                            f'"{request.provider}"',
                            "NO_ADAPTER",
                        ),
                    )
                )
            )
            return
        try:
            iterator = aiter(adapter.stream(request))
        except Exception as exc:  # every adapter failure becomes a finish chunk
            self.next = _Once(_finish_for(failure_of(exc)))
            return
        self._iterator = iterator
        self.next = iterator.__anext__

    @staticmethod
    def failed(exc: Exception) -> Finish:
        """The terminal finish standing for the adapter's failure ``exc``."""
        return _finish_for(failure_of(exc))

    def checked(self, chunk: StreamChunk) -> StreamChunk:
        """``chunk`` with text UTF-8 cannot encode repaired (counted for the warning),
        and usage counts a session cannot record clamped (each noted at once)."""
        # Hot path: the common chunks, plainly ASCII, are told apart here without
        # the calls of ``repaired_chunk`` (which decides the same way).
        cls = chunk.__class__
        if cls is BlockStart:
            return chunk  # no text that is ever repaired
        plain: Any = chunk
        if cls is Usage:  # counts a session cannot record are clamped, and noted
            usage = clamped_usage(plain)
            if usage is None:
                return chunk
            warn_usage(self._provider, plain, usage)
            return usage
        if cls is Finish:
            if plain.reason.failure is None:
                return chunk  # only a failure's text is ever repaired
        elif cls is BlockEnd:
            block = plain.block
            if block.__class__ is ToolCallBlock:
                if all_ascii(block.id, block.name, block.arguments):
                    return chunk
            elif block.__class__ is TextBlock or block.__class__ is ReasoningBlock:
                text = block.text
                if text.__class__ is str and text.isascii():
                    return chunk
        elif cls is ToolCallDelta:
            name = plain.name
            if all_ascii(plain.id, "" if name is None else name, plain.arguments_delta):
                return chunk
        fixed = repaired_chunk(chunk)
        if fixed is None:
            return chunk
        self._repaired += 1
        return fixed

    async def aclose(self) -> None:  # noqa: ASYNC910  # a close that need not wait does not checkpoint
        """Warn about repaired chunks and close the adapter's iterator if it is open.

        The close runs shielded and for at most ``_CLOSE_TIMEOUT_S``; a failing close
        is logged, never raised.
        """
        if self._repaired:
            warn_repaired(self._provider, self._repaired)
            self._repaired = 0
        iterator: Any = self._iterator
        self._iterator = None
        try:
            if iterator.__class__ is _AsyncGenerator:
                # Hot path: the common adapter stream, an async generator, as
                # ``_close`` closes it (without the calls).
                if iterator.ag_frame is None:
                    return  # noqa: ASYNC910  # finished: nothing to close
                if (
                    iterator.ag_await is None
                    and iterator.ag_running is False
                    and not iterator.ag_code.co_exceptiontable
                ):
                    closing = iterator.aclose()
                    try:
                        trap = closing.send(None)
                    except StopIteration:
                        return  # noqa: ASYNC910  # closing ran none of its code
                    with trio.move_on_after(_CLOSE_TIMEOUT_S, shield=True):
                        await _resume(closing, trap)
                    return
            aclose = getattr(iterator, "aclose", None)
            # A finished async generator (ran to its end, or an exception such as
            # Cancelled came out of it) has nothing left to close.
            if aclose is None or getattr(iterator, "ag_frame", True) is None:
                return  # noqa: ASYNC910  # nothing to close: the reading already checkpointed
            await _close(aclose, iterator)  # noqa: ASYNC102  # shielded, with a deadline, inside
        except Exception:
            _logger.warning(
                'closing the model stream of provider "%s" failed',
                self._provider,
                exc_info=True,
            )


async def stream_model(
    adapter: ModelAdapter | None, request: ModelRequest
) -> AsyncGenerator[StreamChunk, None]:
    """Stream one attempt of ``request`` from ``adapter``.

    Yields the adapter's chunks unchanged up to and including its :class:`Finish`, and
    nothing after it, except that text UTF-8 cannot encode (lone surrogates) in a
    delta, a block or a failure is replaced by U+FFFD, and a :class:`Usage` count
    outside ``0..2**53 - 1`` (what a session records) is clamped into that range,
    each with a warning on the ``dsh_trio`` logger. Any ``Exception`` raised while
    creating or iterating the adapter's stream ends the stream with one terminal
    ``Finish`` chunk instead: an
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
    repaired = 0
    next_chunk = iterator.__anext__
    try:
        while True:
            try:
                chunk = await next_chunk()
            except StopAsyncIteration:
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            except Exception as exc:  # as above
                yield _finish_for(failure_of(exc))  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            # Hot path: an ASCII text delta needs no repair and is not a finish.
            if chunk.__class__ is TextDelta:
                text = chunk.text
                if text.__class__ is str and text.isascii():
                    yield chunk  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
                    continue
            if isinstance(chunk, Usage):
                usage = clamped_usage(chunk)
                if usage is not None:
                    warn_usage(request.provider, chunk, usage)
                    chunk = usage
            else:
                fixed = repaired_chunk(chunk)
                if fixed is not None:
                    chunk = fixed
                    repaired += 1
            yield chunk  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
            if isinstance(chunk, Finish):
                return  # noqa: ASYNC911  # the adapter checkpoints; this wrapper adds none of its own
    finally:
        warn_repaired(request.provider, repaired)
        aclose = getattr(iterator, "aclose", None)
        # An async generator that already finished (ran to its end, or an exception
        # such as Cancelled came out of it) has nothing left to close: skip the
        # shielded close and its deadline on that common path.
        finished = getattr(iterator, "ag_frame", True) is None
        if aclose is not None and not finished:
            try:
                # The adapter may hold a connection; release it even while the consumer
                # is being cancelled, but never wait on it without bound.
                await _close(aclose, iterator)  # noqa: ASYNC102  # shielded, with a deadline, inside
            except Exception:
                # Everything the stream had to say was said; a failing close must not
                # replace the outcome the consumer already has.
                _logger.warning(
                    'closing the model stream of provider "%s" failed',
                    request.provider,
                    exc_info=True,
                )
