"""JsonlPersistence: layout, line format, reading rules, claims and failure handling."""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from dsh_trio import user_message
from dsh_trio.errors import (
    InvalidEventError,
    InvalidSessionIdError,
    PersistenceSeqError,
    SessionCorruptError,
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from dsh_trio.persistence import _jsonl_writer
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._jsonl_paths import (
    LOG_FILE_NAME,
    encode_session_id,
    project_dir_name,
)
from dsh_trio.persistence._jsonl_writer import WriterState
from dsh_trio.values import (
    Completed,
    SessionEvent,
    SessionHeader,
    SessionId,
    StepEnd,
    StepStart,
    TextBlock,
    TurnEnd,
    TurnStart,
    UserMessage,
    event_to_json,
)


def header(
    id: str = "s1", *, cwd: str | None = None, created_at: int = 1
) -> SessionHeader:
    return SessionHeader(id=SessionId(id), created_at=created_at, cwd=cwd)


def turn_events(start: int, turn: int, text: str = "hello") -> list[SessionEvent]:
    """A balanced turn of five events starting at seq ``start``."""
    datas: list[tuple[str, object, object]] = [
        ("turn/start", TurnStart(turn), None),
        ("step/start", StepStart(turn, 1), None),
        ("user/message", user_message(text, id=f"m{start}"), "append"),
        ("step/end", StepEnd(turn, 1), None),
        ("turn/end", TurnEnd(turn, Completed()), None),
    ]
    return [
        SessionEvent(
            seq=start + i,
            time=1000 + start + i,
            type=t,
            data=d,  # type: ignore[arg-type]
            surface_op=op,  # type: ignore[arg-type]
        )
        for i, (t, d, op) in enumerate(datas)
    ]


async def store(
    persistence: JsonlPersistence, hdr: SessionHeader, events: Sequence[SessionEvent]
) -> Path:
    writer = await persistence.create(hdr)
    try:
        await writer.append(events, sync=True)
    finally:
        await writer.close()
    return Path(writer.path)


async def reopen(persistence: JsonlPersistence, id: str) -> list[SessionEvent]:
    writer, events = await persistence.open(id)
    await writer.close()
    return events


# --------------------------------------------------------------------------- layout


async def test_layout_header_and_one_compact_line_per_event(
    persistence: JsonlPersistence, root: Path
) -> None:
    events = turn_events(0, 1, text='a, "b": c')
    path = await store(persistence, header("s1", cwd="/w/p"), events)
    assert path == root / "--w-p--" / "s1" / LOG_FILE_NAME
    raw = path.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert lines[0] == (
        b'{"type":"session","version":3,"id":"s1","createdAt":1,"cwd":"/w/p",'
        b'"isSeeded":false,"delegationDepth":0}'
    )
    assert len(lines) == 1 + len(events)
    for line, ev in zip(lines[1:], events, strict=True):
        assert json.loads(line) == event_to_json(ev)
        assert (
            line
            == json.dumps(
                event_to_json(ev), ensure_ascii=False, separators=(",", ":")
            ).encode()
        )


async def test_nothing_is_stored_until_the_first_append(
    persistence: JsonlPersistence, root: Path
) -> None:
    writer = await persistence.create(header("lazy"))
    # Only the claim is on disk: the session's directory and its lock file.
    session_dir = Path(writer.path).parent
    assert sorted(p.name for p in session_dir.iterdir()) == ["session.lock"]
    assert writer.durable_seq == 0
    await writer.append([], sync=True)
    assert not await trio.Path(writer.path).exists()
    assert not await persistence.exists("lazy")
    assert await persistence.list() == []
    await writer.close()
    assert not session_dir.exists()  # the claim leaves nothing behind
    assert not await persistence.exists("lazy")
    # The claim was released: the id can be created again.
    writer = await persistence.create(header("lazy"))
    await writer.close()


def test_encoding_of_ids_and_project_dirs() -> None:
    assert encode_session_id("abc-DEF_0.9") == "abc-DEF_0.9"
    assert encode_session_id(".") == "~002E"
    assert encode_session_id("..") == "~002E~002E"
    assert encode_session_id("...") == "..."
    assert encode_session_id("../x") == "..~002Fx"
    assert encode_session_id("~") == "~007E"
    assert encode_session_id("é") == "~00E9"
    assert encode_session_id("\U0001d11e") == "~D834~DD1E"  # one UTF-16 pair
    assert project_dir_name(None) == "_no-cwd"
    assert project_dir_name("/w/p") == "--w-p--"
    assert project_dir_name("/") == "--root--"
    assert project_dir_name("C:\\Users\\me") == "--C-Users-me--"
    assert project_dir_name("//a//b c") == "--a-b~0020c--"
    assert project_dir_name("/" + "x" * 300) == "--" + "x" * 251 + "--"


UNSAFE_IDS = [
    "../x",
    "../../etc/passwd",
    "a/b",
    ".",
    "..",
    "~",
    "~002E",
    "/abs",
    "C:\\x",
    "a\x00b",
    "naïve/ünïcode",
    "\U0001d11e clef",
    "line\nbreak",
]


async def test_unsafe_ids_stay_under_root_and_round_trip(
    tmp_path: Path, root: Path, persistence: JsonlPersistence
) -> None:
    for n, sid in enumerate(UNSAFE_IDS):
        path = await store(persistence, header(sid, created_at=n), turn_events(0, 1))
        assert path.parent.parent.parent == root
        assert path.parent.name == encode_session_id(sid)
    # Nothing escaped the root, every id has its own directory.
    assert sorted(p.name for p in await trio.Path(tmp_path).iterdir()) == ["sessions"]
    assert len(list(await trio.Path(root / "_no-cwd").iterdir())) == len(UNSAFE_IDS)
    for sid in UNSAFE_IDS:
        assert await persistence.exists(sid)
        assert await reopen(persistence, sid) == turn_events(0, 1)
    listed = await persistence.list()
    assert [h.id for h in listed] == UNSAFE_IDS


@pytest.mark.parametrize("bad", ["", None, 5, b"s1"])
async def test_empty_or_non_str_ids_are_refused(
    persistence: JsonlPersistence, bad: object
) -> None:
    with pytest.raises(InvalidSessionIdError):
        await persistence.create(SessionHeader(id=bad, created_at=1))  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        await persistence.open(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidSessionIdError):
        await persistence.exists(bad)  # type: ignore[arg-type]


async def test_ids_too_long_for_a_file_name_are_refused(
    persistence: JsonlPersistence,
) -> None:
    with pytest.raises(InvalidSessionIdError, match="too long"):
        await persistence.create(header("/" * 100))


# --------------------------------------------------------------------------- line format


async def test_control_characters_cannot_break_lines(
    persistence: JsonlPersistence,
) -> None:
    text = "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029 end"
    events = turn_events(0, 1, text=text)
    path = await store(persistence, header(), events)
    assert path.read_bytes().count(b"\n") == 1 + len(events)
    assert await reopen(persistence, "s1") == events


async def test_a_lone_surrogate_is_refused_before_anything_is_written(
    persistence: JsonlPersistence,
) -> None:
    writer = await persistence.create(header())
    try:
        await writer.append(turn_events(0, 1), sync=True)
        size = (await trio.Path(writer.path).stat()).st_size
        bad = UserMessage(id="m", content=(TextBlock("a\ud800b"),))  # type: ignore[arg-type]
        batch = [
            SessionEvent(seq=5, time=1, type="turn/start", data=TurnStart(2)),
            SessionEvent(
                seq=6, time=1, type="user/message", data=bad, surface_op="append"
            ),
        ]
        with pytest.raises(InvalidEventError, match="seq 6") as info:
            await writer.append(batch, sync=True)
        assert info.value.seq == 6
        assert (await trio.Path(writer.path).stat()).st_size == size
        assert writer.durable_seq == 5
    finally:
        await writer.close()


async def test_a_lone_surrogate_in_the_header_is_refused(
    persistence: JsonlPersistence,
) -> None:
    with pytest.raises(InvalidSessionIdError, match="surrogate"):
        await persistence.create(header("s\udc00"))


# --------------------------------------------------------------------------- reading


def write_raw(root: Path, id: str, lines: Sequence[object], tail: bytes = b"") -> Path:
    """Store a hand-made log: each item is a JSON object or raw bytes (one line each)."""
    path = root / "_no-cwd" / encode_session_id(id) / LOG_FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    out = b""
    for line in lines:
        out += (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
    path.write_bytes(out + tail)
    return path


HEADER_LINE = {
    "type": "session",
    "version": 3,
    "id": "s1",
    "createdAt": 1,
    "isSeeded": False,
    "delegationDepth": 0,
}


def lines_of(events: Sequence[SessionEvent]) -> list[object]:
    return [event_to_json(ev) for ev in events]


async def test_a_torn_tail_is_cut_off_on_open(
    persistence: JsonlPersistence, root: Path
) -> None:
    events = turn_events(0, 1)
    path = write_raw(root, "s1", [HEADER_LINE, *lines_of(events)], tail=b'{"type":"tu')
    good = path.stat().st_size - len(b'{"type":"tu')
    writer, got = await persistence.open("s1")
    try:
        assert got == events
        assert path.stat().st_size == good
        assert writer.durable_seq == 5
        await writer.append(turn_events(5, 2), sync=True)
    finally:
        await writer.close()
    assert await reopen(persistence, "s1") == events + turn_events(5, 2)


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"",
        b"null",
        b"\xff\xfe",
        json.dumps(
            {"type": "step/start", "seq": 7, "time": 1, "data": {"turn": 1, "step": 1}}
        ).encode(),
        json.dumps(
            {"type": "user/message", "seq": 2, "time": 1, "data": {"id": "x"}}
        ).encode(),
    ],
    ids=["garbage", "empty", "null", "not-utf8", "seq-gap", "bad-data"],
)
async def test_damage_followed_by_valid_lines_is_refused_even_without_a_turn_end(
    persistence: JsonlPersistence, root: Path, damage: bytes
) -> None:
    events = turn_events(0, 1)[:2]
    later = turn_events(0, 1)[2:4]  # user/message, step/end: no turn/end
    path = write_raw(
        root, "s1", [HEADER_LINE, *lines_of(events), damage, *lines_of(later)]
    )
    before = path.read_bytes()
    # Cutting the damage would lose the valid lines after it: not a crash's tail.
    with pytest.raises(SessionCorruptError, match="line 4") as info:
        await persistence.open("s1")
    assert (info.value.seq, info.value.line) == (2, 4)
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"[1, 2",
        json.dumps(
            {"type": "step/start", "seq": 9, "time": 1, "data": {"turn": 1, "step": 1}}
        ).encode(),
    ],
    ids=["garbage", "truncated-json", "seq-gap"],
)
async def test_damage_followed_by_a_turn_end_is_corrupt(
    persistence: JsonlPersistence, root: Path, damage: bytes
) -> None:
    events = turn_events(0, 1)
    # Damage where seq 2 belongs; the turn/end line is intact and later.
    path = write_raw(
        root, "s1", [HEADER_LINE, *lines_of(events[:2]), damage, *lines_of(events[3:])]
    )
    before = path.read_bytes()
    with pytest.raises(SessionCorruptError, match="seq 2") as info:
        await persistence.open("s1")
    assert info.value.seq == 2
    assert path.read_bytes() == before  # nothing repaired
    # The failed open released its claim.
    with pytest.raises(SessionCorruptError):
        await persistence.open("s1")


