"""A log read for restoring: each event admitted as it is read, kept as its line.

A log reader hands each decoded event to :meth:`LoadedLog.admit` together with its
line. The event goes through the checks ``Session.restore`` makes (the envelope, the
sources, the surface rules) and into the surface and the markers at once, and only
its line is kept (:class:`~dsh_trio.session._compact.DecodedEvents`), so reading a long log
needs memory for the lines, not for the decoded events. ``Session.restore`` then
adopts the log's surface and markers instead of admitting every event again.

The first event that fails a check is remembered, not raised: the reader goes on
reading (its own errors for later lines come first, as when the whole log was read
before anything was restored), and ``Session.restore`` raises it.
"""

from __future__ import annotations

from typing import Final

from ..errors import InvalidEventError, SessionCorruptError
from ..values import (
    EVENT_DATA_TYPES,
    MAX_SAFE_INTEGER,
    SURFACE_TYPES,
    RequestContextData,
    SessionEvent,
)
from ._admission import admitted, check_sources
from ._compact import DecodedEvents
from ._markers import MARKER_TYPES, Markers
from ._surface import APPEND, Plan, Surface

__all__ = ["LoadedLog"]

#: The known off-surface types and the class of their data.
_OFF_SURFACE: Final = {
    type_: cls for type_, cls in EVENT_DATA_TYPES.items() if type_ not in SURFACE_TYPES
}


class LoadedLog(DecodedEvents):
    """The events of a log, admitted in order as they are read.

    Build it only through :meth:`admit` and :meth:`admit_line` (in seq order).
    ``error`` is the :class:`SessionCorruptError` that restoring the log raises (the
    first event that fails a check), or ``None``. Never blocks.

    Example::

        log = LoadedLog()
        for line in lines:
            event, checked = decode_event(parse_json_line(line), len(log))
            log.admit(event, line, checked)
        session = Session.restore(header, log)
    """

    __slots__ = ("_context_at", "error", "markers", "surface")

    def __init__(self) -> None:
        super().__init__()
        self.surface = Surface(self)
        self.markers = Markers()
        self.error: SessionCorruptError | None = None
        # The position of the latest ``request/context`` admitted as a line only
        # (:meth:`admit_line`): its data is decoded once, by :meth:`settled_markers`.
        self._context_at: int | None = None

    def admit(self, event: SessionEvent, line: bytes, checked: bool) -> None:
        """Check ``event`` (decoded from ``line``) at the next position and keep it.

        ``checked``: its data passed the checkers while being decoded.
        """
        index = self.compact_count
        if not checked:
            self.unchecked.add(index)
        elif (
            # The common event: checked data of its type's class, off the surface,
            # a safe time; all ``admitted`` and the surface rules would check.
            self.error is None
            and event.surface_op is None
            and event.source_event_seqs is None
            and event.data.__class__ is _OFF_SURFACE.get(event.type)
            and event.seq == index
            and -MAX_SAFE_INTEGER <= event.time <= MAX_SAFE_INTEGER
        ):
            self.append_line(line, event.type)
            if event.type in MARKER_TYPES:
                self._fold(event)
            return
        if self.error is None:
            try:
                event, plan = self._check(event, index, checked)
            except InvalidEventError as exc:
                self.error = SessionCorruptError(
                    f"malformed session log: {exc}", seq=index
                )
            else:
                self.append_line(line, event.type)
                if plan is not None:
                    self.surface.apply(plan, index)
                else:
                    self._fold(event)
                return
        self.append_line(line, event.type)  # refused already: keep the line only

    def admit_line(self, type_: str, turn: int | None, line: bytes) -> None:
        """Keep ``line``, an event the typed check accepted, at the next position.

        For a line that :func:`~dsh_trio.values.typed_line_check` accepted with this
        position as its seq: an event of ``type_`` whose data the fast decoders
        take, with a safe time, and an appending ``surfaceOp`` exactly when it is
        a surface event; ``turn`` is the turn of a ``turn/start``. What
        :meth:`admit` would do with its decoded event, without the event.
        """
        index = self.compact_count
        self.append_line(line, type_)
        if self.error is None:
            if type_ in SURFACE_TYPES:
                self.surface.apply(APPEND, index)
            elif turn is not None:
                self.markers.fold_turn(turn, index)
            elif type_ == "turn/end":
                self.markers.close_turn()
            elif type_ == "request/context":
                self._context_at = index

    def _fold(self, event: SessionEvent) -> None:
        if event.type == "request/context":
            self._context_at = None  # this one is the latest
        self.markers.fold(event)

    def settled_markers(self) -> Markers:
        """The log's markers, with the latest ``request/context`` decoded if it was
        admitted as a line only. Read them through this, not ``markers``."""
        at = self._context_at
        if at is not None:
            self.markers.request_context = self[at].data_as(RequestContextData)
            self._context_at = None
        return self.markers

    def _check(
        self, event: SessionEvent, index: int, checked: bool
    ) -> tuple[SessionEvent, Plan]:
        time = event.time
        if not (
            checked
            # What ``admitted`` checks of an event a log decoder built and checked
            # (its class, type, seq and data are what the decoder made them).
            and event.seq == index
            and event.data.__class__ is EVENT_DATA_TYPES.get(event.type)
            and -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
        ):
            event = admitted(event, index, data_checked=checked)
        sources = event.source_event_seqs
        if sources is not None:
            sources = check_sources(event.type, sources, index)
        return event, self.surface.plan(
            event.type, event.data, event.surface_op, sources, index
        )
