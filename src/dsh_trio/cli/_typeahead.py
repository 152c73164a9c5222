"""Keys typed while a reply streams: read without being shown, edited, handed over whole.

While the agent answers, the terminal does not echo (its mode is set by
:class:`TerminalModes`), so typed characters never land inside the reply. They are
read by :func:`read_typed` and edited by a :class:`TypedLine` (Backspace, Ctrl-U,
Ctrl-W; arrow keys are ignored). Enter hands the line over (the chat then shows it on
a line of its own, as the steer it sent); a line still unfinished when the reply ends
is handed back, and the prompt that follows starts with it.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import select
from collections.abc import Callable, Iterator
from typing import Any, Final, TextIO

__all__ = ["CTRL_C_MARK", "TerminalModes", "TypedLine", "read_typed"]

#: What a line ends with when Ctrl-C was pressed on it.
CTRL_C_MARK: Final = "^C"

_ENTER: Final = frozenset("\r\n")
_ERASE: Final = frozenset("\x7f\x08")
_CTRL_C: Final = "\x03"
_CTRL_D: Final = "\x04"
_CTRL_U: Final = "\x15"
_CTRL_W: Final = "\x17"
_ESC: Final = "\x1b"


class TypedLine:
    """The line being typed while nothing is shown: one key at a time in, a line out.

    :meth:`feed` returns ``None`` while the line goes on, the line with a newline when
    Enter ends it (ending in :data:`CTRL_C_MARK` for Ctrl-C, as the line-editing
    prompt does), or ``""`` for Ctrl-D on an empty line (the end of input). Pure;
    never blocks.

    >>> line = TypedLine("ab")
    >>> [line.feed(key) for key in "c\\x7fd\\r"]
    [None, None, None, 'abd\\n']

    Args:
        text: the line typed so far (a line carried over from a prompt).
    """

    __slots__ = ("_escape", "text")

    def __init__(self, text: str = "") -> None:
        #: What has been typed on the line so far.
        self.text = text
        # "" outside an escape sequence, "esc" after ESC, "seq" inside ESC [ ... / ESC O.
        self._escape = ""

    def feed(self, key: str) -> str | None:
        """Take one typed character; returns the finished line, ``""`` or ``None``."""
        if self._escape:
            self._skip_escape(key)
            return None
        if key in _ENTER:
            return self._finish(self.text)
        if key == _CTRL_C:
            return self._finish(self.text + CTRL_C_MARK)
        if key == _CTRL_D:
            return "" if not self.text else None
        if key in _ERASE:
            self.text = self.text[:-1]
        elif key == _CTRL_U:
            self.text = ""
        elif key == _CTRL_W:
            kept = self.text.rstrip()
            self.text = kept[: len(kept) - len(kept.split()[-1])] if kept else ""
        elif key == _ESC:
            self._escape = "esc"
        elif key == "\t" or key >= " ":
            self.text += key
        return None

    def _skip_escape(self, key: str) -> None:
        # Arrow and function keys send ESC [ ... final or ESC O final; Alt+key sends
        # ESC key. None of them edits a line nobody sees.
        if self._escape == "esc" and key in "[O":
            self._escape = "seq"
        elif self._escape == "esc" or "\x40" <= key <= "\x7e":
            self._escape = ""

    def _finish(self, line: str) -> str:
        self.text = ""
        self._escape = ""
        return line + "\n"


def read_typed(
    fd: int, wake_fd: int, line: TypedLine, current: Callable[[], bool]
) -> str | None:
    """Read keys from the terminal ``fd`` into ``line`` until it is finished. Blocking.

    Returns what :meth:`TypedLine.feed` finished (a line, or ``""`` at the end of
    input; also ``""`` when the terminal hung up), or ``None`` as soon as ``current()``
    is false: a byte written to ``wake_fd`` makes it be checked again. ``line.text``
    then holds what was typed. One byte is read at a time, so no key typed after the
    finished line is taken from the terminal. Meant for a worker thread.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while current():
        ready, _, _ = select.select([fd, wake_fd], [], [])
        if wake_fd in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_fd, 4096)
        if fd not in ready:
            continue
        data = os.read(fd, 1)
        if not data:
            return ""
        for key in decoder.decode(data):
            finished = line.feed(key)
            if finished is not None:
                return finished
    return None


class TerminalModes:
    """The terminal's modes for the chat: a prompt, and typing while nothing is shown.

    Inside :meth:`open`, Ctrl-C is a key (the terminal sends no SIGINT for it).
    :meth:`quiet` turns the echo off and hands every key over as it is typed (for
    :func:`read_typed`); :meth:`normal` turns them back on, as line editing expects
    (GNU readline shows nothing when the echo is off). Each switch is one
    ``tcsetattr`` call, which never blocks.
    """

    __slots__ = ("_fd", "_normal", "_quiet")

    def __init__(self, fd: int, normal: list[Any], quiet: list[Any]) -> None:
        self._fd = fd
        self._normal = normal
        self._quiet = quiet

    @property
    def fd(self) -> int:
        """The terminal's file descriptor."""
        return self._fd

    @classmethod
    @contextlib.contextmanager
    def open(cls, stream: TextIO) -> Iterator[TerminalModes | None]:
        """The modes of the terminal ``stream`` is, restored on exit; ``None`` when
        ``stream`` is not a terminal (or the platform has no ``termios``)."""
        try:
            import termios

            fd = stream.fileno()
            saved = termios.tcgetattr(fd)
            disabled = os.fpathconf(fd, "PC_VDISABLE")
        except (ImportError, OSError, ValueError, io.UnsupportedOperation):
            yield None
            return
        normal = termios.tcgetattr(fd)
        normal[6][termios.VINTR] = bytes([disabled])
        quiet = termios.tcgetattr(fd)
        quiet[6][termios.VINTR] = bytes([disabled])
        quiet[3] &= ~(termios.ECHO | termios.ICANON)
        quiet[6][termios.VMIN] = 1
        quiet[6][termios.VTIME] = 0
        modes = cls(fd, normal, quiet)
        modes.normal()
        try:
            yield modes
        finally:
            with contextlib.suppress(OSError):
                termios.tcsetattr(fd, termios.TCSANOW, saved)

    def normal(self) -> None:
        """Echo on, lines edited by whoever reads them (the prompt's mode)."""
        self._set(self._normal)

    def quiet(self) -> None:
        """Echo off, every key handed over as typed (the mode while a reply streams)."""
        self._set(self._quiet)

    def _set(self, mode: list[Any]) -> None:
        import termios

        with contextlib.suppress(OSError):
            termios.tcsetattr(self._fd, termios.TCSANOW, mode)
