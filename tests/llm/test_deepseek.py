"""DeepSeek's API as it is today, replayed with its recorded stream shapes.

Thinking mode: the reasoning of every assistant message that made tool calls goes back
in all later requests (across user turns, resumes and forks), the reasoning of text
answers never does; ``AgentOptions.thinking`` becomes the ``thinking`` switch; the
retired model names are refused before anything is sent; a 400 about a missing
``reasoning_content`` names ``reasoning_passback``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import dsh_trio as dsh
from dsh_trio import user_message
from dsh_trio.errors import LlmError
from dsh_trio.llm import OpenAICompatibleAdapter, check_deepseek_model
from dsh_trio.llm._openai_request import request_body
from dsh_trio.values import (
    AssistantMessage,
    MessageId,
    ModelSource,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolSource,
    TurnEnd,
    UserMessage,
)

from ..support import make_request

FIXTURES = Path(__file__).parent / "fixtures"
DEEPSEEK = "https://api.deepseek.com"
OTHER = "https://llm.test/v1"
MODEL = "deepseek-flash"
FIRST_THOUGHT = "The user wants the weather. I should call get_weather."
SECOND_THOUGHT = "The user wants the weather. Again, call get_weather."


#: A request of this provider (``make_request`` with its names).
deepseek_request = functools.partial(make_request, provider="deepseek", model=MODEL)


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


#: Two user turns of thinking mode, each a tool call and then a text answer.
BODIES = (
    fixture("deepseek_reasoner_tool_call"),
    fixture("deepseek_reasoner_answer"),
    fixture("deepseek_reasoner_tool_call")
    .replace(b"call_00_w1", b"call_00_w2")
    .replace(b"I should call", b"Again, call"),
    fixture("deepseek_reasoner_answer"),
)


class Server:
    """A recorded DeepSeek: answers the recorded bodies in order, keeps every request."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies or BODIES)
        self.seen: list[Any] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(json.loads(request.content))
        return httpx.Response(200, content=self.bodies[len(self.seen) - 1])

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self))


def assistants(body: Any) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


@dsh.tool
async def get_weather(ctx: dsh.ToolContext, city: str) -> str:
    """The weather in a city."""
    await trio.lowlevel.checkpoint()
    return f"sunny in {city}"


def options(**fields: Any) -> dsh.AgentOptions:
    return dsh.AgentOptions(provider="deepseek", model=MODEL, **fields)


async def one_turn(agent: dsh.Agent, text: str) -> None:
    agent.followup(dsh.user_message(text))
    await agent.when_idle()


def turn_ends(agent: dsh.Agent) -> list[Any]:
    return [e.data for e in agent.session.events if isinstance(e.data, TurnEnd)]


def check_fourth_request(seen: list[Any]) -> None:
    """Both tool-call messages carry their reasoning; the text answers none."""
    assert len(seen) == 4
    # Turn 1, after its tool call: the call goes back with its reasoning.
    (call,) = assistants(seen[1])
    assert call["reasoning_content"] == FIRST_THOUGHT
    # Turn 2 opens: turn 1's call keeps its reasoning; the answer never has any.
    old_call, old_answer = assistants(seen[2])
    assert old_call["reasoning_content"] == FIRST_THOUGHT
    assert "reasoning_content" not in old_answer
    # Turn 2, after its tool call: both calls carry theirs, the answer none.
    old_call, old_answer, new_call = assistants(seen[3])
    assert old_call["tool_calls"][0]["id"] == "call_00_w1"
    assert old_call["reasoning_content"] == FIRST_THOUGHT
    assert old_answer["content"] == "Sunny, 24°C in Hangzhou."
    assert "reasoning_content" not in old_answer
    assert new_call["tool_calls"][0]["id"] == "call_00_w2"
    assert new_call["reasoning_content"] == SECOND_THOUGHT
    assert seen[3]["messages"][-1]["role"] == "tool"


# ------------------------------------------------------------------ passback


async def test_two_user_turns_send_every_tool_calls_reasoning_back() -> None:
    server = Server()
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(
            models={"deepseek": adapter}, tools=[get_weather]
        ) as runtime:
            async with runtime.agents.open(options=options()) as agent:
                for text in ("weather?", "and now?"):
                    await one_turn(agent, text)
                assert turn_ends(agent) == [
                    TurnEnd(1, dsh.Completed()),
                    TurnEnd(2, dsh.Completed()),
                ]
    check_fourth_request(server.seen)


async def test_a_resumed_session_sends_the_reasoning_of_earlier_tool_calls(
    tmp_path: Path,
) -> None:
    server = Server()
    persistence = dsh.JsonlPersistence(tmp_path)
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(
            models={"deepseek": adapter}, tools=[get_weather], persistence=persistence
        ) as runtime:
            async with runtime.agents.open(options=options()) as agent:
                await one_turn(agent, "weather?")
                session_id = agent.id
        # A new runtime reads the JSONL log back.
        async with dsh.open_runtime(
            models={"deepseek": adapter}, tools=[get_weather], persistence=persistence
        ) as runtime:
            async with runtime.agents.open_resumed(
                session_id, options=options()
            ) as agent:
                await one_turn(agent, "and now?")
                assert turn_ends(agent)[-1] == TurnEnd(2, dsh.Completed())
    check_fourth_request(server.seen)


