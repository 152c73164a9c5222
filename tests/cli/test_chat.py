"""The chat loop: streaming, steering, Ctrl-C handling, commands and error reporting."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli._chat import ChatApp
from dsh_trio.cli._chat_run import run_chat
from dsh_trio.cli._config import ModelChoice, offline_choice
from dsh_trio.cli._terminal import LineReader
from dsh_trio.testing import ScriptedModel, fail, gate, hang, reply
from dsh_trio.values import TurnEnd

OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


class _Chat:
    def __init__(self, app: ChatApp, out: io.StringIO, err: io.StringIO) -> None:
        self.app = app
        self.out = out
        self.err = err

    @property
    def agent(self) -> dsh.Agent:
        return self.app.agent

    def turn_ends(self) -> list[dsh.TurnEndReason]:
        return [
            ev.data.reason
            for ev in self.agent.session.events
            if isinstance(ev.data, TurnEnd)
        ]


@asynccontextmanager
async def open_chat(
    model: ScriptedModel, tmp_path: Path, **kwargs: bool
) -> AsyncIterator[_Chat]:
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            out, err = io.StringIO(), io.StringIO()
            app = ChatApp(
                agent,
                out=out,
                err=err,
                log_path="/some/log",
                label="the scripted model",
                **kwargs,
            )
            app.install()
            yield _Chat(app, out, err)


class _Lines:
    """A line source the test feeds; it blocks while empty."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[str | None](10)

    def feed(self, line: str | None) -> None:
        self._send.send_nowait(line)

    async def readline(self) -> str | None:
        return await self._receive.receive()


async def test_reply_text_streams_live(tmp_path: Path) -> None:
    g = gate(reply("hello world", chunks=2), after=2)
    async with open_chat(ScriptedModel(g), tmp_path) as chat:
        chat.app.submit("hi")
        await g.wait_reached()
        await trio.testing.wait_all_tasks_blocked()
        assert chat.out.getvalue() == "hello "  # printed before the reply finished
        g.release()
        await chat.agent.when_idle()
        assert chat.out.getvalue() == "hello world\n"
        assert chat.turn_ends() == [dsh.Completed()]
        assert chat.err.getvalue() == ""


async def test_a_line_while_a_turn_runs_steers_it(tmp_path: Path) -> None:
    g = gate(reply("first"))
    async with open_chat(ScriptedModel(g, reply("second")), tmp_path) as chat:
        assert chat.app.submit("one")
        await g.wait_reached()
        assert chat.agent.status is dsh.AgentStatus.RUNNING
        assert chat.app.submit("two")
        assert [m.content for m in chat.agent.inbox.next_step] == [
            (dsh.TextBlock("two"),)
        ]
        assert "steering" in chat.err.getvalue()
        g.release()
        await chat.agent.when_idle()
        assert chat.turn_ends() == [dsh.Completed()]  # one turn, two steps
        steps = [ev for ev in chat.agent.session.events if ev.type == "step/start"]
        assert len(steps) == 2
        assert chat.out.getvalue() == "first\n\nsecond\n"


async def test_interrupt_while_running_cancels_the_turn_and_the_chat_goes_on(
    tmp_path: Path,
) -> None:
    async with open_chat(ScriptedModel(hang(), reply("again")), tmp_path) as chat:
        chat.app.submit("hi")
        await trio.testing.wait_all_tasks_blocked()
        assert chat.agent.status is dsh.AgentStatus.RUNNING
        assert chat.app.interrupt() is True
        await chat.agent.when_idle()
        assert chat.turn_ends() == [dsh.Aborted(dsh.UserCancel())]
        assert "[cancelled]" in chat.err.getvalue()
        assert not chat.app.exit_requested
        chat.app.submit("next")
        await chat.agent.when_idle()
        assert chat.turn_ends() == [dsh.Aborted(dsh.UserCancel()), dsh.Completed()]
        assert chat.out.getvalue() == "partial\n\nagain\n"


async def test_interrupt_while_idle_ends_the_chat(tmp_path: Path) -> None:
    async with open_chat(ScriptedModel(), tmp_path) as chat:
        lines = _Lines()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chat.app.run, lines)
            await trio.testing.wait_all_tasks_blocked()
            assert chat.app.interrupt() is False
        assert chat.app.exit_requested
        assert chat.turn_ends() == []


async def test_run_interrupt_during_a_reply_keeps_reading(tmp_path: Path) -> None:
    async with open_chat(ScriptedModel(hang(), reply("fine")), tmp_path) as chat:
        lines = _Lines()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(chat.app.run, lines)
            lines.feed("hi\n")
            await trio.testing.wait_all_tasks_blocked()
            assert chat.app.interrupt() is True
            await trio.testing.wait_all_tasks_blocked()
            lines.feed("still there?\n")
            lines.feed(None)
        assert chat.turn_ends() == [dsh.Aborted(dsh.UserCancel()), dsh.Completed()]
        assert chat.out.getvalue().endswith("fine\n")


