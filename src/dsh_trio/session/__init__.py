"""The session log: append-only events, the surface, derived history, stream records."""

import importlib
from typing import TYPE_CHECKING

from ..values import (
    SessionEvent as SessionEvent,
    SessionHeader as SessionHeader,
    SurfaceReplace as SurfaceReplace,
    register_event_type as register_event_type,
)
from ._history import DerivedMessages as DerivedMessages
from ._line_chunks import LineChunks as LineChunks
from ._loaded import LoadedLog as LoadedLog
from ._repair import (
    close_interrupted_turn as close_interrupted_turn,
    interrupted_turn_closers as interrupted_turn_closers,
)
from ._session import Session as Session
from ._stream import (
    StreamAccumulator as StreamAccumulator,
    expand_stream as expand_stream,
    stream_text as stream_text,
)

__all__ = [
    "Session",
    "DerivedMessages",
    "SessionEvent",
    "SessionHeader",
    "SurfaceReplace",
    "StreamAccumulator",
    "expand_stream",
    "stream_text",
    "interrupted_turn_closers",
    "close_interrupted_turn",
    "register_event_type",
]

# The public API names the persistence backends under ``dsh_trio.session``. They live one layer
# up, in :mod:`dsh_trio.persistence` (they depend on this package, never the reverse), so
# these two names are resolved on first access instead of at import time.
_PERSISTENCE_NAMES = frozenset({"JsonlPersistence", "SessionPersistence"})

if TYPE_CHECKING:
    from ..persistence import (
        JsonlPersistence as JsonlPersistence,
        SessionPersistence as SessionPersistence,
    )


def __getattr__(name: str) -> object:
    if name in _PERSISTENCE_NAMES:
        return getattr(importlib.import_module("dsh_trio.persistence"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ += ["JsonlPersistence", "SessionPersistence"]
