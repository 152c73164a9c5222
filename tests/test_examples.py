"""Every program in ``examples/`` runs here, offline, against ``ScriptedModel``."""

from __future__ import annotations

import importlib.util
import sys
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, chunks, fail, reply

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

needs_run = pytest.mark.skipif(
    not hasattr(dsh.Agent, "run"),
    reason="agent.run / agent.stream are not in this build yet",
)


def load(name: str) -> Any:
    """Import ``examples/<name>.py`` as a module of its own."""
    spec = importlib.util.spec_from_file_location(
        f"examples_{name}", EXAMPLES / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_example_is_tested() -> None:
    tested = {"chat_endpoint", "sse_server", "delegation", "hook_property"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


@needs_run
async def test_chat_over_an_endpoint_streams_each_reply() -> None:
    chat = load("chat_endpoint")
    lines = iter(["hello", "", "again"])
    out: list[str] = []

    async def read_line() -> str | None:
        await trio.lowlevel.checkpoint()
        return next(lines, None)

    # The adapter is injected: the same code talks to OpenAICompatibleAdapter in main().
    model = ScriptedModel(reply("Hi there.", chunks=3), fail("AUTH", "bad key"))
    completed = await chat.chat(model, "m", read_line, out.append)
    assert completed == 1
    assert out[:4] == ["Hi ", "the", "re.", "\n"]
    assert out[4] == "\n" and out[5].startswith("[turn 2 ended: Errored(")
    assert len(model.requests) == 2  # the blank line started no turn
    assert model.requests[1].model == "m"


def test_chat_main_builds_an_openai_compatible_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chat = load("chat_endpoint")
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setenv("EXAMPLE_KEY", "sk-example")
    monkeypatch.setattr(chat.trio, "run", lambda *args: seen.append(args))
    chat.main(
        [
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--api-key-env",
            "EXAMPLE_KEY",
        ]
    )
    ((fn, adapter, model, *_),) = seen
    assert (
        fn is chat.chat
        and isinstance(adapter, dsh.OpenAICompatibleAdapter)
        and model == "m"
    )


async def test_sse_server_streams_a_turn_to_the_browser() -> None:
    server = load("sse_server")
    broken = chunks(
        dsh.BlockStart(0, "text"),
        dsh.TextDelta(0, "Hel"),
        dsh.Finish(dsh.FinishReason("error", dsh.LlmFailure("overloaded", "SERVER"))),
    )
    model = ScriptedModel(broken, reply("Hello!", chunks=2))
    no_wait = dsh.RetryPolicy(initial_delay_ms=0, jitter=0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(server.serve, model, port=0, retry_policy=no_wait)
        )
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, trust_env=False) as client:
            page = await client.get("/")
            assert page.status_code == 200 and b"EventSource" in page.content
            missing = await client.get("/nope")
            assert missing.status_code == 404
            events: list[str] = []
            async with client.stream(
                "GET", "/chat", params={"q": "hi there"}
            ) as response:
                assert response.headers["content-type"] == "text/event-stream"
                async for line in response.aiter_lines():
                    if line:
                        events.append(line)
        nursery.cancel_scope.cancel()
    # The failed attempt's partial deltas, a discard marker, then the retried reply.
    assert events[-2:] == ["event: done", "data: {}"]
    retry = events.index("event: discard")
    assert events[retry + 2 :] == [
        'data: "Hel"',
        'data: "lo!"',
        "event: done",
        "data: {}",
    ]
    assert events[:retry] == ['data: "Hel"']
    (question,) = model.requests[0].messages[-1].content
    assert question == dsh.TextBlock("hi there")


@needs_run
def test_parent_delegates_to_children(capsys: pytest.CaptureFixture[str]) -> None:
    delegation = load("delegation")
    assert trio.run(delegation.main) == "Both chapters are summarised."
    assert capsys.readouterr().out == (
        "2 child turns: ['done: summarise chapter 1', 'done: summarise chapter 2']\n"
    )


def test_property_test_of_a_custom_hook() -> None:
    from hypothesis.stateful import run_state_machine_as_test

    from dsh_trio.testing import machine_settings

    example = load("hook_property")
    run_state_machine_as_test(
        example.CappedTokensMachine, settings=machine_settings("dev", max_examples=5)
    )


def test_the_hook_property_catches_a_broken_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hypothesis import Phase
    from hypothesis.stateful import run_state_machine_as_test

    from dsh_trio.testing import machine_settings

    example = load("hook_property")

    async def no_cap(event: object, next: Any) -> Any:
        return await next()

    monkeypatch.setattr(example, "cap_tokens", no_cap)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            example.CappedTokensMachine,
            settings=machine_settings("ci", max_examples=20, phases=[Phase.generate]),
        )
