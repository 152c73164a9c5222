"""``EventBus._target``: the listeners one scope admits, kept for a burst of emits.

A model attempt emits its frames through one target, so a frame costs one lookup
however many listeners other scopes registered; the target still follows every
change of the listener set, as ``emit`` does, and every change of its scope's owner
chain (agents created, bound to presets, disposed) once renewed.
"""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.events import EventBus
from dsh_trio.events._target import EmitTarget
from dsh_trio.loop import Agent

NAME = "agent/assistant-stream"


@attrs.frozen(eq=False)
class Payload:
    agent: object = None
    n: int = 0


class Node:
    def __init__(self, parent: Node | None = None) -> None:
        self.parent = parent


def tree_bus() -> EventBus:
    return EventBus(
        parent_of=lambda s: s.parent if isinstance(s, Node) else None,
    )


def test_a_target_admits_what_emit_admits() -> None:
    bus = tree_bus()
    root = Node()
    child = Node(root)
    sibling = Node(root)
    heard: list[str] = []
    bus.on(NAME, lambda p: heard.append("global"))
    bus.on(NAME, lambda p: heard.append("root"), scope=root)
    bus.on(NAME, lambda p: heard.append("child"), scope=child)
    bus.on(NAME, lambda p: heard.append("sibling"), scope=sibling)
    target = bus._target(NAME, child)
    assert len(target.current()) == 3
    target.emit(Payload(child))
    by_target = list(heard)
    heard.clear()
    bus.emit(NAME, Payload(child))
    assert by_target == heard == ["global", "root", "child"]


def test_a_target_follows_listeners_added_and_removed_between_emits() -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[str] = []
    target = bus._target(NAME, scope)
    assert target.current() == ()
    dispose = bus.on(NAME, lambda p: heard.append("a"), scope=scope)
    if target.current():
        target.emit(Payload(scope, 1))
    bus.on(NAME, lambda p: heard.append("b"))
    bus.on(NAME, lambda p: heard.append("other"), scope=Node())
    if target.current():
        target.emit(Payload(scope, 2))
    dispose()
    if target.current():
        target.emit(Payload(scope, 3))
    assert heard == ["a", "a", "b", "b"]


def test_a_listener_added_inside_an_emit_hears_the_next_one() -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[str] = []

    def first(p: Payload) -> None:
        heard.append(f"first {p.n}")
        if p.n == 1:
            bus.on(NAME, lambda q: heard.append(f"late {q.n}"), scope=scope)

    bus.on(NAME, first, scope=scope)
    target = bus._target(NAME, scope)
    for n in (1, 2):
        if target.current():
            target.emit(Payload(scope, n))
    assert heard == ["first 1", "first 2", "late 2"]


def test_a_failing_or_async_listener_is_logged_and_the_rest_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = tree_bus()
    scope = Node()
    heard: list[int] = []

    def boom(p: Payload) -> None:
        raise RuntimeError("boom")

    class Misfire:
        def __call__(self, p: Payload) -> object:
            async def later() -> None:
                pass

            return later()

    bus.on(NAME, boom, scope=scope)
    bus.on("custom", Misfire(), scope=scope)
    bus.on(NAME, lambda p: heard.append(p.n), scope=scope)
    with caplog.at_level(logging.ERROR, logger="dsh_trio"):
        bus._target(NAME, scope).emit(Payload(scope, 1))
        target = bus._target("custom", scope)
        target.emit(Payload(scope, 2))
    assert heard == [1]
    assert 'listener of event "agent/assistant-stream" raised' in caplog.text
    assert 'listener of emit event "custom" returned an awaitable' in caplog.text


def test_a_frame_costs_the_same_lookup_however_many_scopes_listen() -> None:
    """Many scoped listeners elsewhere do not reach a target's resolution."""
    bus = tree_bus()
    scope = Node()
    others = [Node() for _ in range(1_000)]
    for other in others:
        bus.on(NAME, lambda p: None, scope=other)
    mine: list[int] = []
    bus.on(NAME, lambda p: mine.append(p.n), scope=scope)
    calls = 0
    parent_of = bus._parent_of

    def counting(s: object) -> object | None:
        nonlocal calls
        calls += 1
        return parent_of(s)

    bus._parent_of = counting
    target = bus._target(NAME, scope)
    resolved = calls
    for n in range(100):
        if target.current():
            target.emit(Payload(scope, n))
    # The owner chain is read when the target resolves, not per emit.
    assert calls == resolved
    assert mine == list(range(100))


