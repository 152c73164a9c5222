"""Chat features shown without a terminal: usage, tool results, steering echo,
one-shot prompts, ``--continue`` and id prefixes, ``models``, the stored route."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli import main
from dsh_trio.cli._chat import ChatApp
from dsh_trio.cli._config import Route, UsageError, check_session_dir
from dsh_trio.testing import ScriptedModel, gate, reply, tool_calls

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


@dsh.tool
async def lookup(word: str) -> str:
    """Look a word up."""
    await trio.lowlevel.checkpoint()
    return f"{word} means something"


async def _app(
    runtime: dsh.Runtime, agent: dsh.Agent, *, show_usage: bool = False
) -> tuple[ChatApp, io.StringIO, io.StringIO]:
    await trio.lowlevel.checkpoint()
    del runtime
    out, err = io.StringIO(), io.StringIO()
    app = ChatApp(agent, out=out, err=err, label="scripted", show_usage=show_usage)
    app.install()
    return app, out, err


async def test_tool_calls_and_their_results_are_shown(tmp_path: Path) -> None:
    model = ScriptedModel(
        tool_calls(("c1", "lookup", '{"word": "trio"}')), reply("done")
    )
    async with dsh.open_runtime(models={"scripted": model}, tools=[lookup]) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            app, out, err = await _app(runtime, agent, show_usage=True)
            app.submit("look it up")
            await agent.when_idle()
    notices = err.getvalue().splitlines()
    assert notices[0] == '[tool call lookup({"word": "trio"})]'
    assert notices[1] == "[lookup result: trio means something]"
    assert re.fullmatch(
        r"\[tokens: \d+ in, \d+ out; session: \d+ in, \d+ out\]", notices[2]
    )
    assert out.getvalue() == "done\n"


async def test_quiet_hides_the_usage_line_and_usage_command_sums_the_session(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(reply("one"), reply("two"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            app, out, err = await _app(runtime, agent, show_usage=False)
            app.submit("a")
            await agent.when_idle()
            app.submit("b")
            await agent.when_idle()
            app.submit("/usage")
    assert "tokens:" not in err.getvalue()
    assert re.search(r"tokens used in session \S+: \d+ in, \d+ out", out.getvalue())


async def test_steering_is_echoed_on_its_own_line_and_the_next_answer_is_separated(
    tmp_path: Path,
) -> None:
    g = gate(reply("first part", chunks=2), after=1)
    model = ScriptedModel(g, reply("second part"))
    async with dsh.open_runtime(models={"scripted": model}) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            app, out, err = await _app(runtime, agent)
            app.submit("go")
            await g.wait_reached()
            await trio.testing.wait_all_tasks_blocked()
            app.submit("and also this")
            g.release()
            await agent.when_idle()
    assert err.getvalue().splitlines()[0] == (
        "[steering: 'and also this' joins the running turn at its next step]"
    )
    assert out.getvalue().endswith("part\n\nsecond part\n")


def test_one_shot_prompt_runs_one_turn_and_exits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["chat", "--session-dir", str(tmp_path), "--quiet", "hello there"])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.startswith('Hello! You said: "hello there" (your message #1')
    assert "tokens:" not in captured.err
    code = main(["chat", "--session-dir", str(tmp_path), "again"])
    captured = capsys.readouterr()
    assert re.search(r"^\[tokens: \d+ in, \d+ out", captured.err, re.M)


def test_continue_and_prefixes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path)
    assert main(["chat", "-c", "--session-dir", store, "x"]) == 1
    assert "no sessions in" in capsys.readouterr().err
    ids = []
    for word in ("one", "two"):
        assert main(["chat", "--session-dir", store, word]) == 0
        ids.append(re.search(r"^session (\S+)", capsys.readouterr().err, re.M).group(1))
    assert main(["chat", "--continue", "--session-dir", store, "three"]) == 0
    captured = capsys.readouterr()
    assert f"resumed session {ids[1]} (1 turn so far)" in captured.err
    assert main(["chat", "--resume", ids[0][:6], "--session-dir", store, "four"]) == 0
    assert f"resumed session {ids[0]}" in capsys.readouterr().err
    assert main(["chat", "--resume", "", "--session-dir", store, "x"]) == 1
    assert "no session ''" in capsys.readouterr().err


def test_models_lists_the_known_providers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "k")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^offline\s+offline-demo\s", out, re.M)
    assert re.search(
        r"^deepseek\s+deepseek-flash\s+https://api.deepseek.com\s+DEEPSEEK_API_KEY \(set\)$",
        out,
        re.M,
    )
    assert re.search(r"^openai\s.*OPENAI_API_KEY \(not set\)$", out, re.M)
    assert "ollama" in out


def test_the_route_round_trips_through_the_origin() -> None:
    route = Route(model="m 1", base_url="http://h/v1", api_key_env="K")
    assert Route.from_origin(route.origin()) == route
    assert Route.from_origin("something else") is None
    assert Route.from_origin(None) is None
    assert Route.from_origin("dsh-trio chat --bogus x") is None
    stored = Route(provider="deepseek", model="deepseek-flash")
    assert Route(model="deepseek-v4-pro").over(stored) == Route(
        provider="deepseek", model="deepseek-v4-pro"
    )
    assert Route(provider="offline").over(stored) == Route(provider="offline")
    assert Route().over(None) == Route()


def test_check_session_dir(tmp_path: Path) -> None:
    check_session_dir(str(tmp_path / "not" / "yet"))  # made on the first write
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match="is not a directory"):
        check_session_dir(str(tmp_path / "f"))
