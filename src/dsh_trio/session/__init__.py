"""The session log: append-only events, the surface, derived history, stream records."""

from .._values import (
    SessionEvent as SessionEvent,
    SessionHeader as SessionHeader,
    SurfaceReplace as SurfaceReplace,
)
from ._repair import (
    close_interrupted_turn as close_interrupted_turn,
    interrupted_turn_closers as interrupted_turn_closers,
)
from ._session import DerivedMessages as DerivedMessages, Session as Session
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
]

from ._jsonl import JsonlPersistence as JsonlPersistence
from ._persistence import (
    SessionPersistence as SessionPersistence,
    SessionWriter as SessionWriter,
    load_session as load_session,
)
from ._recorder import (
    SessionRecorder as SessionRecorder,
    persist_new_session as persist_new_session,
)

__all__ += [
    "JsonlPersistence",
    "SessionPersistence",
    "SessionWriter",
    "SessionRecorder",
    "load_session",
    "persist_new_session",
]
