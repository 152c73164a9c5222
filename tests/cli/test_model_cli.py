"""``dsh-trio model``: the default model in the config folder's profile, used by ``chat``."""

from __future__ import annotations

import io
import json
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest

from dsh_trio.cli import main
from dsh_trio.cli._config import Route, resolve_model
from dsh_trio.llm import OpenAICompatibleAdapter


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def profile(tmp_path: Path) -> dict[str, object]:
    return tomllib.loads((tmp_path / "profile.toml").read_text(encoding="utf-8"))


def headers(sessions: Path) -> list[dict[str, object]]:
    """The ``request/header`` data of every saved session."""
    found = []
    for log in sessions.rglob("session.v3.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines()[1:]:
            event = json.loads(line)
            if event["type"] == "request/header":
                found.append(event["data"]["header"]["config"])
    return found


def origins(sessions: Path) -> list[str]:
    return [
        json.loads(log.read_text(encoding="utf-8").splitlines()[0]).get("origin", "")
        for log in sessions.rglob("session.v3.jsonl")
    ]


def test_show_set_and_clear_the_effort(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = str(tmp_path / "sessions")
    code, out, _ = run(capsys, "model", "--session-dir", sessions)
    assert code == 0 and "no default model saved" in out
    (tmp_path / "profile.toml").write_text('theme = "dark"\n', encoding="utf-8")
    code, out, _ = run(
        capsys,
        "model",
        "set",
        "deepseek",
        "deepseek-v4-pro",
        "--effort",
        "high",
        "--session-dir",
        sessions,
    )
    assert code == 0
    assert "deepseek/deepseek-v4-pro (reasoning effort high)" in out
    assert profile(tmp_path) == {
        "theme": "dark",
        "default_model": {
            "provider": "deepseek",
            "model": "deepseek-v4-pro",
            "reasoning_effort": "high",
        },
    }
    code, out, _ = run(capsys, "model", "--session-dir", sessions)
    assert code == 0
    assert out.startswith(
        "default model: deepseek/deepseek-v4-pro (reasoning effort high)"
    )
    run(capsys, "model", "set", "deepseek", "deepseek-flash", "--session-dir", sessions)
    assert profile(tmp_path)["default_model"] == {
        "provider": "deepseek",
        "model": "deepseek-flash",
    }


def test_the_profile_follows_the_session_directory_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSH_TRIO_SESSION_DIR", str(tmp_path / "sessions"))
    assert run(capsys, "model", "set", "ollama", "qwen3")[0] == 0
    assert profile(tmp_path)["default_model"] == {
        "provider": "ollama",
        "model": "qwen3",
    }


def test_a_blank_model_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = str(tmp_path / "sessions")
    code, _, err = run(capsys, "model", "set", "ollama", " ", "--session-dir", sessions)
    assert code == 2 and "model must be a non-blank str" in err
    assert not (tmp_path / "profile.toml").exists()


def test_a_malformed_profile_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "profile.toml").write_text("default_model = [", encoding="utf-8")
    code, _, err = run(capsys, "model", "--session-dir", str(tmp_path / "sessions"))
    # A profile the user must fix is a usage error: one line, status 2.
    assert code == 2 and "is not valid TOML" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_chat_uses_the_saved_default_when_no_flag_names_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions"
    run(
        capsys,
        "model",
        "set",
        "offline",
        "offline-demo",
        "--effort",
        "low",
        "--session-dir",
        str(sessions),
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code, out, _ = run(capsys, "chat", "--session-dir", str(sessions))
    assert code == 0 and "hello" in out
    (config,) = headers(sessions)
    assert config["provider"] == "offline" and config["reasoningEffort"] == "low"
    # the session records the route it ran on, so a resume keeps it
    assert origins(sessions) == [
        "dsh-trio chat --provider offline --model offline-demo"
    ]


def test_a_flag_wins_over_the_saved_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "sessions"
    # `model set` refuses an unknown provider; a profile edited by hand may hold one
    (tmp_path / "profile.toml").write_text(
        '[default_model]\nprovider = "nowhere"\nmodel = "m"\n', encoding="utf-8"
    )
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    # the saved default names an unknown provider: used, it is a usage error
    code, _, err = run(capsys, "chat", "--session-dir", str(sessions))
    assert code == 2 and "unknown provider 'nowhere'" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    code, _, _ = run(
        capsys, "chat", "--provider", "offline", "--session-dir", str(sessions)
    )
    assert code == 0
    (config,) = headers(sessions)
    assert config["provider"] == "offline" and "reasoningEffort" not in config


# ------------------------------------------------------------------ DeepSeek today

ANSWER = (
    Path(__file__).parent.parent / "llm" / "fixtures" / "deepseek_reasoner_answer.sse"
).read_bytes()


class DeepSeek:
    """DeepSeek's API, recorded: every request is kept and answered with a text reply."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.host == "api.deepseek.com"
        self.seen.append(json.loads(request.content))
        return httpx.Response(200, content=ANSWER)


@pytest.fixture
def deepseek(monkeypatch: pytest.MonkeyPatch) -> DeepSeek:
    """The chat's adapters talk to a recorded DeepSeek instead of the network."""
    server = DeepSeek()

    class Recorded(OpenAICompatibleAdapter):
        def __init__(self, base_url: str, **kwargs: Any) -> None:
            self.transport_client = httpx.AsyncClient(
                transport=httpx.MockTransport(server)
            )
            super().__init__(base_url, client=self.transport_client, **kwargs)

        async def aclose(self) -> None:
            await super().aclose()
            await self.transport_client.aclose()

    monkeypatch.setattr("dsh_trio.cli._config.OpenAICompatibleAdapter", Recorded)
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    return server


def test_models_lists_deepseeks_current_models(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "models")
    assert code == 0
    lines = out.splitlines()
    (row,) = [line for line in lines if line.startswith("deepseek ")]
    assert row.split()[:3] == ["deepseek", "deepseek-flash", "https://api.deepseek.com"]
    start = lines.index("models of deepseek (--provider deepseek --model M):")
    names = [line.split()[0] for line in lines[start + 1 : start + 4]]
    assert names == ["deepseek-flash", "deepseek-v4-pro", "deepseek-v4-flash"]
    assert "the default" in lines[start + 1]
    assert "the older name, still served" in lines[start + 3]


def test_the_deepseek_provider_defaults_to_deepseek_flash_with_its_default_thinking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deepseek: DeepSeek
) -> None:
    sessions = str(tmp_path / "sessions")
    code, out, _ = run(
        capsys, "chat", "--provider", "deepseek", "--session-dir", sessions, "hi"
    )
    assert code == 0 and "Sunny" in out
    (body,) = deepseek.seen
    assert body["model"] == "deepseek-flash"
    assert "thinking" not in body


def test_no_thinking_reaches_the_request_and_is_kept_across_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deepseek: DeepSeek
) -> None:
    sessions = tmp_path / "sessions"
    where = ("--session-dir", str(sessions))
    code, _, err = run(
        capsys, "chat", "--provider", "deepseek", "--no-thinking", *where, "hi"
    )
    assert code == 0
    assert "with deepseek-flash via https://api.deepseek.com, thinking off" in err
    assert "--no-thinking" in err.splitlines()[-1]  # the resume hint keeps it
    assert origins(sessions) == [
        "dsh-trio chat --provider deepseek --model deepseek-flash --no-thinking"
    ]
    (log,) = sessions.rglob("session.v3.jsonl")
    session_id = json.loads(log.read_text(encoding="utf-8").splitlines()[0])["id"]
    # Resumed without the flag: the session's route keeps thinking off.
    assert run(capsys, "chat", "--resume", session_id, *where, "again")[0] == 0
    # A flag given with --resume overrides it for this run.
    assert (
        run(capsys, "chat", "--resume", session_id, "--thinking", *where, "on")[0] == 0
    )
    switches = [body.get("thinking") for body in deepseek.seen]
    assert switches == [{"type": "disabled"}, {"type": "disabled"}, {"type": "enabled"}]
    assert {body["model"] for body in deepseek.seen} == {"deepseek-flash"}


