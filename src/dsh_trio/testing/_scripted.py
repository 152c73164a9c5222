"""A deterministic model adapter driven by a script of replies.

:class:`ScriptedModel` answers each model request with the next entry of a FIFO
script; the entries and their constructors (:func:`~dsh_trio.testing.reply`,
:func:`~dsh_trio.testing.tool_calls`, ...) are in ``_script``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing

import attrs
import trio

from ..errors import LlmError
from ..llm import ModelRequest
from ..values import LlmFailure, StreamChunk
from ._script import Script, _check_entry, _Chunks

__all__ = ["ScriptedModel"]


_EXHAUSTED = LlmFailure("ScriptedModel: script exhausted", "UNKNOWN")


@attrs.define(eq=False, init=False)
class ScriptedModel:
    """A deterministic :class:`~dsh_trio.llm.ModelAdapter` that plays a script.

    Each request is recorded in :attr:`requests` (before anything else, so an
    exhausted script still counts it) and answered by the next script entry, or by
    ``default`` when the script is empty; with neither, the stream raises
    ``LlmError`` with code ``UNKNOWN``. The stream checkpoints before every chunk, so
    cancellation takes effect at the next chunk at the latest.

    Example::

        model = ScriptedModel(reply("hi"), tool_calls(("c1", "echo", "{}")))
        async with open_runtime(models={"mock": model}) as runtime:
            ...
        assert len(model.requests) == 2

    Args:
        *entries: the script, in order.
        default: the entry used whenever the script is empty (e.g. ``reply("ok")``).

    Raises:
        TypeError: an entry is not a :class:`Script`.
    """

    #: Every request received, in order.
    requests: list[ModelRequest]
    _script: deque[Script]
    _default: Script | None

    def __init__(self, *entries: Script, default: Script | None = None) -> None:
        script = deque(
            _check_entry(e, f"ScriptedModel entry #{n}") for n, e in enumerate(entries)
        )
        if default is not None:
            _check_entry(default, "ScriptedModel default")
        self.__attrs_init__([], script, default)

    def push(self, *entries: Script) -> None:
        """Append entries to the end of the script. Never blocks.

        Raises:
            TypeError: an entry is not a :class:`Script` (nothing is appended).
        """
        checked = [
            _check_entry(e, f"ScriptedModel.push() entry #{n}")
            for n, e in enumerate(entries)
        ]
        self._script.extend(checked)

    @property
    def remaining(self) -> int:
        """How many script entries are left (the default entry is not counted)."""
        return len(self._script)

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Answer ``request`` with the next script entry.

        Records the request and takes the entry when called. The stream checkpoints
        before each chunk; cancellation stops it there (a hanging or gated entry
        waits cancellably).

        Raises (from the stream):
            LlmError: the script is exhausted and there is no default, or the entry
                fails.
        """
        self.requests.append(request)
        entry = self._script.popleft() if self._script else self._default
        if type(entry) is _Chunks:
            # The hot path (benchmarks stream many scripted replies): the prebuilt
            # chunks, from a generator with no cleanup of its own, so a reader that
            # stops at the finish closes it without running any of its code.
            return _replay(entry.chunks, entry.failure)
        return _entry_stream(entry, request)


async def _replay(
    chunks: tuple[StreamChunk, ...], failure: LlmFailure | None
) -> AsyncGenerator[StreamChunk, None]:
    checkpoint = trio.lowlevel.checkpoint
    for chunk in chunks:
        await checkpoint()
        yield chunk
    await checkpoint()
    if failure is not None:
        raise LlmError(failure)


async def _entry_stream(
    entry: Script | None, request: ModelRequest
) -> AsyncGenerator[StreamChunk, None]:
    checkpoint = trio.lowlevel.checkpoint
    if entry is None:
        await checkpoint()
        raise LlmError(_EXHAUSTED)
    async with aclosing(entry.stream(request)) as inner:
        await checkpoint()
        async for chunk in inner:
            await checkpoint()
            yield chunk  # noqa: ASYNC119
    await checkpoint()
