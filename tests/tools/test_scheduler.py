"""The step's call scheduler: ordering, the pool, barriers, cancellation shapes."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing

from dsh_trio import user_message
from dsh_trio.errors import (
    DuplicateMessageError,
    InvalidSpliceError,
    ToolDefinitionError,
)
from dsh_trio.tools import Tool, ToolContext, ToolRegistry, ToolResult, _scheduler, tool
from dsh_trio.values import (
    ImageBlock,
    TextBlock,
    ToolErrorInfo,
    ToolResultBlock,
    ToolSource,
    UserCancel,
)

from .conftest import (
    FakeAgent,
    Outcome,
    call,
    describe,
    drive,
    make_agent,
    registry_of,
    results,
    text_of,
)

ABORTED = ToolErrorInfo("AbortError", "ABORTED")
SKIPPED = ToolErrorInfo("AbortError", "ABORTED_BEFORE_DISPATCH")


class Gates:
    """One event per call id; bodies wait on theirs, the test releases them."""

    def __init__(self) -> None:
        self.events: dict[str, trio.Event] = {}
        self.running: set[str] = set()
        self.max_running = 0

    def __getitem__(self, key: str) -> trio.Event:
        return self.events.setdefault(key, trio.Event())

    async def hold(self, key: str) -> None:
        self.running.add(key)
        self.max_running = max(self.max_running, len(self.running))
        try:
            await self[key].wait()
        finally:
            self.running.discard(key)


def gated(gates: Gates, *, name: str = "gated", parallel_safe: bool = True) -> Tool:
    async def body(ctx: ToolContext) -> str:
        await gates.hold(ctx.call_id)
        return f"done {ctx.call_id}"

    return tool(name=name, parallel_safe=parallel_safe)(body)


# --------------------------------------------------------------------------- ordering and the pool


async def test_results_are_committed_in_model_order_when_bodies_finish_out_of_order(
    agent: FakeAgent,
) -> None:
    gates = Gates()
    registry = registry_of(gated(gates))
    calls = [call(c, "gated") for c in ("c1", "c2", "c3")]
    async with trio.open_nursery() as nursery:
        out = Outcome()
        nursery.start_soon(drive, registry, agent, calls, out)
        await trio.testing.wait_all_tasks_blocked()
        assert describe(agent) == ["call c1", "call c2", "call c3"]
        gates["c3"].set()
        await trio.testing.wait_all_tasks_blocked()
        gates["c2"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"c1"}
        assert describe(agent) == [
            "call c1",
            "call c2",
            "call c3",
        ]  # nothing committed past c1
        gates["c1"].set()
    assert describe(agent) == [
        "call c1",
        "call c2",
        "call c3",
        "result c1 ok",
        "result c2 ok",
        "result c3 ok",
    ]
    assert out == Outcome(concluded=False, cancelled=False)
    got = results(agent)
    assert got["c2"].message.content == (
        ToolResultBlock("c2", (TextBlock("done c2"),)),
    )
    assert got["c2"].message.source == ToolSource("c2")
    assert (got["c2"].turn, got["c2"].step) == (1, 1)
    # each result cites its call
    events = agent.session.events
    calls_seq = {e.data.call_id: e.seq for e in events if e.type == "tool/call"}
    for e in events:
        if e.type == "tool/result":
            assert e.surface_op == "append"
            assert e.source_event_seqs == (calls_seq[e.data.message.source.call_id],)


async def test_pool_is_bounded_and_tool_call_is_appended_when_a_call_starts(
    agent: FakeAgent,
) -> None:
    gates = Gates()
    registry = registry_of(gated(gates), cap=2)
    calls = [call(f"c{i}", "gated") for i in range(1, 6)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive, registry, agent, calls)
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"c1", "c2"}
        assert describe(agent) == ["call c1", "call c2"]
        gates["c2"].set()  # a slot frees; c3 starts, c2's result waits behind c1
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"c1", "c3"}
        assert describe(agent) == ["call c1", "call c2", "call c3"]
        gates["c1"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"c3", "c4"}
        assert describe(agent) == [
            "call c1",
            "call c2",
            "call c3",
            "result c1 ok",
            "result c2 ok",
            "call c4",
        ]
        for key in ("c3", "c4", "c5"):
            gates[key].set()
    assert gates.max_running == 2
    assert describe(agent)[-4:] == [
        "result c3 ok",
        "result c4 ok",
        "call c5",
        "result c5 ok",
    ]


async def test_cap_is_read_when_a_group_starts(agent: FakeAgent) -> None:
    gates = Gates()
    registry = registry_of(gated(gates), cap=1)
    registry.max_parallel_tool_calls = 3
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            drive, registry, agent, [call(f"c{i}", "gated") for i in range(4)]
        )
        await trio.testing.wait_all_tasks_blocked()
        assert len(gates.running) == 3
        for i in range(4):
            gates[f"c{i}"].set()
    with pytest.raises(ValueError, match="positive int"):
        registry.max_parallel_tool_calls = 0
    with pytest.raises(ValueError, match="positive int"):
        ToolRegistry(max_parallel_tool_calls=True)


async def test_an_exclusive_call_is_a_barrier(agent: FakeAgent) -> None:
    gates = Gates()
    registry = registry_of(gated(gates), gated(gates, name="solo", parallel_safe=False))
    calls = [
        call("p1", "gated"),
        call("p2", "gated"),
        call("x", "solo"),
        call("p3", "gated"),
        call("p4", "gated"),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive, registry, agent, calls)
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"p1", "p2"}
        assert describe(agent) == ["call p1", "call p2"]
        gates["p2"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"p1"}  # x waits for the whole group, not just a slot
        gates["p1"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"x"}
        assert describe(agent)[2:] == ["result p1 ok", "result p2 ok", "call x"]
        gates["x"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert gates.running == {"p3", "p4"}
        assert describe(agent)[5:] == ["result x ok", "call p3", "call p4"]
        gates["p3"].set()
        gates["p4"].set()
    assert gates.max_running == 2


async def test_consecutive_exclusive_calls_run_one_at_a_time(agent: FakeAgent) -> None:
    gates = Gates()
    registry = registry_of(gated(gates, parallel_safe=False))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            drive, registry, agent, [call("a", "gated"), call("b", "gated")]
        )
        await trio.testing.wait_all_tasks_blocked()
        assert describe(agent) == ["call a"]
        gates["a"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert describe(agent) == ["call a", "result a ok", "call b"]
        gates["b"].set()
    assert gates.max_running == 1


# --------------------------------------------------------------------------- cancellation


async def test_the_status_cancel_check_matches_the_deadline_check() -> None:
    """Whether a call still runs is read from the task's cancel status: it must say
    what the effective deadline says, inside shields and nested scopes too."""

    def both() -> tuple[bool, bool]:
        return (
            _scheduler._scope_cancelled(),
            trio.current_effective_deadline() == -math.inf,
        )

    assert both() == (False, False)
    with trio.CancelScope() as outer:  # noqa: ASYNC100  # read synchronously
        assert both() == (False, False)
        outer.cancel()
        assert both() == (True, True)
        with trio.CancelScope(shield=True):  # noqa: ASYNC100  # read synchronously
            assert both() == (False, False)
        with trio.CancelScope():  # noqa: ASYNC100  # read synchronously
            assert both() == (True, True)


async def test_t15_cancel_from_an_exclusive_body(agent: FakeAgent) -> None:
    @tool(parallel_safe=True)
    async def p(ctx: ToolContext) -> str:
        return "ok"

    @tool
    async def stop(ctx: ToolContext) -> str:
        ctx.agent.cancel(UserCancel())
        await trio.sleep_forever()
        raise AssertionError("not reached")

    registry = registry_of(p, stop)
    out = await drive(
        registry, agent, [call("c1", "p"), call("c2", "stop"), call("c3", "p")]
    )
    assert out == Outcome(concluded=None, cancelled=True)
    assert describe(agent) == [
        "call c1",
        "result c1 ok",
        "call c2",
        "result c2 ABORTED",
        "call c3",
        "result c3 ABORTED_BEFORE_DISPATCH",
    ]
    got = results(agent)
    assert got["c1"].error is None
    assert got["c2"].error == ABORTED
    assert got["c2"].message.content == (
        ToolResultBlock("c2", (TextBlock("Error: tool call aborted"),), is_error=True),
    )
    assert got["c3"].error == SKIPPED
    assert got["c3"].message.content == (
        ToolResultBlock(
            "c3",
            (TextBlock("Error: tool call aborted before dispatch"),),
            is_error=True,
        ),
    )
    assert agent.signal.cause == UserCancel()


async def test_a_body_that_succeeds_after_the_abort_is_rewritten_and_keeps_its_contexts(
    agent: FakeAgent,
) -> None:
    @tool
    async def stop(ctx: ToolContext) -> str:
        ctx.defer_context(user_message("kept", id="m1"))
        ctx.conclude_turn()
        ctx.agent.cancel(UserCancel())
        return "finished anyway"  # no checkpoint after the cancel

    out = await drive(registry_of(stop), agent, [call("c1", "stop")])
    assert out.cancelled
    assert describe(agent) == [
        "call c1",
        "result c1 ABORTED",
        "spliced next-step [kept]",
    ]
    assert [m.id for m in agent.inbox.next_step] == ["m1"]


async def test_cancel_during_a_parallel_group(agent: FakeAgent) -> None:
    gates = Gates()

    @tool(parallel_safe=True)
    async def quick(ctx: ToolContext) -> str:
        return "quick"

    @tool(parallel_safe=True)
    async def broken(ctx: ToolContext) -> str:
        raise ValueError("bad input")

    registry = registry_of(gated(gates), quick, broken, cap=2)
    calls = [
        call("c1", "gated"),
        call("c2", "quick"),
        call("c3", "broken"),
        call("c4", "gated"),
        call("c5", "quick"),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drive, registry, agent, calls)
        await trio.testing.wait_all_tasks_blocked()
        # c2 and c3 settled (freeing their slots), c1 holds the commit order, c5 waits for a slot
        assert describe(agent) == ["call c1", "call c2", "call c3", "call c4"]
        assert gates.running == {"c1", "c4"}
        agent.cancel(UserCancel())
    assert describe(agent) == [
        "call c1",
        "call c2",
        "call c3",
        "call c4",
        "result c1 ABORTED",  # interrupted
        "result c2 ABORTED",  # finished before the abort, committed after it
        "result c3 TOOL_ERROR",  # a tool error stays an error
        "result c4 ABORTED",
        "call c5",
        "result c5 ABORTED_BEFORE_DISPATCH",
    ]
    assert gates.running == set()


async def test_already_cancelled_turn_skips_every_call(agent: FakeAgent) -> None:
    ran: list[str] = []

    @tool
    async def t(ctx: ToolContext) -> str:
        ran.append(ctx.call_id)
        return ""

    agent.cancel(UserCancel())
    out = await drive(registry_of(t), agent, [call("a", "t"), call("b", "nope")])
    assert out.cancelled
    assert ran == []
    assert describe(agent) == [
        "call a",
        "result a ABORTED_BEFORE_DISPATCH",
        "call b",
        "result b ABORTED_BEFORE_DISPATCH",
    ]


async def test_cancel_from_an_enclosing_scope_closes_the_calls_too(
    agent: FakeAgent,
) -> None:
    gates = Gates()
    registry = registry_of(gated(gates, parallel_safe=False))
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                drive, registry, agent, [call("a", "gated"), call("b", "gated")]
            )
            await trio.testing.wait_all_tasks_blocked()
            outer.cancel()
    assert outer.cancelled_caught
    assert not agent.signal.cancelled
    assert describe(agent) == [
        "call a",
        "result a ABORTED",
        "call b",
        "result b ABORTED_BEFORE_DISPATCH",
    ]


async def test_execute_raises_a_bare_cancelled(agent: FakeAgent) -> None:
    gates = Gates()
    registry = registry_of(gated(gates))
    caught: list[BaseException] = []

    async def run() -> None:
        with agent.signal.scope:
            try:
                await registry.execute(
                    agent,
                    turn=1,
                    step=1,
                    calls=[call("a", "gated")],
                    signal=agent.signal,
                )
            except BaseException as exc:
                caught.append(exc)
                raise

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        agent.cancel(UserCancel())
    assert len(caught) == 1
    assert type(caught[0]) is trio.Cancelled


# --------------------------------------------------------------------------- results


async def test_unknown_tool_and_invalid_arguments_do_not_stop_the_step(
    agent: FakeAgent,
) -> None:
    seen: list[dict[str, Any]] = []

    @tool
    async def add(ctx: ToolContext, a: int, b: int = 1) -> str:
        seen.append({"a": a, "b": b})
        return str(a + b)

    calls = [
        call("c1", "missing"),
        call("c2", "add", '{"a": "one"}'),
        call("c3", "add", "{not json"),
        call("c4", "add", '{"a": 1, "c": 2}'),
        call("c5", "add", '{"a": 2}'),
        call("c6", "add", ""),
    ]
    out = await drive(registry_of(add), agent, calls)
    assert out == Outcome(concluded=False, cancelled=False)
    assert seen == [{"a": 2, "b": 1}]
    got = results(agent)
    assert got["c1"].error == ToolErrorInfo("UnknownToolError", "UNKNOWN_TOOL")
    assert (
        text_of(got["c1"].message.content[0].content) == "Error: unknown tool 'missing'"
    )
    for cid in ("c2", "c3", "c4", "c6"):
        assert got[cid].error == ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")
        assert got[cid].message.content[0].is_error
    assert text_of(got["c2"].message.content[0].content) == (
        "Error: invalid arguments for tool 'add': argument 'a': expected integer, got string \"one\""
    )
    assert "not valid JSON" in text_of(got["c3"].message.content[0].content)
    assert "unexpected argument 'c'" in text_of(got["c4"].message.content[0].content)
    assert "missing required argument 'a'" in text_of(
        got["c6"].message.content[0].content
    )
    assert text_of(got["c5"].message.content[0].content) == "3"
    assert describe(agent) == [
        line
        for c in calls
        for line in (
            f"call {c.id}",
            f"result {c.id} " + ("ok" if c.id == "c5" else got[c.id].error.code),
        )
    ]


async def test_a_raising_body_becomes_an_error_result(agent: FakeAgent) -> None:
    class CodedError(Exception):
        code = "E_CODED"

    class NonStrCode(Exception):
        code = 7

    @tool
    async def boom(ctx: ToolContext, kind: str) -> str:
        if kind == "plain":
            raise ValueError("boom")
        if kind == "coded":
            raise CodedError("with a code")
        if kind == "silent":
            raise KeyError
        raise NonStrCode("numeric code")

    calls = [
        call(k, "boom", f'{{"kind": "{k}"}}')
        for k in ("plain", "coded", "silent", "other")
    ]
    await drive(registry_of(boom), agent, calls)
    got = results(agent)
    assert got["plain"].error == ToolErrorInfo("ValueError", "TOOL_ERROR")
    assert text_of(got["plain"].message.content[0].content) == "Error: boom"
    assert got["coded"].error == ToolErrorInfo("CodedError", "E_CODED")
    assert text_of(got["coded"].message.content[0].content) == "Error: with a code"
    assert text_of(got["silent"].message.content[0].content) == "Error: KeyError"
    assert got["other"].error == ToolErrorInfo("NonStrCode", "TOOL_ERROR")
    assert all(r.message.content[0].is_error for r in got.values())


async def test_return_shapes_and_tool_result(agent: FakeAgent) -> None:
    image = ImageBlock({"url": "x.png"})
    values: dict[str, Any] = {
        "text": "plain",
        "block": TextBlock("one block"),
        "blocks": [TextBlock("a"), image],
        "result": ToolResult("r", meta={"hits": 2}),
        "error": ToolResult([TextBlock("no")], is_error=True),
        "none": None,
        "number": 42,
        "badmeta": ToolResult("m", meta={1, 2}),
        "badblock": [TextBlock("a"), "b"],
    }

    @tool
    async def ret(ctx: ToolContext, key: str) -> Any:
        return values[key]

    await drive(
        registry_of(ret), agent, [call(k, "ret", f'{{"key": "{k}"}}') for k in values]
    )
    got = results(agent)
    block = {k: v.message.content[0] for k, v in got.items()}
    assert block["text"].content == (TextBlock("plain"),)
    assert block["block"].content == (TextBlock("one block"),)
    assert block["blocks"].content == (TextBlock("a"), image)
    assert block["result"].content == (TextBlock("r"),)
    assert got["result"].meta == {"hits": 2}
    assert got["result"].error is None
    assert block["error"].is_error and got["error"].error is None
    for bad in ("none", "number", "badmeta", "badblock"):
        assert got[bad].error == ToolErrorInfo(
            "ToolOutputError", "INVALID_TOOL_OUTPUT"
        ), bad
        assert text_of(block[bad].content).startswith(
            "Error: tool 'ret' returned an invalid result:"
        )


def test_tool_result_normalises_content() -> None:
    assert ToolResult("x").content == (TextBlock("x"),)
    assert ToolResult(TextBlock("y")).content == (TextBlock("y"),)
    assert ToolResult([TextBlock("a"), TextBlock("b")]).content == (
        TextBlock("a"),
        TextBlock("b"),
    )
    with pytest.raises(TypeError, match="content"):
        ToolResult(3)


async def test_deferred_contexts_land_in_next_step_after_their_result_in_model_order(
    agent: FakeAgent,
) -> None:
    gates = Gates()

    @tool(parallel_safe=True)
    async def note(ctx: ToolContext) -> str:
        ctx.defer_context(user_message(f"ctx-{ctx.call_id}-1"))
        await gates.hold(ctx.call_id)
        ctx.defer_context(user_message(f"ctx-{ctx.call_id}-2"))
        return "noted"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            drive, registry_of(note), agent, [call("a", "note"), call("b", "note")]
        )
        await trio.testing.wait_all_tasks_blocked()
        gates["b"].set()
        await trio.testing.wait_all_tasks_blocked()
        assert agent.inbox.next_step == ()  # b's contexts wait for a's result
        gates["a"].set()
    assert describe(agent) == [
        "call a",
        "call b",
        "result a ok",
        "spliced next-step [ctx-a-1]",
        "spliced next-step [ctx-a-2]",
        "result b ok",
        "spliced next-step [ctx-b-1]",
        "spliced next-step [ctx-b-2]",
    ]
    assert [text_of(m.content) for m in agent.inbox.next_step] == [
        "ctx-a-1",
        "ctx-a-2",
        "ctx-b-1",
        "ctx-b-2",
    ]


async def test_a_failing_body_keeps_its_deferred_contexts(agent: FakeAgent) -> None:
    @tool
    async def fails(ctx: ToolContext) -> str:
        ctx.defer_context(user_message("still here"))
        raise RuntimeError("nope")

    await drive(registry_of(fails), agent, [call("a", "fails")])
    assert describe(agent) == [
        "call a",
        "result a TOOL_ERROR",
        "spliced next-step [still here]",
    ]


async def test_defer_context_rejects_bad_messages_and_late_calls(
    agent: FakeAgent,
) -> None:
    kept: list[ToolContext] = []
    problems: list[type[BaseException]] = []
    agent.inbox.append("next-step", user_message("pending", id="p1"))

    @tool
    async def misuse(ctx: ToolContext) -> str:
        kept.append(ctx)
        ctx.defer_context(user_message("x", id="d1"))
        for bad in (
            "text",
            user_message("again", id="d1"),
            user_message("dup", id="p1"),
        ):
            try:
                ctx.defer_context(bad)
            except (InvalidSpliceError, DuplicateMessageError) as exc:
                problems.append(type(exc))
        return "ok"

    await drive(registry_of(misuse), agent, [call("a", "misuse")])
    assert problems == [
        InvalidSpliceError,
        DuplicateMessageError,
        DuplicateMessageError,
    ]
    with pytest.raises(RuntimeError, match="after call 'a' finished"):
        kept[0].defer_context(user_message("late"))
    with pytest.raises(RuntimeError):
        kept[0].conclude_turn()
    assert [m.id for m in agent.inbox.next_step] == ["p1", "d1"]


async def test_conclude_turn(agent: FakeAgent) -> None:
    @tool
    async def done(ctx: ToolContext, how: str) -> Any:
        ctx.conclude_turn()
        if how == "error-result":
            return ToolResult("failed", is_error=True)
        if how == "raise":
            raise ValueError("x")
        return "finished"

    registry = registry_of(done)
    assert (
        await drive(registry, make_agent(), [call("a", "done", '{"how": "ok"}')])
    ).concluded is True
    assert (
        await drive(registry, make_agent(), [call("a", "done", '{"how": "raise"}')])
    ).concluded is False
    assert (
        await drive(
            registry, make_agent(), [call("a", "done", '{"how": "error-result"}')]
        )
    ).concluded is False
    # one concluding call among others is enough
    mixed = [call("a", "done", '{"how": "raise"}'), call("b", "done", '{"how": "ok"}')]
    assert (await drive(registry, make_agent(), mixed)).concluded is True
    assert (await drive(registry, agent, [])).concluded is False


async def test_context_fields(agent: FakeAgent) -> None:
    seen: list[ToolContext] = []

    @tool
    async def look(ctx: ToolContext) -> str:
        seen.append(ctx)
        return ""

    await drive(registry_of(look), agent, [call("call-7", "look")], turn=3, step=2)
    ctx = seen[0]
    assert (ctx.agent, ctx.call_id, ctx.signal, ctx.turn, ctx.step) == (
        agent,
        "call-7",
        agent.signal,
        3,
        2,
    )
    assert [(e.data.turn, e.data.step) for e in agent.session.events] == [
        (3, 2),
        (3, 2),
    ]


async def test_agent_cancelled_from_a_body(agent: FakeAgent) -> None:
    from dsh_trio.errors import AgentCancelled

    @tool
    async def polls(ctx: ToolContext, cancel: bool) -> str:
        if cancel:
            ctx.agent.cancel(UserCancel())
            ctx.signal.raise_if_cancelled()
        raise AgentCancelled(
            UserCancel()
        )  # not this turn's cancellation: a plain failure

    await drive(registry_of(polls), agent, [call("a", "polls", '{"cancel": false}')])
    assert results(agent)["a"].error == ToolErrorInfo("AgentCancelled", "TOOL_ERROR")
    other = make_agent("s2")
    out = await drive(
        registry_of(polls), other, [call("a", "polls", '{"cancel": true}')]
    )
    assert out.cancelled
    assert results(other)["a"].error == ABORTED


async def test_a_body_without_context_gets_only_its_arguments(agent: FakeAgent) -> None:
    @tool
    async def add(a: int, b: int) -> str:
        return str(a + b)

    await drive(registry_of(add), agent, [call("a", "add", '{"a": 2, "b": 3}')])
    assert text_of(results(agent)["a"].message.content[0].content) == "5"


async def test_a_base_exception_from_a_body_is_a_scheduler_failure(
    agent: FakeAgent,
) -> None:
    class Fatal(BaseException):
        pass

    @tool
    async def fatal(ctx: ToolContext) -> str:
        raise Fatal

    with pytest.raises(Fatal):
        await drive(registry_of(fatal), agent, [call("a", "fatal"), call("b", "fatal")])
    # Nothing more starts, but every call is answered before the failure propagates.
    assert describe(agent) == [
        "call a",
        "result a TOOL_ERROR",
        "call b",
        "result b ABORTED_BEFORE_DISPATCH",
    ]
    got = results(agent)
    assert got["a"].error == ToolErrorInfo("Fatal", "TOOL_ERROR")
    assert text_of(got["a"].message.content[0].content) == (
        "Error: tool 'fatal' was stopped by Fatal; the turn ended"
    )


async def test_a_base_exception_in_a_parallel_group_answers_every_call(
    agent: FakeAgent,
) -> None:
    class Fatal(BaseException):
        pass

    gates = Gates()

    @tool(parallel_safe=True)
    async def fatal(ctx: ToolContext) -> str:
        await gates.hold(ctx.call_id)
        raise Fatal("stop")

    @tool(parallel_safe=True)
    async def quick(ctx: ToolContext) -> str:
        return "quick"

    registry = registry_of(gated(gates), fatal, quick, cap=2)
    calls = [
        call("a", "gated"),
        call("b", "quick"),
        call("c", "fatal"),
        call("d", "quick"),
    ]
    with pytest.RaisesGroup(Fatal):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, registry, agent, calls)
            await trio.testing.wait_all_tasks_blocked()
            gates["c"].set()
    # a was cancelled by the failure, b had finished and keeps its result, c is the
    # failure, d never started.
    assert describe(agent) == [
        "call a",
        "call b",
        "call c",
        "result a ABORTED",
        "result b ok",
        "result c TOOL_ERROR",
        "call d",
        "result d ABORTED_BEFORE_DISPATCH",
    ]


# --------------------------------------------------------------------------- registry


def test_registry_registration_and_schemas(agent: FakeAgent) -> None:
    def make(name: str) -> Tool:
        async def body(ctx: ToolContext) -> str:
            return ""

        return tool(name=name, description=f"the {name} tool")(body)

    registry = ToolRegistry()
    assert registry.schemas(agent) == ()
    zeta, alpha, mid = make("zeta"), make("alpha"), make("mid")
    dispose_zeta = registry.register(zeta)
    registry.register(alpha)
    dispose_mid = registry.register(mid)
    assert registry.names() == ("alpha", "mid", "zeta")
    assert [s["name"] for s in registry.schemas(agent)] == ["alpha", "mid", "zeta"]  # type: ignore[index, call-overload]
    assert registry.schemas(agent)[0] == alpha.schema
    assert registry.get("mid") is mid
    assert registry.get("nope") is None
    with pytest.raises(ToolDefinitionError, match="'zeta' is already registered"):
        registry.register(make("zeta"))
    with pytest.raises(ToolDefinitionError, match="decorate the function with @tool"):
        registry.register(lambda: None)
    dispose_mid()
    dispose_mid()  # idempotent
    assert registry.names() == ("alpha", "zeta")
    assert [s["name"] for s in registry.schemas(agent)] == ["alpha", "zeta"]  # type: ignore[index, call-overload]
    # a stale disposer does not remove a newer tool of the same name
    dispose_zeta()
    newer = make("zeta")
    registry.register(newer)
    dispose_zeta()
    assert registry.get("zeta") is newer


async def test_registry_satisfies_the_loop_seam() -> None:
    from dsh_trio.loop import ToolExecutor

    executor: ToolExecutor = ToolRegistry()
    assert executor.schemas(make_agent()) == ()
