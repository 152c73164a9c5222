"""The offline demo model's pace: reading pace in a terminal, at once with ``--fast``.

The pace is a delay between chunks slept on the trio clock, so it is measured here
on a ``MockClock`` (and by the delay the command chooses), never on the wall clock.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import trio
import trio.testing

import dsh_trio as dsh
from dsh_trio.cli import OfflineModel, _chat_cmd, _main, main
from dsh_trio.cli._config import INTERACTIVE_CHUNK_DELAY, ModelChoice
from dsh_trio.cli._offline import OFFLINE_MODEL, OFFLINE_PROVIDER
from dsh_trio.llm import ModelRequest


def _first_request(text: str) -> ModelRequest:
    return ModelRequest(
        provider=OFFLINE_PROVIDER,
        model=OFFLINE_MODEL,
        messages=(dsh.user_message(text),),
        session_id=dsh.SessionId("s"),
    )


async def test_the_terminal_pace_is_a_human_reading_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    model = OfflineModel(chunk_delay=INTERACTIVE_CHUNK_DELAY)
    start = trio.current_time()
    text = "".join(
        [
            chunk.text
            async for chunk in model.stream(_first_request("hello"))
            if isinstance(chunk, dsh.TextDelta)
        ]
    )
    took = trio.current_time() - start
    words = len(text.split())
    # About 30 words a second: the first reply (~420 characters) takes seconds,
    # time enough to type a steering line or press Ctrl-C while it streams.
    assert len(text) > 400
    assert 30 <= round(words / took) <= 60, (words, took)
    assert took >= 2.0


class _Captured(Exception):
    """Raised by the stand-in for ``run_chat`` once it has seen the chat's model."""

    def __init__(self, choice: ModelChoice) -> None:
        super().__init__("captured")
        self.choice = choice


def _chosen_delay(
    monkeypatch: pytest.MonkeyPatch, terminal: bool, *flags: str
) -> float:
    async def fake_run_chat(choice: ModelChoice, **_: Any) -> int:
        await trio.lowlevel.checkpoint()
        raise _Captured(choice)

    monkeypatch.setattr(_chat_cmd, "run_chat", fake_run_chat)
    monkeypatch.setattr(_chat_cmd, "is_terminal", lambda stream: terminal)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(_Captured) as caught:
        _chat_cmd.run_chat_command(_main.build_parser().parse_args(["chat", *flags]))
    adapter = caught.value.choice.adapter
    assert isinstance(adapter, OfflineModel)
    return adapter.chunk_delay


def test_the_chat_picks_the_pace_in_a_terminal_and_none_with_fast_or_a_pipe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    here = ["--session-dir", str(tmp_path)]
    assert _chosen_delay(monkeypatch, True, *here) == INTERACTIVE_CHUNK_DELAY
    assert _chosen_delay(monkeypatch, True, "--fast", *here) == 0.0
    assert _chosen_delay(monkeypatch, False, *here) == 0.0


def test_fast_is_documented(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--help"]) == 0
    assert "reading pace" in " ".join(capsys.readouterr().out.split())
