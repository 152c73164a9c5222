"""``runtime.agents.wait_for``: a handle only once creation completed, else the start's error.

A declared agent whose ``agent/created`` listener refuses is rolled back. Every waiter
on it gets :class:`AgentStartError`, whenever it began: before the start, while the
listener runs, while the failed creation is being rolled back (when another agent's
publication wakes every waiter to look again), or after the failure.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.errors import SessionNotFoundError

PLUGINS = "wait_for_plugins"


@attrs.define
class Gates:
    """What the plugin and the store wait on, and what they report."""

    created: trio.Event = attrs.field(factory=trio.Event)  # agent/created may end
    listening: list[str] = attrs.field(factory=list)  # agents in agent/created


@pytest.fixture
def gates() -> Iterator[Gates]:
    found = Gates()
    module = types.ModuleType(PLUGINS)

    def hold(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        """An ``agent/created`` listener that waits for the gate, then refuses or not."""
        refuse = bool(config.get("refuse"))

        async def created(event: dsh.AgentCreated) -> None:
            found.listening.append(event.agent.id)
            await found.created.wait()
            if refuse:
                raise RuntimeError(f"{event.agent.id} was refused")

        scope.on("agent/created", created)

    module.hold = hold  # type: ignore[attr-defined]
    saved = sys.modules.get(PLUGINS)
    sys.modules[PLUGINS] = module
    try:
        yield found
    finally:
        if saved is None:
            del sys.modules[PLUGINS]
        else:
            sys.modules[PLUGINS] = saved


class HeldWriter:
    """An in-memory writer whose ``close`` waits for its store's gate."""

    def __init__(self, header: dsh.SessionHeader, store: HeldStore) -> None:
        self._header = header
        self._store = store
        self._written = 0

    @property
    def header(self) -> dsh.SessionHeader:
        return self._header

    @property
    def durable_seq(self) -> int:
        return self._written

    async def append(self, events: Sequence[dsh.SessionEvent], *, sync: bool) -> None:
        await trio.lowlevel.checkpoint()
        self._written += len(events)

    async def close(self) -> None:
        if self._header.id == self._store.held_id:
            self._store.closing.set()
            await self._store.may_close.wait()
        else:
            await trio.lowlevel.checkpoint()


class HeldStore:
    """A store that holds nothing: every id is new; closing ``held_id`` waits."""

    durability: Literal["turn", "always", "none"] = "none"

    def __init__(self, held_id: str) -> None:
        self.held_id = held_id
        self.closing = trio.Event()  # the held writer's close began
        self.may_close = trio.Event()

    async def create(self, header: dsh.SessionHeader) -> HeldWriter:
        await trio.lowlevel.checkpoint()
        return HeldWriter(header, self)

    async def open(self, session_id: str) -> Any:
        await trio.lowlevel.checkpoint()
        raise SessionNotFoundError(session_id)

    async def exists(self, session_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        return False

    async def list(self) -> list[dsh.SessionHeader]:
        await trio.lowlevel.checkpoint()
        return []


def write_config(tmp_path: Path, agent: str, *, refuse: bool) -> Path:
    config = tmp_path / "runtime.yml"
    config.write_text(
        f"""
presets:
  - id: held
    plugins: [{{name: {PLUGINS}:hold, config: {{refuse: {str(refuse).lower()}}}}}]
agents:
  - {{id: {agent}, preset: held, options: {{provider: scripted, model: m}}}}
"""
    )
    return config


@attrs.define
class Waiters:
    """``wait_for`` calls started one by one; what each of them came back with."""

    runtime: Any
    session_id: str
    got: dict[str, dsh.AgentHandle | dsh.AgentStartError] = attrs.field(factory=dict)

    def start(self, nursery: trio.Nursery, name: str) -> None:
        async def wait() -> None:
            try:
                self.got[name] = await self.runtime.agents.wait_for(self.session_id)
            except dsh.AgentStartError as exc:
                self.got[name] = exc

        nursery.start_soon(wait, name=name)


async def test_no_waiter_of_a_refused_declared_agent_ever_gets_a_handle(
    gates: Gates, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    store = HeldStore("refused")
    config = write_config(tmp_path, "refused", refuse=True)
    failures: list[dsh.ConfigStartFailed] = []
    async with dsh.open_runtime(persistence=store, config=config) as rt:
        rt.events.on("agent-loop/config-start-failed", failures.append)
        waiters = Waiters(rt, "refused")
        try:
            with trio.fail_after(60):  # virtual time: a waiter left hanging fails
                async with trio.open_nursery() as nursery:
                    assert gates.listening == []  # the start has not got there yet
                    waiters.start(nursery, "before")
                    await trio.testing.wait_all_tasks_blocked()
                    assert gates.listening == ["refused"]
                    waiters.start(nursery, "during")  # agent/created is running
                    await trio.testing.wait_all_tasks_blocked()
                    assert waiters.got == {}

                    gates.created.set()  # the listener refuses: creation rolls back
                    await store.closing.wait()  # held in the rollback
                    waiters.start(nursery, "rollback")
                    await trio.testing.wait_all_tasks_blocked()
                    # Another agent's publication wakes every waiter to look again.
                    other = await rt.agents.create("other")
                    await trio.testing.wait_all_tasks_blocked()
                    assert waiters.got == {}, "a waiter got an agent that failed"
                    store.may_close.set()
        finally:
            store.may_close.set()  # never leave the rollback held
        (failed,) = failures
        assert isinstance(failed.error, RuntimeError)
        assert str(failed.error) == "refused was refused"
        async with trio.open_nursery() as nursery:
            waiters.start(nursery, "after")
        assert sorted(waiters.got) == ["after", "before", "during", "rollback"]
        for name, got in waiters.got.items():
            assert isinstance(got, dsh.AgentStartError), name
            assert got.session_id == "refused"
            assert got.error is failed.error
        assert rt.agents.get("refused") is None
        assert await rt.agents.wait_for("other") is other


async def test_every_waiter_of_a_declared_agent_gets_its_published_handle(
    gates: Gates, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(tmp_path, "main", refuse=False)
    async with dsh.open_runtime(config=config) as rt:
        waiters = Waiters(rt, "main")
        async with trio.open_nursery() as nursery:
            assert gates.listening == []
            waiters.start(nursery, "before")
            await trio.testing.wait_all_tasks_blocked()
            assert gates.listening == ["main"]
            waiters.start(nursery, "during")
            await trio.testing.wait_all_tasks_blocked()
            assert waiters.got == {}  # created, not yet published
            gates.created.set()
        handle = await rt.agents.wait_for("main")  # published: at once
        assert waiters.got == {"before": handle, "during": handle}
        assert rt.agents.get("main") is handle.agent