@pytest.mark.parametrize(
    ("model", "flag"),
    [("deepseek-chat", "--no-thinking"), ("deepseek-reasoner", "--thinking")],
)
def test_a_retired_model_is_refused_before_any_request(
    model: str,
    flag: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    deepseek: DeepSeek,
) -> None:
    sessions = str(tmp_path / "sessions")
    code, _, err = run(
        capsys,
        "chat",
        "--provider",
        "deepseek",
        "--model",
        model,
        "--session-dir",
        sessions,
        "hi",
    )
    assert code == 2
    assert f"DeepSeek retired the model {model!r}" in err
    assert f"--model deepseek-flash {flag}" in err
    assert deepseek.seen == []
    code, _, err = run(
        capsys, "model", "set", "deepseek", model, "--session-dir", sessions
    )
    assert code == 2 and "use 'deepseek-flash' with thinking" in err
    assert not (tmp_path / "profile.toml").exists()


def test_a_retired_name_is_only_refused_on_deepseeks_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = str(tmp_path / "sessions")
    code, _, _ = run(
        capsys, "model", "set", "ollama", "deepseek-chat", "--session-dir", sessions
    )
    assert code == 0
    choice = resolve_model(
        provider=None,
        model="deepseek-chat",
        base_url="http://localhost:8000/v1",
        api_key_env=None,
        environ={},
    )
    assert choice.model == "deepseek-chat"


def test_thinking_needs_a_real_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "chat", "--no-thinking", "--session-dir", str(tmp_path), "hi"
    )
    assert code == 2 and "--thinking / --no-thinking needs --provider" in err


@pytest.mark.parametrize("thinking", [True, False, None])
def test_the_route_records_the_thinking_switch(thinking: bool | None) -> None:
    route = Route(provider="deepseek", model="deepseek-flash", thinking=thinking)
    assert Route.from_origin(route.origin()) == route
    # A session written before the switch existed loads with the provider's default.
    old = Route.from_origin("dsh-trio chat --provider deepseek --model deepseek-flash")
    assert old is not None and old.thinking is None
    assert Route(thinking=thinking).over(old).thinking is thinking
    assert Route(provider="openai").over(route).thinking is None
