"""The entries of a :class:`~dsh_trio.testing.ScriptedModel` script and their constructors.

Each :class:`Script` entry answers one model request. Entries are built with the
module-level helpers (:func:`reply`, :func:`tool_calls`, :func:`max_tokens`,
:func:`fail`, :func:`hang`, :func:`gate`, :func:`chunks`, :func:`custom`). Nothing
here sleeps on a clock: a stream only waits where the script says so (:func:`hang`,
a :class:`Gate`).

Streams that wrap another entry's stream keep it open across their own ``yield``
(ASYNC119): whoever consumes a model stream closes it (``contextlib.aclosing``), and
closing the outer stream closes the inner one at once.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, aclosing

import attrs
import trio

from ..errors import LlmError
from ..llm import ModelRequest
from ..values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishKind,
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

__all__ = [
    "Script",
    "Gate",
    "reply",
    "tool_calls",
    "max_tokens",
    "fail",
    "hang",
    "gate",
    "chunks",
    "custom",
]

_DEFAULT_FAILURE_MESSAGE = "scripted failure"


class Script(abc.ABC):
    """One entry of a :class:`ScriptedModel` script: the answer to one request.

    Build entries with the module helpers. A subclass implements :meth:`stream`;
    the model checkpoints before forwarding each chunk, so a subclass only needs
    to checkpoint where it waits.
    """

    __slots__ = ()

    @abc.abstractmethod
    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Yield the chunks of this entry for ``request`` (may raise ``LlmError``)."""


@attrs.frozen
class _Chunks(Script):
    """A fixed chunk sequence, optionally followed by raising ``LlmError(failure)``."""

    chunks: tuple[StreamChunk, ...]
    failure: LlmFailure | None = None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self.chunks:
            await trio.lowlevel.checkpoint()
            yield chunk
        await trio.lowlevel.checkpoint()
        if self.failure is not None:
            raise LlmError(self.failure)


@attrs.frozen
class _Hang(Script):
    """Optionally a partial text block, then wait until cancelled."""

    prefix: str | None

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        if self.prefix is not None:
            await trio.lowlevel.checkpoint()
            yield BlockStart(0, "text")
            await trio.lowlevel.checkpoint()
            yield TextDelta(0, self.prefix)
        await trio.sleep_forever()


@attrs.frozen
class _Custom(Script):
    """Chunks produced by a caller-supplied function of the request."""

    fn: Callable[[ModelRequest], AsyncIterator[StreamChunk]]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        inner = self.fn(request)
        async with AsyncExitStack() as stack:
            # `fn` may return any async iterator; close it too if it can be closed.
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                stack.push_async_callback(aclose)
            async for chunk in inner:
                yield chunk  # noqa: ASYNC119
                await trio.lowlevel.checkpoint()


