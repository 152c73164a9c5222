"""SIGTERM and SIGHUP in ``dsh-trio chat``: cancel the turn, flush, print the hint, exit 0.

Driven three ways: the app's signal handler called directly (deterministic, no
signal), a real signal sent to this process while ``run_chat`` watches for it, and a
real ``dsh-trio chat`` process killed in the middle of a streamed reply.
"""

from __future__ import annotations

import io
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli._chat import TERMINATING_SIGNALS, ChatApp
from dsh_trio.cli._chat_run import run_chat
from dsh_trio.cli._config import ModelChoice
from dsh_trio.testing import ScriptedModel, hang, reply
from dsh_trio.values import TurnEnd

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

SIGNALS = [signal.SIGTERM, signal.SIGHUP] if hasattr(signal, "SIGHUP") else []
OPTIONS = dsh.AgentOptions(provider="scripted", model="m")


def turn_ends(agent: dsh.Agent) -> list[dsh.TurnEndReason]:
    return [e.data.reason for e in agent.session.events if isinstance(e.data, TurnEnd)]


class Lines:
    """A line source the test feeds; it blocks while empty."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[str | None](10)

    def feed(self, line: str | None) -> None:
        self._send.send_nowait(line)

    async def readline(self) -> str | None:
        return await self._receive.receive()


def test_the_terminating_signals() -> None:
    assert set(TERMINATING_SIGNALS) == {signal.SIGTERM, signal.SIGHUP}


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
async def test_a_terminating_signal_cancels_the_turn_and_ends_the_chat(
    signum: int, tmp_path: Path
) -> None:
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": ScriptedModel(hang())}, persistence=persistence
    ) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            out, err = io.StringIO(), io.StringIO()
            app = ChatApp(agent, out=out, err=err)
            app.install()
            lines = Lines()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(app.run, lines)
                lines.feed("hi\n")
                await trio.testing.wait_all_tasks_blocked()
                assert agent.status is dsh.AgentStatus.RUNNING
                app.handle_signal(signum)
                app.handle_signal(signum)  # a second one changes nothing
            # app.run returned without more input: the chat is over.
            assert app.exit_requested
            name = signal.Signals(signum).name
            assert app.terminated_by == name
            assert turn_ends(agent) == [dsh.Aborted(dsh.UserCancel())]
            assert out.getvalue() == "partial\n"  # the partial reply was shown ...
            kept = [e for e in agent.session.events if e.type == "assistant/message"]
            assert len(kept) == 1  # ... and kept
            assert err.getvalue().splitlines() == [
                f"[{name}: cancelling the reply and ending the chat]",
                "[cancelled]",
            ]


async def test_a_terminating_signal_while_idle_ends_the_chat(tmp_path: Path) -> None:
    persistence = dsh.JsonlPersistence(tmp_path)
    async with dsh.open_runtime(
        models={"scripted": ScriptedModel()}, persistence=persistence
    ) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            err = io.StringIO()
            app = ChatApp(agent, out=io.StringIO(), err=err)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(app.run, Lines())
                await trio.testing.wait_all_tasks_blocked()
                app.handle_signal(signal.SIGTERM)
            assert err.getvalue() == "[SIGTERM: ending the chat]\n"
            assert turn_ends(agent) == []


async def test_sigint_still_only_cancels_the_reply(tmp_path: Path) -> None:
    persistence = dsh.JsonlPersistence(tmp_path)
    model = ScriptedModel(hang(), reply("again"))
    async with dsh.open_runtime(
        models={"scripted": model}, persistence=persistence
    ) as runtime:
        async with runtime.agents.open(options=OPTIONS) as agent:
            app = ChatApp(agent, out=io.StringIO(), err=io.StringIO())
            app.install()
            app.submit("hi")
            await trio.testing.wait_all_tasks_blocked()
            app.handle_signal(signal.SIGINT)
            await agent.when_idle()
            assert not app.exit_requested
            assert app.terminated_by is None
            app.handle_signal(signal.SIGUSR1)  # not ours: ignored
            assert not app.exit_requested


@contextmanager
def blocking_stdin(first_line: str) -> Iterator[io.TextIOWrapper]:
    """A stdin holding one line and then nothing, never at its end while in use."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, first_line.encode())
    stream = os.fdopen(read_fd, "r", encoding="utf-8")
    try:
        yield stream
    finally:
        os.close(write_fd)  # an abandoned reader thread now sees the end and exits
        stream.close()


