"""``PresetRegistry``: preset generations, agent binding, selection before the first turn."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ..errors import (
    AgentDisposedError,
    PresetError,
    PresetLockedError,
    PresetNotFoundError,
)
from ..loop import Agent, PresetSelected
from ..tools import ToolRegistry
from ..values import AgentOptions
from ._definition import PresetDefinition, check_definition, dump_preset
from ._generation import Generation, PresetGeneration
from ._info import (
    PresetInfo as PresetInfo,
    PresetInventory as PresetInventory,
    check_agent as _check_agent,
    check_id as _check_id,
    sort_key as _sort_key,
)

if TYPE_CHECKING:
    from ..events import EventBus

__all__ = ["PresetInfo", "PresetInventory", "PresetRegistry", "SELECTED_EVENT"]

#: The durable log event ``select`` appends (data ``{"agentPreset": id}``).
SELECTED_EVENT = "agent-preset/selected"


@attrs.define(eq=False)
class _Binding:
    generation: Generation
    base_options: AgentOptions


def _with_defaults(options: AgentOptions, defaults: dict[str, Any]) -> AgentOptions:
    unset = {k: v for k, v in defaults.items() if getattr(options, k) is None}
    return attrs.evolve(options, **unset) if unset else options


class PresetRegistry:
    """The runtime's presets: generations of named compositions, and the agents bound to them.

    Obtained as ``runtime.presets``; no public constructor. Registering a definition
    activates its plugin rows once into a new generation; an agent binds to the
    generation current when it is created (a child to its parent's exact generation)
    and keeps it when the preset is registered again. A retired generation is torn
    down when no agent and no lease uses it any more.

    Example::

        unregister = await runtime.presets.register(dsh.load_preset("coder.yml"))
        async with runtime.agents.open(preset="coder", options=options) as agent:
            assert runtime.presets.composed_preset(agent) == "coder"
        await unregister()
    """

    def __init__(
        self,
        *,
        bus: EventBus,
        tools: ToolRegistry,
        spawn: Callable[..., None],
        is_published: Callable[[Agent], bool],
        default: str | None = None,
    ) -> None:
        self._bus = bus
        self._tools = tools
        self._spawn = spawn
        self._is_published = is_published
        self._current: dict[str, Generation] = {}
        self._activating: set[str] = set()
        self._alive: set[Generation] = set()
        self._bindings: dict[Agent, _Binding] = {}
        self._locks: dict[Agent, trio.Lock] = {}
        self._count = 0
        self._closed = False
        #: The configured default preset id.
        self.default = default
        #: A volatile override of ``default`` (read at every resolution).
        self.selected_default: str | None = None

    # ------------------------------------------------------------------ definitions

    async def register(
        self, definition: PresetDefinition
    ) -> Callable[[], Awaitable[None]]:
        """Activate ``definition`` into a new generation; return its async disposer.

        Blocks while the rows' setup functions run (async ones are awaited).
        An import or setup failure does not raise: the preset is kept as ``broken``
        (see :meth:`list`) and cannot be mounted. The disposer unregisters the
        definition and retires its generation, which is torn down once no live
        agent uses it; calling it again does nothing.

        Cancellation (a setup that never returns, under the caller's timeout) tears
        down what the rows registered so far and registers nothing; the id can be
        registered again. A ``BaseException`` other than an ``Exception`` raised by a
        setup (``KeyboardInterrupt``) is not kept as a diagnostic: it propagates
        the same way.

        Raises:
            PresetError: the runtime is closed, the id is blank or already
                registered (or being registered), or a row is malformed (a blank name, a name that is not
                ``package.module:function``, a group without rows, config that is not
                JSON); nothing is registered.
            TypeError: ``definition`` is not a :class:`PresetDefinition`, or one of
                its fields has the wrong type.
        """
        check_definition(definition)
        preset_id = definition.id
        if self._closed:
            raise PresetError(
                f'the runtime is closed: preset "{preset_id}" cannot be registered'
            )
        if preset_id in self._activating:
            raise PresetError(
                f'a preset "{preset_id}" is being registered: its setup is still running'
            )
        if preset_id in self._current:
            raise PresetError(
                f'a preset "{preset_id}" is already registered '
                "(call its disposer before registering it again)"
            )
        self._count += 1
        generation = Generation(
            definition=definition,
            number=self._count,
            bus=self._bus,
            tools=ToolRegistry(base=self._tools),
        )
        self._activating.add(preset_id)
        try:
            self._alive.add(generation)
            await generation.activate()
            if self._closed:  # closed while the setups ran: nobody would tear it down
                raise PresetError(
                    f'the runtime closed while preset "{preset_id}" was being registered'
                )
        except BaseException:
            with trio.CancelScope(shield=True):
                await generation.teardown()
            self._alive.discard(generation)
            raise
        finally:
            self._activating.discard(preset_id)
        self._current[preset_id] = generation

        async def unregister() -> None:
            if self._current.get(preset_id) is generation:
                del self._current[preset_id]
            generation.retired = True
            await self._collect(generation)

        return unregister

    def _info(self, generation: Generation) -> PresetInfo:
        d = generation.definition
        return PresetInfo(
            id=d.id,
            name=d.name,
            description=d.description,
            order=d.order,
            broken=generation.broken,
            is_default=d.id == self.effective_default,
        )

    @property
    def effective_default(self) -> str | None:
        """``selected_default`` if set, else ``default``."""
        return (
            self.selected_default if self.selected_default is not None else self.default
        )

    def list(self) -> list[PresetInfo]:
        """The registered presets, sorted by ``order`` (missing last), then id."""
        return sorted((self._info(g) for g in self._current.values()), key=_sort_key)

    def resolve(self, id: str | None = None) -> PresetInfo:
        """The preset ``id`` (``None``: the effective default).

        Raises:
            PresetNotFoundError: no such preset (the message lists the available ids).
        """
        return self._info(self._lookup(id))

    def read_document(self, id: str) -> str:
        """The YAML text of the preset ``id``'s definition.

        Raises:
            PresetNotFoundError: no such preset.
        """
        return dump_preset(self._lookup(id, "read_document").definition)

    def composition_inventory(self) -> builtins.list[PresetInventory]:
        """Every registered preset with its rows, in ``list()`` order."""
        return [
            PresetInventory(
                id=info.id,
                name=info.name,
                description=info.description,
                is_default=info.is_default,
                broken=info.broken,
                rows=self._current[info.id].definition.plugins,
            )
            for info in self.list()
        ]

    def _lookup(self, id: str | None, method: str = "resolve") -> Generation:
        _check_id(id, method)
        wanted = id if id is not None else self.effective_default
        generation = self._current.get(wanted) if wanted is not None else None
        if generation is None:
            available = tuple(sorted(self._current))
            if wanted is None:
                raise PresetError(
                    "no preset id was given and no default preset is configured "
                    f"(available: {', '.join(available) or 'none'})"
                )
            raise PresetNotFoundError(wanted, available)
        return generation

    def _mountable(self, id: str | None, method: str = "mount") -> Generation:
        generation = self._lookup(id, method)
        if generation.broken is not None:
            raise PresetError(
                f'preset "{generation.preset_id}" is broken and cannot be mounted: '
                f"{generation.broken}"
            )
        return generation

    # ------------------------------------------------------------------ binding

    def mount(self, agent: Agent, id: str | None = None) -> str:
        """Bind ``agent`` to the current generation of ``id`` (``None``: the default).

        Synchronous. Only before publication (in ``create``'s ``setup``); an agent
        already bound is rebound.

        Raises:
            PresetError: ``agent`` is already published, or the preset is broken.
            PresetNotFoundError: no such preset.
            TypeError: ``agent`` is not an Agent, or ``id`` is not a str or None.
        """
        _check_agent(agent, "mount")
        _check_id(id, "mount")
        if self._is_published(agent):
            raise PresetError(
                f'agent "{agent.id}" is published: mount it in its creation setup, '
                "or use select() before its first turn"
            )
        return self.recompose(agent, id)

    def recompose(self, agent: Agent, id: str | None) -> str:
        """Rebind ``agent`` to the current generation of ``id``; the caller checks the session.

        Raises:
            AgentDisposedError: ``agent`` is disposed.
            PresetError, PresetNotFoundError, TypeError: as :meth:`mount`.
        """
        _check_agent(agent, "recompose")
        if agent.disposed:
            raise AgentDisposedError(
                f'agent "{agent.id}" is disposed: it cannot bind to a preset'
            )
        generation = self._mountable(id, "recompose")
        self._bind(agent, generation)
        return generation.preset_id

    def compose_from(self, child: Agent, parent: Agent) -> str | None:
        """Join ``child`` to ``parent``'s exact generation; its preset id, or ``None``.

        Synchronous. ``None`` when ``parent`` is bound to no preset.

        Raises:
            PresetError: ``parent``'s generation is gone, or ``child`` already joined one.
            AgentDisposedError: ``child`` is disposed.
            TypeError: ``child`` or ``parent`` is not an Agent.
        """
        _check_agent(child, "compose_from", "child")
        _check_agent(parent, "compose_from", "parent")
        if child.disposed:
            raise AgentDisposedError(
                f'agent "{child.id}" is disposed: it cannot join a preset'
            )
        binding = self._bindings.get(parent)
        if binding is None:
            return None
        generation = binding.generation
        if generation.torn_down:
            raise PresetError(
                f'agent "{parent.id}"\'s preset "{generation.preset_id}" generation '
                f"{generation.number} is gone"
            )
        if child in self._bindings:
            raise PresetError(f'agent "{child.id}" is already bound to a preset')
        self._bind(child, generation)
        return generation.preset_id

    def composed_preset(self, agent: Agent) -> str | None:
        """The preset id ``agent`` is bound to, or ``None``.

        Raises:
            TypeError: ``agent`` is not an Agent.
        """
        _check_agent(agent, "composed_preset")
        binding = self._bindings.get(agent)
        return binding.generation.preset_id if binding is not None else None

    def service_for(self, agent: Agent, name: str) -> object | None:
        """The service ``name`` provided inside ``agent``'s generation, or ``None``.

        ``None`` too when ``agent`` is bound to no preset (or was disposed).

        Raises:
            TypeError: ``agent`` is not an Agent, or ``name`` is not a str.
        """
        _check_agent(agent, "service_for")
        if not isinstance(name, str):
            raise TypeError(
                f"presets.service_for() expects a service name (str), got {name!r:.60}"
            )
        binding = self._bindings.get(agent)
        return binding.generation.services.get(name) if binding is not None else None

    @asynccontextmanager
    async def acquire_scope(
        self, id: str | None = None
    ) -> AsyncIterator[PresetGeneration]:
        """Lease the current generation of ``id`` (``None``: the default) without an agent.

        The generation is not torn down while the lease is held.

        Raises:
            PresetError, PresetNotFoundError: as :meth:`mount`.
            TypeError: ``id`` is not a str or None.
        """
        generation = self._mountable(id, "acquire_scope")
        generation.users += 1
        try:
            await trio.lowlevel.checkpoint()
            yield PresetGeneration(generation)
        finally:
            generation.users -= 1
            with trio.CancelScope(shield=True):
                await self._collect(generation)  # noqa: ASYNC102  # teardown is bounded and must finish

    def _bind(self, agent: Agent, generation: Generation) -> None:
        old = self._bindings.get(agent)
        if old is not None and old.generation is generation:
            return
        generation.users += 1
        base = old.base_options if old is not None else agent.options
        self._bindings[agent] = _Binding(generation, base)
        self._bus._owners_changed()  # the agent's event-bus parent may differ now
        agent.options = _with_defaults(base, generation.defaults)
        if old is not None:
            old.generation.users -= 1
            if old.generation.retired and old.generation.users == 0:
                self._spawn(self._collect, old.generation)

    async def release(self, agent: Agent) -> builtins.list[Exception]:
        """Unbind a disposed agent; tear its generation down if it was the last user.

        Runtime use only (the agent registry's disposal).
        """
        self._locks.pop(agent, None)
        binding = self._bindings.pop(agent, None)
        if binding is None:
            await trio.lowlevel.checkpoint()
            return []
        self._bus._owners_changed()  # the agent's generation is no longer its parent
        binding.generation.users -= 1
        return await self._collect(binding.generation)

    async def _collect(self, generation: Generation) -> builtins.list[Exception]:
        if generation.users or not generation.retired:
            await trio.lowlevel.checkpoint()
            return []
        self._alive.discard(generation)
        return await generation.teardown()

    async def aclose(self) -> builtins.list[Exception]:
        """Retire and tear down every generation. Runtime use only (it is closing)."""
        self._closed = True
        self._current.clear()
        errors: builtins.list[Exception] = []
        for generation in builtins.list(self._alive):
            generation.retired = True
            errors += await self._collect(generation)
        await trio.lowlevel.checkpoint()
        return errors

    def plan(self, preset: str | None, parent: Agent | None) -> Generation | None:
        """What a new agent will bind to: its parent's generation (a child), else
        ``preset``, else the default if any preset is registered. Runtime use only.

        Raises:
            PresetError: the parent's generation is gone, or the preset is broken.
            PresetNotFoundError: ``preset`` is not registered.
        """
        if parent is not None:
            generation = self._generation_of(parent)
            if generation is not None:
                if generation.torn_down:
                    raise PresetError(
                        f'agent "{parent.id}"\'s preset "{generation.preset_id}" '
                        f"generation {generation.number} is gone"
                    )
                return generation
            return self._mountable(preset, "create") if preset is not None else None
        return self._generation_for(preset)

    def join(self, agent: Agent, generation: Generation) -> None:
        """Bind a new agent to the generation :meth:`plan` chose. Runtime use only."""
        self._bind(agent, generation)

    def _generation_for(self, preset: str | None) -> Generation | None:
        """What a new root agent binds to: ``preset``, else the default if any is registered."""
        if preset is not None:
            return self._mountable(preset, "create")
        if self.effective_default is None or not self._current:
            return None
        return self._mountable(None, "create")

    def scope_parent(self, scope: object) -> object | None:
        """The event-bus parent of a bound root agent: its generation. Runtime use only."""
        if not isinstance(scope, Agent):
            return None
        binding = self._bindings.get(scope)
        return binding.generation if binding is not None else None

    def _generation_of(self, agent: Agent) -> Generation | None:
        binding = self._bindings.get(agent)
        return binding.generation if binding is not None else None

    # ------------------------------------------------------------------ selection

    async def select(self, agent: Agent, id: str) -> str:
        """Bind ``agent`` to preset ``id`` before its first turn, durably.

        Serialised per agent. Rebinds the agent, appends the durable log event
        ``agent-preset/selected {agentPreset}``, emits the live
        ``agent-preset/selected`` (:class:`~dsh_trio.events.PresetSelected`), and
        returns once the event is written (``agent.flush()``). Cancellation while
        waiting for another ``select`` of the same agent changes nothing.

        Raises:
            PresetLockedError: the agent has an open turn or a finished one (nothing
                is appended).
            PresetError, PresetNotFoundError: as :meth:`mount`.
            AgentDisposedError: ``agent`` is disposed.
            TypeError: ``agent`` is not an Agent, or ``id`` is not a str.
        """
        _check_agent(agent, "select")
        if not isinstance(id, str):
            raise TypeError(
                f"presets.select() expects a preset id (str), got {id!r:.60}"
            )
        if agent.disposed:
            raise AgentDisposedError(
                f'agent "{agent.id}" is disposed: it cannot bind to a preset'
            )
        lock = self._locks.setdefault(agent, trio.Lock())
        async with lock:
            session = agent.session
            if session.open_turn is not None or session.last_turn > 0:
                raise PresetLockedError(
                    f'agent "{agent.id}" cannot select preset "{id}": its preset is '
                    f"locked once a turn has started (last turn {session.last_turn})"
                )
            preset_id = self.recompose(agent, id)
            session.append(SELECTED_EVENT, {"agentPreset": preset_id})
            self._bus.emit(SELECTED_EVENT, PresetSelected(str(agent.id), preset_id))
            await agent.flush()
        return preset_id
