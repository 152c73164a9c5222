"""``dsh-trio chat``: an interactive terminal agent on trio.

Lines typed while the agent is idle start a turn (``followup``); lines typed while a
turn runs steer it (``steer``). Replies stream live from ``agent/assistant-stream``
frames. Ctrl-C cancels a running turn with :class:`UserCancel` and keeps the
session; Ctrl-C when idle, Ctrl-D (end of input) or ``/exit`` end the chat. SIGTERM
and SIGHUP end it too: the running turn is cancelled with :class:`UserCancel` (its
partial reply is kept), the session is flushed and the resume hint printed.

This module owns :class:`ChatApp`, the chat on one agent, and the signal watch that
feeds it; :func:`~dsh_trio.cli._chat_run.run_chat` opens and ends a session around it.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Final, TextIO

import attrs
import trio

from ..errors import PersistenceError
from ..events import AgentStatusChanged
from ..loop import Agent, user_message
from ..values import (
    AgentStatus,
    AssistantMessageData,
    TurnEndReason,
    UserCancel,
)
from ._chat_view import _ChatView, _snippet
from ._terminal import CTRL_C_MARK, Console, LineSource

__all__ = ["TERMINATING_SIGNALS", "ChatApp", "watch_interrupts"]

#: The signals that end the chat at once, cancelling a running turn (SIGHUP: the
#: terminal went away). Not every platform has SIGHUP.
TERMINATING_SIGNALS: Final = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)

_HELP: Final = """\
Commands:
  /help      show this help
  /session   print the session id and its log file
  /usage     print the tokens used in this session
  /exit      leave the chat (also Ctrl-D, or Ctrl-C twice while no reply is running)

Typing while a reply is streaming steers it: the line joins the running turn at its
next step (it is not shown while you type; Enter sends it and shows it on a line of its
own). Ctrl-C while a reply is streaming cancels that turn; the session goes on.
Start a line with // to send a message that begins with /.

