"""Every command that takes a session id takes a unique prefix of one, with the same
errors as ``chat --resume`` when a prefix matches nothing or several sessions."""

from __future__ import annotations

import builtins
import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

import dsh_trio as dsh
from dsh_trio.cli import _store, main
from dsh_trio.cli._ids import SessionIdError, resolve_id

REFERENCE_LOG = (
    Path(__file__).parent.parent / "persistence" / "fixtures" / "reference_t1"
)
AMBIGUOUS = (
    "the prefix 't1-ref' matches 2 sessions in {where} (t1-reference, t1-refined)"
)


def test_resolve_id() -> None:
    ids = ["abc1", "abc2", "abd", "x"]
    assert resolve_id(ids, "abd", "here") == "abd"
    assert resolve_id(ids, "abc1", "here") == "abc1"
    assert resolve_id(ids, "x", "here") == "x"
    assert resolve_id(["ab", "abc"], "ab", "here") == "ab"  # a whole id wins
    with pytest.raises(SessionIdError, match=r"^no session 'q' in here$"):
        resolve_id(ids, "q", "here")
    with pytest.raises(SessionIdError, match=r"^no session '' in here$"):
        resolve_id(ids, "", "here")
    with pytest.raises(
        SessionIdError,
        match=r"^the prefix 'ab' matches 3 sessions in here \(abc1, abc2, abd\)$",
    ):
        resolve_id(ids, "ab", "here")
    many = [f"s{n}" for n in range(7)]
    with pytest.raises(SessionIdError, match=r"\(s0, s1, s2, s3, s4, \.\.\.\)$"):
        resolve_id(many, "s", "here")


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """Two stored sessions, ``t1-reference`` and ``t1-refined``."""
    shutil.copytree(REFERENCE_LOG, tmp_path, dirs_exist_ok=True)
    (original,) = tmp_path.glob("*/t1-reference")
    twin = original.parent / "t1-refined"
    shutil.copytree(original, twin)
    log = twin / "session.v3.jsonl"
    log.write_bytes(
        log.read_bytes().replace(b'"id":"t1-reference"', b'"id":"t1-refined"', 1)
    )
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_show_takes_a_unique_prefix(
    sessions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "show", "t1-refi", "--session-dir", str(sessions))
    assert code == 0 and "t1-refined" in out and "user: hello" in out
    code, out, err = _run(capsys, "show", "t1-ref", "--session-dir", str(sessions))
    assert code == 1 and out == ""
    assert err == f"dsh-trio show: {AMBIGUOUS.format(where=sessions)}\n"
    code, _, err = _run(capsys, "show", "zz", "--session-dir", str(sessions))
    assert code == 1 and err == f"dsh-trio show: no session 'zz' in {sessions}\n"


def test_repair_takes_a_unique_prefix(
    sessions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "repair", "t1-refe", "--session-dir", str(sessions))
    assert code == 0, out
    assert "session t1-reference loads" in out
    assert "dsh-trio chat --resume t1-reference" in out
    code, _, err = _run(capsys, "repair", "t1-ref", "--session-dir", str(sessions))
    assert code == 1
    assert err == f"dsh-trio repair: {AMBIGUOUS.format(where=sessions)}\n"
    code, _, err = _run(capsys, "repair", "zz", "--session-dir", str(sessions))
    assert code == 1 and "no session 'zz'" in err


def test_resume_has_the_same_errors(
    sessions: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    here = ["--session-dir", str(sessions)]
    code, _, err = _run(capsys, "chat", "--resume", "t1-ref", *here)
    assert code == 1
    assert err == (
        f"dsh-trio chat: cannot resume session 't1-ref': {AMBIGUOUS.format(where=sessions)}\n"
    )
    code, _, err = _run(capsys, "chat", "--resume", "zz", *here)
    assert code == 1
    assert (
        err
        == f"dsh-trio chat: cannot resume session 'zz': no session 'zz' in {sessions}\n"
    )


class FakeStore:
    """A stand-in for the shared store, holding the JSONL sessions of ``root``."""

    root: Path

    def __init__(self, dsn: str) -> None:
        self._jsonl = dsh.JsonlPersistence(FakeStore.root)

    async def list(self) -> list[dsh.SessionHeader]:
        return await self._jsonl.list()

    async def read(
        self, session_id: str
    ) -> tuple[dsh.SessionHeader, builtins.list[Any]]:
        for header in await self._jsonl.list():
            if header.id == session_id:
                return header, []
        raise dsh.SessionNotFoundError(session_id)

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@pytest.fixture
def store(sessions: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``--store`` reaches a :class:`FakeStore`; returns the exports it was asked for."""
    FakeStore.root = sessions
    exported: list[tuple[str, str]] = []

    async def export_session(store: object, session_id: str, root: str) -> str:
        await trio.lowlevel.checkpoint()
        exported.append((session_id, root))
        return f"{root}/{session_id}.jsonl"

    monkeypatch.setattr(_store, "PostgresPersistence", FakeStore)
    monkeypatch.setattr(_store, "export_session", export_session)
    return exported


def test_export_and_show_in_the_shared_store_take_a_unique_prefix(
    store: list[tuple[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = ["--store", "postgresql://db/agents"]
    out_dir = str(tmp_path / "out")
    code, out, _ = _run(capsys, "export", "t1-refi", "--to", out_dir, *uri)
    assert code == 0
    assert store == [("t1-refined", out_dir)]
    assert out == f"exported session t1-refined to {out_dir}/t1-refined.jsonl\n"
    code, _, err = _run(capsys, "export", "t1-ref", "--to", out_dir, *uri)
    assert code == 1
    assert err == f"dsh-trio export: {AMBIGUOUS.format(where='the shared store')}\n"
    code, out, _ = _run(capsys, "show", "t1-refe", *uri)
    assert code == 0 and "t1-reference" in out
    code, _, err = _run(capsys, "show", "t1-ref", *uri)
    assert code == 1
    assert err == f"dsh-trio show: {AMBIGUOUS.format(where='the shared store')}\n"