async def test_a_damaged_turn_end_line_itself_is_corrupt(
    persistence: JsonlPersistence, root: Path
) -> None:
    events = turn_events(0, 1)
    bad_end = {
        "type": "turn/end",
        "seq": 4,
        "time": 1,
        "data": {"turn": 1, "reason": {"kind": "??"}},
    }
    write_raw(root, "s1", [HEADER_LINE, *lines_of(events[:4]), bad_end])
    with pytest.raises(SessionCorruptError) as info:
        await persistence.open("s1")
    assert info.value.seq == 4


async def test_a_foreign_version_is_refused_and_the_log_left_alone(
    persistence: JsonlPersistence, root: Path
) -> None:
    # A future format need not look like ours at all beyond the version.
    path = write_raw(
        root,
        "s1",
        [{"type": "session", "version": 4, "id": "s1", "new": 1}, b"{???"],
        tail=b"torn",
    )
    before = path.read_bytes()
    for _ in range(2):  # the claim is released after the refusal
        with pytest.raises(SessionFormatError, match="version 4") as info:
            await persistence.open("s1")
        assert info.value.version == 4
        assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert await persistence.exists("s1")
    assert await persistence.list() == []


@pytest.mark.parametrize(
    "first",
    [
        b"{broken",
        b"[]",
        json.dumps({**HEADER_LINE, "isSeeded": "no"}).encode(),
        json.dumps({**HEADER_LINE, "unknown": 1}).encode(),
        json.dumps({**HEADER_LINE, "id": "other"}).encode(),
    ],
    ids=["garbage", "array", "bad-field", "extra-key", "other-id"],
)
async def test_a_bad_header_is_corrupt(
    persistence: JsonlPersistence, root: Path, first: bytes
) -> None:
    write_raw(root, "s1", [first, *lines_of(turn_events(0, 1))])
    with pytest.raises(SessionCorruptError) as info:
        await persistence.open("s1")
    assert info.value.seq is None


