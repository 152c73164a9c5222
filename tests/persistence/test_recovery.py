"""Recovery never destroys data: a load refuses a damaged log unchanged, or cuts only a
crash's tail and keeps every cut byte beside the log, reporting it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio import user_message
from dsh_trio.errors import (
    SessionCorruptError,
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from dsh_trio.persistence import (
    JsonlPersistence,
    RestoredSession,
    _damage,
    _jsonl_load,
    damaged_files,
    load_session,
    persist_new_session,
    restore_session,
    truncate_log,
)
from dsh_trio.persistence._gc import gc_paused
from dsh_trio.persistence._jsonl_lines import parse_line
from dsh_trio.session import Session
from dsh_trio.values import (
    AssistantMessage,
    AssistantMessageData,
    Completed,
    Interrupted,
    MessageId,
    ModelSource,
    RawChunkRecord,
    RequestContextData,
    StepEnd,
    StepStart,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    TurnEnd,
    TurnStart,
    Usage,
    UserMessage,
)

from ..support import ticking_clock

LOG = "session.v3.jsonl"


def read(path: str | Path) -> bytes:
    return Path(path).read_bytes()


# --------------------------------------------------------------------------- valid logs


def append_turn(
    s: Session, turn: int, *, calls: int, answered: int, text: str, steps: int
) -> None:
    """One turn: a prompt, ``steps`` steps, ``calls`` tool calls (``answered`` of
    them with a result) in the first step."""
    s.append("turn/start", TurnStart(turn))
    for step in range(1, steps + 1):
        s.append("step/start", StepStart(turn, step))
        if step == 1:
            s.append(
                "user/message",
                user_message(text, id=f"u{turn}"),
                surface_op="append",
            )
        s.append("request/context", RequestContextData(provider="p", model="m"))
        ids = [f"c{turn}-{k}" for k in range(calls if step == 1 else 0)]
        s.append(
            "assistant/message",
            AssistantMessageData(
                turn=turn,
                step=step,
                message=AssistantMessage(
                    id=MessageId(f"a{turn}-{step}"),
                    content=(
                        TextBlock(f"{text} / {step}"),
                        *(ToolCallBlock(c, "echo", '{"x": 1}') for c in ids),
                    ),
                    source=ModelSource("p", "m"),
                ),
                stream=(RawChunkRecord(5, Usage(1, 2)),),
            ),
            surface_op="append",
        )
        for k, call in enumerate(ids):
            call_seq = s.append(
                "tool/call",
                ToolCallData(
                    turn=turn, step=step, call_id=call, name="echo", arguments="{}"
                ),
            ).seq
            if k < answered:
                s.append(
                    "tool/result",
                    ToolResultData(
                        turn=turn,
                        step=step,
                        message=UserMessage(
                            id=MessageId(f"r-{call}"),
                            content=(ToolResultBlock(call, (TextBlock("ok"),)),),
                            source=ToolSource(call),
                        ),
                    ),
                    surface_op="append",
                    source_event_seqs=(call_seq,),
                )
        s.append("step/end", StepEnd(turn, step))
    s.append("turn/end", TurnEnd(turn, Completed()))


@st.composite
def valid_logs(draw: st.DrawFn) -> Session:
    """A random valid session: balanced turns, plugin events between them, and
    possibly an open last turn (a prefix of a valid log is valid)."""
    s = Session.create("s1", cwd="/w/p", clock=ticking_clock())
    for turn in range(1, draw(st.integers(1, 3)) + 1):
        if draw(st.booleans()):
            s.append("plugin/note", {"n": turn, "text": draw(st.text(max_size=8))})
        calls = draw(st.integers(0, 2))
        append_turn(
            s,
            turn,
            calls=calls,
            answered=draw(st.integers(0, calls)),
            text=draw(st.text(min_size=1, max_size=10)),
            steps=draw(st.integers(1, 2)),
        )
    keep = draw(st.integers(1, s.next_seq))
    return Session.restore(s.header, s.events[:keep])


async def store(root: Path, session: Session) -> Path:
    persistence = JsonlPersistence(root)
    writer = await persist_new_session(persistence, session)
    await writer.close()
    return Path(persistence.path_for(session.header))


# --------------------------------------------------------------------------- damage


REFUSED_ROWS: dict[str, dict[str, Any]] = {
    # The reference refuses these well-formed rows; so do we, leaving the file as it is.
    "unknown type with surfaceOp": {
        "type": "plugin/thing",
        "seq": 0,
        "time": 1,
        "data": {},
        "surfaceOp": "append",
    },
    "unknown type with sourceEventSeqs": {
        "type": "plugin/thing",
        "seq": 0,
        "time": 1,
        "data": {},
        "sourceEventSeqs": [0],
    },
    "system/message with data null": {
        "type": "system/message",
        "seq": 0,
        "time": 1,
        "data": None,
        "surfaceOp": "append",
    },
    "obsolete packed row": {
        "type": "text-chunks",
        "seq0": 0,
        "time0": 1,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [0], "texts": ["h"]},
    },
}


def _with_seq(row: dict[str, Any], seq: int) -> bytes:
    row = dict(row)
    if "seq" in row:
        row["seq"] = seq
    else:
        row["seq0"] = seq
    return json.dumps(row, separators=(",", ":")).encode()


@st.composite
def damages(draw: st.DrawFn, lines: list[bytes]) -> tuple[str, list[bytes], bytes]:
    """One random line damaged: (what, the lines, a torn end without line end)."""
    index = draw(st.integers(0, len(lines) - 1))
    line = lines[index]
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "torn end",
                "garbage",
                "nul",
                "flip",
                "delete",
                "duplicate",
                "join",
                "drop surfaceOp",
                *REFUSED_ROWS,
            ]
        )
    )
    out = list(lines)
    torn = b""
    if kind == "truncate":
        out[index] = line[: draw(st.integers(0, max(len(line) - 1, 0)))]
    elif kind == "torn end":
        # The line loses its line end and what follows: a crash mid-write.
        torn = line[: draw(st.integers(1, len(line)))]
        del out[index:]
    elif kind == "garbage":
        out[index] = draw(st.binary(min_size=1, max_size=30)).replace(b"\n", b" ")
    elif kind == "nul":
        out[index] = b"\0" * len(line)
    elif kind == "flip":
        at = draw(st.integers(0, len(line) - 1))
        value = (line[at] ^ draw(st.integers(1, 255))) or 1
        value = 32 if value == 10 else value
        out[index] = line[:at] + bytes([value]) + line[at + 1 :]
    elif kind == "delete":
        del out[index]
    elif kind == "duplicate":
        out.insert(index, line)
    elif kind == "join":
        if index + 1 < len(out):
            out[index : index + 2] = [line + out[index + 1]]
    elif kind == "drop surfaceOp":
        obj = json.loads(line)
        obj.pop("surfaceOp", None)
        out[index] = json.dumps(obj, separators=(",", ":")).encode()
    else:
        out[index] = _with_seq(REFUSED_ROWS[kind], index - 1)
    return f"{kind} at line {index + 1}", out, torn


def _parses(line: bytes) -> bool:
    try:
        parse_line(line)
    except (ValueError, RecursionError):
        return False
    return True


class Warnings(logging.Handler):
    """The warnings the ``dsh_trio`` logger emits while installed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> Self:
        logging.getLogger("dsh_trio").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("dsh_trio").removeHandler(self)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dsh-recovery-") as tmp:
        yield Path(tmp)


