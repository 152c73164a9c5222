"""Terminal I/O for the chat: lines in on a worker thread, text and notices out.

:class:`LineReader` reads input lines without ever blocking the trio loop;
:class:`ReadlineReader` reads them from a terminal, with line editing at the prompt
and, while a reply streams, without showing what is typed (see ``_typeahead``);
:class:`Console` writes replies and notices and keeps track of the terminal line
(whether the cursor sits after a prompt or inside an unfinished line, whether the
text is dimmed), so the chat can start each kind of output on a line of its own.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import Final, Protocol, TextIO

import trio

from .._files import make_dirs, regular_or_absent
from ._typeahead import CTRL_C_MARK, TerminalModes, TypedLine, read_typed

__all__ = ["CTRL_C_MARK", "Console", "LineReader", "LineSource", "ReadlineReader"]

_HISTORY_LENGTH: Final = 1000

_PROMPT: Final = "> "
_DIM: Final = "\x1b[2m"
_RESET: Final = "\x1b[0m"
_READ_SIZE: Final = 65536


def _history_usable(path: str) -> bool:
    """Whether readline may read and write the history file at ``path``.

    Only a regular file (or nothing yet): readline follows a link and would wait
    forever on a FIFO. Blocking (one ``lstat``).
    """
    try:
        regular_or_absent(path)
    except OSError:  # a link, a FIFO, ...: left alone
        return False
    return True


class LineSource(Protocol):
    """Where a chat's input lines come from."""

    async def readline(self) -> str | None:
        """The next line, or ``None`` at the end of input."""
        ...


class LineReader:
    """Reads lines from a text stream on a worker thread, so the trio loop never blocks.

    A stream with a file descriptor is read with ``os.read`` (an abandoned read holds no
    lock of the ``sys.stdin`` object, so the process can always exit); any other stream
    with its own ``readline``.

    Args:
        stream: where the lines come from (``sys.stdin``, an ``io.StringIO``, ...).
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd: int | None
        try:
            self._fd = stream.fileno()
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            self._fd = None
        encoding = getattr(stream, "encoding", None) or "utf-8"
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._buffer = ""
        self._eof = False

    async def readline(self) -> str | None:
        """The next line (with its newline, if it had one), or ``None`` at end of input.

        Blocks on a worker thread until a line is complete. Cancellation abandons the
        read at once; input that arrives afterwards is lost.
        """
        if self._fd is None:
            line = await trio.to_thread.run_sync(
                self._stream.readline, abandon_on_cancel=True
            )
            return line or None
        fd = self._fd
        while "\n" not in self._buffer and not self._eof:
            data = await trio.to_thread.run_sync(
                os.read, fd, _READ_SIZE, abandon_on_cancel=True
            )
            self._eof = not data
            self._buffer += self._decoder.decode(data, final=self._eof)
        await trio.lowlevel.checkpoint()
        if not self._buffer:
            return None
        line, newline, rest = self._buffer.partition("\n")
        self._buffer = rest
        return line + newline


class ReadlineReader:
    """Reads lines from the terminal with GNU readline: editing, arrow keys, history.

    ``input()`` runs on a worker thread, so the trio loop never blocks. Inside
    :meth:`terminal`, Ctrl-C is a key instead of a signal: it ends the line being
    typed, which is returned ending in :data:`CTRL_C_MARK` (and kept out of the
    history). Use only when stdin and stdout are the process's terminal.

    While ``prompt()`` is ``""`` (a reply is streaming) the line is read with the
    terminal's echo off, so nothing typed shows up inside the reply: Enter hands it
    over whole (Backspace, Ctrl-U and Ctrl-W edit it), Ctrl-C and Ctrl-D act as at
    the prompt. Call :meth:`wake` when the prompt may have changed (the agent went
    idle): a line still being typed then moves to the prompt that follows, where it
    can be edited and sent.

    Args:
        prompt: called before each read; the prompt to show (``""`` for none).
        history: the history file (read at the start, written at the end).
    """

    def __init__(self, prompt: Callable[[], str], *, history: str | None) -> None:
        self._prompt = prompt
        self._history = history
        self._modes: TerminalModes | None = None
        self._wake_fds: tuple[int, int] | None = None
        self._wakes = 0

    @contextlib.contextmanager
    def terminal(self) -> Iterator[None]:
        """Set up readline and the terminal for the chat; restore both on exit.

        Loads the history, binds Ctrl-C and stops the terminal from turning it into
        SIGINT. Blocking (small file and terminal calls).
        """
        import readline

        readline.parse_and_bind("set enable-bracketed-paste off")
        readline.parse_and_bind(r'"\C-c": "\C-e' + CTRL_C_MARK + r'\C-j"')
        readline.set_history_length(_HISTORY_LENGTH)
        history = self._history
        if history is not None and _history_usable(history):
            with contextlib.suppress(OSError):
                readline.read_history_file(history)
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        self._wake_fds = (read_end, write_end)
        with TerminalModes.open(sys.stdin) as modes:
            self._modes = modes
            try:
                yield
            finally:
                self._modes = None
                self._wake_fds = None
                os.close(read_end)
                os.close(write_end)
                if history is not None and _history_usable(history):
                    with contextlib.suppress(OSError):
                        make_dirs(os.path.dirname(history))
                        readline.write_history_file(history)

    def wake(self) -> None:
        """The prompt may have changed: a line typed while nothing was shown moves to
        the prompt if there is one now. Never blocks; a no-op outside :meth:`terminal`."""
        self._wakes += 1
        if self._wake_fds is not None:
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_fds[1], b"!")

    async def readline(self) -> str | None:
        """The next line (with a newline), or ``None`` at end of input (Ctrl-D).

        Blocks on a worker thread until the line is entered. Cancellation abandons
        the read at once.
        """
        typed = ""
        while True:
            prompt = self._prompt()
            modes, fds = self._modes, self._wake_fds
            if prompt or modes is None or fds is None:
                return await self._edit(prompt, typed, modes)
            line = TypedLine(typed)
            finished = await self._read_unseen(modes, fds[0], line)
            if finished is not None:
                if not finished:
                    return None
                if finished.strip() and not finished.endswith(CTRL_C_MARK + "\n"):
                    _remember(finished.rstrip("\n"))
                return finished
            typed = line.text

    async def _edit(
        self, prompt: str, typed: str, modes: TerminalModes | None
    ) -> str | None:
        try:
            line = await trio.to_thread.run_sync(
                _read_line, prompt, typed, modes, abandon_on_cancel=True
            )
        except EOFError:
            sys.stdout.write("\n")
            sys.stdout.flush()
            return None  # noqa: ASYNC910  # the worker-thread call checkpointed
        return line + "\n"

    async def _read_unseen(
        self, modes: TerminalModes, wake_fd: int, line: TypedLine
    ) -> str | None:
        # The echo goes off before the reply can print anything: this runs before
        # the first checkpoint after the turn was started.
        modes.quiet()
        wakes = self._wakes
        running = True
        try:
            return await trio.to_thread.run_sync(
                read_typed,
                modes.fd,
                wake_fd,
                line,
                lambda: running and self._wakes == wakes,
                abandon_on_cancel=True,
            )
        finally:
            # Abandoned (cancelled): the thread stops at its next look.
            running = False
            self.wake()


def _remember(line: str) -> None:
    """Add a line typed while nothing was shown to the history, like a prompt's."""
    import readline

    readline.add_history(line)