async def test_a_header_without_newline_is_corrupt(
    persistence: JsonlPersistence, root: Path
) -> None:
    write_raw(root, "s1", [], tail=json.dumps(HEADER_LINE).encode())
    with pytest.raises(SessionCorruptError, match="header"):
        await persistence.open("s1")


async def test_open_of_an_unknown_id(persistence: JsonlPersistence) -> None:
    with pytest.raises(SessionNotFoundError):
        await persistence.open("nope")
    assert not await persistence.exists("nope")


# --------------------------------------------------------------------------- appends


async def test_append_checks_the_seq(persistence: JsonlPersistence) -> None:
    writer = await persistence.create(header())
    try:
        with pytest.raises(PersistenceSeqError) as info:
            await writer.append(turn_events(1, 1), sync=False)
        assert (info.value.expected, info.value.got) == (0, 1)
        gap = turn_events(0, 1)
        with pytest.raises(PersistenceSeqError):
            await writer.append([gap[0], gap[2]], sync=False)
        assert not await trio.Path(writer.path).exists()
        await writer.append(gap, sync=False)
        with pytest.raises(PersistenceSeqError):
            await writer.append(gap, sync=False)  # a duplicate
        assert writer.durable_seq == 5
    finally:
        await writer.close()
    assert await reopen(persistence, "s1") == gap


