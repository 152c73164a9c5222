"""An application's own event types: marked ignorable, declared, or refused on load.

A stored event of a type the reader does not know loads only when it is marked
``"ignorable": true`` (``Session.append(..., ignorable=True)`` writes the marker) or
its type was declared with ``register_event_type``; otherwise the log is refused
with a :class:`SessionCorruptError` naming the type and the line, and the file is
left byte for byte as it is, as the reference refuses it.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dsh_trio as dsh
from dsh_trio import user_message
from dsh_trio.cli import main
from dsh_trio.errors import (
    InvalidEventError,
    SessionCorruptError,
    SessionFormatError,
    UnknownEventTypeError,
)
from dsh_trio.persistence import load_session, persist_new_session, restore_session
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.session import Session, register_event_type
from dsh_trio.values import (
    StepStart,
    TurnStart,
    event_from_json,
)

FIXTURE = Path(__file__).parent / "fixtures" / "reference_orders"
LOG = Path("--w-p--") / "orders" / "session.v3.jsonl"


def stored(tmp_path: Path, *extra: str) -> Path:
    """The reference log of one closed turn, with ``extra`` lines after it."""
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    path = tmp_path / LOG
    if extra:
        with path.open("a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in extra))
    return path


def row(seq: int, type_: str, *, ignorable: bool | None = None) -> str:
    marker = "" if ignorable is None else f',"ignorable":{json.dumps(ignorable)}'
    return (
        f'{{"type":"{type_}","seq":{seq},"time":1800144000300,'
        f'"data":{{"cents":120}}{marker}}}'
    )


async def append_and_reload(
    tmp_path: Path, type_: str, *, ignorable: bool
) -> tuple[Session, bytes]:
    """A session with one ``type_`` event, stored, then loaded again."""
    session = Session.create("app", cwd="/w/p")
    session.append("turn/start", TurnStart(1))
    session.append(type_, {"cents": 120}, ignorable=ignorable)
    writer = await persist_new_session(JsonlPersistence(tmp_path), session)
    await writer.close()
    path = tmp_path / "--w-p--" / "app" / "session.v3.jsonl"
    written = path.read_bytes()
    loaded, writer = await load_session(JsonlPersistence(tmp_path), "app")
    await writer.close()
    return loaded, written


# --------------------------------------------------------------------------- ignorable


async def test_an_ignorable_event_is_written_with_the_marker_and_loads(
    tmp_path: Path,
) -> None:
    loaded, written = await append_and_reload(
        tmp_path, "app/ignorable-note", ignorable=True
    )
    line = written.splitlines()[2]
    assert line == (
        b'{"type":"app/ignorable-note","seq":1,"time":'
        + str(loaded.events[1].time).encode()
        + b',"data":{"cents":120},"ignorable":true}'
    )
    event = loaded.events[1]
    assert (event.type, event.data, event.ignorable) == (
        "app/ignorable-note",
        {"cents": 120},
        True,
    )
    # The loaded session appended the closers of its open turn; the rows before
    # them are the same bytes.
    path = tmp_path / "--w-p--" / "app" / "session.v3.jsonl"
    assert path.read_bytes().startswith(written)
    assert [e.type for e in loaded.events][2:] == ["turn/end"]


def test_the_marker_is_a_bool_and_only_written_when_asked() -> None:
    session = Session.create("s")
    plain = session.append("app/plain-note", {"a": 1})
    assert plain.ignorable is False
    with pytest.raises(InvalidEventError, match="ignorable must be a bool"):
        session.append("app/plain-note", {}, ignorable=1)  # type: ignore[arg-type]
    assert session.next_seq == 1
    marked = session.append("app/plain-note", {"a": 2}, ignorable=True)
    assert marked.ignorable
    assert session.fork(child_id="c").events[1].ignorable  # a fork keeps it


# --------------------------------------------------------------------------- refused


async def test_an_unknown_event_without_the_marker_is_refused_and_the_file_kept(
    tmp_path: Path,
) -> None:
    path = stored(tmp_path, row(20, "app/undeclared-charge"))
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError) as refused:
        await load_session(JsonlPersistence(tmp_path), "orders")
    assert refused.value.seq == 20
    assert refused.value.line == 22
    message = str(refused.value)
    assert 'event type "app/undeclared-charge" is unknown' in message
    assert "line 22" in message
    assert "register_event_type('app/undeclared-charge')" in message
    assert path.read_bytes() == before  # refused, not cut as a torn tail
    assert not list(path.parent.glob("*.damaged-*"))  # and nothing kept aside


async def test_a_refused_event_anywhere_in_the_log_is_refused_the_same_way(
    tmp_path: Path,
) -> None:
    """Before a valid line, and with a turn left open (crash repair does not run)."""
    lines = (FIXTURE / LOG).read_text(encoding="utf-8").splitlines()
    lines[9:9] = [row(8, "app/undeclared-audit")]
    renumbered = [lines[0]]
    for seq, line in enumerate(lines[1:]):
        obj = json.loads(line)
        obj["seq"] = seq
        renumbered.append(json.dumps(obj, separators=(",", ":")))
    renumbered = renumbered[:-3]  # the turn is left open
    path = tmp_path / LOG
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(renumbered) + "\n", encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError, match='"app/undeclared-audit"') as refused:
        await restore_session(JsonlPersistence(tmp_path), "orders")
    assert (refused.value.seq, refused.value.line) == (8, 10)
    assert path.read_bytes() == before


@pytest.mark.parametrize("marker", [None, False])
async def test_an_unknown_event_is_a_format_the_reader_does_not_read(
    tmp_path: Path, marker: bool | None
) -> None:
    """Absent or ``"ignorable": false``, the marker is missing: the reference's
    format refusal (the class it gives a foreign version), line and type named."""
    path = stored(tmp_path, row(20, "app/unmarked-fee", ignorable=marker))
    before = path.read_bytes()
    with pytest.raises(SessionFormatError) as refused:
        await load_session(JsonlPersistence(tmp_path), "orders")
    error = refused.value
    assert isinstance(error, UnknownEventTypeError)
    assert isinstance(error, SessionCorruptError)  # what callers caught before
    assert (error.event_type, error.seq, error.line) == ("app/unmarked-fee", 20, 22)
    assert error.version is None
    said = "is marked" if marker is False else "is not marked"
    value = "false" if marker is False else "true"
    assert str(error) == (
        f"session log {path}, line 22 (seq 20): the event type "
        f'"app/unmarked-fee" is unknown and the event {said} "ignorable": {value}'
        ", so it may not be skipped; if an application writes it, declare it with "
        "dsh_trio.session.register_event_type('app/unmarked-fee') (dsh-trio: "
        "--event-type app/unmarked-fee) before loading; the log is left unchanged"
    )
    assert path.read_bytes() == before
    with pytest.raises(UnknownEventTypeError):
        await restore_session(JsonlPersistence(tmp_path), "orders")
    assert path.read_bytes() == before


def test_a_line_read_on_its_own_is_taken_for_viewing() -> None:
    """Reading one line (``dsh-trio show``) is no restore: the event is shown."""
    event = event_from_json(json.loads(row(3, "app/undeclared-view")))
    assert (event.type, event.data, event.ignorable) == (
        "app/undeclared-view",
        {"cents": 120},
        False,
    )


def test_repair_refuses_the_log_and_names_the_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = stored(tmp_path, row(20, "app/undeclared-repair"))
    before = path.read_bytes()
    assert main(["repair", "orders", "--session-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "session 'orders' is refused" in err
    assert '"app/undeclared-repair"' in err
    assert "register_event_type" in err
    assert path.read_bytes() == before


def test_repair_names_the_flag_that_declares_the_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = stored(tmp_path, row(20, "app/cli-fee", ignorable=False))
    before = path.read_bytes()
    assert main(["repair", "orders", "--session-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dsh-trio repair: session 'orders' is refused: ")
    assert err[1:] == [
        (
            "if your application writes 'app/cli-fee' events, declare the type: "
            f"dsh-trio repair orders --event-type app/cli-fee --session-dir {tmp_path}"
        )
    ]
    assert path.read_bytes() == before


def test_repair_loads_a_log_whose_types_are_declared_on_the_command_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = stored(
        tmp_path,
        row(20, "app/cli-declared-fee"),
        row(21, "app/cli-declared-tax", ignorable=False),
    )
    before = path.read_bytes()
    argv = ["repair", "orders", "--session-dir", str(tmp_path)]
    argv += ["--event-type", "app/cli-declared-fee"]
    argv += ["--event-type", "app/cli-declared-tax"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        (
            "session orders loads: 22 events; continue it with: dsh-trio chat --resume "
            f"orders --session-dir {tmp_path} --event-type app/cli-declared-fee "
            "--event-type app/cli-declared-tax"
        )
    ]
    assert path.read_bytes() == before  # kept as they are


def test_chat_resumes_a_log_whose_types_are_declared_on_the_command_line(
    tmp_path: Path,
) -> None:
    """In its own process: a declaration lasts as long as the process."""
    path = stored(tmp_path, row(20, "app/chat-fee"))

    def chat(*flags: str) -> subprocess.CompletedProcess[str]:
        argv = ["chat", "--resume", "orders", "--session-dir", str(tmp_path)]
        return subprocess.run(
            [sys.executable, "-m", "dsh_trio.cli", *argv, *flags, "--fast", "hi"],
            input="",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    before = path.read_bytes()
    refused = chat()
    assert refused.returncode == 1
    assert "(dsh-trio: --event-type app/chat-fee)" in refused.stderr
    assert path.read_bytes() == before
    done = chat("--event-type", "app/chat-fee")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"resume with: dsh-trio chat --resume orders --session-dir {tmp_path} "
        "--event-type app/chat-fee"
    )
    assert path.read_bytes().startswith(before)  # the fee row kept, the turn added


@pytest.mark.parametrize("bad", ["", " app/x", "app x"])
def test_an_event_type_flag_must_be_a_type(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: str
) -> None:
    for command in (["repair", "orders"], ["chat", "--fast", "hi"]):
        argv = [*command, "--session-dir", str(tmp_path), "--event-type", bad]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--event-type: TYPE must be an event type such as billing/charge" in err
        assert repr(bad) in err


# --------------------------------------------------------------------------- declared


async def test_a_declared_type_loads_without_the_marker(tmp_path: Path) -> None:
    register_event_type("app/declared-charge")
    register_event_type("app/declared-charge")  # idempotent
    path = stored(tmp_path, row(20, "app/declared-charge"))
    before = path.read_bytes()
    session, writer = await load_session(JsonlPersistence(tmp_path), "orders")
    await writer.close()
    assert path.read_bytes() == before
    event = session.events[20]
    assert (event.type, event.data, event.ignorable) == (
        "app/declared-charge",
        {"cents": 120},
        False,
    )
    loaded, _ = await append_and_reload(
        tmp_path / "appended", "app/declared-charge", ignorable=False
    )
    assert loaded.events[1].data == {"cents": 120}


async def test_crash_repair_keeps_the_applications_rows_as_they_are(
    tmp_path: Path,
) -> None:
    """A turn left open around an ignorable row and a declared one: the closers
    are appended after them; the rows are neither dropped nor rewritten."""
    register_event_type("app/declared-step-note")
    session = Session.create("crashed", cwd="/w/p")
    session.append("turn/start", TurnStart(1))
    session.append("step/start", StepStart(1, 1))
    session.append("user/message", user_message("go"), surface_op="append")
    session.append("app/ignorable-step-note", {"n": 1}, ignorable=True)
    session.append("app/declared-step-note", {"n": 2})
    writer = await persist_new_session(JsonlPersistence(tmp_path), session)
    await writer.close()
    path = tmp_path / "--w-p--" / "crashed" / "session.v3.jsonl"
    before = path.read_bytes()

    restored = await restore_session(JsonlPersistence(tmp_path), "crashed")
    await restored.writer.close()
    assert [e.type for e in restored.closers] == ["step/end", "turn/end"]
    after = path.read_bytes()
    assert after.startswith(before)
    assert len(after.splitlines()) == len(before.splitlines()) + 2
    events = restored.session.events
    assert (events[3].type, events[3].data, events[3].ignorable) == (
        "app/ignorable-step-note",
        {"n": 1},
        True,
    )
    assert (events[4].type, events[4].data, events[4].ignorable) == (
        "app/declared-step-note",
        {"n": 2},
        False,
    )
    # And resumed by a runtime, the session goes on with them in its log.
    async with dsh.open_runtime(persistence=JsonlPersistence(tmp_path)) as rt:
        handle = await rt.agents.resume("crashed")
        assert handle.agent.session.events[3].ignorable
        await handle.dispose()


def test_register_event_type_refuses_what_is_no_type() -> None:
    for bad in ("", None, 3):
        with pytest.raises(InvalidEventError, match="expects an event type"):
            register_event_type(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- warning


def test_appending_an_undeclared_unmarked_type_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    register_event_type("app/declared-quiet")
    session = Session.create("s")
    with caplog.at_level(logging.WARNING, logger="dsh_trio"):
        session.append("app/undeclared-loud", {"n": 1})
        session.append("app/undeclared-loud", {"n": 2})
        session.append("app/ignorable-quiet", {"n": 3}, ignorable=True)
        session.append("app/declared-quiet", {"n": 4})
        session.append("llm/retry", {"retry": 1})  # a type the reference knows
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert '"app/undeclared-loud" is not known' in warnings[0]
    assert "ignorable=True" in warnings[0]
    assert 'register_event_type("app/undeclared-loud")' in warnings[0]
    assert session.next_seq == 5  # a warning, not a refusal
