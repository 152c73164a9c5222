"""A bad flag or environment setting: exit status 2, one line on stderr, no traceback,
and never a password from a connection string."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_trio.cli import _store, main
from dsh_trio.cli._redact import redact

SECRET = "s3cret"


@pytest.fixture
def place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a plain file ``file``, a malformed YAML ``bad.yml``, a folder ``dir``."""
    (tmp_path / "file").write_text("x\n", encoding="utf-8")
    (tmp_path / "bad.yml").write_text("a: [\n", encoding="utf-8")
    (tmp_path / "dir").mkdir()
    # Files that are not configs, holding a secret the errors must not quote.
    (tmp_path / "passwd").write_text(
        f"root:x:0:0:{SECRET}:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/bin/false\n",
        encoding="utf-8",
    )
    (tmp_path / "keys.yml").write_text(f"presets: {SECRET}\n", encoding="utf-8")
    (tmp_path / "broken.yml").write_text(
        f"token: {SECRET}\n  bad: [\n", encoding="utf-8"
    )
    (tmp_path / "tagged.yml").write_text(
        f"default_preset: !!int {SECRET}\n", encoding="utf-8"
    )
    for name in [n for n in os.environ if n.startswith("DSH_TRIO_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# (arguments, environment, what the one line says after "dsh-trio COMMAND: ")
CASES: list[tuple[list[str], dict[str, str], str]] = [
    (
        ["sessions", "--store", "foo"],
        {},
        "--store must be a postgresql:// URI, got 'foo'",
    ),
    (
        ["sessions"],
        {"DSH_TRIO_STORE": f"host=db password={SECRET} dbname=app"},
        "$DSH_TRIO_STORE must be a postgresql:// URI, got 'host=db password=*** dbname=app'",
    ),
    (
        ["show", "x", "--store", f"user=me password='{SECRET} 2'"],
        {},
        "--store must be a postgresql:// URI, got 'user=me password=***'",
    ),
    (
        ["chat", "--store", f"mysql://me:{SECRET}@db/app", "hi"],
        {},
        "--store must be a postgresql:// URI, got 'mysql://me:***@db/app'",
    ),
    (
        ["export", "x", "--to", "out", "--store", "sqlite:x"],
        {},
        "--store must be a postgresql:// URI, got 'sqlite:x'",
    ),
    (["import", "file", "--store", "foo"], {}, "--store must be a postgresql:// URI"),
    (
        ["import", "file"],
        {},
        "name the shared store with --store URL or $DSH_TRIO_STORE",
    ),
    (
        ["import", "missing.jsonl", "--store", "postgresql://db/app"],
        {},
        "no file missing.jsonl to import",
    ),
    (
        ["import", "dir", "--store", "postgresql://db/app"],
        {},
        "dir is a directory: name its session.v3.jsonl log to import",
    ),
    (
        ["export", "x", "--to", "file/sub", "--store", "postgresql://db/app"],
        {},
        "--to file/sub: {place}/file is not a directory",
    ),
    (
        ["sessions", "--session-dir", "file"],
        {},
        "the session directory {place}/file is not a directory",
    ),
    (
        ["sessions"],
        {"DSH_TRIO_SESSION_DIR": "file/sessions"},
        "the session directory {place}/file/sessions is below {place}/file, which is not a directory",
    ),
    (
        ["show", "x", "--session-dir", "file"],
        {},
        "the session directory {place}/file is not a directory",
    ),
    (
        ["repair", "x", "--session-dir", "file"],
        {},
        "the session directory {place}/file is not a directory",
    ),
    (
        ["presets", "--session-dir", "file/sessions"],
        {},
        "the session directory {place}/file/sessions is below {place}/file",
    ),
    (["presets", "--config", "missing.yml"], {}, "--config missing.yml: cannot read"),
    (
        ["chat", "--config", "missing.yml", "hi"],
        {},
        "--config missing.yml: cannot read",
    ),
    (["chat", "--config", "bad.yml", "hi"], {}, "--config bad.yml: cannot read"),
    (["chat", "--config", "file", "hi"], {}, "--config file: file must be a mapping"),
    (
        ["chat", "--config", "passwd", "hi"],
        {},
        "--config passwd: passwd must be a mapping, got a string",
    ),
    (
        ["presets", "--config", "keys.yml"],
        {},
        "--config keys.yml: keys.yml.presets must be a list, got a string",
    ),
    (
        ["presets", "--config", "broken.yml"],
        {},
        (
            "--config broken.yml: cannot read runtime config 'broken.yml': not valid "
            "YAML: mapping values are not allowed here (line 2, column 6)"
        ),
    ),
    (
        ["presets", "--config", "tagged.yml"],
        {},
        (
            "--config tagged.yml: cannot read runtime config 'tagged.yml': not valid "
            "YAML: a tagged value cannot be converted (ValueError)"
        ),
    ),
    (
        [
            "chat",
            "--base-url",
            "http://x/v1",
            "--model",
            "m",
            "--api-key-env",
            f"sk-{SECRET}0123456789abcdef",
            "hi",
        ],
        {},
        (
            "--api-key-env takes the name of the environment variable that holds the "
            "API key (such as OPENAI_API_KEY); the value given looks like a key, not a "
            "variable name, so it is not shown"
        ),
    ),
    (
        ["chat", "--api-key-env", f"{SECRET}", "hi"],
        {},
        "--api-key-env needs --provider or --base-url",
    ),
    (["chat", "--preset", "nope", "hi"], {}, 'no preset "nope" is registered'),
    (["chat", "--provider", "nope", "hi"], {}, "unknown provider 'nope'"),
    (
        ["chat", "--provider", "deepseek", "hi"],
        {},
        "the API key variable DEEPSEEK_API_KEY",
    ),
    (["chat", "--base-url", "ftp://x", "--model", "m", "hi"], {}, "--base-url must be"),
    (
        ["chat", "--base-url", "http://x/v1", "--model", "m", "--api-key-env", "NOPE"],
        {},
        "the API key variable NOPE is not set",
    ),
    (["chat", "--model", "m", "hi"], {}, "--model needs --provider or --base-url"),
    (["chat", "--resume", "x", "-c"], {}, "--resume and --continue cannot be combined"),
    (
        ["chat", "--session-dir", "file", "hi"],
        {},
        "the session directory {place}/file is not a directory",
    ),
    (
        ["model", "--session-dir", "file/sessions"],
        {},
        "profile {place}/file/profile.toml",
    ),
    (
        ["model", "set", "offline", "offline-demo", "--session-dir", "file/sessions"],
        {},
        "profile {place}/file/profile.toml",
    ),
    (
        ["model", "set", "nope", "m"],
        {"DSH_TRIO_SESSION_DIR": "s"},
        "unknown provider 'nope'",
    ),
]


@pytest.mark.parametrize(
    ("args", "env", "said"), CASES, ids=[" ".join(c[0]) for c in CASES]
)
def test_a_bad_setting_is_one_line_and_status_2(
    args: list[str],
    env: dict[str, str],
    said: str,
    place: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(args)
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    line = captured.err.rstrip("\n")
    assert "\n" not in line, captured.err
    assert line.startswith(f"dsh-trio {args[0]}: {said.format(place=place)}"), line
    assert SECRET not in captured.err


def test_a_malformed_profile_is_a_usage_error_for_the_chat_too(
    place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (place / "profile.toml").write_text("default_model = [", encoding="utf-8")
    assert main(["chat", "--session-dir", str(place / "sessions")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"dsh-trio chat: profile {place}/profile.toml: is not valid TOML"
    )
    assert err.count("\n") == 1


def test_an_unexpected_failure_is_one_line_without_the_password(
    place: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Unreachable:
        def __init__(self, dsn: str) -> None:
            raise ConnectionError(f"cannot connect to {dsn}")

    monkeypatch.setattr(_store, "PostgresPersistence", Unreachable)
    dsn = f"postgresql://me:{SECRET}@db/app?sslpassword={SECRET}"
    assert main(["sessions", "--store", dsn]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        (
            "dsh-trio sessions: ConnectionError: cannot connect to "
            "postgresql://me:***@db/app?sslpassword=***"
        ),
        "(set DSH_TRIO_DEBUG=1 to see the traceback)",
    ]


def test_a_real_process_prints_no_traceback(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_TRIO_")}
    env["DSH_TRIO_STORE"] = f"postgres-ish://me:{SECRET}@db"
    for args in (["sessions"], ["show", "abc"]):
        done = subprocess.run(
            [sys.executable, "-m", "dsh_trio.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert done.stderr == (
            f"dsh-trio {args[0]}: $DSH_TRIO_STORE must be a postgresql:// URI, "
            "got 'postgres-ish://me:***@db'\n"
        )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://me:pw@db/app", "postgresql://me:***@db/app"),
        ("postgresql://me:a:b@db/app", "postgresql://me:***@db/app"),
        ("postgresql://me@db/app", "postgresql://me@db/app"),
        ("host=db password=pw port=5", "host=db password=*** port=5"),
        ("host=db PASSWORD = pw", "host=db PASSWORD = ***"),
        ("host=db password='a b' x=1", "host=db password=*** x=1"),
        ("x?sslmode=require&password=pw&a=1", "x?sslmode=require&password=***&a=1"),
        ("api_key=k token=t secret=s", "api_key=*** token=*** secret=***"),
        ("nothing secret here", "nothing secret here"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown
