"""Runtime context: contexts rendered into snapshot messages (BEHAVIOR §3.8.1).

The snapshot is proposed at the first pre-step proposal of a turn, as the last message
of the batch, only when its text differs from the one the session retains; the
retained one is restored from the log on resume, and a surface replacement of it
clears retention.
"""

from __future__ import annotations

import functools
import json
import sys
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import dsh_trio as dsh
from dsh_trio.loop._context import CLEARED_CONTEXT, SNAPSHOT_PREAMBLE
from dsh_trio.testing import ScriptedModel, reply, tool_calls
from dsh_trio.values import (
    SYSTEM_PROMPT_PLUGIN,
    ContextSection,
    SurfaceReplace,
    event_from_json,
    event_to_json,
)

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")
m = dsh.user_message


def snapshot_text(*texts: str) -> str:
    return SNAPSHOT_PREAMBLE + "\n\n" + "\n\n".join(texts)


def user_messages(agent: dsh.Agent) -> list[dsh.UserMessage]:
    return [
        e.data
        for e in agent.session.events
        if e.type == "user/message" and isinstance(e.data, dsh.UserMessage)
    ]


def snapshots(agent: dsh.Agent) -> list[dsh.UserMessage]:
    return [
        msg
        for msg in user_messages(agent)
        if isinstance(msg.source, dsh.PluginSource)
        and msg.source.plugin == SYSTEM_PROMPT_PLUGIN
    ]


class Turns:
    """Run turns of one agent against a model that always answers."""

    def __init__(self, agent: dsh.Agent, model: ScriptedModel) -> None:
        self.agent = agent
        self.model = model

    async def run(self, text: str = "go") -> None:
        self.model.push(reply("ok"))
        self.agent.followup(m(text))
        await self.agent.when_idle()


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def runtime(model: ScriptedModel) -> AsyncIterator[dsh.Runtime]:
    async with dsh.open_runtime(models={"scripted": model}) as rt:
        yield rt


@pytest.fixture
async def agent(runtime: dsh.Runtime) -> AsyncIterator[dsh.Agent]:
    handle = await runtime.agents.create("a1", options=OPTIONS)
    yield handle.agent
    await handle.dispose()