def test_renew_reads_the_owner_chain_again() -> None:
    """``current()`` keeps the chain read at the last ``renew()`` (a model attempt
    renews its target as it opens); ``renew()`` reads it again."""
    bus = tree_bus()
    old, new = Node(), Node()
    scope = Node(old)
    bus.on(NAME, lambda p: None, scope=old)
    target = bus._target(NAME, scope)
    assert len(target.current()) == 1
    assert len(target.renew()) == 1
    scope.parent = new
    assert len(target.current()) == 1  # within a span the chain is not read
    assert target.renew() == ()
    scope.parent = old
    assert len(target.renew()) == 1


# --------------------------------------------------------------------------- owner changes
# The runtime's agent and preset registries report every change of an event scope's
# parent (``EventBus._owners_changed``), so a kept resolution (an attempt's target, the
# bus's own cache) is confirmed with one comparison instead of a walk. Random sequences
# of creations, children, preset bindings and disposals check after each that a kept
# target, renewed, gives exactly the listeners a fresh walk of the owner chain admits;
# and that the check notices when a change goes unreported.

PLUGINS = "emit_target_owner_plugins"
PRESETS = ("p", "q")


def _listen(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
    """A generation-scoped listener, so a binding changes what an agent hears."""
    scope.on(NAME, lambda payload: None)


@pytest.fixture
def listen_plugin() -> Iterator[None]:
    """The plugin module the presets of these tests name (``PLUGINS:listen``)."""
    module = types.ModuleType(PLUGINS)
    module.listen = _listen  # type: ignore[attr-defined]
    saved = sys.modules.get(PLUGINS)
    sys.modules[PLUGINS] = module
    try:
        yield
    finally:
        if saved is None:
            del sys.modules[PLUGINS]
        else:
            sys.modules[PLUGINS] = saved


def _definition(preset_id: str) -> dsh.PresetDefinition:
    return dsh.PresetDefinition(
        id=preset_id, plugins=(dsh.PluginRow(name=f"{PLUGINS}:listen"),)
    )


def _fresh(bus: EventBus, scope: object) -> tuple[Callable[..., Any], ...]:
    """The listeners ``scope`` admits now, from a walk of its owner chain (no cache)."""
    ancestry = {id(scope)}
    seen = {id(scope)}
    current = bus._parent_of(scope)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        ancestry.add(id(current))
        current = bus._parent_of(current)
    return tuple(
        e.listener
        for e in bus._listeners.get(NAME, ())
        if e.scope is None or id(e.scope) in ancestry
    )


class _World:
    """A runtime, its agents (live and disposed) and one kept target per agent."""

    def __init__(self, runtime: dsh.Runtime) -> None:
        self.runtime = runtime
        self.bus = runtime.events
        self.live: list[dsh.AgentHandle] = []
        self.targets: list[tuple[dsh.Agent, EmitTarget]] = []
        self.unregister: dict[str, Callable[[], Any]] = {}
        self.count = 0

    def mismatches(self) -> list[str]:
        """The agents whose kept target disagrees with a fresh resolution."""
        wrong = []
        for agent, target in self.targets:
            expected = _fresh(self.bus, agent)
            if target.renew() != expected:
                wrong.append(f"target of {agent.id}")
            entries = self.bus._listeners.get(NAME, ())
            if self.bus._resolve(NAME, entries, agent) != expected:
                wrong.append(f"cache of {agent.id}")
        return wrong

    async def register(self, preset_id: str) -> None:
        old = self.unregister.pop(preset_id, None)
        if old is not None:
            await old()
        self.unregister[preset_id] = await self.runtime.presets.register(
            _definition(preset_id)
        )

    async def create(
        self,
        parent: int | None,
        preset: str | None,
        mount: str | None,
        *,
        listen: bool = True,
    ) -> None:
        self.count += 1
        world = self

        async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> None:
            await trio.lowlevel.checkpoint()
            # Its own listener, kept after its disposal (``scope.on`` would drop it,
            # changing the listener set, which alone makes a target resolve again).
            if listen:
                world.bus.on(NAME, lambda payload: None, scope=agent)
            world.targets.append((agent, world.bus._target(NAME, agent)))
            if mount is not None and mount in world.unregister:
                world.runtime.presets.mount(agent, mount)

        owner = None
        if parent is not None and self.live:
            owner = self.live[parent % len(self.live)].agent
        handle = await self.runtime.agents.create(
            f"a{self.count}",
            parent=owner,
            preset=preset if owner is None and preset in self.unregister else None,
            setup=setup,
        )
        self.live.append(handle)

    async def select(self, index: int, preset_id: str) -> None:
        if not self.live or preset_id not in self.unregister:
            return
        await self.runtime.presets.select(
            self.live[index % len(self.live)].agent, preset_id
        )

    async def dispose(self, index: int) -> None:
        if not self.live:
            return
        await self.live[index % len(self.live)].dispose()
        self.live = [h for h in self.live if not h.agent.disposed]


_preset = st.sampled_from(PRESETS)
_ops = st.one_of(
    st.tuples(st.just("register"), _preset),
    st.tuples(
        st.just("create"),
        st.none() | st.integers(0, 7),
        st.none() | _preset,
        st.none() | _preset,
    ),
    st.tuples(st.just("select"), st.integers(0, 7), _preset),
    st.tuples(st.just("dispose"), st.integers(0, 7)),
    st.tuples(st.just("check")),
)


async def _play(ops: list[tuple[Any, ...]], *, check_each: bool) -> list[str]:
    async with dsh.open_runtime() as runtime:
        world = _World(runtime)
        wrong: list[str] = []
        for op in ops:
            kind = op[0]
            if kind == "register":
                await world.register(op[1])
            elif kind == "create":
                await world.create(op[1], op[2], op[3])
            elif kind == "select":
                await world.select(op[1], op[2])
            elif kind == "dispose":
                await world.dispose(op[1])
            if check_each or kind == "check":
                wrong += world.mismatches()
        wrong += world.mismatches()
        return wrong


@pytest.mark.usefixtures("listen_plugin")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_ops, max_size=14), check_each=st.booleans())
def test_a_kept_target_admits_what_a_fresh_walk_admits(
    ops: list[tuple[Any, ...]], check_each: bool
) -> None:
    assert trio.run(lambda: _play(ops, check_each=check_each)) == []