class DiskAtHint(io.StringIO):
    """stderr that reads the session logs on disk when the resume hint is printed."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self._root = root
        self.on_disk: str | None = None

    def write(self, text: str) -> int:
        if "resume with:" in text:
            self.on_disk = "".join(
                p.read_text() for p in self._root.rglob("session.v3.jsonl")
            )
        return super().write(text)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
async def test_run_chat_on_a_real_signal(signum: int, tmp_path: Path) -> None:
    model = ScriptedModel(hang("half a reply"))
    choice = ModelChoice(provider="scripted", model="m", adapter=model, label="m")
    out, err = io.StringIO(), DiskAtHint(tmp_path)
    with blocking_stdin("hello\n") as stdin:
        async with trio.open_nursery() as nursery:

            async def chat() -> None:
                code = await run_chat(
                    choice,
                    session_dir=str(tmp_path),
                    stdin=stdin,
                    stdout=out,
                    stderr=err,
                    handle_signals=True,
                )
                assert code == 0

            nursery.start_soon(chat)
            while "half a reply" not in out.getvalue():
                await trio.testing.wait_all_tasks_blocked()
            os.kill(os.getpid(), signum)
    name = signal.Signals(signum).name
    lines = err.getvalue().splitlines()
    assert f"[{name}: cancelling the reply and ending the chat]" in lines
    match = re.search(
        r"^resume with: dsh-trio chat --resume (\S+)$", err.getvalue(), re.M
    )
    assert match is not None, err.getvalue()
    # On disk by the time the hint was printed: the aborted turn and its partial reply.
    assert err.on_disk is not None
    rows = [json.loads(line) for line in err.on_disk.splitlines()[1:]]
    assert rows[-1]["type"] == "turn/end"
    assert rows[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
    assert "half a reply" in err.on_disk


# ------------------------------------------------------------------ a real process


class StallingServer:
    """An OpenAI-compatible server on loopback that streams a partial reply and stalls."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            event = json.dumps(
                {"choices": [{"index": 0, "delta": {"content": "streaming part"}}]}
            ).encode()
            chunk = b"data: " + event + b"\n\n"
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(chunk)
                + chunk
                + b"\r\n"
            )
            self._done.wait(120)  # stall until the test is over

    def close(self) -> None:
        self._done.set()
        self._listener.close()
        self._thread.join(10)


def read_until(stream: IO[bytes], marker: bytes, *, limit: float = 60) -> bytes:
    """Read ``stream`` until ``marker`` shows up (``limit`` only guards against a hang)."""
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while marker not in seen:
            if not selector.select(limit):
                raise AssertionError(f"no {marker!r} after {seen!r}")
            data = os.read(stream.fileno(), 65536)
            if not data:
                raise AssertionError(f"end of output before {marker!r}: {seen!r}")
            seen += data
    return seen


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_chat_process_ends_cleanly_on_a_signal(signum: int, tmp_path: Path) -> None:
    server = StallingServer()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    env.pop("OPENAI_API_KEY", None)
    store = str(tmp_path)
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dsh_trio.cli",
                "chat",
                "--base-url",
                f"http://127.0.0.1:{server.port}/v1",
                "--model",
                "m",
                "--session-dir",
                store,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(b"hello\n")
            process.stdin.flush()  # and kept open: the chat waits for more
            shown = read_until(process.stdout, b"streaming part")
            process.send_signal(signum)
            rest, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    finally:
        server.close()
    name = signal.Signals(signum).name
    stderr = err.decode()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert f"[{name}: cancelling the reply and ending the chat]" in stderr
    assert "[cancelled]" in stderr
    match = re.search(
        r"^resume with: dsh-trio chat --resume (\S+) .*--session-dir ", stderr, re.M
    )
    assert match is not None, stderr
    assert (shown + rest).decode().startswith("streaming part")
    (log,) = tmp_path.rglob(f"{match.group(1)}/session.v3.jsonl")
    text = log.read_text()
    assert "streaming part" in text  # the partial reply was kept
    last = json.loads(text.splitlines()[-1])
    assert last["type"] == "turn/end"
    assert last["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