async def load_and_check(root: Path, path: Path, what: str) -> RestoredSession | None:
    """Load the damaged log at ``path``; check that no byte was lost either way."""
    before = read(path)
    with Warnings() as warnings:
        try:
            restored = await restore_session(JsonlPersistence(root), "s1")
        except SessionCorruptError as exc:
            # Refused: the file is byte for byte as it was, the error names the line.
            assert read(path) == before, what
            assert exc.line is not None, (what, exc)
            assert f"line {exc.line}" in str(exc), (what, exc)
            if exc.line > 1:
                assert exc.seq == exc.line - 2, (what, exc)
            assert damaged_files(str(path.parent)) == [], what
            return None
        except SessionFormatError:
            assert what.endswith("at line 1"), what
            assert read(path) == before, what
            return None
    await restored.writer.close()
    after = read(path)
    salvaged = restored.salvaged
    if salvaged is None:
        # Nothing cut: the log is the damaged file plus the closers.
        assert after.startswith(before), what
        assert damaged_files(str(path.parent)) == [], what
        assert warnings.messages == [], what
        kept = len(before)
    else:
        # Every cut byte is in the side file, which the loader reports and logs.
        side = read(salvaged.path)
        assert damaged_files(str(path.parent)) == [salvaged.path], what
        assert before == after[: salvaged.offset] + side, what
        assert (salvaged.size, salvaged.log_path) == (len(side), str(path)), what
        assert salvaged.line == before[: salvaged.offset].count(b"\n") + 1, what
        assert salvaged.seq == salvaged.line - 2, what
        assert len(warnings.messages) == 1, what
        assert salvaged.path in warnings.messages[0], what
        # Only what a crash can leave was cut: nothing in it parses, except a
        # first line that is a surface event without its surfaceOp.
        cut_lines = side.split(b"\n")
        torn = cut_lines.pop()
        for n, line in enumerate(cut_lines):
            if n == 0 and b"surfaceOp" not in line and _parses(line):
                assert json.loads(line)["type"] in (
                    "user/message",
                    "assistant/message",
                    "tool/result",
                    "system/message",
                ), what
                continue
            assert not _parses(line), (what, line)
        assert torn == b"" or cut_lines or salvaged.reason.startswith("the last line")
        kept = salvaged.offset
    closers = after[kept:].split(b"\n")
    assert closers.pop() == b""
    assert [json.loads(c)["seq"] for c in closers] == list(
        range(restored.session.next_seq - len(closers), restored.session.next_seq)
    )
    assert len(restored.closers) == len(closers), what
    if restored.session.events:
        assert restored.session.open_turn is None
    return restored


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(session=valid_logs(), data=st.data())
def test_one_damaged_line_is_refused_or_cut_into_a_side_file(
    session: Session, data: st.DataObject
) -> None:
    with scratch() as root:

        async def main() -> None:
            path = await store(root, session)
            lines = read(path).split(b"\n")
            assert lines.pop() == b""
            what, damaged, torn = data.draw(damages(lines))
            path.write_bytes(b"".join(line + b"\n" for line in damaged) + torn)
            await load_and_check(root, path, what)

        trio.run(main)


