"""The event bus: named events dispatched as emit, serial or waterfall, with scope filtering."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeAlias, TypeVar, cast

import trio

from ._dispatch import dispatch
from ._frames import EMIT_EVENT_NAMES
from ._target import EmitTarget

__all__ = ["EmitListener", "EventBus", "SerialListener", "WaterfallListener"]

P = TypeVar("P")
T = TypeVar("T")

#: A listener of an ``emit`` event: a plain callable taking the payload.
EmitListener: TypeAlias = Callable[[P], None]
#: A listener of a ``serial`` event: an async callable; a result other than ``None`` or
#: ``False`` stops the chain and becomes the dispatch result.
SerialListener: TypeAlias = Callable[[P], Awaitable[object]]
#: A listener of a ``waterfall`` event: ``(payload, next)``; ``await next()`` runs the
#: rest of the chain and returns its result.
WaterfallListener: TypeAlias = Callable[[P, Callable[[], Awaitable[T]]], Awaitable[T]]


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<from payload>"


#: Marks "take the dispatch scope from ``payload.agent``".
_FROM_PAYLOAD: Any = _Unset()


class _Entry:
    """One registration, and its idempotent disposer (calling it removes it).

    Identity distinguishes two registrations of one callable. Being its own disposer
    keeps a registration one small object (an agent-scoped listener of an idle agent
    costs only this).
    """

    __slots__ = ("_bus", "_name", "listener", "scope")

    def __init__(
        self,
        bus: EventBus,
        name: str,
        listener: Callable[..., Any],
        scope: object | None,
    ) -> None:
        self._bus = bus
        self._name = name
        self.listener = listener
        self.scope = scope

    def __call__(self) -> None:
        """Remove this registration (no-op once removed)."""
        bus = self._bus
        name = self._name
        table = bus._listeners
        entries = table.get(name)
        if entries is None or self not in entries:
            return
        remaining = tuple(e for e in entries if e is not self)
        if remaining:
            table[name] = remaining
        else:
            del table[name]
        bus._cache.pop(name, None)


def _no_parent(_scope: object) -> object | None:
    return None


def _is_async(listener: Callable[..., Any]) -> bool:
    """Whether calling ``listener`` gives a coroutine or an async generator."""
    if inspect.iscoroutinefunction(listener) or inspect.isasyncgenfunction(listener):
        return True
    call = getattr(type(listener), "__call__", None)  # noqa: B004  # a callable instance
    return call is not None and (
        inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call)
    )


class _Resolved:
    """The listeners one scope admits for one listener tuple, and the owner chain
    they were resolved against (re-walked on use unless the bus's owner count says
    no owner changed since, so a changed owner is seen)."""

    __slots__ = ("chain", "entries", "listeners", "owners", "ref", "tail")

    def __init__(
        self,
        ref: weakref.ref[Any],
        entries: tuple[_Entry, ...],
        chain: tuple[object, ...],
        tail: object | None,
        listeners: tuple[Callable[..., Any], ...],
        owners: int,
    ) -> None:
        self.ref = ref
        self.entries = entries
        self.chain = chain
        self.tail = tail
        self.listeners = listeners
        #: The bus's owner count when the chain was last found current.
        self.owners = owners


#: Resolutions kept per event name before the cache of that name starts over.
_CACHE_LIMIT = 4096


class EventBus:
    """Named events with three dispatch modes and scope-filtered delivery.

    * :meth:`emit` calls plain listeners in order; a failing listener is logged through
      the ``dsh_trio`` logger and the others still run.
    * :meth:`serial` awaits async listeners in order; the first result other than
      ``None``/``False`` stops the chain and is returned; a failure propagates.
    * :meth:`waterfall` runs async middleware ``(payload, next)``; the first registered
      listener is the outermost; the innermost ``next()`` returns the dispatch default.

    Every dispatch has a scope (by default the payload's ``agent`` attribute). A listener
    registered with ``scope=None`` hears every event; a listener registered with a scope
    ``S`` hears events whose scope is ``S`` or one of its descendants (the
    ``parent_of`` chain of the event's scope passes through ``S``), never events of
    siblings or ancestors. An event whose scope is ``None`` reaches only unscoped
    listeners.

    Each dispatch works on the listener set as it was when the dispatch started:
    registering or removing listeners from inside a listener affects later dispatches
    only.

    The listeners a scope admits are resolved once per listener set and kept (for
    scopes that support weak references); each dispatch re-walks the scope's owner
    chain, O(depth), to confirm it, so its cost does not grow with the number of
    listeners registered for other scopes. A bus whose owner links are tracked (the
    runtime's: every change is reported through ``_owners_changed``) confirms a
    chain with one comparison while no owner changed.

    The runtime's emit events (``agent/status``, ``agent/assistant-stream``, ...) take
    plain callables only: registering an ``async def`` for one raises ``TypeError``.

    Args:
        parent_of: gives the owner of a scope, or ``None`` for a root; the runtime maps
            an agent to its parent agent. Without it no scope has a parent.

    Example::

        bus = EventBus()
        dispose = bus.on("agent/status", lambda p: print(p.status))
        bus.emit("agent/status", payload)
        dispose()
    """

    __slots__ = (
        "_cache",
        "_listeners",
        "_owners",
        "_parent_of",
        "_watchers",
        "listened",
    )

    def __init__(
        self, *, parent_of: Callable[[object], object | None] | None = None
    ) -> None:
        # Only names with at least one listener are keys, so "nobody listens" is one
        # failed dictionary lookup.
        self._listeners: dict[str, tuple[_Entry, ...]] = {}
        # name -> called after every registration for that name (runtime use).
        self._watchers: dict[str, Callable[[], None]] = {}
        #: A live read-only view whose keys are the names with at least one listener:
        #: ``name in bus.listened`` is :meth:`has_listeners` without a call (hot paths).
        self.listened: Mapping[str, object] = MappingProxyType(self._listeners)
        self._parent_of = parent_of if parent_of is not None else _no_parent
        # name -> id(scope) -> resolution; dropped whenever ``name``'s listeners change.
        self._cache: dict[str, dict[int, _Resolved]] = {}
        # How many owner-link changes were reported; -1 while nobody reports them
        # (owner chains are then re-walked on every use).
        self._owners = -1

    # ------------------------------------------------------------------ registration

    def on(
        self,
        name: str,
        listener: Callable[..., Any],
        *,
        scope: object | None = None,
        prepend: bool = False,
    ) -> Callable[[], None]:
        """Register ``listener`` for the event ``name``.

        Never blocks. The listener's shape depends on how the event is dispatched: a
        plain callable for emit events, an async callable for serial events, an async
        ``(payload, next)`` callable for waterfall events.

        Args:
            name: the event name, e.g. ``"agent/status"``.
            listener: the callable to register. Registering the same callable twice
                makes two independent registrations.
            scope: hear only events about this scope and its descendants; ``None``
                hears everything.
            prepend: run before the listeners already registered for ``name``.

        Returns:
            An idempotent disposer that removes this registration.

        Raises:
            TypeError: ``name`` is not a string, ``listener`` is not callable, or
                ``listener`` is an async callable and ``name`` is one of the
                runtime's emit events (nothing would await it).
        """
        if not isinstance(name, str):
            raise TypeError(f"event name must be a str, got {name!r}")
        if not callable(listener):
            raise TypeError(f'listener for "{name}" is not callable: {listener!r}')
        if name in EMIT_EVENT_NAMES and _is_async(listener):
            raise TypeError(
                f'"{name}" is an emit event: its listeners are plain (synchronous) '
                f"callables, and nothing would await the async callable {listener!r}. "
                "Register a plain function instead; to do async work from it, hand the "
                "payload to a task (e.g. send it on a trio memory channel read by a "
                "task in your nursery)."
            )
        entry = _Entry(self, name, listener, scope)
        current = self._listeners.get(name, ())
        self._listeners[name] = (entry, *current) if prepend else (*current, entry)
        self._cache.pop(name, None)
        watcher = self._watchers.get(name)
        if watcher is not None:
            watcher()
        return entry

    def _watch(self, name: str, watcher: Callable[[], None]) -> None:
        """Call ``watcher()`` after every registration for ``name``. Runtime use only
        (the runtime's agents relay ``session/event`` only once someone listens)."""
        self._watchers[name] = watcher

    def has_listeners(self, name: str) -> bool:
        """Whether any listener (of any scope) is registered for ``name``.

        Lets callers skip building a payload nobody would receive.
        """
        return name in self._listeners

    def _track_owners(self) -> None:
        """Promise that every change of what ``parent_of`` gives is reported through
        :meth:`_owners_changed`. Runtime use only (its agent and preset registries
        report theirs); idempotent."""
        if self._owners < 0:
            self._owners = 0

    def _owners_changed(self) -> None:
        """An owner link changed: resolved owner chains are walked again. Runtime use
        only; never blocks."""
        if self._owners >= 0:
            self._owners += 1

    # ------------------------------------------------------------------ resolution

    def _chain(self, scope: object) -> tuple[tuple[object, ...], object | None]:
        """The owners above ``scope``, nearest first, and what ``parent_of`` gave
        after the last of them: ``None``, or an earlier member when the chain loops."""
        seen = {id(scope)}
        chain: list[object] = []
        parent_of = self._parent_of
        current = parent_of(scope)
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            chain.append(current)
            current = parent_of(current)
        return tuple(chain), current

    def _still(self, resolved: _Resolved, scope: object) -> bool:
        """Whether ``scope``'s owner chain is still the one ``resolved`` was built on."""
        owners = self._owners
        if resolved.owners == owners >= 0:  # tracked, and no owner changed since
            return True
        parent_of = self._parent_of
        current = parent_of(scope)
        for owner in resolved.chain:
            if current is not owner:
                return False
            current = parent_of(current)
        if current is not resolved.tail:
            return False
        resolved.owners = owners
        return True

    def _resolve(
        self, name: str, entries: tuple[_Entry, ...], scope: object | None
    ) -> tuple[Callable[..., Any], ...]:
        """The listeners of ``entries`` that ``scope`` admits, in registration order."""
        if scope is None:
            return tuple(e.listener for e in entries if e.scope is None)
        by_scope = self._cache.get(name)
        if by_scope is not None:
            resolved = by_scope.get(id(scope))
            if (
                resolved is not None
                and resolved.entries is entries
                and resolved.ref() is scope
                and self._still(resolved, scope)
            ):
                return resolved.listeners
        owners = self._owners
        chain, tail = self._chain(scope)
        ancestry = {id(scope), *map(id, chain)}
        listeners = tuple(
            e.listener for e in entries if e.scope is None or id(e.scope) in ancestry
        )
        try:
            ref = weakref.ref(scope)
        except TypeError:  # no weak references: resolve on every dispatch
            return listeners
        if by_scope is None or len(by_scope) >= _CACHE_LIMIT:
            by_scope = self._cache[name] = {}
        by_scope[id(scope)] = _Resolved(ref, entries, chain, tail, listeners, owners)
        return listeners

    # ------------------------------------------------------------------ dispatch

    def emit(
        self, name: str, payload: P, *, scope: object | None = _FROM_PAYLOAD
    ) -> None:
        """Call every admitted listener of ``name`` with ``payload``, in order.

        Synchronous; never blocks. A listener that raises is logged (with the event
        name) through the ``dsh_trio`` logger and the remaining listeners still run;
        the failure never reaches the caller. Exceptions outside ``Exception``
        (``KeyboardInterrupt``) propagate.

        Args:
            name: the event name.
            payload: passed to each listener.
            scope: the dispatch scope; by default ``payload.agent`` (or ``None``).
        """
        entries = self._listeners.get(name)
        if entries is None:
            return
        if scope is _FROM_PAYLOAD:
            scope = getattr(payload, "agent", None)
        dispatch(name, self._resolve(name, entries, scope), payload)

    def _target(self, name: str, scope: object) -> EmitTarget:
        """An ``EmitTarget`` for emitting ``name`` about ``scope``. Runtime use only."""
        return EmitTarget(self, name, scope)

    async def serial(
        self, name: str, payload: P, *, scope: object | None = _FROM_PAYLOAD
    ) -> object | None:
        """Await the admitted listeners of ``name`` in order until one bails.

        Executes a checkpoint first, then awaits each listener; cancellation is
        delivered wherever a listener waits, and stops the chain. A listener result
        other than ``None`` or ``False`` stops the chain and is returned.

        Args:
            name: the event name.
            payload: passed to each listener.
            scope: the dispatch scope; by default ``payload.agent`` (or ``None``).

        Returns:
            The bailing listener's result, or ``None`` when every listener returned
            ``None``/``False`` (or none is registered).

        Raises:
            Exception: the first listener failure, unchanged; later listeners do not run.
        """
        await trio.lowlevel.checkpoint()
        entries = self._listeners.get(name)
        if entries is None:
            return None
        if scope is _FROM_PAYLOAD:
            scope = getattr(payload, "agent", None)
        for listener in self._resolve(name, entries, scope):
            result = await listener(payload)
            if result is not None and result is not False:
                return cast("object", result)
        return None

    async def waterfall(
        self, name: str, payload: P, default: T, *, scope: object | None = _FROM_PAYLOAD
    ) -> T:
        """Run the admitted listeners of ``name`` as middleware around ``default``.

        Executes a checkpoint first. The first registered listener is the outermost:
        it receives ``(payload, next)``, and ``await next()`` runs the next listener,
        down to the innermost ``next()``, which returns ``default``. Every ``next`` of
        one dispatch shares one cursor: calling it twice advances the chain twice. A
        listener that does not call ``next`` short-circuits the listeners after it.

        Args:
            name: the event name.
            payload: passed to each listener (it cannot be replaced along the chain).
            default: what the innermost ``next()`` returns.
            scope: the dispatch scope; by default ``payload.agent`` (or ``None``).

        Returns:
            The outermost listener's result (``default`` when nobody listens).

        Raises:
            Exception: a listener failure, unchanged.
        """
        await trio.lowlevel.checkpoint()
        entries = self._listeners.get(name)
        if entries is None:
            return default
        if scope is _FROM_PAYLOAD:
            scope = getattr(payload, "agent", None)
        chain = self._resolve(name, entries, scope)
        cursor = 0

        async def next_() -> T:
            nonlocal cursor
            if cursor >= len(chain):
                return default  # noqa: ASYNC910  # private: the scheduler around it checkpoints
            listener = chain[cursor]
            cursor += 1
            return cast("T", await listener(payload, next_))

        return await next_()