async def test_run_reads_until_end_of_input_and_waits_for_the_reply(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(reply("one"), reply("two"))
    async with open_chat(model, tmp_path, sequential=True) as chat:
        await chat.app.run(
            LineReader(io.StringIO("a\n/session\nb"))
        )  # no final newline
        assert chat.agent.status is dsh.AgentStatus.IDLE
        assert chat.turn_ends() == [dsh.Completed(), dsh.Completed()]
        assert (
            chat.out.getvalue()
            == f"one\nsession {chat.agent.id}\nlog     /some/log\n\ntwo\n"
        )
        assert [len(r.messages) for r in model.requests] == [
            1,
            3,
        ]  # b followed a's reply


async def test_exit_command_cancels_a_running_turn(tmp_path: Path) -> None:
    async with open_chat(ScriptedModel(hang()), tmp_path) as chat:
        await chat.app.run(LineReader(io.StringIO("hi\n/exit\nnever sent\n")))
        assert chat.app.exit_requested
        assert chat.turn_ends() == [dsh.Aborted(dsh.UserCancel())]
        assert chat.agent.inbox.next_turn == ()


async def test_commands(tmp_path: Path) -> None:
    model = ScriptedModel(reply("ok"))
    async with open_chat(model, tmp_path) as chat:
        assert chat.app.submit("/help")
        assert "/session" in chat.out.getvalue()
        assert "the scripted model" in chat.out.getvalue()
        assert chat.app.submit("/nope")
        assert "unknown command /nope" in chat.err.getvalue()
        assert chat.app.submit("   ")
        assert chat.turn_ends() == []
        assert chat.app.submit("//etc is a directory")
        await chat.agent.when_idle()
        assert model.requests[0].messages[-1].content == (
            dsh.TextBlock("/etc is a directory"),
        )
        assert chat.app.submit("/quit") is False


async def test_a_failed_turn_prints_one_line(tmp_path: Path) -> None:
    async with open_chat(ScriptedModel(fail("AUTH", "bad key")), tmp_path) as chat:
        chat.app.submit("hi")
        await chat.agent.when_idle()
        assert chat.err.getvalue() == "error: bad key [AUTH]\n"
        assert isinstance(chat.app.last_reason, dsh.Errored)


async def test_a_retry_after_beyond_the_policy_says_when_to_retry(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel(fail("RATE_LIMIT", "slow down", retry_after_ms=60_000))
    async with open_chat(model, tmp_path) as chat:
        chat.app.submit("hi")
        await chat.agent.when_idle()
        assert chat.err.getvalue() == (
            "error: rate limited; the provider asks to retry after 60 s, more than "
            "max_delay_ms=10000: slow down [RATE_LIMIT]\n"
        )
        assert len(model.requests) == 1


async def test_retries_are_announced(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_chat(
        ScriptedModel(fail("SERVER", "overloaded"), reply("ok")), tmp_path
    ) as chat:
        chat.app.submit("hi")
        await chat.agent.when_idle()
        assert (
            "[request failed: overloaded [SERVER]; retry 1/5 in" in chat.err.getvalue()
        )
        assert chat.out.getvalue() == "ok\n"
        assert chat.turn_ends() == [dsh.Completed()]


async def test_interactive_mode_prompts_and_dims_reasoning(tmp_path: Path) -> None:
    model = ScriptedModel(reply("answer", reasoning="think"))
    async with open_chat(model, tmp_path, interactive=True, sequential=True) as chat:
        await chat.app.run(LineReader(io.StringIO("q\n")))
        assert chat.out.getvalue() == "> \x1b[2mthink\x1b[0m\nanswer\n> \n"


async def test_line_reader_on_a_file_descriptor() -> None:
    r, w = os.pipe()
    os.write(w, "one\nzwei \u00fc\nthree".encode())
    os.close(w)
    with os.fdopen(r, "r", encoding="utf-8") as stream:
        reader = LineReader(stream)
        assert [await reader.readline() for _ in range(4)] == [
            "one\n",
            "zwei \u00fc\n",
            "three",
            None,
        ]


def _http_choice(status: int) -> ModelChoice:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"error": {"message": "Invalid API key"}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    adapter = dsh.OpenAICompatibleAdapter(
        "https://llm.example/v1", api_key="sk-secret", client=client
    )
    return ModelChoice(
        provider="remote",
        model="m",
        adapter=adapter,
        label="m via https://llm.example/v1",
    )


async def test_run_chat_reports_an_auth_failure_in_one_line(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(
        _http_choice(401),
        session_dir=str(tmp_path),
        stdin=io.StringIO("hello\n"),
        stdout=out,
        stderr=err,
    )
    assert code == 1
    errors = [line for line in err.getvalue().splitlines() if line.startswith("error:")]
    assert errors == [
        "error: HTTP 401 from https://llm.example/v1/chat/completions: Invalid API key [AUTH]"
    ]
    assert "Traceback" not in err.getvalue()
    assert "sk-secret" not in err.getvalue() + out.getvalue()


async def test_run_chat_cannot_resume_an_unknown_session(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(
        offline_choice(),
        session_dir=str(tmp_path),
        stdin=io.StringIO(""),
        stdout=out,
        stderr=err,
        resume="nope",
    )
    assert code == 1
    assert "cannot resume session 'nope'" in err.getvalue()


async def test_run_chat_with_no_input_saves_nothing(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = await run_chat(
        offline_choice(),
        session_dir=str(tmp_path),
        stdin=io.StringIO(""),
        stdout=out,
        stderr=err,
    )
    assert code == 0
    assert "is empty; nothing was saved" in err.getvalue()
    assert await trio.to_thread.run_sync(os.listdir, tmp_path) == []


async def test_a_line_the_log_cannot_take_is_refused_and_the_chat_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_chat(ScriptedModel(reply("ok")), tmp_path) as chat:

        def failing_followup(self: dsh.Agent, message: dsh.UserMessage) -> None:
            raise dsh.PersistenceError(
                "disk full", session_id=chat.agent.id, cause=OSError(28, "No space")
            )

        monkeypatch.setattr(dsh.Agent, "followup", failing_followup)
        assert chat.app.submit("hello") is True
        assert "not sent: the session log cannot be written: disk full" in (
            chat.out.getvalue() + chat.err.getvalue()
        )
        monkeypatch.undo()
        assert chat.app.submit("again") is True
        await chat.agent.when_idle()
        assert chat.turn_ends() == [dsh.Completed()]
