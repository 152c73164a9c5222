"""``dsh-trio chat``: an interactive terminal agent on trio.

Lines typed while the agent is idle start a turn (``followup``); lines typed while a
turn runs steer it (``steer``). Replies stream live from ``agent/assistant-stream``
frames. Ctrl-C cancels a running turn with :class:`UserCancel` and keeps the
session; Ctrl-C when idle, Ctrl-D (end of input) or ``/exit`` end the chat. SIGTERM
and SIGHUP end it too: the running turn is cancelled with :class:`UserCancel` (its
partial reply is kept), the session is flushed and the resume hint printed.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
from typing import Final, TextIO

import attrs
import trio

from ..errors import (
    InvalidSessionIdError,
    PersistenceError,
    SessionCorruptError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from ..events import AgentStatusChanged
from ..loop import Agent, user_message
from ..nursery import AgentHandle, Runtime, open_runtime
from ..persistence import JsonlPersistence
from ..values import (
    AgentOptions,
    AgentStatus,
    AssistantMessageData,
    TurnEndReason,
    UserCancel,
)
from ._chat_view import _ChatView, _farewell, _greet, _snippet
from ._config import ModelChoice
from ._exit import exit_status
from ._presets import RuntimeOpener
from ._store import log_location
from ._terminal import CTRL_C_MARK, Console, LineReader, LineSource, ReadlineReader

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "HISTORY_FILE",
    "TERMINATING_SIGNALS",
    "ChatApp",
    "run_chat",
    "watch_interrupts",
]

#: The persona the chat gives a model unless ``--system`` says otherwise.
DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a helpful assistant in a terminal chat. Answer clearly and concisely."
)

#: The line-editing history, kept in the session directory.
HISTORY_FILE: Final = "chat-history"

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


async def run_chat(
    choice: ModelChoice,
    *,
    session_dir: str,
    stdin: TextIO,
    stdout: TextIO,
    stderr: TextIO,
    resume: str | None = None,
    system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    interactive: bool = False,
    sequential: bool = True,
    handle_signals: bool = False,
    resume_hint: str = "",
    show_usage: bool = False,
    line_editing: bool = False,
    opener: RuntimeOpener = open_runtime,
    one_shot: bool = False,
) -> int:
    """Run one chat session to its end; returns the process exit status.

    Opens a runtime (``opener``) with ``choice`` and a :class:`JsonlPersistence` under
    ``session_dir``, creates (or resumes) the agent, and runs a :class:`ChatApp` on
    it. The session id is printed to ``stderr`` at the start and at the end (with the
    command that resumes it). Blocks until the chat ends; the session is flushed
    before the resume hint is printed and durable when this returns. With
    ``handle_signals`` (main thread only), Ctrl-C cancels a running reply, and SIGTERM
    or SIGHUP cancel it and end the chat cleanly (see :meth:`ChatApp.terminate`).
    A new session records ``choice.route`` in its header (``origin``), the
    thinking switch too; the agent gets ``choice.thinking``. With
    ``line_editing`` (a terminal on both ends) lines are read with GNU readline
    (editing, and a history kept in ``session_dir``), where Ctrl-C is a key: it
    clears a typed line, cancels a running reply, and quits when pressed twice.
    With ``one_shot`` (``dsh-trio chat PROMPT``) a last turn that did not complete
    (blocked, aborted, failed) makes the status 1 (see :func:`exit_status`).

    Returns:
        ``0``; ``1`` when the session cannot be resumed, the last turn failed, or
        (``one_shot``) the turn did not complete.
    """
    persistence = JsonlPersistence(session_dir)
    options = AgentOptions(
        provider=choice.provider, model=choice.model, thinking=choice.thinking
    )
    async with contextlib.AsyncExitStack() as stack:
        aclose = getattr(choice.adapter, "aclose", None)
        if aclose is not None:
            stack.push_async_callback(aclose)
        runtime = await stack.enter_async_context(
            opener(
                models={choice.provider: choice.adapter},
                persistence=persistence,
                system_prompt=system_prompt,
            )
        )
        handle = await _open_agent(
            runtime, options, resume, stderr, choice.route.origin()
        )
        if handle is None:
            return 1
        agent = handle.agent
        log_path = log_location(runtime.persistence, agent.session.header)
        app = ChatApp(
            agent,
            out=stdout,
            err=stderr,
            log_path=log_path,
            label=choice.label,
            interactive=interactive,
            sequential=sequential,
            show_usage=show_usage,
            reader_prompts=line_editing,
        )
        reader: LineSource = LineReader(stdin)
        editing = (
            ReadlineReader(app.prompt, history=os.path.join(session_dir, HISTORY_FILE))
            if line_editing
            else None
        )
        # The signals stay handled until the hint is printed: a second SIGTERM
        # while the session is flushed or closed must not kill the process.
        async with trio.open_nursery() as nursery:
            if handle_signals:
                await nursery.start(watch_interrupts, app)
            async with handle:
                app.install()
                _greet(
                    agent,
                    choice.label,
                    resumed=bool(resume),
                    interactive=interactive,
                    stderr=stderr,
                )
                if editing is not None:
                    # A line typed while the reply streamed moves to the next prompt.
                    agent.scope.on("agent/status", lambda _: editing.wake())
                    with editing.terminal():
                        await app.run(editing)
                else:
                    await app.run(reader)
                # Durable before the hint says so; a failed write raises here.
                await agent.flush()
            hint = shlex.join(choice.route.flags())
            _farewell(
                agent,
                log_path,
                f" {hint}{resume_hint}" if hint else resume_hint,
                stderr,
            )
            nursery.cancel_scope.cancel()
        return exit_status(app.last_reason, one_shot=one_shot)
    # The exit stack does not swallow: unreachable.
    raise AssertionError("unreachable")  # pragma: no cover


async def _open_agent(
    runtime: Runtime,
    options: AgentOptions,
    resume: str | None,
    stderr: TextIO,
    origin: str,
) -> AgentHandle | None:
    """The chat's agent, new or resumed; ``None`` (reported) if it cannot be resumed."""
    try:
        if resume is not None:
            return await runtime.agents.resume(resume, options=options)
        return await runtime.agents.create(
            options=options, meta={"cwd": _cwd(), "origin": origin}
        )
    except (
        SessionNotFoundError,
        SessionLockedError,
        SessionCorruptError,
        SessionFormatError,
        InvalidSessionIdError,
    ) as exc:
        print(f"dsh-trio: cannot resume session {resume!r}: {exc}", file=stderr)
        return None  # noqa: ASYNC910  # private: entering the runtime in run_chat checkpointed


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None