# --------------------------------------------------------------------------- the reference's rows


async def balanced_log(root: Path) -> tuple[Path, list[bytes]]:
    """A stored log of one balanced turn with a tool call; its lines."""
    s = Session.create("s1", cwd="/w/p", clock=ticking_clock())
    append_turn(s, 1, calls=1, answered=1, text="hi", steps=1)
    path = await store(root, s)
    lines = read(path).split(b"\n")
    assert lines.pop() == b""
    return path, lines


@pytest.mark.parametrize("row", sorted(REFUSED_ROWS))
@pytest.mark.parametrize("where", ["middle", "last"])
async def test_the_reference_refuses_these_rows_and_so_do_we(
    tmp_path: Path, row: str, where: str
) -> None:
    path, lines = await balanced_log(tmp_path)
    index = 4 if where == "middle" else len(lines)
    damaged = [*lines[:index], _with_seq(REFUSED_ROWS[row], index - 1), *lines[index:]]
    path.write_bytes(b"".join(line + b"\n" for line in damaged))
    before = read(path)
    with pytest.raises(SessionCorruptError) as info:
        await load_session(JsonlPersistence(tmp_path), "s1")
    assert (info.value.seq, info.value.line) == (index - 1, index + 1)
    assert f"line {index + 1}" in str(info.value)
    assert read(path) == before
    assert damaged_files(str(path.parent)) == []


async def test_an_obsolete_row_after_a_torn_line_is_refused(tmp_path: Path) -> None:
    path, lines = await balanced_log(tmp_path)
    torn = lines[5][:20]
    obsolete = _with_seq(REFUSED_ROWS["obsolete packed row"], 5)
    path.write_bytes(b"".join(line + b"\n" for line in [*lines[:5], torn, obsolete]))
    before = read(path)
    with pytest.raises(SessionCorruptError, match="line 6") as info:
        await load_session(JsonlPersistence(tmp_path), "s1")
    assert (info.value.seq, info.value.line) == (4, 6)
    assert read(path) == before


async def test_a_last_surface_event_without_its_surface_op_is_cut_like_a_torn_tail(
    tmp_path: Path,
) -> None:
    path, lines = await balanced_log(tmp_path)
    # Keep the turn open up to its assistant message, which lost its surfaceOp.
    kept = lines[:5]
    last = json.loads(lines[5])
    assert last["type"] == "assistant/message"
    del last["surfaceOp"]
    stripped = json.dumps(last, separators=(",", ":")).encode() + b"\n"
    path.write_bytes(b"".join(line + b"\n" for line in kept) + stripped)
    with Warnings() as warnings:
        restored = await restore_session(JsonlPersistence(tmp_path), "s1")
    await restored.writer.close()
    salvaged = restored.salvaged
    assert salvaged is not None
    assert (salvaged.seq, salvaged.line) == (4, 6)
    assert "assistant/message event without its surfaceOp" in salvaged.reason
    assert read(salvaged.path) == stripped
    assert read(path).startswith(b"".join(line + b"\n" for line in kept))
    assert [ev.type for ev in restored.closers] == ["step/end", "turn/end"]
    assert restored.session.events[-1].data == TurnEnd(1, Interrupted())
    assert warnings.messages == [f'session "s1": {salvaged.describe()}']
    # The same line followed by a valid one is not a tail: refused, unchanged.
    path.write_bytes(
        b"".join(line + b"\n" for line in kept) + stripped + lines[6] + b"\n"
    )
    before = read(path)
    with pytest.raises(SessionCorruptError, match="line 6"):
        await load_session(JsonlPersistence(tmp_path), "s1")
    assert read(path) == before


