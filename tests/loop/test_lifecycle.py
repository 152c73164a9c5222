"""Creation, ownership and disposal through the runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, hang, reply

from .conftest import OPTIONS


async def test_dispose_runtime_with_100_busy_agents_drains_everything(
    tmp_path: Any,
) -> None:
    model = ScriptedModel(default=hang("partial"))
    persistence = dsh.JsonlPersistence(tmp_path)
    disposed: list[str] = []
    agents: list[dsh.Agent] = []
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        runtime.events.on("agent/disposed", lambda e: disposed.append(e.agent.id))
        for i in range(50):
            parent = (await runtime.agents.create(f"p{i}", options=OPTIONS)).agent
            child = (
                await runtime.agents.create(f"c{i}", options=OPTIONS, parent=parent)
            ).agent
            agents += [parent, child]
        for a in agents:
            a.followup(dsh.user_message("work"))
        await trio.testing.wait_all_tasks_blocked()
        assert all(a.status is dsh.AgentStatus.RUNNING for a in agents)
        assert runtime.agents.is_owned_by("c0", agents[0])
        assert len(runtime.agents.roots()) == 50
        registry = runtime.agents
    # The runtime block has exited: its nursery is closed, so no task survives it.
    assert registry.list() == []
    assert sorted(disposed) == sorted(a.id for a in agents)
    assert len(disposed) == len(set(disposed)) == 100
    for i in range(50):
        assert disposed.index(f"c{i}") < disposed.index(f"p{i}")  # children first
    for a in agents:
        assert a.status is dsh.AgentStatus.IDLE
        assert a.session.events[-1].data.reason == dsh.Aborted(dsh.DisposedCancel())
        with pytest.raises(dsh.AgentDisposedError):
            a.followup(dsh.user_message("too late"))
    # Every session was flushed: a cold load sees the final turn/end, no repair needed.
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as runtime2:
        h = await runtime2.agents.resume("p7")
        types = [e.type for e in h.agent.session.events]
        assert types[-2:] == ["turn/end", "session/end-seed"]
        assert "interrupted" not in repr(h.agent.session.events[-2].data)


async def test_dispose_is_idempotent_and_concurrent_callers_share_the_outcome(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create("x", options=OPTIONS)
    count: list[int] = []
    runtime.events.on("agent/disposed", lambda e: count.append(1))
    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(handle.dispose)
    await handle.dispose()
    assert count == [1]
    assert runtime.agents.get("x") is None
    assert handle.agent.disposed


async def test_dispose_aggregates_cleanup_failures(runtime: dsh.Runtime) -> None:
    handle = await runtime.agents.create("x", options=OPTIONS)

    def bad() -> None:
        raise RuntimeError("cleanup failed")

    handle.agent.scope.add_cleanup(bad)
    handle.agent.scope.add_cleanup(bad)
    with pytest.RaisesGroup(RuntimeError, RuntimeError):
        await handle.dispose()
    assert runtime.agents.get("x") is None
    with pytest.RaisesGroup(RuntimeError, RuntimeError):
        await handle.dispose()  # same outcome again


async def test_input_during_setup_runs_after_creation(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(reply("hello back"))
    seen_status: list[dsh.AgentStatus] = []

    async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> None:
        agent.followup(dsh.user_message("queued during setup"))
        await trio.lowlevel.checkpoint()
        seen_status.append(agent.status)

    handle = await runtime.agents.create("s", options=OPTIONS, setup=setup)
    assert seen_status == [dsh.AgentStatus.IDLE]
    assert (
        handle.agent.status is dsh.AgentStatus.RUNNING
    )  # released at the end of creation
    await handle.agent.when_idle()
    assert handle.agent.session.events[-1].data.reason == dsh.Completed()
    await handle.dispose()


async def test_failed_creation_rolls_back_completely(runtime: dsh.Runtime) -> None:
    created: list[str] = []
    disposed: list[str] = []
    runtime.events.on("agent/created", _record_created(created))
    runtime.events.on("agent/disposed", lambda e: disposed.append(e.agent.id))

    async def veto(e: Any) -> None:
        e.agent.followup(dsh.user_message("never runs"))
        raise ValueError("no")

    remove_veto = runtime.events.on("agent/created", veto)
    with pytest.raises(ValueError, match="no"):
        await runtime.agents.create("v", options=OPTIONS)
    remove_veto()
    assert runtime.agents.get("v") is None
    assert runtime.sessions.get("v") is None
    assert created == ["v"] and disposed == ["v"]  # the announced edge is paired
    # The id is free again, and the queued input never ran.
    h = await runtime.agents.create("v", options=OPTIONS)
    assert not any(e.type == "turn/start" for e in h.agent.session.events)
    await h.dispose()


def _record_created(out: list[str]) -> Any:
    async def listener(e: Any) -> None:
        out.append(e.agent.id)
        assert e.source == "startup"

    return listener


async def test_duplicate_live_id_is_refused(runtime: dsh.Runtime) -> None:
    h = await runtime.agents.create("dup", options=OPTIONS)
    with pytest.raises(dsh.AgentExistsError):
        await runtime.agents.create("dup", options=OPTIONS)
    await h.dispose()


async def test_initiator_is_the_driving_agent(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(reply("ok"))
    seen: list[object] = []

    async def pre_step(e: Any, next: Any) -> Any:
        seen.append(dsh.current_initiator())
        return await next()

    async with runtime.agents.open("i", options=OPTIONS) as agent:
        agent.scope.on("agent/pre-step", pre_step)
        assert dsh.current_initiator() is None
        agent.followup(dsh.user_message("go"))
        await agent.when_idle()
        assert seen == [agent]
    with pytest.raises(dsh.NoInitiatorError):
        dsh.require_initiator()


async def test_resume_requires_persistence(runtime: dsh.Runtime) -> None:
    with pytest.raises(dsh.PersistenceNotConfiguredError):
        await runtime.agents.resume("nope")


async def test_resume_continues_turn_numbers_and_restores_the_inbox(
    tmp_path: Any,
) -> None:
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=dsh.JsonlPersistence(tmp_path)
    ) as rt:
        async with rt.agents.open("r", options=OPTIONS) as agent:
            agent.followup(dsh.user_message("first"))
            await agent.when_idle()
            agent.inbox.append("next-turn", dsh.user_message("pending"))
            # disposal clears the inbox durably; keep something pending via a crash instead
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=dsh.JsonlPersistence(tmp_path)
    ) as rt:
        async with rt.agents.open_resumed("r", options=OPTIONS) as agent:
            assert agent.inbox.next_turn == ()  # disposal discarded it
            agent.followup(dsh.user_message("second"))
            await agent.when_idle()
            turns = [
                e.data.turn for e in agent.session.events if e.type == "turn/start"
            ]
            assert turns == [1, 2]
            headers = [
                e.data.reason
                for e in agent.session.events
                if e.type == "request/header"
            ]
            assert headers == ["initial", "resume"]


# --------------------------------------------------------------------------- input after the drain


async def test_input_after_the_drain_is_refused_never_lost(tmp_path: Any) -> None:
    """During the drain input is parked (and stored); after it, it raises."""
    outcomes: list[str] = []

    def try_send(agent: dsh.Agent, text: str) -> None:
        try:
            agent.send(dsh.user_message(text), "next-turn", False)
        except dsh.AgentDisposedError as exc:
            outcomes.append(f"{text}: refused ({exc})")
        else:
            outcomes.append(f"{text}: parked")

    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as rt:
        handle = await rt.agents.create("d", options=OPTIONS)
        agent = handle.agent
        agent.scope.add_cleanup(lambda: try_send(agent, "from a cleanup"))
        rt.events.on("agent/disposed", lambda e: try_send(e.agent, "from disposed"))
        await handle.dispose()
        with pytest.raises(dsh.AgentDisposedError, match='"d" is disposed'):
            agent.followup(dsh.user_message("after"))
        with pytest.raises(dsh.AgentDisposedError):
            agent.inbox.append("next-step", dsh.user_message("after"))
    assert outcomes == [
        "from a cleanup: parked",
        'from disposed: refused (agent "d" is being disposed and takes no more input)',
    ]
    # What was accepted is stored: a resume finds the parked message.
    async with dsh.open_runtime(persistence=dsh.JsonlPersistence(tmp_path)) as rt:
        async with rt.agents.open_resumed("d", options=OPTIONS) as resumed:
            texts = [
                b.text
                for m in resumed.inbox.next_turn
                for b in m.content
                if isinstance(b, dsh.TextBlock)
            ]
            assert texts == ["from a cleanup"]


# --------------------------------------------------------------------------- the caller's exception


async def test_the_callers_exception_is_not_masked_by_a_failed_disposal() -> None:
    def failing_cleanup() -> None:
        raise RuntimeError("cleanup failed")

    with pytest.RaisesGroup(pytest.RaisesGroup(ValueError, RuntimeError)) as info:
        async with dsh.open_runtime() as rt:
            handle = await rt.agents.create("x", options=OPTIONS)
            handle.agent.scope.add_cleanup(failing_cleanup)
            raise ValueError("the caller's own error")
    assert _matched_by_except_star(info.value, ValueError) == [
        "the caller's own error",
        "cleanup failed",
    ]


def _matched_by_except_star(
    group: BaseExceptionGroup[Any], callers: type[Exception]
) -> list[str]:
    """What ``except* callers`` and then ``except* RuntimeError`` each catch of
    ``group``, in that order."""
    matched: list[str] = []
    try:
        raise group
    except* callers as caught:
        matched += [str(e) for e in _leaves(caught)]
    except* RuntimeError as caught:
        matched += [str(e) for e in _leaves(caught)]
    return matched


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out += _leaves(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


async def test_a_failed_disposal_alone_is_still_raised() -> None:
    def failing_cleanup() -> None:
        raise RuntimeError("cleanup failed")

    with pytest.RaisesGroup(RuntimeError, flatten_subgroups=True):
        async with dsh.open_runtime() as rt:
            handle = await rt.agents.create("x", options=OPTIONS)
            handle.agent.scope.add_cleanup(failing_cleanup)


# --------------------------------------------------------------------------- strict types


@pytest.mark.parametrize("wakeup", ["no", 1, None, 0.0])
async def test_send_takes_a_bool_wakeup(agent: dsh.Agent, wakeup: object) -> None:
    with pytest.raises(TypeError, match="wakeup"):
        agent.send(dsh.user_message("x"), "next-turn", wakeup)  # type: ignore[arg-type]
    assert agent.inbox.next_turn == ()
    assert agent.status is dsh.AgentStatus.IDLE
    assert not any(e.type == "turn/start" for e in agent.session.events)


@pytest.mark.parametrize(
    "kwargs",
    [{"provider": 123}, {"model": b"m"}, {"reasoning_effort": 1}],
    ids=["provider", "model", "reasoning_effort"],
)
def test_agent_options_refuse_non_strings(kwargs: dict[str, object]) -> None:
    (field,) = kwargs
    with pytest.raises(TypeError, match=f"AgentOptions.{field} must be a str"):
        dsh.AgentOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "content", [None, 123, [None], (dsh.TextBlock("a"), "b")], ids=repr
)
def test_user_message_refuses_what_is_not_content(content: object) -> None:
    with pytest.raises(TypeError, match="user_message"):
        dsh.user_message(content)  # type: ignore[arg-type]


def test_user_message_refuses_a_bad_source_or_id() -> None:
    with pytest.raises(TypeError, match="source"):
        dsh.user_message("x", source="user")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="id"):
        dsh.user_message("x", id=7)  # type: ignore[arg-type]


# ----------------------------------------------- the caller's exception, per agent block


def _failing_cleanup() -> None:
    raise RuntimeError("cleanup failed")


async def _block_raises(rt: dsh.Runtime, how: str) -> None:
    if how == "open":
        async with rt.agents.open("x", options=OPTIONS) as agent:
            agent.scope.add_cleanup(_failing_cleanup)
            raise KeyError("the caller's own error")
    elif how == "handle":
        async with await rt.agents.create("x", options=OPTIONS) as handle:
            handle.agent.scope.add_cleanup(_failing_cleanup)
            raise KeyError("the caller's own error")
    else:
        async with rt.agents.open("x", options=OPTIONS) as agent:
            agent.followup(dsh.user_message("first"))
            await agent.when_idle()
        async with rt.agents.open_resumed("x", options=OPTIONS) as agent:
            agent.scope.add_cleanup(_failing_cleanup)
            raise KeyError("the caller's own error")


@pytest.mark.parametrize("how", ["open", "open_resumed", "handle"])
async def test_an_agent_block_never_masks_the_callers_exception(
    how: str, tmp_path: Path
) -> None:
    async with dsh.open_runtime(
        models={"scripted": ScriptedModel(reply("one"))},
        persistence=dsh.JsonlPersistence(tmp_path),
    ) as rt:
        with pytest.RaisesGroup(KeyError, RuntimeError) as info:
            await _block_raises(rt, how)
        assert _matched_by_except_star(info.value, KeyError) == [
            '"the caller\'s own error"',
            "cleanup failed",
        ]
        assert rt.agents.get("x") is None


@pytest.mark.parametrize("how", ["open", "handle"])
async def test_an_agent_block_that_ends_well_raises_the_failed_disposal_alone(
    how: str,
) -> None:
    async with dsh.open_runtime() as rt:
        with pytest.raises(RuntimeError, match="cleanup failed"):
            if how == "open":
                async with rt.agents.open("x", options=OPTIONS) as agent:
                    agent.scope.add_cleanup(_failing_cleanup)
            else:
                async with await rt.agents.create("x", options=OPTIONS) as handle:
                    handle.agent.scope.add_cleanup(_failing_cleanup)


# --------------------------------------------------------------------------- task names


class _TaskNames:
    """A model that records the name of the task its stream runs in."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def stream(self, request: Any) -> Any:
        return self._stream()

    async def _stream(self) -> Any:
        self.names.append(trio.lowlevel.current_task().name)
        await trio.lowlevel.checkpoint()
        for chunk in (
            dsh.BlockStart(0, "text"),
            dsh.BlockEnd(0, dsh.TextBlock("ok")),
            dsh.Finish(dsh.FinishReason("stop")),
        ):
            yield chunk


async def test_every_turn_runs_in_a_task_named_after_the_driver() -> None:
    """Each turn's driver task has the name trio gives the driver's ``drive`` method
    (what a task tree or an instrument shows), the same for every turn."""
    model = _TaskNames()
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        agent = (await runtime.agents.create(options=OPTIONS)).agent
        agent.followup(dsh.user_message("one"))
        await agent.when_idle()
        agent.followup(dsh.user_message("two"))
        await agent.when_idle()
    first, second = model.names
    assert first == second
    assert first.startswith("dsh_trio.loop.") and first.endswith(".drive")


async def test_a_runtime_task_started_without_a_name_is_named_by_trio() -> None:
    names: list[str] = []

    async def job() -> None:
        names.append(trio.lowlevel.current_task().name)
        await trio.lowlevel.checkpoint()

    async with dsh.open_runtime() as runtime:
        runtime._spawn(job)
        runtime._spawn(job, name="given")
        await trio.testing.wait_all_tasks_blocked()
    assert sorted(names) == sorted([f"{job.__module__}.{job.__qualname__}", "given"])