async def test_a_snapshot_is_the_last_message_of_the_first_batch(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    runtime.prompt.context("approval", lambda a: "Approval policy: ask.")
    runtime.prompt.context("sandbox", lambda a: "Sandbox: read-only.")
    runtime.prompt.context("empty", lambda a: None)
    await Turns(agent, model).run("hello")
    msgs = user_messages(agent)
    assert [dsh.text_of(x) for x in msgs] == [
        "hello",
        snapshot_text("Approval policy: ask.", "Sandbox: read-only."),
    ]
    source = msgs[-1].source
    assert source == dsh.PluginSource(
        SYSTEM_PROMPT_PLUGIN,
        form="snapshot",
        sections=(
            ContextSection("approval", "Approval policy: ask."),
            ContextSection("sandbox", "Sandbox: read-only."),
        ),
    )
    # the model saw it, after the user's message
    sent = model.requests[0].messages
    assert [dsh.text_of(x) for x in sent[-2:]] == ["hello", dsh.text_of(msgs[-1])]


async def test_no_context_no_snapshot(agent: dsh.Agent, model: ScriptedModel) -> None:
    await Turns(agent, model).run()
    assert snapshots(agent) == []


async def test_only_a_changed_context_is_published_and_a_cleared_one_once(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    state: dict[str, str | None] = {"mode": "Approval policy: ask."}
    runtime.prompt.context("approval", lambda a: state["mode"])
    turns = Turns(agent, model)
    await turns.run()
    await turns.run()  # unchanged: nothing new
    assert len(snapshots(agent)) == 1
    state["mode"] = "Approval policy: never."
    await turns.run()
    state["mode"] = None
    await turns.run()
    await turns.run()  # still empty: the marker is not repeated
    got = snapshots(agent)
    assert [dsh.text_of(x) for x in got] == [
        snapshot_text("Approval policy: ask."),
        snapshot_text("Approval policy: never."),
        CLEARED_CONTEXT,
    ]
    # The cleared marker has no contributions to attribute: no form, no sections.
    assert got[-1].source == dsh.PluginSource(SYSTEM_PROMPT_PLUGIN)


async def test_contexts_render_once_per_turn_at_the_first_proposal(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    calls: list[int] = []

    def render(a: Any) -> str:
        calls.append(len(calls))
        return f"render {len(calls)}"

    runtime.prompt.context("counter", render)
    model.push(tool_calls(("c1", "missing", "{}")), reply("done"))
    agent.followup(m("go"))
    await agent.when_idle()
    assert len(calls) == 1  # two steps, one rendering
    assert [e.type for e in agent.session.events].count("step/start") == 2


async def test_a_context_for_one_agent_reaches_only_that_agent(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    first = (await runtime.agents.create("one", options=OPTIONS)).agent
    second = (await runtime.agents.create("two", options=OPTIONS)).agent
    runtime.prompt.context("who", lambda a: "You are one.", scope=first)
    await Turns(first, model).run()
    await Turns(second, model).run()
    assert len(snapshots(first)) == 1 and snapshots(second) == []


async def test_a_disposed_context_clears_the_snapshot(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    dispose = runtime.prompt.context("approval", lambda a: "Approval policy: ask.")
    assert runtime.prompt.contexts() == ["approval"]
    turns = Turns(agent, model)
    await turns.run()
    dispose()
    dispose()  # idempotent
    await turns.run()
    assert [dsh.text_of(x) for x in snapshots(agent)][-1] == CLEARED_CONTEXT


async def test_a_repeated_name_keeps_its_place_and_takes_the_later_text(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    runtime.prompt.context("a", lambda _: "first a")
    runtime.prompt.context("b", lambda _: "b")
    runtime.prompt.context("a", lambda _: "second a")
    await Turns(agent, model).run()
    source = snapshots(agent)[0].source
    assert isinstance(source, dsh.PluginSource)
    assert source.sections == (
        ContextSection("a", "second a"),
        ContextSection("b", "b"),
    )


async def test_a_blank_context_name_is_refused(runtime: dsh.Runtime) -> None:
    with pytest.raises(ValueError, match="non-blank name"):
        runtime.prompt.context(" ", lambda _: "x")


async def test_a_failing_context_fails_the_turn_before_any_step(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    def broken(a: Any) -> str:
        raise RuntimeError("no mode")

    runtime.prompt.context("mode", broken)
    agent.followup(m("go"))
    await agent.when_idle()
    types = [e.type for e in agent.session.events]
    assert "step/start" not in types
    end = [e.data for e in agent.session.events if e.type == "turn/end"][-1]
    assert isinstance(end.reason, dsh.Errored)
    assert "no mode" in end.reason.error.message


async def test_a_non_text_rendering_fails_the_turn_naming_the_context(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    runtime.prompt.context("odd", lambda a: 3)  # type: ignore[arg-type,return-value]
    agent.followup(m("go"))
    await agent.when_idle()
    end = [e.data for e in agent.session.events if e.type == "turn/end"][-1]
    assert isinstance(end.reason, dsh.Errored)
    assert "runtime context 'odd' must render a str or None, got int" in (
        end.reason.error.message
    )


async def test_a_changed_context_makes_an_emptied_first_proposal_non_empty(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    state = {"mode": "Approval policy: ask."}
    runtime.prompt.context("approval", lambda a: state["mode"])

    async def drop_claimed(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        decision = await next()
        return dsh.Enter(tuple(x for x in decision.messages if x not in e.messages))

    agent.scope.on("agent/pre-step", drop_claimed)
    turns = Turns(agent, model)
    await turns.run("first")
    # the batch held only the snapshot, and the step ran
    assert [e.type for e in agent.session.events].count("step/start") == 1
    assert len(snapshots(agent)) == 1
    agent.followup(m("second"))
    await agent.when_idle()  # unchanged: the emptied first proposal runs no step
    assert [e.type for e in agent.session.events].count("step/start") == 1


async def test_a_surface_replacement_of_the_snapshot_clears_retention(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    runtime.prompt.context("approval", lambda a: "Approval policy: ask.")
    turns = Turns(agent, model)
    await turns.run()
    seq = next(
        e.seq
        for e in agent.session.events
        if e.type == "user/message" and e.data in snapshots(agent)
    )
    # a compaction replaces the snapshot with a summary that cites it
    agent.session.append(
        "user/message",
        m("summary"),
        surface_op=SurfaceReplace(seq, seq),
        source_event_seqs=(seq,),
    )
    await turns.run()
    assert len(snapshots(agent)) == 2  # the same text, published again


async def test_a_compacted_snapshot_with_every_context_gone_gets_the_marker(
    runtime: dsh.Runtime, agent: dsh.Agent, model: ScriptedModel
) -> None:
    dispose = runtime.prompt.context("approval", lambda a: "Approval policy: ask.")
    turns = Turns(agent, model)
    await turns.run()
    (seq,) = [
        e.seq
        for e in agent.session.events
        if e.type == "user/message" and e.data in snapshots(agent)
    ]
    agent.session.append(
        "user/message",
        m("summary"),
        surface_op=SurfaceReplace(seq, seq),
        source_event_seqs=(seq,),
    )
    dispose()
    await turns.run()
    assert dsh.text_of(snapshots(agent)[-1]) == CLEARED_CONTEXT


# --------------------------------------------------------------------- reference logs

HEADER = (
    '{"type":"session","version":3,"id":"%s","createdAt":1800144000000,'
    '"cwd":"/w/p","isSeeded":false,"delegationDepth":0}'
)

#: Two turns as the reference writes them, each ending with a runtime-context snapshot
#: (the second supersedes the first), sections as ``[{"name", "text"}]`` objects.
SNAPSHOT_LOG = [
    '{"type":"agent/inbox/spliced","seq":0,"time":1800144000010,"data":{"target":"next-turn","start":0,"inserted":[{"id":"a44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"hello"}],"source":{"kind":"user"}}]}}',
    '{"type":"turn/start","seq":1,"time":1800144000011,"data":{"turn":1}}',
    '{"type":"agent/inbox/spliced","seq":2,"time":1800144000012,"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}}',
    '{"type":"step/start","seq":3,"time":1800144000020,"data":{"turn":1,"step":1}}',
    '{"type":"system/message","seq":4,"time":1800144000030,"data":{"turn":1,"step":1,"message":{"id":"5d1c2b3a-0000-4000-8000-000000000001","role":"system","content":[],"source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt"}}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":5,"time":1800144000031,"data":{"id":"a44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"hello"}],"source":{"kind":"user"}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":6,"time":1800144000032,"data":{"id":"c0c0c0c0-0000-4000-8000-000000000001","role":"user","content":[{"type":"text","text":"Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\\n\\nApproval policy: ask."}],"source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[{"name":"approval","text":"Approval policy: ask."}]}},"surfaceOp":"append"}',
    '{"type":"request/header","seq":7,"time":1800144000040,"data":{"header":{"config":{"provider":"scripted","model":"m"}},"reason":"initial"}}',
    '{"type":"request/context","seq":8,"time":1800144000041,"data":{"provider":"scripted","model":"m"}}',
    '{"type":"assistant/message","seq":9,"time":1800144000110,"data":{"turn":1,"step":1,"message":{"id":"9e8f7a6b-1111-4222-8333-444455556666","role":"assistant","content":[{"type":"text","text":"hi"}],"source":{"kind":"model","provider":"scripted","model":"m"}},"stream":[{"type":"chunk","time":1800144000105,"chunk":{"type":"finish","reason":{"kind":"stop"}}}]},"surfaceOp":"append"}',
    '{"type":"step/end","seq":10,"time":1800144000120,"data":{"turn":1,"step":1}}',
    '{"type":"turn/end","seq":11,"time":1800144000130,"data":{"turn":1,"reason":{"kind":"completed"}}}',
    '{"type":"agent/inbox/spliced","seq":12,"time":1800144000210,"data":{"target":"next-turn","start":0,"inserted":[{"id":"b44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"again"}],"source":{"kind":"user"}}]}}',
    '{"type":"turn/start","seq":13,"time":1800144000211,"data":{"turn":2}}',
    '{"type":"agent/inbox/spliced","seq":14,"time":1800144000212,"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}}',
    '{"type":"step/start","seq":15,"time":1800144000220,"data":{"turn":2,"step":1}}',
    '{"type":"user/message","seq":16,"time":1800144000231,"data":{"id":"b44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"again"}],"source":{"kind":"user"}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":17,"time":1800144000232,"data":{"id":"c0c0c0c0-0000-4000-8000-000000000002","role":"user","content":[{"type":"text","text":"Current runtime context. This snapshot supersedes earlier runtime-context snapshots.\\n\\nApproval policy: never.\\n\\nSandbox: read-only."}],"source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt","form":"snapshot","sections":[{"name":"approval","text":"Approval policy: never."},{"name":"sandbox","text":"Sandbox: read-only."}]}},"surfaceOp":"append"}',
    '{"type":"assistant/message","seq":18,"time":1800144000310,"data":{"turn":2,"step":1,"message":{"id":"9e8f7a6b-1111-4222-8333-444455556667","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"scripted","model":"m"}},"stream":[{"type":"chunk","time":1800144000305,"chunk":{"type":"finish","reason":{"kind":"stop"}}}]},"surfaceOp":"append"}',
    '{"type":"step/end","seq":19,"time":1800144000320,"data":{"turn":2,"step":1}}',
    '{"type":"turn/end","seq":20,"time":1800144000330,"data":{"turn":2,"reason":{"kind":"completed"}}}',
]

#: A later compaction that replaced the second snapshot (citing it) with a summary.
COMPACTED = [
    '{"type":"user/message","seq":21,"time":1800144000400,"data":{"id":"d0d0d0d0-0000-4000-8000-000000000001","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}},"surfaceOp":{"op":"replace","startSeq":16,"endSeq":18},"sourceEventSeqs":[16,17,18]}',
]

#: A third turn whose snapshot was the cleared marker (no form, no sections).
CLEARED = [
    '{"type":"agent/inbox/spliced","seq":21,"time":1800144000410,"data":{"target":"next-turn","start":0,"inserted":[{"id":"e44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"third"}],"source":{"kind":"user"}}]}}',
    '{"type":"turn/start","seq":22,"time":1800144000411,"data":{"turn":3}}',
    '{"type":"agent/inbox/spliced","seq":23,"time":1800144000412,"data":{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}}',
    '{"type":"step/start","seq":24,"time":1800144000420,"data":{"turn":3,"step":1}}',
    '{"type":"user/message","seq":25,"time":1800144000431,"data":{"id":"e44b0d6e-5f0b-4b7e-9a53-0c2f0c1d2e3f","role":"user","content":[{"type":"text","text":"third"}],"source":{"kind":"user"}},"surfaceOp":"append"}',
    '{"type":"user/message","seq":26,"time":1800144000432,"data":{"id":"c0c0c0c0-0000-4000-8000-000000000003","role":"user","content":[{"type":"text","text":"Current runtime context: none. Earlier runtime-context snapshots no longer apply."}],"source":{"kind":"plugin","plugin":"@deepseek-ai/dsh-system-prompt"}},"surfaceOp":"append"}',
    '{"type":"assistant/message","seq":27,"time":1800144000510,"data":{"turn":3,"step":1,"message":{"id":"9e8f7a6b-1111-4222-8333-444455556668","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"scripted","model":"m"}},"stream":[{"type":"chunk","time":1800144000505,"chunk":{"type":"finish","reason":{"kind":"stop"}}}]},"surfaceOp":"append"}',
    '{"type":"step/end","seq":28,"time":1800144000520,"data":{"turn":3,"step":1}}',
    '{"type":"turn/end","seq":29,"time":1800144000530,"data":{"turn":3,"reason":{"kind":"completed"}}}',
]


def fixed(text: str | None, agent: object) -> str | None:
    return text


def store(root: Path, lines: Sequence[str], sid: str) -> None:
    folder = root / "--w-p--" / sid
    folder.mkdir(parents=True)
    text = "\n".join([HEADER % sid, *lines]) + "\n"
    (folder / "session.v3.jsonl").write_text(text, encoding="utf-8")


async def resume_and_run(
    root: Path, sid: str, contexts: Mapping[str, str | None]
) -> list[dsh.UserMessage]:
    """Resume ``sid``, run one turn with ``contexts``; the snapshots that turn appended."""
    model = ScriptedModel(reply("ok"))
    persistence = dsh.JsonlPersistence(root)
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as rt:
        for name, text in contexts.items():
            rt.prompt.context(name, functools.partial(fixed, text))
        async with rt.agents.open_resumed(sid, options=OPTIONS) as agent:
            before = len(snapshots(agent))
            agent.followup(m("next"))
            await agent.when_idle()
            return snapshots(agent)[before:]


def test_the_reference_snapshot_lines_read_and_write_back_the_same() -> None:
    for line in (SNAPSHOT_LOG[6], SNAPSHOT_LOG[17], CLEARED[5]):
        event = event_from_json(json.loads(line))
        assert event_to_json(event) == json.loads(line)
    event = event_from_json(json.loads(SNAPSHOT_LOG[17]))
    assert event.data.source.sections == (
        ContextSection("approval", "Approval policy: never."),
        ContextSection("sandbox", "Sandbox: read-only."),
    )


CURRENT = {"approval": "Approval policy: never.", "sandbox": "Sandbox: read-only."}


async def test_a_resumed_reference_log_keeps_its_retained_snapshot(
    tmp_path: Path,
) -> None:
    store(tmp_path, SNAPSHOT_LOG, "ref")
    assert await resume_and_run(tmp_path, "ref", CURRENT) == []


async def test_a_resumed_reference_log_publishes_a_changed_context(
    tmp_path: Path,
) -> None:
    store(tmp_path, SNAPSHOT_LOG, "ref")
    new = await resume_and_run(tmp_path, "ref", {"approval": "Approval policy: ask."})
    assert [dsh.text_of(x) for x in new] == [snapshot_text("Approval policy: ask.")]


async def test_a_resumed_log_whose_snapshot_was_compacted_away_publishes_again(
    tmp_path: Path,
) -> None:
    store(tmp_path, SNAPSHOT_LOG + COMPACTED, "ref")
    new = await resume_and_run(tmp_path, "ref", CURRENT)
    assert [dsh.text_of(x) for x in new] == [
        snapshot_text("Approval policy: never.", "Sandbox: read-only.")
    ]


async def test_a_resumed_log_ending_with_the_cleared_marker_stays_cleared(
    tmp_path: Path,
) -> None:
    store(tmp_path, SNAPSHOT_LOG + CLEARED, "ref")
    assert await resume_and_run(tmp_path, "ref", {}) == []
    store(tmp_path / "again", SNAPSHOT_LOG + CLEARED, "ref")
    new = await resume_and_run(tmp_path / "again", "ref", CURRENT)
    assert len(new) == 1  # contexts came back: a full snapshot again


async def test_a_resumed_log_whose_snapshots_are_all_off_the_surface_retains_none(
    tmp_path: Path,
) -> None:
    # Restoring reads the surface only: snapshots all compacted away count as none
    # (the model sees none of them), so empty contexts publish nothing ...
    compacted = [
        *SNAPSHOT_LOG,
        '{"type":"user/message","seq":21,"time":1800144000400,"data":{"id":"d0d0d0d0-0000-4000-8000-000000000002","role":"user","content":[{"type":"text","text":"summary"}],"source":{"kind":"user"}},"surfaceOp":{"op":"replace","startSeq":5,"endSeq":18},"sourceEventSeqs":[5,6,9,16,17,18]}',
    ]
    store(tmp_path, compacted, "ref")
    assert await resume_and_run(tmp_path, "ref", {}) == []
    # ... and a context publishes its snapshot.
    store(tmp_path / "again", compacted, "ref")
    new = await resume_and_run(tmp_path / "again", "ref", CURRENT)
    assert len(new) == 1


async def test_a_resumed_log_with_a_snapshot_and_no_contexts_gets_the_marker(
    tmp_path: Path,
) -> None:
    store(tmp_path, SNAPSHOT_LOG, "ref")
    new = await resume_and_run(tmp_path, "ref", {})
    assert [dsh.text_of(x) for x in new] == [CLEARED_CONTEXT]


# --------------------------------------------------------------------- preset contexts


def _mode_plugin(scope: dsh.PresetScope, config: Mapping[str, object]) -> None:
    scope.context("mode", lambda agent: f"Mode: {config['mode']}.")


async def test_a_preset_context_reaches_exactly_its_agents_after_the_runtime_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plugins = types.ModuleType("context_test_plugins")
    plugins.setup = _mode_plugin  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "context_test_plugins", plugins)
    preset = dsh.PresetDefinition(
        id="strict",
        plugins=(
            dsh.PluginRow(name="context_test_plugins:setup", config={"mode": "strict"}),
        ),
    )
    model = ScriptedModel(default=reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, presets=[preset]) as rt:
        rt.prompt.context("global", lambda a: "Global context.")
        bound = (
            await rt.agents.create("bound", options=OPTIONS, preset="strict")
        ).agent
        free = (await rt.agents.create("free", options=OPTIONS)).agent
        await Turns(bound, model).run()
        await Turns(free, model).run()
        (snapshot,) = snapshots(bound)
        assert dsh.text_of(snapshot) == snapshot_text(
            "Global context.", "Mode: strict."
        )
        assert isinstance(snapshot.source, dsh.PluginSource)
        assert snapshot.source.sections == (
            ContextSection("global", "Global context."),
            ContextSection("mode", "Mode: strict."),
        )
        (other,) = snapshots(free)
        assert dsh.text_of(other) == snapshot_text("Global context.")


async def test_a_section_rendering_none_fails_the_turn_naming_the_section(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    runtime.prompt.add_section("tone", lambda a: None)  # type: ignore[arg-type,return-value]
    agent.followup(m("go"))
    await agent.when_idle()
    end = [e.data for e in agent.session.events if e.type == "turn/end"][-1]
    assert isinstance(end.reason, dsh.Errored)
    assert "system-prompt section 'tone' must render a str, got NoneType" in (
        end.reason.error.message
    )


async def test_a_failing_section_or_context_is_named_on_its_exception(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    errors: list[BaseException] = []
    runtime.events.on("agent/error", lambda e: errors.append(e.error))

    def broken(a: Any) -> str:
        raise ZeroDivisionError("division by zero")

    dispose = runtime.prompt.add_section("budget", broken)
    agent.followup(m("go"))
    await agent.when_idle()
    dispose()
    runtime.prompt.context("clock", broken)
    agent.followup(m("again"))
    await agent.when_idle()
    notes = [getattr(e, "__notes__", []) for e in errors]
    assert notes == [
        ["while rendering the system-prompt section 'budget'"],
        ["while rendering the runtime context 'clock'"],
    ]
