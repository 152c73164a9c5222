"""The files of a JSONL store: no planted link is followed, only regular files are
opened, and what the store creates is private to its user (0600 / 0700, less the
umask)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_trio import _files
from dsh_trio.errors import DshError, UnusableFileError
from dsh_trio.persistence import restore_session, truncate_log
from dsh_trio.persistence._jsonl import JsonlPersistence
from dsh_trio.persistence._jsonl_paths import LOCK_FILE_NAME, LOG_FILE_NAME

from .test_jsonl import HEADER_LINE, header, store, turn_events

needs_posix = pytest.mark.skipif(
    not hasattr(os, "mkfifo"), reason="FIFOs and file modes are POSIX"
)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def bytes_of(path: Path) -> bytes:
    return path.read_bytes()


def session_dir(root: Path, id: str = "s1") -> Path:
    return root / "_no-cwd" / id


VICTIM = b"a file of the user's that no session may touch\n" * 4


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim"
    path.write_bytes(VICTIM)
    return path


# --------------------------------------------------------------------------- links


async def test_a_link_planted_at_a_new_sessions_lock_file_is_refused(
    persistence: JsonlPersistence, root: Path, victim: Path
) -> None:
    lock = session_dir(root) / LOCK_FILE_NAME
    lock.parent.mkdir(parents=True)
    lock.symlink_to(victim)
    with pytest.raises(UnusableFileError, match="is a symbolic link") as info:
        await persistence.create(header())
    assert info.value.path == str(lock)
    assert info.value.errno == errno.ELOOP
    assert bytes_of(victim) == VICTIM  # not truncated, not written
    assert lock.is_symlink()  # and left where it was


async def test_a_link_planted_at_a_stored_sessions_lock_file_is_refused(
    persistence: JsonlPersistence, root: Path, victim: Path
) -> None:
    await store(persistence, header(), turn_events(0, 1))
    lock = session_dir(root) / LOCK_FILE_NAME
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    with pytest.raises(UnusableFileError, match="is a symbolic link"):
        await persistence.open("s1")
    with pytest.raises(UnusableFileError, match="is a symbolic link"):
        await restore_session(persistence, "s1")
    with pytest.raises(UnusableFileError, match="is a symbolic link"):
        await truncate_log(persistence, "s1", 0)
    assert bytes_of(victim) == VICTIM


async def test_a_link_at_the_log_is_refused_and_its_target_untouched(
    persistence: JsonlPersistence, root: Path, tmp_path: Path
) -> None:
    elsewhere = JsonlPersistence(tmp_path / "elsewhere")
    target = await store(elsewhere, header(), turn_events(0, 1))
    before = target.read_bytes()
    log = session_dir(root) / LOG_FILE_NAME
    log.parent.mkdir(parents=True)
    log.symlink_to(target)
    with pytest.raises(UnusableFileError, match="is a symbolic link") as info:
        await persistence.open("s1")
    assert info.value.path == str(log)
    with pytest.raises(UnusableFileError):
        await truncate_log(persistence, "s1", 0)
    assert target.read_bytes() == before
    assert await persistence.list() == []  # not listed either


async def test_a_directory_at_the_lock_file_is_a_clear_error(
    persistence: JsonlPersistence, root: Path
) -> None:
    lock = session_dir(root) / LOCK_FILE_NAME
    lock.mkdir(parents=True)
    with pytest.raises(UnusableFileError, match="is a directory") as info:
        await persistence.create(header())
    assert isinstance(info.value, DshError)
    assert isinstance(info.value, OSError)
    assert info.value.errno == errno.EISDIR
    assert str(info.value) == f"{lock} is a directory, not a regular file"


# --------------------------------------------------------------------------- linked directories


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("level", ["session", "project"])
async def test_a_new_session_is_not_made_through_a_linked_directory(
    persistence: JsonlPersistence, root: Path, tmp_path: Path, level: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = session_dir(root) if level == "session" else session_dir(root).parent
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UnusableFileError, match="is a symbolic link") as info:
        await persistence.create(header())
    assert info.value.path == str(link)
    assert info.value.errno == errno.ELOOP
    assert str(info.value) == (
        f"{link} is a symbolic link (not followed): only the store's root may be a link"
    )
    assert files_under(elsewhere) == []  # no directory, no lock file made there
    assert link.is_symlink()


@pytest.mark.parametrize("level", ["session", "project"])
async def test_a_stored_session_behind_a_linked_directory_is_refused(
    persistence: JsonlPersistence,
    root: Path,
    tmp_path: Path,
    level: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    elsewhere = JsonlPersistence(tmp_path / "elsewhere")
    log = await store(elsewhere, header(), turn_events(0, 1))
    before = files_under(tmp_path / "elsewhere"), log.read_bytes()
    target = log.parent if level == "session" else log.parent.parent
    link = session_dir(root) if level == "session" else session_dir(root).parent
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(UnusableFileError, match="is a symbolic link") as info:
        await persistence.open("s1")
    assert info.value.path == str(link)
    with pytest.raises(UnusableFileError, match="is a symbolic link"):
        await restore_session(persistence, "s1")
    with pytest.raises(UnusableFileError, match="is a symbolic link"):
        await truncate_log(persistence, "s1", 0)
    assert (files_under(tmp_path / "elsewhere"), log.read_bytes()) == before
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    assert await persistence.list() == []
    assert [r.getMessage() for r in caplog.records] == [
        (
            f"{link} is a symbolic link (not followed): only the store's root may "
            "be a link; it is skipped"
        )
    ]


async def test_the_stores_root_may_be_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(real, target_is_directory=True)
    persistence = JsonlPersistence(linked)
    await store(persistence, header(), turn_events(0, 1))
    assert (real / "_no-cwd" / "s1" / LOG_FILE_NAME).is_file()
    assert [h.id for h in await persistence.list()] == ["s1"]
    writer, events = await persistence.open("s1")
    await writer.close()
    assert len(events) == 5


async def test_a_file_where_the_session_directory_belongs_is_a_clear_error(
    persistence: JsonlPersistence, root: Path
) -> None:
    where = session_dir(root)
    where.parent.mkdir(parents=True)
    where.write_bytes(b"not a directory")
    with pytest.raises(UnusableFileError) as info:
        await persistence.create(header())
    assert str(info.value) == f"{where} is a regular file, not a directory"
    assert info.value.errno == errno.ENOTDIR


# --------------------------------------------------------------------------- FIFOs


@contextlib.contextmanager
def fifo_holding(path: Path, data: bytes) -> Iterator[int]:
    """A FIFO at ``path`` holding ``data``, kept open for writing (so opening it for
    reading does not wait); yields the fd, which reads back what nobody took."""
    os.mkfifo(path)
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(fd, data)
        yield fd
    finally:
        os.close(fd)


def left_in(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return b""


@needs_posix
async def test_a_fifo_named_like_a_log_is_never_opened(
    persistence: JsonlPersistence, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await store(persistence, header("s2"), turn_events(0, 1))
    log = session_dir(root) / LOG_FILE_NAME
    log.parent.mkdir(parents=True)
    line = json.dumps(HEADER_LINE).encode()
    with fifo_holding(log, line + b"\n") as fd:
        caplog.set_level(logging.WARNING, logger="dsh_trio")
        listed = await persistence.list()
        assert [h.id for h in listed] == ["s2"]  # the FIFO is skipped
        assert [r.getMessage() for r in caplog.records] == [
            f"{log} is a FIFO, not a regular file; it is skipped"
        ]
        with pytest.raises(UnusableFileError, match="is a FIFO"):
            await persistence.open("s1")
        assert left_in(fd) == line + b"\n"  # nobody read it


# --------------------------------------------------------------------------- modes


@needs_posix
@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
async def test_what_the_store_creates_is_private_to_its_user(
    tmp_path: Path, mask: int
) -> None:
    root = tmp_path / "home" / "sessions"  # neither folder exists yet
    persistence = JsonlPersistence(root)
    with umask(mask):
        path = await store(persistence, header(), turn_events(0, 1))
        writer = await persistence.create(header("s2"))  # a claim: its lock file
        try:
            lock = session_dir(root, "s2") / LOCK_FILE_NAME
            assert mode_of(lock) == 0o600
        finally:
            await writer.close()
        with path.open("ab") as f:
            f.write(b'{"torn')  # a torn tail: the next load keeps it in a side file
        restored = await restore_session(persistence, "s1")
        await restored.writer.close()
    assert restored.salvaged is not None
    assert mode_of(path) == 0o600
    assert mode_of(Path(restored.salvaged.path)) == 0o600
    for folder in (tmp_path / "home", root, root / "_no-cwd", path.parent):
        assert mode_of(folder) == 0o700, folder


@needs_posix
def test_a_stricter_umask_makes_stricter_modes(tmp_path: Path) -> None:
    with umask(0o277):
        fd, _ = _files.open_regular(
            str(tmp_path / "file"), os.O_WRONLY | os.O_CREAT | os.O_EXCL
        )
        os.close(fd)
        _files.make_dirs(str(tmp_path / "dir"))
    assert mode_of(tmp_path / "file") == 0o400
    assert mode_of(tmp_path / "dir") == 0o500


# --------------------------------------------------------------------------- documents


def test_a_document_over_the_limit_is_refused_before_it_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.truncate(_files.DOCUMENT_LIMIT + 1)
    with pytest.raises(UnusableFileError, match="larger than the 1 MiB limit") as info:
        _files.read_document(str(path))
    assert info.value.errno == errno.EFBIG
    path.write_bytes(b"x" * _files.DOCUMENT_LIMIT)
    assert len(_files.read_document(str(path))) == _files.DOCUMENT_LIMIT


@needs_posix
def test_a_device_is_refused_before_it_is_opened() -> None:
    with pytest.raises(UnusableFileError, match="is a character device"):
        _files.read_document("/dev/zero")
