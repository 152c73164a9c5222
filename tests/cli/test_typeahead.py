"""Keys typed while a reply streams never show inside it; the steer is echoed after it.

The line editor and the reading loop are shown on their own (pure, and with a pipe
standing in for the terminal); the whole behaviour through a pseudo-terminal, with a
fake model that holds its reply open until the test lets it go on (no clock).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh_trio.cli._typeahead import CTRL_C_MARK, TypedLine, read_typed

from .test_pty import ROUTE, finish, spawn, user_texts


def _feed(line: TypedLine, keys: str) -> list[str | None]:
    return [line.feed(key) for key in keys]


def test_enter_hands_the_edited_line_over() -> None:
    line = TypedLine()
    assert _feed(line, "help\x7flo") == [None] * 7
    assert line.text == "hello"
    assert line.feed("\r") == "hello\n"
    assert line.text == ""  # a new line starts
    assert _feed(line, "x\n")[-1] == "x\n"


def test_kill_and_word_erase() -> None:
    line = TypedLine("carried over")
    _feed(line, " and more\x17\x17")
    assert line.text == "carried over "
    _feed(line, "\x15new")
    assert line.text == "new"


def test_arrow_and_alt_keys_edit_nothing() -> None:
    line = TypedLine()
    _feed(line, "a\x1b[Db\x1bOAc\x1b[1;5Cd\x1bxe")
    assert line.text == "abcde"


def test_ctrl_c_and_ctrl_d_act_as_at_the_prompt() -> None:
    line = TypedLine()
    assert _feed(line, "stop\x03")[-1] == f"stop{CTRL_C_MARK}\n"
    assert line.feed("\x04") == ""  # an empty line: the end of input
    _feed(line, "ab")
    assert line.feed("\x04") is None  # on a typed line it does nothing
    assert line.text == "ab"


def test_other_control_keys_are_dropped_and_text_is_unicode() -> None:
    line = TypedLine()
    _feed(line, "\x01\x02é\t☃")
    assert line.text == "é\t☃"


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    data_r, data_w = os.pipe()
    wake_r, wake_w = os.pipe()
    yield data_r, data_w, wake_r, wake_w
    for fd in (data_r, data_w, wake_r, wake_w):
        os.close(fd)


def test_read_typed_takes_one_line_and_leaves_the_rest(
    pipes: tuple[int, int, int, int],
) -> None:
    data_r, data_w, wake_r, _ = pipes
    os.write(data_w, b"ab\x7fc\rnext")
    assert read_typed(data_r, wake_r, TypedLine(), lambda: True) == "ac\n"
    os.write(data_w, b"\r")
    # "next" was not taken with the first line.
    assert read_typed(data_r, wake_r, TypedLine(), lambda: True) == "next\n"


def test_read_typed_hands_an_unfinished_line_back_when_woken(
    pipes: tuple[int, int, int, int],
) -> None:
    data_r, data_w, wake_r, wake_w = pipes
    os.write(data_w, b"xy")
    os.write(wake_w, b"!")
    line = TypedLine()
    # The reply ended once the line reads "xy": the wake byte makes it look.
    assert read_typed(data_r, wake_r, line, lambda: line.text != "xy") is None
    assert line.text == "xy"


def test_read_typed_ends_when_the_terminal_hangs_up() -> None:
    data_r, data_w = os.pipe()
    wake_r, wake_w = os.pipe()
    try:
        os.write(data_w, b"half")
        os.close(data_w)
        assert read_typed(data_r, wake_r, TypedLine(), lambda: True) == ""
    finally:
        for fd in (data_r, wake_r, wake_w):
            os.close(fd)


# ------------------------------------------------------------------ a terminal


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    """A FIFO the fake model waits on after its first words (``DSH_TEST_GATE``)."""
    path = tmp_path / "gate"
    os.mkfifo(path)
    return path


def _open_gate(gate: Path) -> None:
    with open(gate, "w", encoding="utf-8") as f:
        f.write("go on\n")


STEER = r"\[steering: 'and also THIS' joins the running turn at its next step\]"


def test_a_steer_typed_mid_reply_shows_only_as_its_echo(
    tmp_path: Path, gate: Path
) -> None:
    store = tmp_path / "s"
    child = spawn("chat", "--session-dir", str(store), *ROUTE, DSH_TEST_GATE=str(gate))
    child.expect("> ")
    child.send("go\r")
    child.expect("Alpha ")
    # Typed and edited while the reply streams: nothing of it is shown.
    child.send("and also this")
    child.send("\x7f\x7f\x7f\x7fTHIS\r")
    child.expect(STEER)
    _open_gate(gate)
    child.expect("omega")
    child.expect("reply from m1")  # the next step answers the steer
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
    shown = child.logfile_read.getvalue()
    assert "and also this" not in shown
    assert "THIS" not in shown.replace("'and also THIS'", "")
    # The reply's line ends, the steer is echoed on a line of its own, the reply goes on.
    assert re.search(rf"Alpha \r?\n{STEER}\r?\nomega\r?\n", shown), shown
    assert user_texts(store) == ["go", "and also THIS"]


def test_a_line_unfinished_when_the_reply_ends_moves_to_the_prompt(
    tmp_path: Path, gate: Path
) -> None:
    store = tmp_path / "s"
    child = spawn("chat", "--session-dir", str(store), *ROUTE, DSH_TEST_GATE=str(gate))
    child.expect("> ")
    child.send("go\r")
    child.expect("Alpha ")
    child.send("draft")
    _open_gate(gate)
    child.expect("omega")
    child.expect("> draft")
    child.send("ed\r")  # finished at the prompt, with its editing
    child.expect("reply from m1")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
    shown = child.logfile_read.getvalue()
    assert re.search(r"Alpha omega\r?\n", shown), shown
    assert user_texts(store) == ["go", "drafted"]


def test_ctrl_c_typed_mid_reply_cancels_it_and_drops_the_typed_text(
    tmp_path: Path, gate: Path
) -> None:
    store = tmp_path / "s"
    child = spawn("chat", "--session-dir", str(store), *ROUTE, DSH_TEST_GATE=str(gate))
    child.expect("> ")
    child.send("go\r")
    child.expect("Alpha ")
    child.send("never sent\x03")
    child.expect(r"\[cancelled\]")
    child.expect("> ")
    child.sendeof()
    assert finish(child)[0] == 0
    assert "never sent" not in child.logfile_read.getvalue()
    assert user_texts(store) == ["go"]