async def test_a_tool_call_after_a_bad_line_is_never_cut(tmp_path: Path) -> None:
    """The issue's case: damage inside an open turn, a tool call that ran after it."""
    path, lines = await balanced_log(tmp_path)
    call = next(i for i, line in enumerate(lines) if b'"tool/call"' in line)
    damaged = [*lines[: call - 1], b'{"type":"assistant/mes', *lines[call:-3]]
    path.write_bytes(b"".join(line + b"\n" for line in damaged))
    before = read(path)
    with pytest.raises(SessionCorruptError) as info:
        await load_session(JsonlPersistence(tmp_path), "s1")
    assert (info.value.seq, info.value.line) == (call - 2, call)
    assert read(path) == before
    # The user decides: cut from the damaged event on; every cut byte is kept.
    cut = await truncate_log(JsonlPersistence(tmp_path), "s1", call - 2)
    assert cut is not None
    assert read(cut.path) == before[cut.offset :]
    assert read(path) == before[: cut.offset]
    restored = await restore_session(JsonlPersistence(tmp_path), "s1")
    await restored.writer.close()
    assert restored.salvaged is None
    assert restored.session.events[-1].data == TurnEnd(1, Interrupted())


async def test_a_restore_failure_before_a_torn_tail_leaves_the_file_unchanged(
    tmp_path: Path,
) -> None:
    """The tail is cut only once the history before it is known to be valid."""
    path, lines = await balanced_log(tmp_path)
    bad = json.loads(lines[3])  # user/message: replace nodes that do not exist
    assert bad["type"] == "user/message"
    bad["surfaceOp"] = {"op": "replace", "startSeq": 90, "endSeq": 91}
    bad["sourceEventSeqs"] = [1]
    damaged = [*lines[:3], json.dumps(bad).encode(), *lines[4:6]]
    path.write_bytes(b"".join(line + b"\n" for line in damaged) + b'{"type":"to')
    before = read(path)
    for _ in range(2):  # the claim is released after the refusal
        with pytest.raises(SessionCorruptError) as info:
            await load_session(JsonlPersistence(tmp_path), "s1")
        assert (info.value.seq, info.value.line) == (2, 4)
        assert "line 4" in str(info.value)
    assert read(path) == before
    assert damaged_files(str(path.parent)) == []


async def test_a_failed_copy_cuts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, lines = await balanced_log(tmp_path)
    path.write_bytes(b"".join(line + b"\n" for line in lines[:5]) + b"\0\0\0")
    before = read(path)

    def no_space(*args: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_damage, "save_bytes", no_space)
    with pytest.raises(OSError, match="No space"):
        await load_session(JsonlPersistence(tmp_path), "s1")
    assert read(path) == before
    monkeypatch.undo()
    restored = await restore_session(JsonlPersistence(tmp_path), "s1")
    await restored.writer.close()
    assert restored.salvaged is not None
    assert read(restored.salvaged.path) == b"\0\0\0"


async def test_every_cut_gets_its_own_side_file(tmp_path: Path) -> None:
    path, _ = await balanced_log(tmp_path)
    sides = []
    for torn in (b'{"ty', b'{"type":"st'):
        path.write_bytes(read(path) + torn)
        restored = await restore_session(JsonlPersistence(tmp_path), "s1")
        await restored.writer.close()
        assert restored.salvaged is not None
        sides.append(restored.salvaged.path)
    assert damaged_files(str(path.parent)) == sides
    assert [read(p) for p in sides] == [b'{"ty', b'{"type":"st']
    assert all(os.path.basename(p).startswith(f"{LOG}.damaged-") for p in sides)


# --------------------------------------------------------------------------- first writes


async def crashed_first_write(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Session, Path]:
    """A first write that stopped after the temporary file was fsynced, before it
    was linked into place (the process died: nothing cleaned up)."""
    session = Session.create("s1", cwd="/w/p", clock=ticking_clock())
    append_turn(session, 1, calls=1, answered=0, text="hi", steps=1)

    class Crash(BaseException):
        pass

    def crash(*args: object, **kwargs: object) -> None:
        raise Crash

    persistence = JsonlPersistence(root)
    with monkeypatch.context() as patch:
        patch.setattr(os, "link", crash)
        patch.setattr(os, "unlink", lambda *a, **k: None)
        writer = await persistence.create(session.header)
        with pytest.raises(Crash):
            await writer.append(list(session.events), sync=True)
        await writer.close()
    return session, Path(persistence.path_for(session.header))