async def test_a_forked_child_sends_the_reasoning_of_its_parents_tool_calls() -> None:
    server = Server()
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(
            models={"deepseek": adapter}, tools=[get_weather]
        ) as runtime:
            async with runtime.agents.open(options=options()) as parent:
                await one_turn(parent, "weather?")
                cut = parent.session.fork()
            seed = list(cut.events)
            async with runtime.agents.open(
                options=options(), seed=seed, inherited_event_count=len(seed)
            ) as child:
                await one_turn(child, "and now?")
                assert turn_ends(child)[-1] == TurnEnd(2, dsh.Completed())
    check_fourth_request(server.seen)


def history() -> tuple[Any, ...]:
    source = ModelSource("deepseek", MODEL)

    def call(n: int) -> AssistantMessage:
        return AssistantMessage(
            MessageId(f"a{n}"),
            (
                ReasoningBlock("think "),
                ReasoningBlock(f"{n}"),
                TextBlock("calling"),
                ToolCallBlock(f"c{n}", "f", "{}"),
            ),
            source,
        )

    def result(n: int) -> UserMessage:
        return dsh.user_message("ok", source=ToolSource(f"c{n}"))

    return (
        user_message("one"),
        call(1),
        result(1),
        AssistantMessage(
            MessageId("a1x"), (ReasoningBlock("r"), TextBlock("done")), source
        ),
        user_message("two"),
        call(2),
        result(2),
        call(3),
        result(3),
    )


@pytest.mark.parametrize(
    ("url", "passback", "sent"),
    [
        (DEEPSEEK, None, True),
        ("https://api.deepseek.com/v1", None, True),
        (DEEPSEEK, False, False),
        (OTHER, None, False),
        (OTHER, True, True),
        ("https://notdeepseek.com", None, False),
    ],
)
async def test_reasoning_passback_is_per_server_and_covers_every_tool_call(
    url: str, passback: bool | None, sent: bool
) -> None:
    server = Server(fixture("deepseek_reasoner_answer"))
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(
            url, client=client, reasoning_passback=passback
        )
        async for _ in adapter.stream(deepseek_request(messages=history())):
            pass
    got = [m.get("reasoning_content") for m in assistants(server.seen[0])]
    if sent:
        # Every tool-call message of every turn; never the text answer (a1x).
        assert got == ["think 1", None, "think 2", "think 3"]
    else:
        assert got == [None, None, None, None]


def test_a_tool_call_without_reasoning_sends_none() -> None:
    bare = AssistantMessage(
        MessageId("a"), (ToolCallBlock("c", "f", "{}"),), ModelSource("p", "m")
    )
    body = request_body(deepseek_request(messages=(bare,)), reasoning_passback=True)
    (call,) = assistants(body)
    assert "reasoning_content" not in call


# ------------------------------------------------------------------ thinking switch


@pytest.mark.parametrize(
    ("thinking", "sent"),
    [(True, {"type": "enabled"}), (False, {"type": "disabled"}), (None, None)],
)
@pytest.mark.parametrize(
    ("url", "switch", "on"),
    [
        (DEEPSEEK, None, True),
        (DEEPSEEK, False, False),
        (OTHER, None, False),
        (OTHER, True, True),
    ],
)
async def test_thinking_reaches_the_body_of_servers_that_take_it(
    thinking: bool | None,
    sent: Any,
    url: str,
    switch: bool | None,
    on: bool,
) -> None:
    server = Server(fixture("deepseek_reasoner_answer"))
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(url, client=client, thinking_switch=switch)
        async for _ in adapter.stream(deepseek_request(thinking=thinking)):
            pass
    (body,) = server.seen
    assert body.get("thinking") == (sent if on else None)
    assert ("thinking" in body) == (on and thinking is not None)


@pytest.mark.parametrize("thinking", [True, False, None])
async def test_agent_options_thinking_is_in_every_request_body(
    thinking: bool | None,
) -> None:
    server = Server()
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(
            models={"deepseek": adapter}, tools=[get_weather]
        ) as runtime:
            async with runtime.agents.open(
                options=options(thinking=thinking, reasoning_effort="max")
            ) as agent:
                await one_turn(agent, "weather?")
    assert len(server.seen) == 2
    for body in server.seen:
        assert body["reasoning_effort"] == "max"  # passed through as given
        if thinking is None:
            assert "thinking" not in body
        else:
            assert body["thinking"] == {"type": "enabled" if thinking else "disabled"}


def thinking_off(scope: dsh.PresetScope, config: Any) -> None:
    """A preset plugin: the agents it composes think not unless they say so."""
    scope.defaults(thinking=False)