@attrs.define(eq=False)
class Gate(Script):
    """A script entry that holds its stream until the test releases it.

    The stream stops at the gate (before its first chunk, or after ``after`` chunks
    of the wrapped entry) and sets :attr:`reached`. :meth:`release` lets it go on
    with the wrapped entry; :meth:`fail` makes it raise :class:`LlmError` instead.
    Releasing (or failing) before the stream arrives lets it pass without waiting.
    A gate is single-use: once released it stays open.

    Example::

        g = gate(reply("done"))
        model = ScriptedModel(g)
        ...  # start a turn
        await g.wait_reached()
        g.release()
    """

    _entry: Script
    _after: int
    #: Set when a stream arrives at the gate.
    reached: trio.Event = attrs.field(factory=trio.Event, init=False)
    _released: trio.Event = attrs.field(factory=trio.Event, init=False)
    _failure: LlmFailure | None = attrs.field(default=None, init=False)

    def release(self) -> None:
        """Open the gate: the stream continues with the wrapped entry. Never blocks."""
        self._released.set()

    def fail(
        self,
        code: str,
        message: str = _DEFAULT_FAILURE_MESSAGE,
        *,
        retry_after_ms: float | None = None,
        status: int | None = None,
    ) -> None:
        """Open the gate with a failure: the stream raises ``LlmError`` there.

        Never blocks. Has no effect if the gate was already released or failed.
        """
        if not self._released.is_set():
            self._failure = LlmFailure(
                message, code, status=status, retry_after_ms=retry_after_ms
            )
            self._released.set()

    async def wait_reached(self) -> None:
        """Wait until a stream arrives at the gate (returns at once if one has).

        Cancellation leaves the gate unchanged.
        """
        await self.reached.wait()

    async def _hold(self) -> None:
        self.reached.set()
        await self._released.wait()
        if self._failure is not None:
            raise LlmError(self._failure)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Wait at the gate, then stream the wrapped entry (or raise on failure)."""
        if self._after <= 0:
            await self._hold()
            async with aclosing(self._entry.stream(request)) as inner:
                async for chunk in inner:
                    yield chunk  # noqa: ASYNC119
                    await trio.lowlevel.checkpoint()
            return
        count = 0
        async with aclosing(self._entry.stream(request)) as inner:
            async for chunk in inner:
                yield chunk  # noqa: ASYNC119
                count += 1
                if count == self._after:
                    await self._hold()
                else:
                    await trio.lowlevel.checkpoint()
        if count < self._after:
            # The entry ended before the gate: stop at its end, so `reached` is
            # always set by a stream that passes through.
            await self._hold()


# --------------------------------------------------------------------------- helpers


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _split(text: str, pieces: int | None) -> list[str]:
    """Split ``text`` into ``pieces`` nearly equal parts (one per character if None)."""
    if pieces is None:
        return list(text)
    if not _is_int(pieces) or pieces <= 0:
        raise ValueError(f"chunks must be a positive int, got {pieces!r}")
    pieces = min(pieces, len(text))
    if pieces == 0:
        return []
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _text_block(index: int, text: str, pieces: int | None) -> list[StreamChunk]:
    out: list[StreamChunk] = [BlockStart(index, "text")]
    out.extend(TextDelta(index, part) for part in _split(text, pieces))
    out.append(BlockEnd(index, TextBlock(text)))
    return out


def _reasoning_block(index: int, text: str, pieces: int | None) -> list[StreamChunk]:
    out: list[StreamChunk] = [BlockStart(index, "reasoning")]
    out.extend(ReasoningDelta(index, part) for part in _split(text, pieces))
    out.append(BlockEnd(index, ReasoningBlock(text)))
    return out


def _check_text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be a str, got {type(value).__name__}")
    return value


def reply(
    text: str,
    *,
    chunks: int | None = None,
    reasoning: str | None = None,
    usage: Usage | None = None,
) -> Script:
    """A text answer that finishes with ``stop``.

    The text block is streamed as one delta per character, or as ``chunks`` nearly
    equal deltas; then ``BlockEnd``, ``usage`` (default ``Usage(10, len(text))``) and
    ``Finish(stop)``. With ``reasoning``, a reasoning block (chunked the same way)
    comes first, at index 0.

    Example::

        ScriptedModel(reply("abc"))  # block-start, 3 text deltas, block-end,
                                     # usage, finish: 7 chunks

    Raises:
        ValueError: ``chunks`` is not a positive int.
    """
    _check_text(text, "reply() text")
    out: list[StreamChunk] = []
    if reasoning is not None:
        out.extend(
            _reasoning_block(0, _check_text(reasoning, "reply() reasoning"), chunks)
        )
    out.extend(_text_block(1 if out else 0, text, chunks))
    out.append(usage if usage is not None else Usage(10, len(text)))
    out.append(Finish(FinishReason("stop")))
    return _Chunks(tuple(out))


def tool_calls(
    *calls: tuple[str, str, str] | ToolCallBlock, text: str | None = None
) -> Script:
    """A reply that calls tools and finishes with ``tool-calls``.

    Each call, given as ``(id, name, arguments_json)`` or a :class:`ToolCallBlock`,
    becomes one tool-call block streamed as a single ``ToolCallDelta``. With
    ``text``, a text block (one delta per character) comes first at index 0.
    Usage is ``Usage(10, len(text) + total length of the arguments)``.

    Raises:
        ValueError: no calls were given.
        TypeError: a call is neither a ``ToolCallBlock`` nor a 3-tuple of str.
    """
    if not calls:
        raise ValueError("tool_calls() needs at least one call")
    blocks: list[ToolCallBlock] = []
    for n, call in enumerate(calls):
        if isinstance(call, ToolCallBlock):
            blocks.append(call)
            continue
        raw: object = call
        if (
            not isinstance(raw, tuple)
            or len(raw) != 3
            or not all(isinstance(part, str) for part in raw)
        ):
            raise TypeError(
                f"tool_calls() call #{n} must be a ToolCallBlock or an "
                f"(id, name, arguments) tuple of str, got {call!r}"
            )
        blocks.append(ToolCallBlock(*call))
    out: list[StreamChunk] = []
    index = 0
    if text is not None:
        out.extend(_text_block(0, _check_text(text, "tool_calls() text"), None))
        index = 1
    for block in blocks:
        out.append(BlockStart(index, "tool-call"))
        out.append(ToolCallDelta(index, block.id, block.name, block.arguments))
        out.append(BlockEnd(index, block))
        index += 1
    output = len(text or "") + sum(len(b.arguments) for b in blocks)
    out.append(Usage(10, output))
    out.append(Finish(FinishReason("tool-calls")))
    return _Chunks(tuple(out))


def max_tokens(text: str) -> Script:
    """A text answer (one delta per character) that finishes with ``max-tokens``."""
    out = _text_block(0, _check_text(text, "max_tokens() text"), None)
    out.append(Usage(10, len(text)))
    out.append(Finish(FinishReason("max-tokens")))
    return _Chunks(tuple(out))


def fail(
    code: str,
    message: str = _DEFAULT_FAILURE_MESSAGE,
    *,
    retry_after_ms: float | None = None,
    status: int | None = None,
    in_band: bool = False,
) -> Script:
    """A failed request: raises ``LlmError`` before any chunk.

    With ``in_band=True`` the stream instead yields a single
    ``Finish(FinishReason("error", failure))`` chunk (``"aborted"`` when ``code`` is
    ``"ABORTED"``).
    """
    failure = LlmFailure(message, code, status=status, retry_after_ms=retry_after_ms)
    if in_band:
        kind: FinishKind = "aborted" if code == "ABORTED" else "error"
        return _Chunks((Finish(FinishReason(kind, failure)),))
    return _Chunks((), failure)


def hang(prefix: str | None = "partial") -> Script:
    """A stream that never finishes on its own.

    Yields ``BlockStart(0, "text")`` and ``TextDelta(0, prefix)`` (nothing when
    ``prefix`` is None), then waits in ``trio.sleep_forever()`` until cancelled.
    """
    if prefix is not None:
        _check_text(prefix, "hang() prefix")
    return _Hang(prefix)


def gate(entry: Script | None = None, *, after: int = 0) -> Gate:
    """A :class:`Gate` around ``entry`` (default ``reply("ok")``).

    With ``after=N`` the first ``N`` chunks of ``entry`` stream before the gate.

    Raises:
        TypeError: ``entry`` is not a :class:`Script`.
        ValueError: ``after`` is negative or not an int.
    """
    inner = reply("ok") if entry is None else _check_entry(entry, "gate() entry")
    if not _is_int(after) or after < 0:
        raise ValueError(f"gate() after must be an int >= 0, got {after!r}")
    return Gate(inner, after)


def chunks(*items: StreamChunk) -> Script:
    """Exactly these chunks, in order (no checks on their shape)."""
    return _Chunks(tuple(items))


def custom(fn: Callable[[ModelRequest], AsyncIterator[StreamChunk]]) -> Script:
    """Chunks produced by ``fn(request)`` (an async generator function, say).

    ``fn`` may raise; the model still checkpoints before forwarding each chunk.
    """
    if not callable(fn):
        raise TypeError(f"custom() needs a callable, got {fn!r}")
    return _Custom(fn)


def _check_entry(entry: object, where: str) -> Script:
    if not isinstance(entry, Script):
        raise TypeError(
            f"{where} must be a Script (built with reply(), tool_calls(), ...), "
            f"got {entry!r}"
        )
    return entry
