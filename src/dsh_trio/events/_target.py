"""The emit target: one emit event's listeners that one scope admits, kept for a
burst of emits (a model attempt's live frames)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._dispatch import dispatch

if TYPE_CHECKING:
    from ._bus import EventBus, _Entry, _Resolved

__all__ = ["EmitTarget"]


class EmitTarget:
    """The listeners of one emit event that one scope admits, for a burst of emits.

    Runtime use only (made by ``EventBus._target``; a model attempt's live frames
    are its use). :meth:`current` re-resolves the listeners whenever the event's
    listener set changed since the last call, so every emit still sees the listener
    set as it was when it started; the scope's owner chain is read when the listeners
    are resolved, not on every emit, so a target serves a span in which the scope's
    owners do not change (an agent's owners are fixed while it runs). :meth:`renew`
    starts a new span: one target may serve every span of its scope.
    """

    __slots__ = (
        "_bus",
        "_name",
        "_resolved",
        "_scope",
        "entries",
        "listeners",
        "table",
    )

    def __init__(self, bus: EventBus, name: str, scope: object) -> None:
        self._bus = bus
        self._name = name
        self._scope = scope
        #: The bus's registrations by name, and this name's when last resolved: a
        #: hot loop may test ``target.table.get(name) is target.entries`` itself
        #: and call :meth:`current` only when that fails.
        self.table: dict[str, tuple[_Entry, ...]] = bus._listeners
        self.entries: tuple[_Entry, ...] | None = None
        self.listeners: tuple[Callable[..., Any], ...] = ()
        # The bus's resolution the listeners came from (with the owner chain they
        # were resolved against), if it keeps one.
        self._resolved: _Resolved | None = None
        self.current()

    def current(self) -> tuple[Callable[..., Any], ...]:
        """The admitted listeners now (empty when nobody listens). Never blocks."""
        entries = self.table.get(self._name)
        if entries is not self.entries:
            self.entries = entries
            self._resolved = None
            if entries is None:
                self.listeners = ()
            else:
                name, scope, bus = self._name, self._scope, self._bus
                self.listeners = bus._resolve(name, entries, scope)
                resolved = bus._cache.get(name, {}).get(id(scope))
                if resolved is not None and resolved.entries is entries:
                    self._resolved = resolved
        return self.listeners

    def renew(self) -> tuple[Callable[..., Any], ...]:
        """:meth:`current`, with the scope's owner chain confirmed again (read again
        unless the bus says no owner changed): the listeners a new target would
        resolve now. Never blocks."""
        resolved = self._resolved
        if (
            resolved is not None
            and self.table.get(self._name) is self.entries
            and self._bus._still(resolved, self._scope)
        ):
            return self.listeners  # what ``current`` would return
        self.entries = None
        self.listeners = ()
        self._resolved = None
        return self.current()

    def emit(self, payload: object) -> None:
        """Call the listeners :meth:`current` returned last, as :meth:`EventBus.emit`
        does (:func:`~dsh_trio.events.dispatch`: a failing listener is reported, the
        others still run). A hot loop may call ``dispatch(name, target.listeners,
        payload)`` itself instead."""
        dispatch(self._name, self.listeners, payload)