def _read_line(prompt: str, typed: str, modes: TerminalModes | None) -> str:
    import readline

    if typed:

        def start_with_typed() -> None:
            readline.insert_text(typed)
            readline.redisplay()

        readline.set_pre_input_hook(start_with_typed)
    if modes is not None:
        modes.normal()
    try:
        line = input(prompt)
    finally:
        if typed:
            readline.set_pre_input_hook()
        if modes is not None:
            # Until the next prompt nothing typed is shown (a reply may stream).
            modes.quiet()
    if line.endswith(CTRL_C_MARK):
        length = readline.get_current_history_length()
        if length and readline.get_history_item(length) == line:
            readline.remove_history_item(length - 1)
    return line


class Console:
    """The chat's output: replies to ``out``, notices to ``err``, one line at a time.

    Every method writes synchronously and flushes; none blocks the trio loop for
    longer than the stream's own write.

    Args:
        out: where replies, command output and the prompt are written.
        err: where notices are written.
        interactive: a terminal on both ends: show prompts and dim reasoning.
    """

    __slots__ = ("_dim", "_err", "_interactive", "_line_open", "_out", "_prompt_shown")

    def __init__(self, out: TextIO, err: TextIO, *, interactive: bool) -> None:
        self._out = out
        self._err = err
        self._interactive = interactive
        self._prompt_shown = False
        self._line_open = False
        self._dim = False

    def write(self, text: str, *, dim: bool = False) -> None:
        """Continue the current line with ``text`` (dimmed only when interactive)."""
        want_dim = dim and self._interactive
        if want_dim != self._dim:
            self._out.write(_DIM if want_dim else _RESET)
            self._dim = want_dim
        self._out.write(text)
        if text:
            self._line_open = not text.endswith("\n")
        self._out.flush()

    def end_line(self) -> None:
        """Undim, and end an unfinished line."""
        if self._dim:
            self._out.write(_RESET)
            self._dim = False
        if self._line_open:
            self._out.write("\n")
            self._line_open = False
        self._out.flush()

    def end_dimmed(self) -> None:
        """End the line if dimmed text (reasoning) is on it."""
        if self._dim:
            self.end_line()

    def blank_line(self) -> None:
        """End the current line and leave an empty one (between two replies)."""
        self.end_line()
        self._out.write("\n")

    def say(self, text: str) -> None:
        """Write ``text`` to ``out`` on lines of its own."""
        self.end_line()
        self._out.write(text + "\n")
        self._out.flush()

    def notice(self, text: str) -> None:
        """Write ``text`` to ``err`` on lines of its own."""
        self.end_line()
        self._err.write(text + "\n")
        self._err.flush()

    def prompt_text(self) -> str:
        """The input prompt (``"> "``); shown only when interactive."""
        return _PROMPT if self._interactive else ""

    def prompt(self) -> None:
        """Show the input prompt on a fresh line (interactive only)."""
        if not self._interactive:
            return
        self.end_line()
        self._out.write(_PROMPT)
        self._out.flush()
        self._prompt_shown = True

    def line_entered(self) -> None:
        """Record that the Enter the user typed ended the line the cursor was on."""
        if self._interactive:
            self._line_open = self._prompt_shown = False

    def leave_prompt(self) -> None:
        """Leave a prompt line at the end of input (the terminal echoed ^C or ^D)."""
        if self._prompt_shown:
            self._out.write("\n")
            self._out.flush()
            self._prompt_shown = False
