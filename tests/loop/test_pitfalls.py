"""One test per known pitfall of the agent core's semantics (numbered 1-36).

Each test is named after its pitfall number and the rule it pins down, so a failure
reads as the rule that broke.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.session import Session
from dsh_trio.testing import ScriptedModel, chunks, hang, max_tokens, reply, tool_calls
from dsh_trio.values import TurnEnd, TurnStart

from .conftest import OPTIONS, Tracer, text_of

m = dsh.user_message


def types_of(agent: dsh.Agent) -> list[str]:
    return [e.type for e in agent.session.events]


def turn_ends(agent: dsh.Agent) -> list[Any]:
    return [e.data.reason for e in agent.session.events if e.type == "turn/end"]


async def test_pitfall_01_the_waking_prefix_runs_before_followup_returns(
    agent: dsh.Agent,
) -> None:
    agent.followup(m("A"))
    assert agent.status is dsh.AgentStatus.RUNNING
    assert types_of(agent) == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
    ]
    assert agent.inbox.next_turn == ()
    agent.cancel(dsh.UserCancel())
    await agent.when_idle()


async def test_pitfall_02_the_claim_happens_after_turn_start_inside_the_turn(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    order: list[str] = []
    runtime.events.on("agent/inbox/claimed", lambda e: order.append("claimed"))
    runtime.events.on("session/event", lambda e: order.append(e.event.type))
    agent.followup(m("A"))
    agent.cancel(dsh.UserCancel())
    await agent.when_idle()
    assert order[:4] == [
        "agent/inbox/spliced",
        "turn/start",
        "agent/inbox/spliced",
        "claimed",
    ]


async def test_pitfall_03_batch_is_next_step_first_and_one_followup_per_turn(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"), reply("2"))
    tracer = Tracer(runtime)
    agent.inbox.append("next-turn", m("F1"))
    agent.inbox.append("next-turn", m("F2"))
    agent.steer(m("S"))  # idle steer claims a parked follow-up into the same step
    await agent.when_idle()
    pre_steps = [x for x in tracer.lines if x.startswith("~pre-step")]
    assert pre_steps == ["~pre-step t1s1 [S|F1]", "~pre-step t2s1 [F2]"]


@pytest.mark.parametrize("ending", ["blocked", "error", "aborted", "first-empty"])
async def test_pitfall_04_the_driver_does_not_drain_the_queue_after_a_failure(
    model: ScriptedModel, agent: dsh.Agent, ending: str
) -> None:
    model.push(hang("p"))

    async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        agent.inbox.append("next-turn", m("queued"))
        if ending == "blocked":
            return dsh.Reject()
        if ending == "error":
            raise RuntimeError("hook failed")
        if ending == "first-empty":
            return dsh.Enter(())
        return await next()

    agent.scope.on("agent/pre-step", pre_step)
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    if ending == "aborted":
        agent.cancel(dsh.UserCancel(), keep_inbox=True)
    await agent.when_idle()
    assert sum(1 for t in types_of(agent) if t == "turn/start") == 1
    assert [text_of(x) for x in agent.inbox.next_turn] == ["queued"]  # parked


async def test_pitfall_05_a_live_undisturbed_driver_never_latches(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(hang("p"), reply("second"))
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.followup(m("B"))  # queued for the running driver, no latch needed
    agent.cancel(
        dsh.UserCancel(), keep_inbox=True
    )  # B was queued before the abort: parked
    await agent.when_idle()
    assert sum(1 for t in types_of(agent) if t == "turn/start") == 1
    assert [text_of(x) for x in agent.inbox.next_turn] == ["B"]


async def test_pitfall_05_a_non_keep_inbox_cancel_drops_the_latch(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(hang("p"))
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.UserCancel(), keep_inbox=True)
    agent.followup(m("B"))  # latched
    agent.cancel(dsh.UserCancel())  # clears B and the latch
    await agent.when_idle()
    assert sum(1 for t in types_of(agent) if t == "turn/start") == 1
    assert agent.inbox.next_turn == ()


async def test_pitfall_06_keep_inbox_parks_it_does_not_resume(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(hang("p"))
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.inject(m("ctx"))
    agent.cancel(dsh.UserCancel(), keep_inbox=True)
    await agent.when_idle()
    assert [text_of(x) for x in agent.inbox.next_step] == ["ctx"]
    assert agent.status is dsh.AgentStatus.IDLE


async def test_pitfall_07_cancel_on_an_idle_agent_still_clears_the_inbox(
    agent: dsh.Agent,
) -> None:
    agent.inject(m("x"))
    agent.inbox.append("next-turn", m("y"))
    agent.cancel(dsh.UserCancel())
    assert not agent.inbox.has_pending
    spliced = [e.data for e in agent.session.events if e.type == "agent/inbox/spliced"]
    assert [s.outcome for s in spliced[-2:]] == ["canceled", "canceled"]
    assert [s.target.value for s in spliced[-2:]] == ["next-step", "next-turn"]


async def test_pitfall_08_disposal_durably_cancels_pending_inbox_items(
    runtime: dsh.Runtime,
) -> None:
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.inbox.append("next-turn", m("pending"))
    await handle.dispose()
    last = agent.session.events[-1].data
    assert last.outcome == "canceled" and last.removed_count == 1


async def test_pitfall_09_the_first_cancel_cause_wins(
    model: ScriptedModel, runtime: dsh.Runtime
) -> None:
    model.push(hang("p"))
    handle = await runtime.agents.create(options=OPTIONS)
    agent = handle.agent
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.UserCancel())
    await handle.dispose()  # a later disposed cause does not overwrite "user"
    assert turn_ends(agent) == [dsh.Aborted(dsh.UserCancel())]


async def test_pitfall_10_aborted_turns_emit_no_agent_error(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(hang("p"))
    errors: list[object] = []
    runtime.events.on("agent/error", errors.append)

    async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        agent.cancel(dsh.UserCancel())
        raise RuntimeError("unrelated failure while aborted")

    agent.scope.on("agent/pre-step", pre_step)
    agent.followup(m("A"))
    await agent.when_idle()
    assert errors == []
    assert turn_ends(agent) == [dsh.Aborted(dsh.UserCancel())]


async def test_pitfall_11_status_events_are_edge_triggered_and_maintenance_is_invisible(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"), reply("2"))
    statuses: list[str] = []
    restarted = False

    def on_status(e: Any) -> None:
        nonlocal restarted
        statuses.append(e.status.value)
        if e.status is dsh.AgentStatus.IDLE and not restarted:
            restarted = True
            agent.followup(
                m("again")
            )  # an idle listener's waking send starts a new driver

    agent.scope.on("agent/status", on_status)

    async def task(signal: dsh.CancelSignal) -> None:
        await trio.lowlevel.checkpoint()

    await agent.run_maintenance(task)
    assert statuses == []
    agent.followup(m("A"))
    await agent.when_idle()
    assert statuses == ["running", "idle", "running", "idle"]
    assert len(turn_ends(agent)) == 2


async def test_pitfall_12_reentrant_appends_fail_and_are_contained(
    runtime: dsh.Runtime, agent: dsh.Agent, caplog: pytest.LogCaptureFixture
) -> None:
    def reenter(e: Any) -> None:
        if e.event.type == "agent/inbox/spliced" and e.event.data.inserted:
            agent.inject(m("from a listener"))

    runtime.events.on("session/event", reenter)
    agent.inject(m("x"))
    assert [text_of(x) for x in agent.inbox.next_step] == [
        "x"
    ]  # the reentrant send was lost
    assert any(
        r.exc_info and isinstance(r.exc_info[1], dsh.SessionReentrancyError)
        for r in caplog.records
    )


async def test_pitfall_13_durable_first_live_second(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    seen: list[tuple[str, int]] = []

    def on_session(e: Any) -> None:
        seen.append(("session", len(agent.inbox.next_step)))

    def on_inserted(e: Any) -> None:
        seen.append(("inserted", len(agent.inbox.next_step)))

    runtime.events.on("session/event", on_session)
    runtime.events.on("agent/inbox/inserted", on_inserted)
    agent.inject(m("x"))
    assert seen == [
        ("session", 0),
        ("inserted", 1),
    ]  # observers of the splice see the pre-splice list
    before = len(agent.session.events)
    dup = agent.inbox.next_step[0]
    with pytest.raises(dsh.DuplicateMessageError):
        agent.inject(dup)
    assert len(agent.session.events) == before  # validation before both


async def test_pitfall_14_request_error_fires_inside_the_open_step(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    from dsh_trio.testing import fail

    model.push(fail("SERVER", "down"), reply("ok"))
    open_steps: list[str] = []

    async def on_error(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        open_steps.append(agent.session.events[-1].type)
        return dsh.Retry()

    agent.scope.on("agent/request-error", on_error, prepend=True)
    agent.followup(m("A"))
    await agent.when_idle()
    assert open_steps == ["assistant/attempt"]  # no step/end yet
    t = types_of(agent)
    assert (
        t.count("step/start") == 1
        and t.count("assistant/attempt") == 1
        and t.count("assistant/message") == 1
    )


async def test_pitfall_15_only_final_adapter_failures_reach_request_error(
    runtime: dsh.Runtime, agent: dsh.Agent
) -> None:
    offered: list[object] = []
    runtime.events.on(
        "agent/request-error", lambda e, n: offered.append(e)
    )  # never awaited: must not be called

    async def broken(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        raise RuntimeError("middleware failure")

    agent.scope.on("agent/request", broken)
    agent.followup(m("A"))
    await agent.when_idle()
    assert offered == []
    assert isinstance(turn_ends(agent)[0], dsh.Errored)
    # seed era: a failure in agent/request commits no user/message
    assert "user/message" not in types_of(agent)


async def test_pitfall_15_a_missing_route_is_a_turn_error(runtime: dsh.Runtime) -> None:
    async with runtime.agents.open() as agent:
        agent.followup(m("A"))
        await agent.when_idle()
        assert types_of(agent)[-3:] == ["step/start", "step/end", "turn/end"]
        assert "provider/model" in turn_ends(agent)[0].error.message


async def test_pitfall_16_max_tokens_is_sticky_and_suppresses_tool_continuation(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(max_tokens("cut"), tool_calls(("c1", "echo", "{}")))
    steered = False

    async def stopping(e: Any) -> None:
        nonlocal steered
        if not steered:
            steered = True
            agent.steer(m("continue"))

    agent.scope.on("agent/turn-stopping", stopping)
    agent.followup(m("A"))
    await agent.when_idle()
    assert turn_ends(agent) == [dsh.MaxTokens()]
    t = types_of(agent)
    assert t.count("tool/result") == 1  # the tool ran ...
    assert len(model.requests) == 2  # ... but its result was never sent back


async def test_pitfall_17_every_successful_call_writes_an_assistant_message_even_when_empty(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(chunks(dsh.Finish(dsh.FinishReason("stop"))))
    agent.followup(m("A"))
    await agent.when_idle()
    msg = next(e for e in agent.session.events if e.type == "assistant/message")
    assert msg.data.message.content == ()
    assert all(
        not isinstance(x, dsh.AssistantMessage) for x in agent.session.derive_messages()
    )


async def test_pitfall_18_the_interrupted_prefix_keeps_only_visible_text(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    from dsh_trio.testing import custom

    async def stream(_request: Any) -> Any:
        yield dsh.BlockStart(0, "text")
        yield dsh.TextDelta(0, "kept")
        yield dsh.BlockStart(1, "reasoning")
        yield dsh.ReasoningDelta(1, "   ")
        yield dsh.BlockStart(2, "tool-call")
        yield dsh.ToolCallDelta(2, "c1", "echo", "{")
        await trio.sleep_forever()

    model.push(custom(stream))
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.UserCancel())
    await agent.when_idle()
    ev = next(e for e in agent.session.events if e.type == "assistant/message")
    assert ev.data.interrupted is True
    assert ev.data.message.content == (dsh.TextBlock("kept"),)
    assert types_of(agent)[-3:] == ["assistant/message", "step/end", "turn/end"]


async def test_pitfall_20_turn_stopping_may_fire_more_than_once_and_inject_forces_a_step(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"), reply("2"))
    calls = 0

    async def stopping(e: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            agent.inject(m("more context"))

    agent.scope.on("agent/turn-stopping", stopping)
    agent.followup(m("A"))
    await agent.when_idle()
    assert calls == 2
    assert types_of(agent).count("step/start") == 2


async def test_pitfall_20_turn_stopping_is_serial_with_bail(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"))
    ran: list[str] = []

    async def first(e: Any) -> bool:
        ran.append("first")
        return True

    async def second(e: Any) -> None:
        ran.append("second")

    agent.scope.on("agent/turn-stopping", first)
    agent.scope.on("agent/turn-stopping", second)
    agent.followup(m("A"))
    await agent.when_idle()
    assert ran == ["first"]


async def test_pitfall_21_pre_step_empties(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    # empty on a tool continuation: the step still runs with no new user/message
    model.push(tool_calls(("c1", "echo", "{}")), reply("done"))
    agent.followup(m("A"))
    await agent.when_idle()
    t = types_of(agent)
    assert t.count("step/start") == 2 and t.count("user/message") == 1
    assert turn_ends(agent) == [dsh.Completed()]


async def test_pitfall_21_empty_after_a_completed_step_keeps_the_prior_reason(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(max_tokens("cut"))
    steps = 0

    async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        nonlocal steps
        steps += 1
        if steps == 1:
            agent.inject(m("ctx"))  # pending next-step after the first step
            return await next()
        return dsh.Enter(())

    agent.scope.on("agent/pre-step", pre_step)
    agent.followup(m("A"))
    await agent.when_idle()
    assert turn_ends(agent) == [dsh.MaxTokens()]
    assert types_of(agent).count("step/start") == 1


async def test_pitfall_22_request_header_logging(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"), reply("2"))
    agent.followup(m("A"))
    await agent.when_idle()
    agent.followup(m("B"))
    await agent.when_idle()
    headers = [
        e.data.reason for e in agent.session.events if e.type == "request/header"
    ]
    contexts = [e for e in agent.session.events if e.type == "request/context"]
    assert headers == ["initial"]  # unchanged later: not logged again
    assert len(contexts) == 1
    # messages are derived after this step's user/message
    assert text_of(model.requests[1].messages[-1]) == "B"


async def test_pitfall_22_a_changed_route_logs_a_change_header(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(reply("1"), reply("2"))
    agent.followup(m("A"))
    await agent.when_idle()

    async def reroute(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        config = await next()
        import attrs

        return attrs.evolve(config, temperature=0.5)

    agent.scope.on("agent/request", reroute)
    agent.followup(m("B"))
    await agent.when_idle()
    assert [
        e.data.reason for e in agent.session.events if e.type == "request/header"
    ] == ["initial", "change"]
    assert model.requests[1].temperature == 0.5


async def test_pitfall_23_runtime_context_snapshots_come_last_and_only_when_changed(
    runtime: dsh.Runtime, model: ScriptedModel, agent: dsh.Agent
) -> None:
    mode = {"text": "Approval policy: ask."}
    runtime.prompt.context("approval", lambda a: mode["text"])
    bypass = {"on": False}

    async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        if bypass["on"]:  # replaces the batch without calling next()
            return dsh.Enter(e.messages)
        return await next()

    agent.scope.on("agent/pre-step", pre_step)

    def snapshots() -> list[str]:
        return [
            text_of(e.data)
            for e in agent.session.events
            if e.type == "user/message"
            and isinstance(e.data.source, dsh.PluginSource)
            and e.data.source.form == "snapshot"
        ]

    async def turn(text: str) -> list[str]:
        model.push(reply("ok"))
        agent.followup(m(text))
        await agent.when_idle()
        batch = [x for x in agent.session.events if x.type == "user/message"]
        return [text_of(x.data) for x in batch[-2:]]

    last = await turn("A")
    assert last[0] == "A" and last[1].endswith(
        "Approval policy: ask."
    )  # last of the batch
    await turn("B")  # unchanged: none
    assert len(snapshots()) == 1
    mode["text"] = "Approval policy: never."
    bypass["on"] = True
    await turn("C")  # changed, but the listener did not call next(): dropped
    assert len(snapshots()) == 1
    bypass["on"] = False
    last = await turn("D")  # still changed: proposed again, last of the batch
    assert last[0] == "D" and last[1].endswith("Approval policy: never.")
    assert len(snapshots()) == 2
    # the retained snapshot compacted away: published again though unchanged
    seq = [e.seq for e in agent.session.events if e.type == "user/message"][-1]
    agent.session.append(
        "user/message",
        m("summary"),
        surface_op=dsh.SurfaceReplace(seq, seq),
        source_event_seqs=(seq,),
    )
    await turn("E")
    assert len(snapshots()) == 3


async def test_pitfall_24_one_cancellation_signal_per_turn(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    model.push(hang("p"), reply("2"))
    signals: list[dsh.CancelSignal] = []

    async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
        signals.append(e.signal)
        return await next()

    agent.scope.on("agent/pre-step", pre_step)
    agent.followup(m("A"))
    await trio.testing.wait_all_tasks_blocked()
    agent.cancel(dsh.UserCancel())
    agent.followup(m("B"))  # latched; its turn gets a fresh, uncancelled signal
    await agent.when_idle()
    assert len(signals) == 2 and signals[0] is not signals[1]
    assert signals[0].cancelled and not signals[1].cancelled
    assert turn_ends(agent) == [dsh.Aborted(dsh.UserCancel()), dsh.Completed()]


async def test_pitfall_29_turn_numbers_continue_from_the_whole_log(
    runtime: dsh.Runtime, model: ScriptedModel
) -> None:
    model.push(reply("1"))
    parent = Session.create("src")
    for turn in (1, 2):
        parent.append("turn/start", TurnStart(turn))
        parent.append("turn/end", TurnEnd(turn, dsh.Completed()))
    child = parent.fork()
    handle = await runtime.agents.create(options=OPTIONS, seed=list(child.events))
    handle.agent.followup(m("A"))
    await handle.agent.when_idle()
    starts = [
        e.data.turn for e in handle.agent.session.events if e.type == "turn/start"
    ]
    assert starts == [1, 2, 3]
    await handle.dispose()


async def test_pitfall_30_creation_is_a_rollback_covered_transaction(
    runtime: dsh.Runtime,
) -> None:
    async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> Callable[[], None]:
        scope.on("agent/status", lambda e: None)

        def commit() -> None:
            raise KeyError("commit failed")

        return commit

    with pytest.raises(KeyError):
        await runtime.agents.create("tx", options=OPTIONS, setup=setup)
    assert runtime.agents.get("tx") is None
    assert not runtime.events.has_listeners("agent/status")  # the scope was unwound


async def test_pitfall_31_dispose_ladder_order(runtime: dsh.Runtime) -> None:
    handle = await runtime.agents.create("d", options=OPTIONS)
    order: list[str] = []
    handle.agent.scope.add_cleanup(lambda: order.append("scope unwound"))

    def on_disposed(e: Any) -> None:
        order.append(f"disposed get={runtime.agents.get('d')}")

    runtime.events.on("agent/disposed", on_disposed)
    await handle.dispose()
    assert order == ["scope unwound", "disposed get=None"]


async def test_pitfall_32_session_append_contract(agent: dsh.Agent) -> None:
    before = len(agent.session.events)
    with pytest.raises(dsh.InvalidEventError):
        agent.session.append("custom/thing", {"x": float("nan")})
    with pytest.raises(dsh.InvalidEventError):
        agent.session.append("user/message", m("no surface op"))
    assert len(agent.session.events) == before
    ev = agent.session.append("custom/thing", {"x": [1, "a"]})
    assert ev.seq == before and ev.data == {"x": [1, "a"]}


async def test_pitfall_33_seeds_always_get_a_trailing_end_seed() -> None:
    s = Session.create("s", seed=[])
    assert [e.type for e in s.events] == ["session/end-seed"]


async def test_pitfall_34_when_idle_follows_replacements_and_never_raises(
    model: ScriptedModel, agent: dsh.Agent
) -> None:
    from dsh_trio.testing import fail

    model.push(fail("AUTH", "no"))
    agent.followup(m("A"))
    await agent.when_idle()  # the turn failed; when_idle does not raise
    assert isinstance(turn_ends(agent)[0], dsh.Errored)
    await agent.when_idle()  # idle: returns at once


async def test_pitfall_35_waterfall_mechanics(runtime: dsh.Runtime) -> None:
    bus = runtime.events
    trail: list[str] = []

    async def outer(p: Any, next: Callable[[], Awaitable[str]]) -> str:
        trail.append("outer")
        return "outer(" + await next() + ")"

    async def inner(p: Any, next: Callable[[], Awaitable[str]]) -> str:
        trail.append("inner")
        return "inner"  # short-circuits the default

    bus.on("x", outer)
    bus.on("x", inner)
    assert await bus.waterfall("x", object(), "default") == "outer(inner)"
    assert trail == ["outer", "inner"]


async def test_pitfall_36_scoped_delivery_flows_up_the_ownership_chain(
    runtime: dsh.Runtime,
) -> None:
    parent = (await runtime.agents.create("parent", options=OPTIONS)).agent
    child = (await runtime.agents.create("child", options=OPTIONS, parent=parent)).agent
    sibling = (await runtime.agents.create("sibling", options=OPTIONS)).agent
    heard: dict[str, list[str]] = {"parent": [], "child": [], "sibling": []}
    parent.scope.on(
        "agent/inbox/inserted", lambda e: heard["parent"].append(e.agent.id)
    )
    child.scope.on("agent/inbox/inserted", lambda e: heard["child"].append(e.agent.id))
    sibling.scope.on(
        "agent/inbox/inserted", lambda e: heard["sibling"].append(e.agent.id)
    )
    child.inject(m("c"))
    parent.inject(m("p"))
    assert heard == {"parent": ["child", "parent"], "child": ["child"], "sibling": []}


# ---------------------------------------------------------------- tool pitfalls


@dsh.tool
async def conclude(ctx: dsh.ToolContext) -> str:
    """Conclude the turn."""
    ctx.conclude_turn()
    return "done"


@dsh.tool(parallel_safe=True)
async def slow(ctx: dsh.ToolContext, n: int) -> str:
    """A parallel-safe tool that waits for its gate."""
    await GATES[n].wait()
    return f"slow {n}"


@dsh.tool
async def add(ctx: dsh.ToolContext, a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


GATES: dict[int, trio.Event] = {}


async def test_pitfall_19_concludes_turn_is_not_stop_now_when_input_is_pending() -> (
    None
):
    model = ScriptedModel(
        tool_calls(("c1", "conclude", "{}")), reply("after the steer")
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[conclude]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:

            async def pre_step(e: Any, next: Callable[[], Awaitable[Any]]) -> Any:
                if e.step == 1:
                    agent.inject(
                        m("pending context")
                    )  # lands in next-step during step 1
                return await next()

            agent.scope.on("agent/pre-step", pre_step)
            agent.followup(m("go"))
            await agent.when_idle()
            # ... but with next-step input pending, a concluded step still runs another step.
            assert types_of(agent).count("step/start") == 2
            assert turn_ends(agent) == [dsh.Completed()]


async def test_pitfall_25_tool_call_is_appended_when_a_call_starts_and_results_commit_in_model_order() -> (
    None
):
    GATES.clear()
    GATES.update({1: trio.Event(), 2: trio.Event()})
    model = ScriptedModel(
        tool_calls(("c1", "slow", '{"n": 1}'), ("c2", "slow", '{"n": 2}')), reply("ok")
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[slow]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await trio.testing.wait_all_tasks_blocked()
            assert types_of(agent)[-2:] == [
                "tool/call",
                "tool/call",
            ]  # both started (parallel)
            GATES[2].set()  # the second finishes first ...
            await trio.testing.wait_all_tasks_blocked()
            assert "tool/result" not in types_of(agent)  # ... but waits for the first
            GATES[1].set()
            await agent.when_idle()
            results = [
                e.data.message.source.call_id
                for e in agent.session.events
                if e.type == "tool/result"
            ]
            assert results == ["c1", "c2"]


async def test_pitfall_26_cancellation_result_codes() -> None:
    GATES.clear()
    GATES.update({1: trio.Event()})
    model = ScriptedModel(
        tool_calls(("c1", "slow", '{"n": 1}'), ("c2", "add", '{"a": 1, "b": 2}'))
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[slow, add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await trio.testing.wait_all_tasks_blocked()
            agent.cancel(dsh.UserCancel())
            await agent.when_idle()
            codes = [
                e.data.error.code
                for e in agent.session.events
                if e.type == "tool/result"
            ]
            assert codes == ["ABORTED", "ABORTED_BEFORE_DISPATCH"]
            calls = [
                e.data.call_id for e in agent.session.events if e.type == "tool/call"
            ]
            assert calls == ["c1", "c2"]  # the skipped call still gets its tool/call


async def test_pitfall_27_a_failing_tool_body_is_a_result_not_a_crash() -> None:
    @dsh.tool
    async def explode(ctx: dsh.ToolContext) -> str:
        """Fail."""
        raise RuntimeError("kaboom")

    model = ScriptedModel(tool_calls(("c1", "explode", "{}")), reply("recovered"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[explode]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            result = next(e for e in agent.session.events if e.type == "tool/result")
            assert result.data.message.content[0].is_error
            assert "kaboom" in result.data.message.content[0].content[0].text
            assert turn_ends(agent) == [dsh.Completed()]


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ("", "INVALID_ARGS"),
        ("not json", "INVALID_ARGS"),
        ('{"a": 1, "b": true}', "INVALID_ARGS"),
        ('{"a": 1, "b": 2}', None),
    ],
)
async def test_pitfall_28_argument_parsing(arguments: str, code: str | None) -> None:
    model = ScriptedModel(tool_calls(("c1", "add", arguments)), reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[add]) as rt:
        async with rt.agents.open(options=OPTIONS) as agent:
            agent.followup(m("go"))
            await agent.when_idle()
            result = next(e for e in agent.session.events if e.type == "tool/result")
            assert (result.data.error.code if result.data.error else None) == code
