"""Plugin functions for preset tests, importable as ``preset_plugins:<name>``."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pytest
import trio

import dsh_trio as dsh

PLUGINS = "preset_plugins"
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


@attrs.define
class Recorder:
    """What the plugins saw: statuses heard per preset, closed services."""

    heard: dict[str, list[str]] = attrs.field(factory=dict)
    closed: list[str] = attrs.field(factory=list)
    created_gate: trio.Event | None = None
    scopes: list[dsh.PresetScope] = attrs.field(factory=list)


class Service:
    def __init__(self, name: str, recorder: Recorder) -> None:
        self.name = name
        self._recorder = recorder

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        self._recorder.closed.append(self.name)


def _tool(name: str) -> dsh.Tool:
    async def body(text: str) -> str:
        await trio.lowlevel.checkpoint()
        return f"{name}:{text}"

    return dsh.tool(name=name)(body)


def build(recorder: Recorder) -> types.ModuleType:
    module = types.ModuleType(PLUGINS)

    def tools(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        """Registers the tools named in config, a section, a listener and a service."""
        label = str(config.get("label", scope.preset_id))
        for name in config.get("tools", ()):
            scope.tool(_tool(str(name)))
        scope.section("preset", f"section of {label}")
        heard = recorder.heard.setdefault(label, [])
        scope.on("agent/status", lambda e: heard.append(f"{e.agent.id}:{e.status}"))
        scope.on("custom/" + label, lambda e: None)
        scope.provide("svc", Service(label, recorder))

    async def slow(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        """An async setup: awaited once per generation."""
        await trio.lowlevel.checkpoint()
        scope.section("slow", "slow section")

    def keep(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        recorder.scopes.append(scope)

    def defaults(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        scope.defaults(**config)

    def explode(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        scope.section("never", "never seen")
        raise RuntimeError("the plugin refused to start")

    def gated_failure(scope: dsh.PresetScope, config: Mapping[str, Any]) -> None:
        """Fails creation from agent/created once the test opens the gate."""

        async def created(e: dsh.AgentCreated) -> None:
            assert recorder.created_gate is not None
            await recorder.created_gate.wait()
            raise RuntimeError("setup of the declared agent failed")

        scope.on("agent/created", created)

    module.tools = tools  # type: ignore[attr-defined]
    module.keep = keep  # type: ignore[attr-defined]
    module.slow = slow  # type: ignore[attr-defined]
    module.defaults = defaults  # type: ignore[attr-defined]
    module.explode = explode  # type: ignore[attr-defined]
    module.gated_failure = gated_failure  # type: ignore[attr-defined]
    module.setup = tools  # type: ignore[attr-defined]
    module.not_callable = 3  # type: ignore[attr-defined]
    return module


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    saved = sys.modules.get(PLUGINS)
    sys.modules[PLUGINS] = build(rec)
    try:
        yield rec
    finally:
        if saved is None:
            del sys.modules[PLUGINS]
        else:
            sys.modules[PLUGINS] = saved


def preset(
    preset_id: str, *rows: dsh.PluginRow, order: float | None = None
) -> dsh.PresetDefinition:
    return dsh.PresetDefinition(id=preset_id, plugins=rows, order=order)


def row(fn: str, **config: Any) -> dsh.PluginRow:
    return dsh.PluginRow(name=f"{PLUGINS}:{fn}", config=config)
