"""``dsh-trio`` run in-process through ``main([...])``: chat, sessions, show, repair, usage."""

from __future__ import annotations

import datetime
import io
import re
import shutil
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio.cli import main

REFERENCE_LOG = (
    Path(__file__).parent.parent / "persistence" / "fixtures" / "reference_t1"
)


def _chat(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stdin: str,
    *args: str,
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["chat", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _session_id(err: str) -> str:
    match = re.search(r"^(?:resumed )?session (\S+)", err, re.MULTILINE)
    assert match is not None, err
    return match.group(1)


def test_help_documents_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("chat", "sessions", "show", "repair"):
        assert command in out
    assert main(["chat", "--help"]) == 0
    chat_help = capsys.readouterr().out
    for flag in (
        "--provider",
        "--model",
        "--base-url",
        "--api-key-env",
        "--session-dir",
        "--resume",
        "--system",
    ):
        assert flag in chat_help
    assert "offline demo model" in chat_help
    assert main(["show", "--help"]) == 0
    assert "transcript" in capsys.readouterr().out
    assert main(["repair", "--help"]) == 0
    repair_help = capsys.readouterr().out
    assert "--truncate-at SEQ" in repair_help
    assert "session.v3.jsonl.damaged-<time>" in repair_help


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dsh-trio {dsh.__version__}"


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: dsh-trio" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "x"], "--model needs --provider or --base-url"),
        (["--provider", "nowhere"], "unknown provider 'nowhere'"),
        (
            ["--base-url", "ftp://host", "--model", "m"],
            "--base-url must be an http:// or https:// URL",
        ),
        (
            ["--base-url", "http://localhost:1/v1"],
            "--model is required with --base-url",
        ),
        (
            ["--provider", "deepseek", "--api-key-env", "DSH_TRIO_TEST_UNSET_KEY"],
            "DSH_TRIO_TEST_UNSET_KEY is not set",
        ),
    ],
)
def test_chat_usage_errors(
    args: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.delenv("DSH_TRIO_TEST_UNSET_KEY", raising=False)
    code, _, err = _chat(
        monkeypatch, capsys, "hello\n", *args, "--session-dir", str(tmp_path)
    )
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_chat_sessions_show_and_resume(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    code, out, err = _chat(monkeypatch, capsys, "hello\n", "--session-dir", store)
    assert code == 0
    assert out.startswith('Hello! You said: "hello" (your message #1')
    sid = _session_id(err)
    assert f"resume with: dsh-trio chat --resume {sid} --session-dir {store}" in err
    logs = list(Path(store).glob(f"*/{sid}/session.v3.jsonl"))
    assert len(logs) == 1

    assert main(["sessions", "--session-dir", store]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["ID", "CREATED", "TURNS", "LAST", "PROMPT"]
    assert listing[1].startswith(sid)
    assert listing[1].split()[3:] == ["1", "hello"]

    code, out, err = _chat(
        monkeypatch, capsys, "again\n", "--session-dir", store, "--resume", sid
    )
    assert code == 0
    assert _session_id(err) == sid
    assert "(1 turn so far)" in err
    assert '"again" (your message #2' in out  # the resumed history reached the model

    assert main(["show", sid, "--session-dir", store]) == 0
    transcript = capsys.readouterr().out
    assert f"session {sid}" in transcript
    assert "system: You are a helpful assistant" in transcript
    assert "user: hello" in transcript
    assert "assistant: Hello! You said" in transcript
    assert "=== turn 1 ended: completed ===" in transcript
    assert "--- resumed ---" in transcript
    assert "=== turn 2 ===" in transcript  # resuming continued the numbering
    assert "=== turn 2 ended: completed ===" in transcript
    assert (
        transcript.index("user: hello")
        < transcript.index("--- resumed ---")
        < transcript.index("user: again")
    )


def test_sessions_newest_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ids = []
    for text in ("first\n", "second\n"):
        code, _, err = _chat(monkeypatch, capsys, text, "--session-dir", str(tmp_path))
        assert code == 0
        ids.append(_session_id(err))
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    old = next(tmp_path.glob("*/t1-reference/session.v3.jsonl"))
    old.write_bytes(
        old.read_bytes().replace(
            b'"createdAt":1800144000000', b'"createdAt":1000000000000', 1
        )
    )
    assert main(["sessions", "--session-dir", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 3
    day = datetime.datetime.fromtimestamp(1_000_000_000).strftime("%Y-%m-%d")
    assert rows[-1].split()[:2] == ["t1-reference", day]  # the oldest: listed last
    assert sorted(row.split()[0] for row in rows[:2]) == sorted(ids)


def test_session_dir_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DSH_TRIO_SESSION_DIR", str(tmp_path))
    assert main(["sessions"]) == 0
    assert capsys.readouterr().out.strip() == f"no sessions in {tmp_path}"
    code, _, err = _chat(monkeypatch, capsys, "hi\n")
    assert code == 0
    assert "--session-dir" not in err  # the variable keeps pointing there
    assert main(["sessions"]) == 0
    assert _session_id(err) in capsys.readouterr().out


def test_show_unknown_session(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["show", "no-such-id", "--session-dir", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert "no session 'no-such-id'" in captured.err
    assert captured.out == ""


def test_resume_unknown_session(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = _chat(
        monkeypatch, capsys, "", "--session-dir", str(tmp_path), "--resume", "ghost"
    )
    assert code == 1
    assert "cannot resume session 'ghost'" in err


def test_show_reads_a_reference_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    assert main(["show", "t1-reference", "--session-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cwd     /w/p" in out
    assert "system: You are an AI agent powered by DeepSeek Harness." in out
    assert "[model mock/mock]" in out
    assert "user: hello\n" in out
    assert "assistant: hi\n" in out
    assert out.rstrip().endswith("=== turn 1 ended: completed ===")


def test_show_never_repairs_or_locks(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    log = next(tmp_path.glob("*/t1-reference/session.v3.jsonl"))
    lines = log.read_bytes().splitlines(keepends=True)
    # A crash mid-turn: no step/end or turn/end, and half a line at the end.
    damaged = b"".join(lines[:-2]) + b'{"type":"step/e'
    log.write_bytes(damaged)
    before = sorted(p.name for p in log.parent.iterdir())

    assert main(["show", "t1-reference", "--session-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "assistant: hi" in out
    assert "[turn 1 has not ended" in out
    assert "the last line (15 bytes) is incomplete" in out
    assert log.read_bytes() == damaged  # no closers appended, no tail cut
    assert sorted(p.name for p in log.parent.iterdir()) == before  # no lock file either

    assert main(["sessions", "--session-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[3:] == ["1", "hello"]


def test_show_a_log_with_a_foreign_version(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    log = next(tmp_path.glob("*/t1-reference/session.v3.jsonl"))
    log.write_bytes(log.read_bytes().replace(b'"version":3', b'"version":4', 1))
    # Listing skips logs it cannot read, so the id is unknown to show as well.
    assert main(["show", "t1-reference", "--session-dir", str(tmp_path)]) == 1
    assert "no session 't1-reference'" in capsys.readouterr().err


def _reference_log(tmp_path: Path) -> Path:
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    return next(tmp_path.glob("*/t1-reference/session.v3.jsonl"))


def test_repair_cuts_a_torn_tail_into_a_side_file_that_show_lists(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _reference_log(tmp_path)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-2]) + b'{"type":"step/e')
    assert main(["repair", "t1-reference", "--session-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (side,) = log.parent.glob("session.v3.jsonl.damaged-*")
    assert side.read_bytes() == b'{"type":"step/e'
    assert f"15 damaged bytes from line {len(lines) - 1} (seq {len(lines) - 3})" in out
    assert str(side) in out
    assert "closed turn 1, which a stop left open, as interrupted" in out
    assert "dsh-trio chat --resume t1-reference" in out
    assert main(["show", "t1-reference", "--session-dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    assert "=== turn 1 ended: interrupted" in shown
    assert "[15 damaged bytes were cut off the end of this log" in shown
    assert str(side) in shown


def test_repair_refuses_mid_log_damage_until_the_user_truncates(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _reference_log(tmp_path)
    lines = log.read_bytes().splitlines(keepends=True)
    lines[5] = b"not json at all\n"  # seq 4, line 6; valid lines follow
    damaged = b"".join(lines)
    log.write_bytes(damaged)
    args = ["repair", "t1-reference", "--session-dir", str(tmp_path)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "session 't1-reference' is refused" in err
    assert "line 6" in err
    assert "dsh-trio repair t1-reference --truncate-at 4 --session-dir" in err
    assert log.read_bytes() == damaged
    assert main([*args, "--truncate-at", "4"]) == 0
    out = capsys.readouterr().out
    (side,) = log.parent.glob("session.v3.jsonl.damaged-*")
    assert side.read_bytes() == b"".join(lines[5:])
    assert f"into {side}" in out
    assert "session t1-reference loads" in out
    assert log.read_bytes().startswith(b"".join(lines[:5]))
    assert main([*args, "--truncate-at", "-1"]) == 2
    assert "non-negative" in capsys.readouterr().err


def test_repair_refuses_a_log_whose_inbox_resume_refuses(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = _reference_log(tmp_path)
    lines = log.read_bytes().splitlines(keepends=True)
    claim = b'"target":"next-turn","start":0,"removedCount":1'
    assert claim in lines[3]  # seq 2: the turn claims its prompt
    lines[3] = lines[3].replace(claim, claim.replace(b'"start":0', b'"start":3'))
    log.write_bytes(b"".join(lines))
    args = ["repair", "t1-reference", "--session-dir", str(tmp_path)]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no "loads"
    assert "session 't1-reference' is refused" in captured.err
    assert "line 4: invalid persisted inbox splice at session seq 2" in captured.err
    assert "resume refuses it too" in captured.err
    assert "dsh-trio repair t1-reference --truncate-at 2 --session-dir" in captured.err
    code, _, err = _chat(
        monkeypatch, capsys, "", "--session-dir", str(tmp_path), "--resume", "t1"
    )
    assert code == 1
    assert "invalid persisted inbox splice at session seq 2" in err
    assert main([*args, "--truncate-at", "2"]) == 0
    assert "session t1-reference loads: " in capsys.readouterr().out


def test_repair_unknown_session(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["repair", "ghost", "--session-dir", str(tmp_path)]) == 1
    assert "no session 'ghost'" in capsys.readouterr().err
