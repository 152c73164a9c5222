"""The command line reads only regular files: a FIFO or a device named like a log, a
config or a file to import is refused at once (never waited on), a document over
1 MiB is refused before it is read, and the chat history is never a link or a FIFO."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_trio.cli import main
from dsh_trio.cli._terminal import _history_usable

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")

HEADER = {
    "type": "session",
    "version": 3,
    "id": "fifo",
    "createdAt": 1,
    "isSeeded": False,
    "delegationDepth": 0,
}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("DSH_TRIO_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))


class Feeder:
    """A FIFO whose every reader gets ``data`` and then the end of the file.

    A thread opens the FIFO for writing (which waits for a reader), writes ``data``
    and closes it, again and again; so code that wrongly reads the FIFO sees a
    complete file instead of waiting forever. ``opened`` counts the readers.
    """

    def __init__(self, path: Path, data: bytes) -> None:
        os.mkfifo(path)
        self.path, self.data = path, data
        self.opened = 0
        self._stop = False
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        while True:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                if self._stop:
                    return
                self.opened += 1
                with contextlib.suppress(BrokenPipeError):  # the reader left
                    os.write(fd, self.data)
            finally:
                os.close(fd)

    def close(self) -> None:
        self._stop = True
        # A reader held open lets the feeder's pending open return: it then stops.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            self._thread.join()
        finally:
            os.close(fd)


@pytest.fixture
def feed() -> Iterator[list[Feeder]]:
    made: list[Feeder] = []
    yield made
    for feeder in made:
        feeder.close()


def fifo(feed: list[Feeder], path: Path, data: bytes) -> Feeder:
    feeder = Feeder(path, data)
    feed.append(feeder)
    return feeder


def stored(root: Path, id: str) -> None:
    """A session ``id`` with a log of its header alone."""
    log = root / "_no-cwd" / id / "session.v3.jsonl"
    log.parent.mkdir(parents=True)
    log.write_bytes(json.dumps({**HEADER, "id": id}).encode() + b"\n")


def fifo_log(root: Path, feed: list[Feeder]) -> tuple[Path, Feeder]:
    log = root / "_no-cwd" / "fifo" / "session.v3.jsonl"
    log.parent.mkdir(parents=True)
    return log, fifo(feed, log, json.dumps(HEADER).encode() + b"\n")


def test_sessions_and_show_skip_a_fifo_named_like_a_log(
    tmp_path: Path,
    feed: list[Feeder],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="dsh_trio")
    stored(tmp_path, "plain")
    log, feeder = fifo_log(tmp_path, feed)
    assert main(["sessions", "--session-dir", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["plain"]
    assert main(["show", "fifo", "--session-dir", str(tmp_path)]) == 1
    assert "no session 'fifo'" in capsys.readouterr().err
    assert feeder.opened == 0  # never opened, so never waited on
    said = {r.getMessage() for r in caplog.records}
    assert said == {f"{log} is a FIFO, not a regular file; it is skipped"}


def test_a_fifo_or_a_device_as_the_config_is_a_usage_error(
    tmp_path: Path, feed: list[Feeder], capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "runtime.yml"
    feeder = fifo(feed, config, b"presets: []\n")
    sessions = str(tmp_path / "sessions")
    for command in (["presets"], ["chat", "hi"]):
        args = [*command, "--config", str(config), "--session-dir", sessions]
        assert main(args) == 2
        assert capsys.readouterr().err == (
            f"dsh-trio {command[0]}: --config {config}: cannot read runtime config "
            f"'{config}': it is a FIFO, not a regular file\n"
        )
    assert feeder.opened == 0
    assert main(["presets", "--config", "/dev/null", "--session-dir", sessions]) == 2
    assert "it is a character device, not a regular file" in capsys.readouterr().err


def test_a_preset_file_over_one_mib_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "presets"
    folder.mkdir()
    big = folder / "big.yaml"
    # A valid preset, padded with a comment to just over the limit.
    big.write_bytes(b"id: big\nplugins: []\n#" + b"x" * (1 << 20) + b"\n")
    sessions = str(tmp_path / "sessions")
    assert main(["presets", "--session-dir", sessions]) == 2
    err = capsys.readouterr().err
    assert (
        f"'{big}': it is larger than the 1 MiB limit ({big.stat().st_size} bytes)"
        in (err)
    )
    big.write_bytes(b"id: big\nplugins: []\n")
    assert main(["presets", "--session-dir", sessions]) == 0
    assert capsys.readouterr().out.split() == ["big"]


def test_import_refuses_a_fifo_and_a_device(
    tmp_path: Path, feed: list[Feeder], capsys: pytest.CaptureFixture[str]
) -> None:
    pipe = tmp_path / "session.v3.jsonl"
    feeder = fifo(feed, pipe, json.dumps(HEADER).encode() + b"\n")
    store = ["--store", "postgresql://nowhere.invalid/app"]
    assert main(["import", str(pipe), *store]) == 2
    assert capsys.readouterr().err == (
        f"dsh-trio import: {pipe} is a FIFO, not a regular file: name a "
        "session.v3.jsonl log to import\n"
    )
    assert main(["import", "/dev/null", *store]) == 2
    assert "/dev/null is a character device" in capsys.readouterr().err
    assert feeder.opened == 0


def test_the_chat_history_is_only_ever_a_regular_file(tmp_path: Path) -> None:
    assert _history_usable(str(tmp_path / "chat-history"))  # not made yet
    (tmp_path / "plain").write_text("")
    assert _history_usable(str(tmp_path / "plain"))
    os.mkfifo(tmp_path / "pipe")
    assert not _history_usable(str(tmp_path / "pipe"))
    (tmp_path / "link").symlink_to(tmp_path / "plain")
    assert not _history_usable(str(tmp_path / "link"))
