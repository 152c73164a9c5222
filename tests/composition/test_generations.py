"""Preset generations: binding, re-registration, scope isolation and teardown."""

from __future__ import annotations

from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, reply, tool_calls

from .conftest import OPTIONS, Recorder, preset, row


def tool_names(request: Any) -> list[str]:
    return [t["name"] for t in request.tools]  # the JSON schemas the model was sent


def system_text(agent: dsh.Agent) -> str:
    return dsh.text_of(agent.session.derive_messages()[0])


async def test_a_child_keeps_its_generation_and_a_new_root_gets_the_new_one(
    recorder: Recorder,
) -> None:
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}) as rt:
        unregister = await rt.presets.register(
            preset("p", row("tools", label="g1", tools=["alpha"]))
        )
        parent = await rt.agents.create("a", options=OPTIONS, preset="p")
        child = await rt.agents.create("c", options=OPTIONS, parent=parent.agent)
        assert rt.presets.composed_preset(child.agent) == "p"
        assert child.agent.session.header.agent_preset == "p"

        await unregister()  # retired: its agents keep it
        await rt.presets.register(preset("p", row("tools", label="g2", tools=["beta"])))
        root = await rt.agents.create("b", options=OPTIONS)  # no default: preset-free
        bound = await rt.agents.create("d", options=OPTIONS, preset="p")
        assert rt.presets.composed_preset(root.agent) is None

        await child.agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == ["alpha"]
        assert "section of g1" in system_text(child.agent)
        await bound.agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == ["beta"]
        assert "section of g2" in system_text(bound.agent)
        await root.agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == []
        assert "section of" not in system_text(root.agent)

        await parent.agent.run(dsh.user_message("hi"))
        # Listeners reach exactly the agents bound to their generation (and owned ones).
        assert {h.split(":")[0] for h in recorder.heard["g1"]} == {"a", "c"}
        assert {h.split(":")[0] for h in recorder.heard["g2"]} == {"d"}
        # A child created now (of a G1 agent) still joins G1, not the current G2.
        late = await rt.agents.create("e", options=OPTIONS, parent=parent.agent)
        await late.agent.run(dsh.user_message("hi"))
        assert tool_names(model.requests[-1]) == ["alpha"]
        assert rt.presets.service_for(late.agent, "svc").name == "g1"  # type: ignore[attr-defined]

        # G1 is torn down exactly when its last agent is disposed.
        await child.dispose()
        await late.dispose()
        assert recorder.closed == []
        assert rt.events.has_listeners("custom/g1")
        await parent.dispose()
        assert recorder.closed == ["g1"]
        assert not rt.events.has_listeners("custom/g1")
        assert rt.events.has_listeners("custom/g2")
    assert recorder.closed == ["g1", "g2"]  # the runtime tears down the rest
    assert not rt.events.has_listeners("custom/g2")


async def test_a_generation_tool_runs_for_its_agents(recorder: Recorder) -> None:
    model = ScriptedModel(tool_calls(("t1", "alpha", '{"text": "x"}')), reply("done"))
    async with dsh.open_runtime(models={"scripted": model}) as rt:
        await rt.presets.register(preset("p", row("tools", tools=["alpha"])))
        async with rt.agents.open(options=OPTIONS, preset="p") as agent:
            result = await agent.run(dsh.user_message("go"))
    assert result.text == "done"
    tool_result = next(e.data for e in agent.session.events if e.type == "tool/result")
    assert "alpha:x" in repr(tool_result)


async def test_the_default_preset_binds_root_agents(recorder: Recorder) -> None:
    async with dsh.open_runtime(
        presets=[preset("p", row("tools")), preset("q", row("tools"))],
        default_preset="q",
    ) as rt:
        handle = await rt.agents.create(options=OPTIONS)
        assert rt.presets.composed_preset(handle.agent) == "q"
        rt.presets.selected_default = "p"  # read at every resolution
        other = await rt.agents.create(options=OPTIONS)
        assert rt.presets.composed_preset(other.agent) == "p"
        assert [i.is_default for i in rt.presets.list()] == [True, False]
        with pytest.raises(dsh.PresetNotFoundError, match=r'"nope".*"p", "q"'):
            await rt.agents.create(options=OPTIONS, preset="nope")
        assert rt.agents.list() == [handle.agent, other.agent]


async def test_no_registered_preset_means_a_preset_free_agent() -> None:
    async with dsh.open_runtime(default_preset="p") as rt:
        handle = await rt.agents.create(options=OPTIONS)
        assert rt.presets.composed_preset(handle.agent) is None
        assert handle.agent.session.header.agent_preset is None


async def test_defaults_fill_only_unset_options(recorder: Recorder) -> None:
    async with dsh.open_runtime() as rt:
        await rt.presets.register(
            preset("p", row("defaults", model="preset-model", max_tokens=7))
        )
        agent = (await rt.agents.create(options=OPTIONS, preset="p")).agent
        assert agent.options == dsh.AgentOptions(
            provider="scripted", model="m", max_tokens=7
        )
        bare = (await rt.agents.create(preset="p")).agent
        assert bare.options.model == "preset-model"