Model: {label}.
Connect a real model with --provider deepseek (deepseek-flash; reads
DEEPSEEK_API_KEY; --no-thinking for answers without thinking), or --base-url URL
--model NAME for any OpenAI-compatible server (--api-key-env VAR names the variable
holding its key); dsh-trio models lists the known models."""


@attrs.define(eq=False)
class ChatApp(_ChatView):
    """One terminal chat on one agent: lines in, streamed replies and notices out.

    Assistant text (and command output) goes to ``out``; notices (turn outcomes,
    retries, errors) go to ``err``. Call :meth:`install` once, then await :meth:`run`
    with a line source; :meth:`interrupt` is what Ctrl-C does, :meth:`terminate` what
    SIGTERM and SIGHUP do (:meth:`handle_signal` dispatches a signal number).

    Args:
        agent: the agent to chat with.
        out: where replies are written.
        err: where notices are written.
        log_path: the session's log file (for ``/session``).
        label: how the model is described in ``/help``.
        interactive: print prompts and dim reasoning (a terminal on both ends).
        sequential: finish each turn before reading the next line (piped input),
            instead of steering the running turn with it.
        show_usage: print the tokens a turn used after it ends.
        reader_prompts: the line source shows the prompt itself (line editing).
    """

    _agent: Agent
    _out: TextIO
    _err: TextIO
    _log_path: str | None = None
    _label: str = "the configured model"
    _interactive: bool = False
    _sequential: bool = False
    _show_usage: bool = False
    _reader_prompts: bool = False
    _console: Console = attrs.field(init=False, repr=False)
    _exit_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, init=False)
    _exit_requested: bool = attrs.field(default=False, init=False)
    _terminated_by: str | None = attrs.field(default=None, init=False)
    _closing: bool = attrs.field(default=False, init=False)
    _last_reason: TurnEndReason | None = attrs.field(default=None, init=False)
    _attempt: tuple[str, int] | None = attrs.field(default=None, init=False)
    _printed: tuple[str, int] | None = attrs.field(default=None, init=False)
    _attempt_text: str = attrs.field(default="", init=False)
    _retry_pending: bool = attrs.field(default=False, init=False)
    _skip: str | None = attrs.field(default=None, init=False)
    _busy: bool = attrs.field(default=False, init=False)
    _quit_armed: bool = attrs.field(default=False, init=False)
    _tool_names: dict[str, str] = attrs.field(factory=dict, init=False)
    _turn_usage: list[int] = attrs.field(factory=lambda: [0, 0], init=False)
    _total_usage: list[int] = attrs.field(factory=lambda: [0, 0], init=False)

    @_console.default
    def _make_console(self) -> Console:
        return Console(self._out, self._err, interactive=self._interactive)

    @property
    def agent(self) -> Agent:
        """The agent this chat talks to."""
        return self._agent

    @property
    def exit_requested(self) -> bool:
        """Whether ``/exit``, an idle Ctrl-C or SIGTERM / SIGHUP asked the chat to end."""
        return self._exit_requested

    @property
    def terminated_by(self) -> str | None:
        """The name of the signal that ended the chat (``"SIGTERM"``), if one did."""
        return self._terminated_by

    @property
    def last_reason(self) -> TurnEndReason | None:
        """How the last turn of this chat ended (``None`` before the first)."""
        return self._last_reason

    def install(self) -> None:
        """Register the chat's listeners on the agent's scope (removed when it is disposed)."""
        for event in self._agent.session.events.of_types("assistant/message"):
            if isinstance(event.data, AssistantMessageData) and event.data.usage:
                self._total_usage[0] += event.data.usage.input_tokens
                self._total_usage[1] += event.data.usage.output_tokens
        scope = self._agent.scope
        scope.on("agent/assistant-stream", self._on_frame)
        scope.on("session/event", self._on_session_event)
        scope.on("agent/status", self._on_status)

    # ------------------------------------------------------------------ input

    def submit(self, line: str) -> bool:
        """Handle one input line; returns ``False`` when the chat should end.

        A ``/command`` runs at once. Other text starts a turn when the agent is idle
        (``followup``) or steers the running turn (``steer``). Never blocks.
        """
        if not self._reader_prompts:
            # A line-editing reader shows nothing of a line typed while a reply
            # streams, so Enter did not end the line the reply is on.
            self._console.line_entered()
        text = line.rstrip("\r\n")
        if text.endswith(CTRL_C_MARK):
            # Ctrl-C typed at a line-editing prompt: the typed text is dropped.
            typed = text[: -len(CTRL_C_MARK)]
            if typed.strip() and self._agent.status is not AgentStatus.RUNNING:
                self._quit_armed = False
                self._console.notice("[line cleared]")
                self._prompt_if_idle()
                return True
            return self.interrupt() or not self._exit_requested
        self._quit_armed = False
        stripped = text.strip()
        if not stripped:
            self._prompt_if_idle()
            return True
        if stripped.startswith("/") and not stripped.startswith("//"):
            return self._command(stripped)
        if stripped.startswith("//"):
            text = text.lstrip()[1:]
        message = user_message(text)
        try:
            if self._agent.status is AgentStatus.RUNNING:
                self._agent.steer(message)
                self._console.notice(
                    f"[steering: {_snippet(text)!r} joins the running turn at its next step]"
                )
            else:
                self._agent.followup(message)
                self._busy = True
        except PersistenceError as exc:
            # The log is not being written: refuse the line (it is not lost silently,
            # it was never accepted) and say why; the chat goes on, so the user can
            # free space and retry, or quit.
            self._console.notice(
                f"[not sent: the session log cannot be written: {exc}]"
            )
            self._prompt_if_idle()
        return True

    def interrupt(self) -> bool:
        """What Ctrl-C does: cancel the running turn, or end the chat when idle.

        A running turn is cancelled with ``UserCancel()`` (it ends ``Aborted``; the
        session and the chat go on) and ``True`` is returned. When idle, the chat is
        asked to exit and ``False`` is returned; in an interactive chat only on the
        second Ctrl-C in a row (the first asks to press it again). Never blocks.
        """
        if self._agent.status is AgentStatus.RUNNING:
            self._quit_armed = False
            self._agent.cancel(UserCancel())
            return True
        if self._interactive and not self._quit_armed:
            self._quit_armed = True
            self._console.notice("[press Ctrl-C again to quit, or Ctrl-D]")
            self._prompt_if_idle()
            return True
        self.request_exit()
        return False

    def terminate(self, why: str) -> None:
        """What SIGTERM and SIGHUP do: cancel the running turn and end the chat.

        A running turn is cancelled with ``UserCancel()`` (it ends ``Aborted``; its
        partial reply is kept in the session); input is no longer read, and
        :meth:`run` returns once the agent is idle. ``why`` (the signal's name) is
        noted on ``err``. Idempotent; never blocks.
        """
        if self._terminated_by is not None:
            return
        self._terminated_by = why
        running = self._agent.status is AgentStatus.RUNNING
        if running:
            self._agent.cancel(UserCancel())
        self.request_exit()
        doing = "cancelling the reply and ending" if running else "ending"
        with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
            self._console.notice(f"[{why}: {doing} the chat]")

    def handle_signal(self, signum: int) -> None:
        """Act on signal ``signum``: SIGINT as :meth:`interrupt`, SIGTERM and SIGHUP
        as :meth:`terminate`; others are ignored. Never blocks."""
        if signum == signal.SIGINT:
            self.interrupt()
        elif signum in TERMINATING_SIGNALS:
            self.terminate(signal.Signals(signum).name)

    def request_exit(self) -> None:
        """Stop reading input: :meth:`run` returns once the agent is idle. Never blocks."""
        self._exit_requested = True
        self._close_input()
        self._exit_scope.cancel(reason="the chat was asked to exit")

    def _close_input(self) -> None:
        self._closing = True
        self._console.leave_prompt()

    async def run(self, reader: LineSource) -> None:
        """Read and handle lines until end of input, ``/exit`` or :meth:`request_exit`.

        Blocks while it reads and, at the end, until the running turn (if any) has
        finished, so a reply to the last line is complete when this returns. In
        ``sequential`` mode each turn finishes before the next line is read.
        """
        if not self._reader_prompts:
            self._prompt_if_idle()
        with self._exit_scope:
            while True:
                line = await reader.readline()
                if line is None:
                    self._close_input()
                    break
                if not self.submit(line):
                    self._exit_requested = True
                    self._close_input()
                    if self._agent.status is AgentStatus.RUNNING:
                        self._agent.cancel(UserCancel())
                    break
                if self._sequential:
                    await self._agent.when_idle()
        await self._agent.when_idle()
        self._console.end_line()

    def _command(self, command: str) -> bool:
        name = command.split()[0].lower()
        if name in ("/exit", "/quit"):
            return False
        if name == "/help":
            self._console.say(_HELP.format(label=self._label))
        elif name == "/usage":
            tokens_in, tokens_out = self._total_usage
            self._console.say(
                f"tokens used in session {self._agent.id}: {tokens_in} in, {tokens_out} out"
            )
        elif name == "/session":
            self._console.say(
                f"session {self._agent.id}\nlog     {self._log_path or '(not stored)'}"
            )
        else:
            self._console.notice(
                f"unknown command {name}; /help lists the commands (// sends a line starting with /)"
            )
        self._prompt_if_idle()
        return True

    def _prompt_if_idle(self) -> None:
        if self._closing or self._agent.status is not AgentStatus.IDLE or self._busy:
            return
        if self._reader_prompts:
            return  # the reader shows the prompt when it reads at one
        self._console.prompt()

    def prompt(self) -> str:
        """The prompt a line-editing reader shows now: ``"> "`` when idle, else ``""``."""
        if self._busy or self._agent.status is not AgentStatus.IDLE:
            return ""
        return self._console.prompt_text()

    # ------------------------------------------------------------------ listeners

    def _on_status(self, payload: AgentStatusChanged) -> None:
        if payload.status is AgentStatus.IDLE:
            self._busy = False
            self._prompt_if_idle()


async def watch_interrupts(  # noqa: ASYNC114  # started with nursery.start only here
    app: ChatApp, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Hand SIGINT (Ctrl-C), SIGTERM and SIGHUP to :meth:`ChatApp.handle_signal`.

    Runs until cancelled. Must run in the main thread (signal handlers live there).
    While it runs, Ctrl-C raises no ``KeyboardInterrupt`` and SIGTERM / SIGHUP do not
    kill the process: the chat ends the way :meth:`ChatApp.terminate` says.
    """
    with trio.open_signal_receiver(signal.SIGINT, *TERMINATING_SIGNALS) as received:
        task_status.started()
        async for signum in received:
            app.handle_signal(signum)