async def test_appends_run_in_a_worker_thread(
    persistence: JsonlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    real = _jsonl_writer.write_all

    def spy(fd: int, data: bytes) -> None:
        threads.append(threading.current_thread())
        real(fd, data)

    monkeypatch.setattr(_jsonl_writer, "write_all", spy)
    writer = await persistence.create(header())
    try:
        await writer.append(turn_events(0, 1), sync=True)  # materialises
        await writer.append(turn_events(5, 2), sync=True)
    finally:
        await writer.close()
    assert len(threads) == 2
    assert all(t is not threading.main_thread() for t in threads)


@pytest.mark.parametrize("where", ["write", "sync"])
async def test_a_failed_append_leaves_the_file_as_it_was(
    persistence: JsonlPersistence, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    writer = await persistence.create(header())
    try:
        await writer.append(turn_events(0, 1), sync=True)
        path = trio.Path(writer.path)
        before = await path.read_bytes()
        failures = itertools.count()

        real_write, real_sync = _jsonl_writer.write_all, _jsonl_writer.sync_data

        def half_write(fd: int, data: bytes) -> None:
            if next(failures) == 0:
                real_write(fd, data[: len(data) // 2 + 3])
                raise OSError(28, "No space left on device")
            real_write(fd, data)

        def failing_sync(fd: int) -> None:
            if next(failures) == 0:
                raise OSError(5, "Input/output error")
            real_sync(fd)

        if where == "write":
            monkeypatch.setattr(_jsonl_writer, "write_all", half_write)
        else:
            monkeypatch.setattr(_jsonl_writer, "sync_data", failing_sync)
        batch = turn_events(5, 2)
        with pytest.raises(OSError, match=r"No space|Input/output"):
            await writer.append(batch, sync=True)
        assert await path.read_bytes() == before
        assert writer.durable_seq == 5
        await writer.append(batch, sync=True)  # the retry
    finally:
        await writer.close()
    got = await reopen(persistence, "s1")
    assert [ev.seq for ev in got] == list(range(10))
    assert got == turn_events(0, 1) + turn_events(5, 2)


async def test_a_failed_rollback_is_finished_before_the_next_write(
    persistence: JsonlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await persistence.create(header())
    try:
        await writer.append(turn_events(0, 1), sync=True)
        real_write, real_truncate = _jsonl_writer.write_all, os.ftruncate
        calls = itertools.count()

        def half_write(fd: int, data: bytes) -> None:
            real_write(fd, data[:7])
            raise OSError(28, "No space left on device")

        def failing_truncate(fd: int, size: int) -> None:
            if next(calls) == 0:
                raise OSError(5, "Input/output error")
            real_truncate(fd, size)

        monkeypatch.setattr(_jsonl_writer, "write_all", half_write)
        monkeypatch.setattr(os, "ftruncate", failing_truncate)
        with pytest.raises(OSError, match="No space"):
            await writer.append(turn_events(5, 2), sync=True)
        torn = writer.state
        monkeypatch.setattr(_jsonl_writer, "write_all", real_write)
        await writer.append(turn_events(5, 2), sync=True)
        assert (torn, writer.state) == (WriterState.TORN, WriterState.SYNCED)
    finally:
        await writer.close()
    assert await reopen(persistence, "s1") == turn_events(0, 1) + turn_events(5, 2)


async def test_the_first_append_never_replaces_an_existing_file(
    persistence: JsonlPersistence, root: Path
) -> None:
    writer = await persistence.create(header())
    try:
        # Another owner stores the same id after our create but before our append.
        path = write_raw(root, "s1", [HEADER_LINE, *lines_of(turn_events(0, 7))])
        before = path.read_bytes()
        with pytest.raises(SessionExistsError):
            await writer.append(turn_events(0, 1), sync=True)
        assert path.read_bytes() == before
        assert writer.durable_seq == 0
        assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
        if sys.platform != "win32":
            import fcntl

            # The failed writer does not keep the other owner's session locked.
            fd = os.open(path.parent / "session.lock", os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    finally:
        await writer.close()


async def test_a_failed_first_append_leaves_no_log(
    persistence: JsonlPersistence, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = _jsonl_writer.sync_dir
    calls = itertools.count()

    def failing_sync_dir(path: str) -> None:
        if next(calls) == 0:
            raise OSError(5, "Input/output error")
        real(path)

    monkeypatch.setattr(_jsonl_writer, "sync_dir", failing_sync_dir)
    writer = await persistence.create(header())
    try:
        with pytest.raises(OSError, match="Input/output"):
            await writer.append(turn_events(0, 1), sync=True)
        assert not await trio.Path(writer.path).exists()
        assert writer.durable_seq == 0
        await writer.append(turn_events(0, 1), sync=True)
    finally:
        await writer.close()
    assert await reopen(persistence, "s1") == turn_events(0, 1)


async def test_create_refuses_a_stored_id(persistence: JsonlPersistence) -> None:
    await store(persistence, header("s1", cwd="/a"), turn_events(0, 1))
    with pytest.raises(SessionExistsError):
        await persistence.create(header("s1", cwd="/elsewhere"))


async def test_a_closed_writer_refuses_appends(persistence: JsonlPersistence) -> None:
    writer = await persistence.create(header())
    await writer.close()
    await writer.close()  # idempotent
    with pytest.raises(trio.ClosedResourceError):
        await writer.append(turn_events(0, 1), sync=True)


def test_durability_is_checked() -> None:
    with pytest.raises(ValueError, match="durability"):
        JsonlPersistence("/tmp/x", durability="sometimes")  # type: ignore[arg-type]
    assert JsonlPersistence("~/x").root == os.path.expanduser("~/x")


# --------------------------------------------------------------------------- claims


async def test_one_writer_at_a_time_in_process(persistence: JsonlPersistence) -> None:
    first = await persistence.create(header())
    with pytest.raises(SessionLockedError):
        await persistence.create(header())
    await first.append(turn_events(0, 1), sync=True)
    with pytest.raises(SessionLockedError):
        await persistence.open("s1")
    # Another instance on the same root sees the claim too.
    with pytest.raises(SessionLockedError):
        await JsonlPersistence(persistence.root).open("s1")
    await first.close()
    second, events = await persistence.open("s1")
    assert events == turn_events(0, 1)
    with pytest.raises(SessionLockedError):
        await persistence.open("s1")
    await second.close()
    assert await reopen(persistence, "s1") == events


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
async def test_one_writer_at_a_time_across_processes(
    persistence: JsonlPersistence,
) -> None:
    import fcntl

    path = await store(persistence, header(), turn_events(0, 1))
    # A lock held through another open file description is what another process holds.
    fd = os.open(path.parent / "session.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SessionLockedError, match="another process"):
            await persistence.open("s1")
    finally:
        os.close(fd)
    assert await reopen(persistence, "s1") == turn_events(0, 1)


def open_files_under(root: str) -> list[str]:
    if sys.platform != "linux":
        return []
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(root):
            found.append(target)
    return found


def lease_file(root: Path, id: str) -> Path:
    return root / "_no-cwd" / encode_session_id(id) / "session.lock"


async def test_a_writer_holds_no_open_file_between_appends(
    persistence: JsonlPersistence,
) -> None:
    writer = await persistence.create(header())
    try:
        await writer.append(turn_events(0, 1), sync=True)
        assert open_files_under(persistence.root) == []
    finally:
        await writer.close()


async def test_an_append_refuses_a_log_another_writer_changed(
    persistence: JsonlPersistence,
) -> None:
    path = await store(persistence, header(), turn_events(0, 1))
    writer, _ = await persistence.open("s1")
    try:
        with path.open("ab") as f:  # a writer that ignored the lease
            f.write(b'{"foreign":true}\n')
        changed = path.read_bytes()
        with pytest.raises(SessionLockedError, match="changed by another writer"):
            await writer.append(turn_events(5, 2), sync=True)
        assert path.read_bytes() == changed  # left as the other writer made it
        path.unlink()
        path.write_bytes(changed)  # another file (its inode may be reused)
        with pytest.raises(SessionLockedError, match="changed by another writer"):
            await writer.append(turn_events(5, 2), sync=True)
    finally:
        await writer.close()


@pytest.mark.parametrize(
    "lease",
    [
        b"",  # released
        b"garbage that is not a lease",
        b'{"pid": 999999999, "host": "%HOST%"}',  # a process that is gone
        b'{"pid": %PID%, "host": "%HOST%", "token": "not live"}',  # ours, left over
    ],
    ids=["released", "garbage", "dead process", "stale in this process"],
)
async def test_a_stale_lease_is_taken_over(
    persistence: JsonlPersistence, root: Path, lease: bytes
) -> None:
    import socket

    await store(persistence, header(), turn_events(0, 1))
    lease = lease.replace(b"%HOST%", socket.gethostname().encode())
    lease_file(root, "s1").write_bytes(
        lease.replace(b"%PID%", str(os.getpid()).encode())
    )
    assert await reopen(persistence, "s1") == turn_events(0, 1)


async def test_a_lease_held_on_another_host_is_respected(
    persistence: JsonlPersistence, root: Path
) -> None:
    await store(persistence, header(), turn_events(0, 1))
    lease_file(root, "s1").write_bytes(b'{"pid": 1, "host": "elsewhere", "token": "t"}')
    with pytest.raises(SessionLockedError, match="host 'elsewhere'"):
        await persistence.open("s1")


async def test_closing_releases_the_lease_in_place(
    persistence: JsonlPersistence, root: Path
) -> None:
    await store(persistence, header(), turn_events(0, 1))
    writer, _ = await persistence.open("s1")
    held = json.loads(lease_file(root, "s1").read_bytes())
    assert held["pid"] == os.getpid()
    await writer.close()
    assert lease_file(root, "s1").read_bytes().strip() == b""


# --------------------------------------------------------------------------- listing


async def test_list_and_exists(persistence: JsonlPersistence, root: Path) -> None:
    assert await persistence.list() == []
    await store(
        persistence, header("b", cwd="/p/one", created_at=20), turn_events(0, 1)
    )
    await store(
        persistence, header("a", cwd="/p/two", created_at=10), turn_events(0, 1)
    )
    await store(persistence, header("c", created_at=30), turn_events(0, 1))
    write_raw(root, "junk", [b"not a header"])
    (root / "stray-file").write_text("x")
    listed = await persistence.list()
    assert [(h.id, h.cwd) for h in listed] == [
        ("a", "/p/two"),
        ("b", "/p/one"),
        ("c", None),
    ]
    fresh = JsonlPersistence(root)  # no cached locations
    assert await fresh.exists("b")
    assert await reopen(fresh, "a") == turn_events(0, 1)


async def test_the_writer_state_follows_the_log(persistence: JsonlPersistence) -> None:
    writer = await persistence.create(header())
    states = [writer.state]
    await writer.append([], sync=True)  # nothing to write yet: no file
    states.append(writer.state)
    await writer.append(turn_events(0, 1)[:2], sync=False)  # created fsynced
    states.append(writer.state)
    await writer.append(turn_events(0, 1)[2:], sync=False)
    states.append(writer.state)
    await writer.append([], sync=True)
    states.append(writer.state)
    await writer.close()
    states.append(writer.state)
    await writer.close()  # idempotent
    states.append(writer.state)
    assert states == [
        WriterState.UNWRITTEN,
        WriterState.UNWRITTEN,
        WriterState.SYNCED,
        WriterState.UNSYNCED,
        WriterState.SYNCED,
        WriterState.CLOSED,
        WriterState.CLOSED,
    ]
    reopened, _ = await persistence.open("s1")
    try:
        assert reopened.state is WriterState.SYNCED
    finally:
        await reopened.close()


def test_the_writer_state_refuses_an_impossible_step() -> None:
    # Every transition goes through one table; a step it lacks is a bug.
    with pytest.raises(
        AssertionError, match="in state 'closed' cannot take step 'cut'"
    ):
        _jsonl_writer._next_state(WriterState.CLOSED, _jsonl_writer._Step.CUT)
    with pytest.raises(AssertionError, match="state 'unwritten' cannot take step"):
        _jsonl_writer._next_state(
            WriterState.UNWRITTEN, _jsonl_writer._Step.WROTE_SYNCED
        )