async def test_mount_is_for_setup_and_compose_from_checks_its_parent(
    recorder: Recorder,
) -> None:
    async with dsh.open_runtime() as rt:
        await rt.presets.register(preset("p", row("tools", label="p")))
        await rt.presets.register(preset("q", row("tools", label="q")))

        async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> None:
            assert rt.presets.mount(agent, "q") == "q"  # rebinds from p

        handle = await rt.agents.create(options=OPTIONS, preset="p", setup=setup)
        assert rt.presets.composed_preset(handle.agent) == "q"
        with pytest.raises(dsh.PresetError, match="is published"):
            rt.presets.mount(handle.agent, "p")
        child = await rt.agents.create(options=OPTIONS, parent=handle.agent)
        with pytest.raises(dsh.PresetError, match="already bound"):
            rt.presets.compose_from(child.agent, handle.agent)
        free = await rt.agents.create(options=OPTIONS)
        other = await rt.agents.create(options=OPTIONS)
        assert rt.presets.compose_from(other.agent, free.agent) is None
        assert rt.presets.compose_from(free.agent, handle.agent) == "q"


async def test_a_lease_keeps_a_retired_generation(recorder: Recorder) -> None:
    async with dsh.open_runtime() as rt:
        unregister = await rt.presets.register(
            preset("p", row("tools", label="g1", tools=["alpha"]))
        )
        async with rt.presets.acquire_scope("p") as generation:
            await unregister()
            await unregister()  # idempotent
            assert recorder.closed == []
            assert generation.preset_id == "p"
            assert generation.tool_names() == ("alpha",)
            assert generation.service("svc") is not None
            assert [name for name, _ in generation.sections()] == ["preset"]
        assert recorder.closed == ["g1"]
        with pytest.raises(dsh.PresetNotFoundError):
            rt.presets.resolve("p")


async def test_registration_rejects_blank_and_duplicate_ids(recorder: Recorder) -> None:
    async with dsh.open_runtime() as rt:
        with pytest.raises(dsh.PresetError, match="non-blank"):
            await rt.presets.register(preset(" "))
        await rt.presets.register(preset("p", row("slow")))
        with pytest.raises(dsh.PresetError, match='"p" is already registered'):
            await rt.presets.register(preset("p"))
        assert [i.id for i in rt.presets.list()] == ["p"]


async def test_list_orders_by_order_then_id_and_documents_round_trip(
    recorder: Recorder, tmp_path: Any
) -> None:
    async with dsh.open_runtime(default_preset="b") as rt:
        await rt.presets.register(preset("c", order=1))
        await rt.presets.register(preset("b"))
        await rt.presets.register(preset("a"))
        await rt.presets.register(preset("d", row("tools", tools=["x"]), order=0.5))
        assert [i.id for i in rt.presets.list()] == ["d", "c", "a", "b"]
        assert rt.presets.resolve().id == "b"
        text = rt.presets.read_document("d")
        path = tmp_path / "d.yml"
        path.write_text(text)
        assert dsh.load_preset(path) == preset(
            "d", row("tools", tools=["x"]), order=0.5
        )
        inventory = rt.presets.composition_inventory()
        assert next((i.id, i.is_default, len(i.rows)) for i in inventory) == (
            "d",
            False,
            1,
        )


async def test_the_scope_refuses_registration_after_teardown(
    recorder: Recorder,
) -> None:
    async with dsh.open_runtime() as rt:
        unregister = await rt.presets.register(preset("p", row("keep")))
        handle = await rt.agents.create(options=OPTIONS, preset="p")
        (scope,) = recorder.scopes
        scope.section("late", "added while live")
        await unregister()
        await handle.dispose()
        with pytest.raises(dsh.PresetError, match="torn down"):
            scope.section("later", "x")


async def test_generation_tools_layer_over_the_runtime_tools(
    recorder: Recorder,
) -> None:
    @dsh.tool(name="alpha")
    async def runtime_alpha(text: str) -> str:
        return "runtime"

    @dsh.tool
    async def gamma(text: str) -> str:
        return "gamma"

    model = ScriptedModel(
        tool_calls(("t1", "alpha", '{"text": "x"}')), reply("done"), default=reply("ok")
    )
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[runtime_alpha, gamma]
    ) as rt:
        await rt.presets.register(preset("p", row("tools", tools=["alpha", "beta"])))
        async with rt.agents.open(options=OPTIONS, preset="p") as agent:
            await agent.run(dsh.user_message("go"))
            assert tool_names(model.requests[0]) == ["alpha", "beta", "gamma"]
            result = next(
                e.data for e in agent.session.events if e.type == "tool/result"
            )
            assert "alpha:x" in repr(
                result
            )  # the generation's alpha shadows the runtime's
        async with rt.agents.open(options=OPTIONS) as bare:
            await bare.run(dsh.user_message("hi"))
            assert tool_names(model.requests[-1]) == ["alpha", "gamma"]
        async with rt.presets.acquire_scope("p") as generation:
            assert generation.tool_names() == ("alpha", "beta", "gamma")


def test_a_layered_tool_registry_reads_through_to_its_base() -> None:
    @dsh.tool
    async def low(text: str) -> str:
        return text

    @dsh.tool
    async def high(text: str) -> str:
        return text

    base = dsh.ToolRegistry(max_parallel_tool_calls=2)
    layered = dsh.ToolRegistry(base=base)
    layered.register(high)
    assert layered.names() == ("high",)
    unregister = base.register(low)
    assert layered.names() == ("high", "low")
    assert layered.get("low") is low
    assert [s["name"] for s in layered.schemas(None)] == ["high", "low"]  # type: ignore[arg-type,index,call-overload]
    unregister()
    assert [s["name"] for s in layered.schemas(None)] == ["high"]  # type: ignore[arg-type,index,call-overload]
    base.max_parallel_tool_calls = 5
    assert layered.max_parallel_tool_calls == 5
