"""Running one ``dsh-trio chat`` session, from opening the runtime to the resume hint.

:func:`run_chat` owns a session's setup and end: the runtime and its store, the new
or resumed agent, the reader, the signal watch, and the flush before the hint; the
:class:`~dsh_trio.cli._chat.ChatApp` it runs owns what happens in between.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from typing import Final, TextIO

import trio

from ..errors import (
    InvalidSessionIdError,
    SessionCorruptError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from ..nursery import AgentHandle, Runtime, open_runtime
from ..persistence import JsonlPersistence
from ..values import AgentOptions
from ._chat import ChatApp, watch_interrupts
from ._chat_view import _farewell, _greet
from ._config import ModelChoice
from ._exit import exit_status
from ._presets import RuntimeOpener
from ._store import log_location
from ._terminal import LineReader, LineSource, ReadlineReader

__all__ = ["DEFAULT_SYSTEM_PROMPT", "HISTORY_FILE", "run_chat"]

#: The persona the chat gives a model unless ``--system`` says otherwise.
DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a helpful assistant in a terminal chat. Answer clearly and concisely."
)

#: The line-editing history, kept in the session directory.
HISTORY_FILE: Final = "chat-history"


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
