"""``dsh_trio.observe.instrument``: the spans and metrics of turns, attempts and tool calls.

Each test runs a real runtime with the scripted model and reads what the OpenTelemetry
SDK recorded through its in-memory span exporter and metric reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import dsh_trio as dsh
from dsh_trio.observe import instrument
from dsh_trio.testing import ScriptedModel, fail, hang, reply, tool_calls

OPTIONS = dsh.AgentOptions(provider="scripted", model="m1")
KEY = "sk-test-0123456789abcdefSECRET"


class Recorder:
    """An SDK tracer and meter provider whose spans and metrics stay in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        # Spans started and not yet ended (the SDK has no list of them).
        self.started: list[Any] = []
        recorder = self

        class Watch(SimpleSpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                recorder.started.append(span)

        self.tracer_provider.add_span_processor(Watch(InMemorySpanExporter()))

    def install(self, runtime: dsh.Runtime, *, include_content: bool = False) -> Any:
        return instrument(
            runtime,
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            include_content=include_content,
        )

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def open_spans(self) -> list[str]:
        return [s.name for s in self.started if s.end_time is None]

    def named(self, operation: str) -> list[ReadableSpan]:
        return [
            s
            for s in self.spans
            if (s.attributes or {}).get("gen_ai.operation.name") == operation
        ]

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for m in scope.metrics:
                    if m.name == metric:
                        found += [
                            (dict(p.attributes or {}), p) for p in m.data.data_points
                        ]
        return found


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.tracer_provider.shutdown()
    rec.meter_provider.shutdown()


def attrs_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    found: int = span.context.span_id
    return found


def everything_recorded(recorder: Recorder) -> str:
    """Every string the SDK holds: names, attributes, events, statuses, metrics."""
    parts: list[str] = []
    for span in recorder.spans:
        parts.append(span.name)
        parts.append(json.dumps(attrs_of(span), default=str))
        parts.append(str(span.status.description))
        for event in span.events:
            parts.append(event.name)
            parts.append(json.dumps(dict(event.attributes or {}), default=str))
    for metric in ("gen_ai.client.token.usage", "gen_ai.client.operation.duration"):
        parts += [json.dumps(a) for a, _ in recorder.points(metric)]
    return "\n".join(parts)


@pytest.fixture
async def lookup_tool() -> dsh.Tool:
    @dsh.tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        await trio.lowlevel.checkpoint()
        return f"value of {key}"

    return lookup


# ---------------------------------------------------------------------- span tree


async def test_a_turn_with_a_retried_attempt_and_a_tool_call_gives_the_span_tree(
    recorder: Recorder,
    lookup_tool: dsh.Tool,
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = ScriptedModel(
        fail("SERVER", "upstream down"),
        tool_calls(("c1", "lookup", '{"key": "k"}')),
        reply("done"),
    )
    async with dsh.open_runtime(
        models={"scripted": model}, tools=[lookup_tool]
    ) as runtime:
        recorder.install(runtime)
        async with runtime.agents.open(options=OPTIONS) as agent:
            result = await agent.run("look k up")
            assert result.text == "done"

    (turn,) = recorder.named("invoke_agent")
    chats = sorted(recorder.named("chat"), key=lambda s: s.start_time or 0)
    (tool,) = recorder.named("execute_tool")
    assert [c.name for c in chats] == ["chat m1"] * 3

    # The turn: the agent's session id, its number and how it ended.
    assert turn.kind is SpanKind.INTERNAL
    assert attrs_of(turn) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": agent.id,
        "dsh.turn": 1,
        "dsh.turn.end_reason": "completed",
    }
    assert turn.status.status_code is StatusCode.UNSET

    # Three attempts under the turn: the failed one, its retry (attempt 1 of step 1),
    # and the first attempt of step 2.
    assert all(parent_of(c) == span_id(turn) for c in chats)
    failed, retried, final = chats
    assert attrs_of(failed) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m1",
        "dsh.attempt": 0,
        "gen_ai.response.finish_reasons": ("error",),
        "error.type": "SERVER",
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "upstream down"
    assert failed.kind is SpanKind.CLIENT
    assert attrs_of(retried) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "m1",
        "dsh.attempt": 1,
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": len('{"key": "k"}'),
    }
    assert retried.status.status_code is StatusCode.UNSET
    assert attrs_of(final)["dsh.attempt"] == 0
    assert attrs_of(final)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs_of(final)["gen_ai.usage.output_tokens"] == len("done")

    # The tool call, between the retry and the final attempt, under the turn.
    assert parent_of(tool) == span_id(turn)
    assert tool.name == "execute_tool lookup"
    assert attrs_of(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    assert retried.end_time is not None and tool.start_time is not None
    assert final.start_time is not None and tool.end_time is not None
    assert retried.end_time <= tool.start_time <= tool.end_time <= final.start_time
    # Every child inside its parent's time.
    for child in (*chats, tool):
        assert turn.start_time <= child.start_time  # type: ignore[operator]
        assert child.end_time <= turn.end_time  # type: ignore[operator]
    # The retry's span starts after the retry delay, not when the failure ended.
    assert failed.end_time is not None and retried.start_time is not None
    assert retried.start_time >= failed.end_time

    # Metrics: tokens per attempt that reported usage, a duration per attempt.
    tokens = recorder.points("gen_ai.client.token.usage")
    by_type = {
        t: sum(p.sum for a, p in tokens if a["gen_ai.token.type"] == t)
        for t in ("input", "output")
    }
    assert by_type == {"input": 20, "output": len('{"key": "k"}') + len("done")}
    assert all(
        a["gen_ai.operation.name"] == "chat"
        and a["gen_ai.provider.name"] == "scripted"
        and a["gen_ai.request.model"] == "m1"
        for a, _ in tokens
    )
    durations = recorder.points("gen_ai.client.operation.duration")
    assert sum(p.count for _, p in durations) == 3
    assert sum(p.count for a, p in durations if a.get("error.type") == "SERVER") == 1
    assert recorder.open_spans() == []


async def test_a_child_agents_turn_nests_under_the_tool_call_that_ran_it(
    recorder: Recorder,
) -> None:
    # Two calls of one step run at once, each delegating to a child agent: each
    # child's turn is a child of the call that ran it.
    model = ScriptedModel(
        tool_calls(
            ("c1", "delegate", '{"task": "a"}'), ("c2", "delegate", '{"task": "b"}')
        ),
        default=reply("answer"),
    )
    children: dict[str, str] = {}  # call id -> child agent id

    async with dsh.open_runtime(models={"scripted": model}) as runtime:

        @dsh.tool(parallel_safe=True)
        async def delegate(ctx: dsh.ToolContext, task: str) -> str:
            """Hand the task to a child agent."""
            handle = await runtime.agents.create(options=OPTIONS, parent=ctx.agent)
            async with handle:
                children[ctx.call_id] = handle.agent.id
                # Both calls are under way before either child starts its turn.
                await trio.testing.wait_all_tasks_blocked()
                result = await handle.agent.run(task)
            return result.text

        runtime.tools.register(delegate)
        recorder.install(runtime)
        async with runtime.agents.open(options=OPTIONS) as parent:
            assert (await parent.run("go")).text == "answer"

    turns = {attrs_of(s)["gen_ai.agent.id"]: s for s in recorder.named("invoke_agent")}
    tools = {
        attrs_of(s)["gen_ai.tool.call.id"]: s for s in recorder.named("execute_tool")
    }
    assert set(tools) == set(children) == {"c1", "c2"}
    for call_id, child_id in children.items():
        assert parent_of(turns[child_id]) == span_id(tools[call_id])
        assert parent_of(tools[call_id]) == span_id(turns[parent.id])
    assert turns[parent.id].parent is None
    # One trace for the three agents.
    assert len({s.context.trace_id for s in recorder.spans if s.context}) == 1
    assert recorder.open_spans() == []


# ---------------------------------------------------------------------- ends


async def test_a_cancelled_turn_carries_its_cause(recorder: Recorder) -> None:
    model = ScriptedModel(hang("partial"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        recorder.install(runtime)
        async with runtime.agents.open(options=OPTIONS) as agent:
            agent.followup(dsh.user_message("wait"))
            await trio.testing.wait_all_tasks_blocked()
            assert recorder.open_spans() == ["invoke_agent", "chat m1"]
            agent.cancel(dsh.HookCancel("too slow"))
            await agent.when_idle()
            (turn,) = recorder.named("invoke_agent")
            assert attrs_of(turn)["dsh.turn.end_reason"] == "aborted"
            assert attrs_of(turn)["dsh.cancel.cause"] == "hook"
            (chat,) = recorder.named("chat")
            assert chat.end_time is not None
            assert recorder.open_spans() == []


async def test_an_errored_turn_has_status_error(recorder: Recorder) -> None:
    model = ScriptedModel(fail("AUTH", "bad credentials"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        recorder.install(runtime)
        async with runtime.agents.open(options=OPTIONS) as agent:
            result = await agent.run("hello", check=False)
            assert isinstance(result.reason, dsh.Errored)
    (turn,) = recorder.named("invoke_agent")
    assert turn.status.status_code is StatusCode.ERROR
    assert turn.status.description == "bad credentials"
    assert attrs_of(turn)["dsh.turn.end_reason"] == "errored"
    assert attrs_of(turn)["error.type"] == "AUTH"
    assert "dsh.cancel.cause" not in attrs_of(turn)


async def test_disposing_mid_turn_ends_every_span(recorder: Recorder) -> None:
    model = ScriptedModel(hang("partial"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        recorder.install(runtime)
        handle = await runtime.agents.create(options=OPTIONS)
        handle.agent.followup(dsh.user_message("wait"))
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.open_spans() == ["invoke_agent", "chat m1"]
        await handle.dispose()
        assert recorder.open_spans() == []
        (turn,) = recorder.named("invoke_agent")
        assert attrs_of(turn)["dsh.cancel.cause"] == "disposed"


async def test_leaving_the_runtime_mid_turn_ends_every_span(
    recorder: Recorder, lookup_tool: dsh.Tool
) -> None:
    gate = trio.Event()

    @dsh.tool
    async def slow() -> str:
        """Wait."""
        await gate.wait()
        return "late"

    model = ScriptedModel(tool_calls(("c1", "slow", "{}")), default=reply("x"))
    async with dsh.open_runtime(models={"scripted": model}, tools=[slow]) as runtime:
        recorder.install(runtime)
        handle = await runtime.agents.create(options=OPTIONS)
        handle.agent.followup(dsh.user_message("go"))
        await trio.testing.wait_all_tasks_blocked()
        assert recorder.open_spans() == ["invoke_agent", "execute_tool slow"]
    assert recorder.open_spans() == []
    assert len(recorder.spans) == 3


async def test_uninstall_stops_the_spans_and_ends_the_open_ones(
    recorder: Recorder,
) -> None:
    model = ScriptedModel(reply("one"), hang("partial"), default=reply("later"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        uninstall = recorder.install(runtime)
        async with runtime.agents.open(options=OPTIONS) as agent:
            await agent.run("first")
            assert len(recorder.named("invoke_agent")) == 1
            agent.followup(dsh.user_message("second"))
            await trio.testing.wait_all_tasks_blocked()
            assert recorder.open_spans() == ["invoke_agent", "chat m1"]
            uninstall()
            assert recorder.open_spans() == []
            uninstall()  # idempotent
            agent.cancel(dsh.UserCancel())
            await agent.when_idle()
            count = len(recorder.spans)
            await agent.run("third")
            assert len(recorder.spans) == count  # nothing recorded any more
    assert recorder.open_spans() == []


# ---------------------------------------------------------------------- content


async def test_content_is_recorded_only_when_asked(
    recorder: Recorder, lookup_tool: dsh.Tool
) -> None:
    for include in (False, True):
        rec = Recorder()
        model = ScriptedModel(
            tool_calls(("c1", "lookup", '{"key": "secret-plan"}')),
            reply("the answer is 42"),
        )
        async with dsh.open_runtime(
            models={"scripted": model}, tools=[lookup_tool]
        ) as runtime:
            rec.install(runtime, include_content=include)
            async with runtime.agents.open(options=OPTIONS) as agent:
                await agent.run("what is the plan?")
        recorded = everything_recorded(rec)
        words = ("what is the plan?", "secret-plan", "value of", "the answer is 42")
        if not include:
            for word in words:
                assert word not in recorded
            continue
        (tool,) = rec.named("execute_tool")
        assert json.loads(str(attrs_of(tool)["gen_ai.tool.call.arguments"])) == {
            "key": "secret-plan"
        }
        assert attrs_of(tool)["gen_ai.tool.call.result"] == "value of secret-plan"
        first, last = sorted(rec.named("chat"), key=lambda s: s.start_time or 0)
        sent = json.loads(str(attrs_of(last)["gen_ai.input.messages"]))
        assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
        assert sent[0]["parts"] == [{"type": "text", "content": "what is the plan?"}]
        assert sent[1]["parts"] == [
            {
                "type": "tool_call",
                "id": "c1",
                "name": "lookup",
                "arguments": {"key": "secret-plan"},
            }
        ]
        assert sent[2]["parts"][0]["type"] == "tool_call_response"
        assert json.loads(str(attrs_of(last)["gen_ai.output.messages"])) == [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "the answer is 42"}],
                "finish_reason": "stop",
            }
        ]
        assert json.loads(str(attrs_of(first)["gen_ai.input.messages"])) == sent[:1]
        rec.tracer_provider.shutdown()
        rec.meter_provider.shutdown()


def sse_reply(text: str) -> bytes:
    events = [
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
    ]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


async def test_the_api_key_is_never_recorded(recorder: Recorder) -> None:
    seen: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=sse_reply("hi from the server"))

    async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as client:
        adapter = dsh.OpenAICompatibleAdapter(
            "https://llm.test/v1", api_key=KEY, client=client
        )
        # A route, a failure and content that all carry the key: the scripted model
        # redacts nothing, so only the instrumentation keeps it out.
        scripted = ScriptedModel(
            fail("AUTH", f"rejected key {KEY}"),
            tool_calls(("c1", "lookup", json.dumps({"key": KEY}))),
            reply(f"echo {KEY}"),
        )

        @dsh.tool
        async def lookup(key: str) -> str:
            """Look a key up."""
            await trio.lowlevel.checkpoint()
            return f"value of {key}"

        async with dsh.open_runtime(
            models={"remote": adapter, "scripted": scripted}, tools=[lookup]
        ) as runtime:
            recorder.install(runtime, include_content=True)
            remote = dsh.AgentOptions(provider="remote", model=f"model-{KEY}")
            async with runtime.agents.open(options=remote) as agent:
                result = await agent.run(f"my key is {KEY}")
                assert result.text == "hi from the server"
            keyed = dsh.AgentOptions(provider="scripted", model=f"m-{KEY}")
            async with runtime.agents.open(options=keyed) as agent:
                failed = await agent.run(f"again {KEY}", check=False)
                assert isinstance(failed.reason, dsh.Errored)
                await agent.run(f"and {KEY}")
    assert seen and KEY in seen[0].headers["authorization"]  # the key was in use
    recorded = everything_recorded(recorder)
    assert len(recorder.spans) == 8  # 3 turns, 4 attempts, 1 tool call
    assert "model-***" in recorded and "rejected key ***" in recorded
    assert KEY not in recorded
    assert KEY[:12] not in recorded


# ---------------------------------------------------------------------- installing


def subscriptions(*agents: dsh.Agent) -> list[int]:
    """How many listeners each agent's session has."""
    return [len(agent.session._subs) for agent in agents]


async def test_agents_live_before_and_created_after_install_are_both_traced(
    recorder: Recorder,
) -> None:
    model = ScriptedModel(
        reply("untraced"),
        tool_calls(("c1", "ask", "{}")),
        reply("child's answer"),
        default=reply("ok"),
    )
    children: list[dsh.Agent] = []

    @dsh.tool
    async def ask() -> str:
        """Ask the child."""
        return (await children[0].run("child's turn")).text

    async with dsh.open_runtime(models={"scripted": model}, tools=[ask]) as runtime:
        async with runtime.agents.open(options=OPTIONS) as before:
            # A child live before install, run from its parent's tool call.
            child = await runtime.agents.create(options=OPTIONS, parent=before)
            children.append(child.agent)
            await before.run("untraced")
            recorder.install(runtime)
            async with runtime.agents.open(options=OPTIONS) as after:
                await before.run("delegate")
                await after.run("two")
                # A child created after install, run while its parent is idle.
                late = await runtime.agents.create(options=OPTIONS, parent=after)
                async with late:
                    await late.agent.run("three")
            await child.dispose()
    turns = {attrs_of(s)["gen_ai.agent.id"]: s for s in recorder.named("invoke_agent")}
    assert {k: attrs_of(s)["dsh.turn"] for k, s in turns.items()} == {
        before.id: 2,
        child.agent.id: 1,
        after.id: 1,
        late.agent.id: 1,
    }
    (tool,) = recorder.named("execute_tool")
    assert parent_of(tool) == span_id(turns[before.id])
    assert parent_of(turns[child.agent.id]) == span_id(tool)
    assert turns[late.agent.id].parent is None  # "after" had no turn open
    assert len(recorder.named("chat")) == 5
    assert recorder.open_spans() == []


async def test_an_agent_being_created_at_install_is_traced_once(
    recorder: Recorder,
) -> None:
    # Installed from an agent/created listener: the agent is already listed as live
    # and its agent/created is being dispatched, so both ways find it.
    model = ScriptedModel(default=reply("ok"))
    uninstalls: list[Any] = []
    async with dsh.open_runtime(models={"scripted": model}) as runtime:

        async def install(payload: dsh.AgentCreated) -> None:
            await trio.lowlevel.checkpoint()
            if not uninstalls:
                uninstalls.append(recorder.install(runtime))

        runtime.events.on("agent/created", install)
        async with runtime.agents.open(options=OPTIONS) as agent:
            assert subscriptions(agent) == [1]
            await agent.run("one")
        # Installed from a creation's setup: the agent is not listed yet, its
        # agent/created is still to come.
        uninstalls.pop()()

        async def setup(scope: dsh.AgentScope, agent: dsh.Agent) -> None:
            await trio.lowlevel.checkpoint()
            uninstalls.append(recorder.install(runtime))

        async with runtime.agents.open(options=OPTIONS, setup=setup) as second:
            assert subscriptions(second) == [1]
            await second.run("two")
    ids = [attrs_of(s)["gen_ai.agent.id"] for s in recorder.named("invoke_agent")]
    assert ids == [agent.id, second.id]


async def test_uninstall_leaves_no_listener_and_no_subscription(
    recorder: Recorder,
) -> None:
    model = ScriptedModel(hang("partial"), default=reply("ok"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        bus = runtime.events
        names = ("session/event", "agent/created", "agent/disposed")
        listeners = [bus.has_listeners(name) for name in names]
        async with runtime.agents.open(options=OPTIONS) as before:
            untraced = subscriptions(before)
            uninstall = recorder.install(runtime)
            # No runtime-wide relay of every append: each agent's own session.
            assert not bus.has_listeners("session/event")
            async with runtime.agents.open(options=OPTIONS) as after:
                child = await runtime.agents.create(options=OPTIONS, parent=after)
                gone = await runtime.agents.create(options=OPTIONS)
                traced = subscriptions(before, after, child.agent, gone.agent)
                assert traced == [n + 1 for n in untraced * 4]
                # Disposing an agent ends its subscription.
                await gone.dispose()
                assert subscriptions(gone.agent) == untraced
                before.followup(dsh.user_message("hang"))
                await trio.testing.wait_all_tasks_blocked()
                assert recorder.open_spans() == ["invoke_agent", "chat m1"]
                uninstall()
                assert recorder.open_spans() == []
                assert subscriptions(before, after, child.agent) == untraced * 3
                assert [bus.has_listeners(name) for name in names] == listeners
                uninstall()  # idempotent
                before.cancel(dsh.UserCancel())
                await before.when_idle()
                count = len(recorder.spans)
                await after.run("after uninstall")
                await child.agent.run("after uninstall")
                assert len(recorder.spans) == count
                await child.dispose()


async def test_bad_include_content_is_refused(recorder: Recorder) -> None:
    async with dsh.open_runtime(models={"scripted": ScriptedModel()}) as runtime:
        with pytest.raises(
            TypeError, match="include_content=True or include_content=False, got 'yes'"
        ):
            instrument(runtime, include_content="yes")  # type: ignore[arg-type]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )


def test_importing_dsh_trio_imports_no_opentelemetry() -> None:
    done = run_python(
        "import sys, dsh_trio, dsh_trio.observe\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_opentelemetry_instrument_names_the_extra() -> None:
    done = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import dsh_trio\n"
        "from dsh_trio.observe import instrument\n"
        "try:\n"
        "    instrument(object())\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'dsh-trio[otel]'" in done.stdout
    assert "opentelemetry-api" in done.stdout