async def test_an_interrupted_first_write_is_completed_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, path = await crashed_first_write(tmp_path, monkeypatch)
    assert not path.exists()
    (tmp,) = path.parent.glob(f".{LOG}.*.tmp")
    persistence = JsonlPersistence(tmp_path)
    assert await persistence.exists("s1")  # "not found" must not hide it
    with pytest.raises(SessionExistsError):
        await persistence.create(session.header)
    restored = await restore_session(persistence, "s1")
    await restored.writer.close()
    assert list(restored.session.events) == list(session.events)
    assert restored.salvaged is None and restored.closers == ()
    assert path.exists() and not tmp.exists()
    assert [h.id for h in await persistence.list()] == ["s1"]


async def test_a_torn_first_write_is_completed_and_its_tail_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash came while the temporary file was written: a whole header, a torn
    batch. It is linked into place and its torn tail cut into a side file."""
    session, path = await crashed_first_write(tmp_path, monkeypatch)
    (tmp,) = path.parent.glob(f".{LOG}.*.tmp")
    data = read(tmp)
    keep = data.index(b"\n", data.index(b"\n") + 1) + 1  # header + one event
    tmp.write_bytes(data[: keep + 10])
    restored = await restore_session(JsonlPersistence(tmp_path), "s1")
    await restored.writer.close()
    assert restored.salvaged is not None
    assert read(restored.salvaged.path) == data[keep : keep + 10]
    assert list(restored.session.events)[:1] == list(session.events)[:1]
    assert not tmp.exists()


async def test_a_first_write_without_a_whole_header_is_removed_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, path = await crashed_first_write(tmp_path, monkeypatch)
    (tmp,) = path.parent.glob(f".{LOG}.*.tmp")
    tmp.write_bytes(read(tmp)[:30])  # the crash came mid-header: no event in it
    persistence = JsonlPersistence(tmp_path)
    assert not await persistence.exists("s1")
    with pytest.raises(SessionNotFoundError):
        await load_session(persistence, "s1")
    assert not tmp.exists()
    # The id is free again.
    writer = await persistence.create(session.header)
    await writer.close()


# --------------------------------------------------------------------------- truncate_log


async def test_truncate_log_moves_the_rest_into_a_side_file(tmp_path: Path) -> None:
    path, lines = await balanced_log(tmp_path)
    before = read(path)
    persistence = JsonlPersistence(tmp_path)
    with pytest.raises(ValueError, match="non-negative"):
        await truncate_log(persistence, "s1", -1)
    assert await truncate_log(persistence, "s1", len(lines) - 1) is None
    assert read(path) == before
    cut = await truncate_log(persistence, "s1", 3)
    assert cut is not None
    assert (cut.seq, cut.line) == (3, 5)
    assert read(path) == b"".join(line + b"\n" for line in lines[:4])
    assert read(cut.path) == b"".join(line + b"\n" for line in lines[4:])
    # A writer holds it: no cut.
    session, writer = await load_session(persistence, "s1")
    try:
        with pytest.raises(SessionLockedError):
            await truncate_log(JsonlPersistence(tmp_path), "s1", 0)
    finally:
        await writer.close()
    with pytest.raises(SessionNotFoundError):
        await truncate_log(persistence, "nope", 0)
    assert [ev.type for ev in session.events][-2:] == ["step/end", "turn/end"]


# --------------------------------------------------------------------------- streaming


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"\n", b"a", b"bc", b"{}\n", b"x" * 9]), max_size=30
    ).map(b"".join),
    block=st.integers(1, 8),
)
def test_iter_lines_splits_across_blocks(data: bytes, block: int) -> None:
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.flush()
        old = _jsonl_load._BLOCK
        setattr(_jsonl_load, "_BLOCK", block)  # noqa: B010  # a Final, for this test only
        try:
            got = list(_jsonl_load.iter_lines(f.fileno()))
        finally:
            setattr(_jsonl_load, "_BLOCK", old)  # noqa: B010
    pieces = data.split(b"\n")
    last = pieces.pop()
    expected = [(line, True) for line in pieces] + ([(last, False)] if last else [])
    assert [(line, whole) for _, line, whole in got] == expected
    assert all(data[offset:].startswith(line) for offset, line, _ in got)


def test_gc_pauses_nest_and_keep_a_disabled_collector_disabled() -> None:
    import gc

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