async def test_a_presets_default_thinking_reaches_the_request() -> None:
    server = Server(fixture("deepseek_reasoner_answer"))
    row = dsh.PluginRow(name=f"{__name__}:thinking_off")
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(models={"deepseek": adapter}) as runtime:
            await runtime.presets.register(
                dsh.PresetDefinition(id="quick", plugins=(row,))
            )
            async with runtime.agents.open(options=options(), preset="quick") as agent:
                assert agent.options.thinking is False
                await one_turn(agent, "hi")
    assert server.seen[0]["thinking"] == {"type": "disabled"}


def test_thinking_is_a_bool_or_none() -> None:
    with pytest.raises(TypeError, match=r"AgentOptions\.thinking must be True"):
        dsh.AgentOptions(thinking="off")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="thinking_switch"):
        OpenAICompatibleAdapter(OTHER, thinking_switch="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reasoning_passback"):
        OpenAICompatibleAdapter(OTHER, reasoning_passback="yes")  # type: ignore[arg-type]


def test_model_request_thinking_defaults_to_none() -> None:
    assert deepseek_request().thinking is None
    assert "thinking" not in request_body(deepseek_request(), thinking_switch=True)


# ------------------------------------------------------------------ retired names

RETIRED = [("deepseek-chat", "off"), ("deepseek-reasoner", "on")]


@pytest.mark.parametrize(("model", "on_off"), RETIRED)
async def test_a_retired_name_fails_before_any_request(model: str, on_off: str) -> None:
    server = Server()
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        with pytest.raises(LlmError) as caught:
            async for _ in adapter.stream(deepseek_request(model=model)):
                pass
    assert server.seen == []
    failure = caught.value.failure
    assert failure.code == "INVALID_REQUEST"
    assert f"retired the model {model!r}" in failure.message
    assert f"'deepseek-flash' with thinking {on_off}" in failure.message


@pytest.mark.parametrize(("model", "on_off"), RETIRED)
async def test_an_agent_on_a_retired_name_ends_its_turn_with_the_replacement(
    model: str, on_off: str
) -> None:
    server = Server()
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(DEEPSEEK, client=client)
        async with dsh.open_runtime(models={"deepseek": adapter}) as runtime:
            async with runtime.agents.open(
                options=dsh.AgentOptions(provider="deepseek", model=model)
            ) as agent:
                await one_turn(agent, "hi")
                (end,) = turn_ends(agent)
    assert server.seen == []  # not retried: INVALID_REQUEST
    assert isinstance(end.reason, dsh.Errored)
    assert end.reason.error.code == "INVALID_REQUEST"
    assert f"'deepseek-flash' with thinking {on_off}" in end.reason.error.message


async def test_other_servers_get_a_retired_name_as_asked() -> None:
    server = Server(fixture("deepseek_reasoner_answer"))
    async with server.client() as client:
        adapter = OpenAICompatibleAdapter(OTHER, client=client)
        async for _ in adapter.stream(deepseek_request(model="deepseek-chat")):
            pass
    assert server.seen[0]["model"] == "deepseek-chat"


@pytest.mark.parametrize(
    "model", ["deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"]
)
def test_current_names_pass_the_check(model: str) -> None:
    check_deepseek_model(DEEPSEEK, model)
    with pytest.raises(LlmError, match="deepseek-flash"):
        check_deepseek_model("https://api.deepseek.com/beta", "deepseek-chat")
    check_deepseek_model("http://localhost:8000/v1", "deepseek-reasoner")


# ------------------------------------------------------------------ the 400 hint

MISSING = (
    '{"error": {"message": "The reasoning_content in the thinking mode must be '
    'passed back to the API.", "type": "invalid_request_error"}}'
)


async def refused(
    **kwargs: Any,
) -> dsh.LlmFailure:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, content=MISSING.encode())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(OTHER, client=client, **kwargs)
        with pytest.raises(LlmError) as caught:
            async for _ in adapter.stream(deepseek_request()):
                pass
    return caught.value.failure


async def test_a_400_about_missing_reasoning_names_reasoning_passback() -> None:
    failure = await refused()
    assert failure.code == "INVALID_REQUEST"
    assert failure.status == 400
    assert "must be passed back to the API" in failure.message
    assert "pass reasoning_passback=True to OpenAICompatibleAdapter" in failure.message


async def test_with_passback_on_the_400_says_a_tool_call_had_no_reasoning() -> None:
    failure = await refused(reasoning_passback=True)
    assert "reasoning_passback is on" in failure.message
    assert "thinking=False" in failure.message


async def test_other_400s_get_no_passback_hint() -> None:
    async def plain(request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        return httpx.Response(400, content=b'{"error": {"message": "bad model"}}')

    async with httpx.AsyncClient(transport=httpx.MockTransport(plain)) as client:
        adapter = OpenAICompatibleAdapter(OTHER, client=client)
        with pytest.raises(LlmError) as caught:
            async for _ in adapter.stream(deepseek_request()):
                pass
    assert "reasoning_passback" not in caught.value.failure.message
