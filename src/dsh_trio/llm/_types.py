"""The model seam: what a request carries and what an adapter must provide."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

import attrs

from ..values import JsonValue, Message, SessionId, StreamChunk

__all__ = ["ModelAdapter", "ModelRequest"]


@attrs.frozen(kw_only=True, weakref_slot=False)
class ModelRequest:
    """One model request: the route, the knobs, the derived history and tool schemas.

    ``messages`` is the history derived from the session log (system, user, assistant
    and tool-result messages, in surface order); ``tools`` the JSON tool schemas
    (``{"name", "description", "parameters"}``). ``thinking`` (from
    ``AgentOptions.thinking``) switches the model's thinking on (``True``) or off
    (``False``) where the adapter knows how (DeepSeek's ``thinking`` field);
    ``None`` leaves the provider's default.
    """

    provider: str
    model: str
    messages: Sequence[Message] = attrs.field(hash=False)
    tools: tuple[JsonValue, ...] = attrs.field(default=(), hash=False)
    max_tokens: int | None = None
    reasoning_effort: str | None = None
    temperature: float | None = None
    stop: tuple[str, ...] | None = None
    session_id: SessionId
    thinking: bool | None = None


class ModelAdapter(Protocol):
    """Streams one provider attempt.

    ``stream`` returns an async iterator of :data:`StreamChunk` values: block starts,
    deltas, block ends, usage, then one terminal :class:`Finish`. An adapter may
    also fail by raising; the runtime turns any exception into one terminal
    ``Finish`` error (or aborted) chunk. Adapters must let ``trio.Cancelled``
    propagate and must checkpoint while they wait. The runtime closes the iterator
    (``aclose()``, shielded, with a deadline) once it reads no more chunks: after the
    finish, and when the turn is cancelled between two chunks (by a listener of a
    chunk's frame, say). Then the iterator is not resumed but closed at its
    ``yield`` (``GeneratorExit`` in an async generator).
    """

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]: ...