# The scenarios below each need one kind of report; without it the check above fails.

Ops = list[tuple[Any, ...]]
_SELECT: Ops = [("register", "p"), ("create", None, None, None), ("check",)]
_SELECT += [("select", 0, "p")]
_DISPOSE_CHILD: Ops = [("create", None, None, None), ("create", 0, None, None)]
_DISPOSE_CHILD += [("check",), ("dispose", 1)]
_MOUNT: Ops = [("register", "p"), ("create", None, None, "p")]


@pytest.mark.usefixtures("listen_plugin")
@pytest.mark.parametrize("ops", [_SELECT, _DISPOSE_CHILD], ids=["select", "dispose"])
def test_the_scenarios_agree_with_a_fresh_walk(ops: list[tuple[Any, ...]]) -> None:
    assert trio.run(lambda: _play(ops, check_each=False)) == []


@pytest.mark.usefixtures("listen_plugin")
@pytest.mark.parametrize(
    "ops", [_SELECT, _DISPOSE_CHILD, _MOUNT], ids=["select", "dispose", "mount"]
)
def test_an_unreported_owner_change_is_noticed(
    ops: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EventBus, "_owners_changed", lambda self: None)
    assert trio.run(lambda: _play(ops, check_each=False)) != []


def test_a_bus_nobody_reports_to_walks_the_chain() -> None:
    """A plain bus (no registry reports its owners) re-reads the chain on renew."""

    bus = tree_bus()
    root, child = Node(), Node()
    heard: list[str] = []
    bus.on(NAME, lambda p: heard.append("root"), scope=root)
    target = bus._target(NAME, child)
    assert target.current() == ()
    child.parent = root  # unreported: a plain bus promises nothing
    assert len(target.renew()) == 1


async def _release_directly() -> list[str]:
    """A bound root agent's binding dropped while it is still registered (what its
    teardown does before it unregisters it)."""
    async with dsh.open_runtime() as runtime:
        world = _World(runtime)
        await world.register("p")
        await world.create(None, "p", None)
        assert world.mismatches() == []
        await runtime.presets.release(world.live[0].agent)
        return world.mismatches()


@pytest.mark.usefixtures("listen_plugin")
def test_a_released_binding_is_reported() -> None:
    assert trio.run(_release_directly) == []


@pytest.mark.usefixtures("listen_plugin")
def test_an_unreported_release_is_noticed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EventBus, "_owners_changed", lambda self: None)
    assert trio.run(_release_directly) != []


async def _resolved_before_registration(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A child agent whose chain was resolved while it was built, before the registry
    knew its owner."""
    from dsh_trio.nursery import _creation

    async with dsh.open_runtime() as runtime:
        world = _World(runtime)

        class Resolving(Agent):
            def __init__(self, *args: Any) -> None:
                super().__init__(*args)
                world.targets.append((self, world.bus._target(NAME, self)))

        await world.create(None, None, None)
        monkeypatch.setattr(_creation, "Agent", Resolving)
        await world.create(0, None, None, listen=False)  # no listener set change
        return world.mismatches()


def test_a_registration_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    assert trio.run(_resolved_before_registration, monkeypatch) == []


def test_an_unreported_registration_is_noticed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(EventBus, "_owners_changed", lambda self: None)
    assert trio.run(_resolved_before_registration, monkeypatch) != []
