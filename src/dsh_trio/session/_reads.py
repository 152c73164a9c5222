"""What a session answers about itself: the read side of a session.

:class:`SessionReads` holds the reading members of
:class:`~dsh_trio.session.Session`: its id and header, the live view of its events,
the next seq, the surface, the latest markers and the derived history. The session
holds the state they read and is the one to change it (:mod:`._session`); every read
here is O(1), never blocks and changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..values import (
    EpochHeader,
    RequestContextData,
    SessionEvent,
    SessionHeader,
    SessionId,
)
from ._history import DerivedMessages, HistoryFold
from ._markers import Markers
from ._surface import Surface
from ._views import SessionEvents

__all__ = ["SessionReads"]


class SessionReads:
    """The reading members of a :class:`~dsh_trio.session.Session` (its base class).

    Declares the state it reads; the session's fields hold it. Adds no state of
    its own (no slots), so a session pays nothing for it.

    Example::

        session = Session.create()
        session.next_seq  # 0
        session.derive_messages()  # []
    """

    __slots__ = ()

    _header: SessionHeader  # ``_header.id`` is the session id
    _live: list[SessionEvent]  # the events kept as values
    _base: int  # how many events (the first ones) are kept as lines
    _view: SessionEvents
    _surface: Surface
    _history: HistoryFold
    _markers: Markers

    @property
    def _id(self) -> SessionId:
        # Read from the header rather than kept twice (a live session's bytes).
        return self._header.id

    @property
    def id(self) -> SessionId:
        """The session id."""
        return self._id

    @property
    def header(self) -> SessionHeader:
        """The session header (identity and lineage)."""
        return self._header

    @property
    def events(self) -> SessionEvents:
        """A read-only live view of the log (O(1), no copy)."""
        return self._view

    @property
    def next_seq(self) -> int:
        """The seq the next appended event gets."""
        return self._base + len(self._live)

    @property
    def surface(self) -> tuple[int, ...]:
        """The seqs of the current surface nodes, in order."""
        return tuple(self._surface.nodes)

    @property
    def _surface_nodes(self) -> Sequence[int]:
        """The surface's live node list (O(1), no copy): read it, never change it."""
        return self._surface.nodes

    @property
    def replace_generation(self) -> int:
        """How many replace ops the surface has seen."""
        return self._surface.generation

    @property
    def last_turn(self) -> int:
        """The turn number of the last ``turn/start`` in the log (0 if none)."""
        return self._markers.last_turn

    @property
    def open_turn(self) -> int | None:
        """The turn of a ``turn/start`` not yet closed by ``turn/end``, if any."""
        return self._markers.open_turn

    @property
    def _open_turn_start(self) -> int | None:
        """The seq of the open turn's ``turn/start`` (``None`` with no open turn)."""
        return self._markers.open_turn_seq

    def request_header(self) -> EpochHeader | None:
        """The header of the latest ``request/header`` event, if any (O(1))."""
        return self._markers.request_header

    def request_context(self) -> RequestContextData | None:
        """The data of the latest ``request/context`` event, if any (O(1))."""
        return self._markers.request_context

    def derive_messages(self) -> DerivedMessages:
        """The model-visible history: the surface folded into messages.

        ``user/message`` gives its message; ``system/message`` and
        ``assistant/message`` give theirs unless the content is empty;
        ``tool/result`` gives its result message. The fold is incremental (only
        surface nodes added since the last call are visited) and rebuilt only after
        a replace op. Returns an immutable O(1) snapshot (:class:`DerivedMessages`),
        so a call costs O(new events) however long the log is; ``list(...)`` of it
        gives a mutable copy. The messages themselves are shared immutable values.
        """
        return self._history.snapshot()
