"""What many test modules build the same way: requests, clocks, chunk adapters, outcomes.

Plain functions and classes (the fixtures are in the ``conftest.py`` files), imported
relatively: ``from ..support import make_request``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import trio

from dsh_trio import user_message
from dsh_trio.llm import ModelRequest, StreamChunk
from dsh_trio.values import SessionId

#: The epoch milliseconds :func:`ticking_clock` starts at by default (in 2027).
EPOCH_MS = 1_800_000_000_000


def make_request(**overrides: Any) -> ModelRequest:
    """A one-message request (``"hello"``) of provider ``p``, model ``m``, session ``s1``;
    ``overrides`` replace any field."""
    fields: dict[str, Any] = {
        "provider": "p",
        "model": "m",
        "messages": (user_message("hello"),),
        "session_id": SessionId("s1"),
    }
    fields.update(overrides)
    return ModelRequest(**fields)


def ticking_clock(start: int = EPOCH_MS) -> Callable[[], int]:
    """A session clock: ``start`` on its first read, one millisecond more on each next."""
    now = iter(range(start, start + 100_000_000_000))
    return lambda: next(now)


def outcome_of(fn: Callable[..., Any], *args: Any) -> tuple[str, object]:
    """``("ok", value)`` of ``fn(*args)``, or ``("error", (type, message))`` of what it
    raised: two calls compare equal when they give the same value or the same error."""
    try:
        return "ok", fn(*args)
    except Exception as exc:  # the comparison is the point
        return "error", (type(exc), str(exc))


class ChunkAdapter:
    """A model adapter streaming ``chunks`` from a plain async generator, a checkpoint
    before each; it keeps every stream it made (``streams``) and request it got."""

    def __init__(self, chunks: Sequence[StreamChunk]) -> None:
        self.chunks = tuple(chunks)
        self.streams: list[Any] = []
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        self.requests.append(request)
        stream = self._stream()
        self.streams.append(stream)
        return stream

    async def _stream(self) -> AsyncIterator[StreamChunk]:
        for chunk in self.chunks:
            await trio.lowlevel.checkpoint()
            yield chunk
