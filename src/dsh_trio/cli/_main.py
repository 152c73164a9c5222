"""The ``dsh-trio`` command: ``chat``, ``sessions``, ``show`` and ``repair``."""

from __future__ import annotations

import argparse
import io
import os
import shlex
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from typing import Final

import trio

from .. import __version__
from ..errors import (
    DshError,
    ProfileError,
    SessionCorruptError,
    SessionNotFoundError,
    UnknownEventTypeError,
)
from ..loop import Inbox
from ..persistence import JsonlPersistence, restore_session, truncate_log
from ..session import register_event_type
from ._chat import DEFAULT_SYSTEM_PROMPT, run_chat
from ._checks import check_sessions_readable
from ._config import (
    DEFAULT_API_KEY_ENV,
    DEFAULT_SESSION_DIR,
    INTERACTIVE_CHUNK_DELAY,
    PRESETS,
    SESSION_DIR_ENV,
    Route,
    UsageError,
    check_session_dir,
    resolve_model,
    resolve_session_dir,
)
from ._hints import location_flags
from ._ids import SessionIdError, resolve_id
from ._listing import list_sessions, render_listing
from ._model_cmd import default_route
from ._offline import OFFLINE_MODEL, OFFLINE_PROVIDER
from ._oneshot import OneShotInput, one_shot_text
from ._presets import add_composition, chat_opener
from ._redact import redact
from ._store import (
    add_store_commands,
    find_session,
    store_commands,
    store_of,
    with_store,
)
from ._transcript import find_log, read_log, render_transcript
from ._worker import add_worker_command, run_worker

__all__ = ["build_parser", "main"]

#: Set this variable to see tracebacks of unexpected failures.
DEBUG_ENV: Final = "DSH_TRIO_DEBUG"

_DESCRIPTION: Final = "LLM agents on trio: chat with an agent in the terminal and browse its saved sessions."
_EPILOG: Final = f"""\
Sessions are stored under --session-dir, ${SESSION_DIR_ENV} or {DEFAULT_SESSION_DIR}.

examples:
  dsh-trio chat                                   # offline demo model, no network
  dsh-trio chat --provider deepseek                 # deepseek-flash, thinking on
  dsh-trio chat --provider deepseek --no-thinking   # its answers without thinking
  dsh-trio chat --base-url http://localhost:11434/v1 --model llama3.2
  dsh-trio sessions
  dsh-trio show SESSION_ID
  dsh-trio chat --resume SESSION_ID
  dsh-trio repair SESSION_ID --truncate-at 120      # a log that resume refuses"""

_CHAT_DESCRIPTION: Final = f"""\
Chat with an agent in the terminal. Each line you type is a message: while the agent
is idle it starts a turn; while a reply is streaming it steers the running turn.
Ctrl-C cancels the running turn (the session goes on); when idle it clears a typed
line, and pressed twice on an empty line it quits, as do Ctrl-D and /exit. Lines are
edited with readline (history in the session directory). The conversation is saved
as a session log with its model route; its id is printed at the start and at the end,
and --resume ID (or a unique prefix) or -c continues it on the same model.

Without --provider or --base-url the chat uses a built-in offline demo model, so it
runs without network or API key. Known providers: {", ".join(sorted(PRESETS))}
(their URL, key variable and default model are filled in); --base-url selects any
OpenAI-compatible server (DeepSeek, OpenAI, vLLM, llama.cpp, Ollama).

Piped input (not a terminal) is read line by line, each line a turn that finishes
before the next is read; the replies go to stdout, everything else to stderr. With a
PROMPT, piped input and PROMPT are one message instead: the piped text first, then a
blank line, then PROMPT (git diff | dsh-trio chat "review this"). A PROMPT turn that
does not complete (blocked by a hook, cancelled, failed) exits with status 1, its
reason on stderr."""


_REPAIR_DESCRIPTION: Final = """\
Load a saved session the way --resume does and say what was repaired. A torn tail
that a crash left at the end of the log is cut off, and every cut byte is kept in a
side file beside the log (session.v3.jsonl.damaged-<time>); a turn the crash left
open is closed as interrupted. A log damaged anywhere else is refused and left
unchanged, and so is one whose inbox edits do not replay (resume refuses it too):
the error names the damaged line and its seq, because cutting there could lose
events written after it (a tool call that already ran).

--truncate-at SEQ is your decision to cut such a log: every line from event SEQ to
the end of the file moves into a side file beside the log (nothing is deleted), and
then the log is loaded. Run `dsh-trio show ID` to read the log first.

An event of a type dsh-trio does not know (your application's own) is refused unless
it is marked "ignorable": true; --event-type TYPE declares such a type (repeat it for
each), so that the log loads with those events kept as they are. Pass the same flags
to `dsh-trio chat --resume`."""


def _add_session_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session-dir",
        metavar="DIR",
        help=f"where sessions are stored (default: ${SESSION_DIR_ENV} or {DEFAULT_SESSION_DIR})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``dsh-trio`` argument parser (one subparser per command)."""
    parser = argparse.ArgumentParser(
        prog="dsh-trio",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"dsh-trio {__version__}"
    )
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", title="commands"
    )

    chat = commands.add_parser(
        "chat",
        help="chat with an agent in the terminal (offline demo model unless one is configured)",
        description=_CHAT_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = chat.add_argument_group("model (default: the offline demo model)")
    model.add_argument(
        "--provider",
        metavar="P",
        help=f"provider name; known: {', '.join(sorted(PRESETS))}, offline",
    )
    model.add_argument(
        "--model",
        metavar="M",
        help="model name, e.g. deepseek-v4-pro (dsh-trio models lists the known ones)",
    )
    model.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible API root, e.g. https://api.openai.com/v1",
    )
    model.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key (default: the provider's, else OPENAI_API_KEY)",
    )
    model.add_argument(
        "--thinking",
        action=argparse.BooleanOptionalAction,
        help="switch the model's thinking on or off (DeepSeek; default: the "
        "provider's, on for DeepSeek); kept with the session like --model",
    )
    _add_session_dir(chat)
    _add_event_types(chat)
    chat.add_argument(
        "prompt",
        nargs="?",
        metavar="PROMPT",
        help="run this one message as a turn, print the reply and exit; piped stdin "
        "comes first, then a blank line, then PROMPT",
    )
    chat.add_argument(
        "--resume",
        metavar="ID",
        help="continue the saved session ID (a unique prefix is enough) on its model",
    )
    chat.add_argument(
        "-c",
        "--continue",
        dest="continue_",
        action="store_true",
        help="continue the most recent saved session",
    )
    chat.add_argument(
        "--quiet", action="store_true", help="no token usage line after each turn"
    )
    chat.add_argument(
        "--fast",
        action="store_true",
        help="let the offline demo model reply at once (it streams at reading pace in a terminal)",
    )
    chat.add_argument(
        "--system",
        metavar="TEXT",
        help='the system prompt ("" for none; default: a short assistant persona)',
    )

    models = commands.add_parser(
        "models",
        help="list the providers and models the chat knows",
        description=(
            "List the providers --provider accepts, their default model, endpoint and "
            "key variable, and the models known for each."
        ),
    )
    del models

    sessions = commands.add_parser(
        "sessions",
        help="list saved sessions, newest first",
        description="List saved sessions, newest first: id, creation time, number of turns and the last prompt.",
    )
    _add_session_dir(sessions)

    show = commands.add_parser(
        "show",
        help="print a saved session as a readable transcript",
        description=(
            "Print a saved session as a readable transcript: system prompt, messages, tool calls and "
            "results, turn boundaries with how each turn ended. Reads the log without changing it."
        ),
    )
    show.add_argument(
        "id", metavar="ID", help="the session id (see: dsh-trio sessions)"
    )
    _add_session_dir(show)

    repair = commands.add_parser(
        "repair",
        help="load a damaged session, or cut its log at a seq you choose (cut lines are kept)",
        description=_REPAIR_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    repair.add_argument(
        "id", metavar="ID", help="the session id (see: dsh-trio sessions)"
    )
    repair.add_argument(
        "--truncate-at",
        metavar="SEQ",
        type=_seq,
        help="move event SEQ and everything after it into a side file, then load",
    )
    _add_session_dir(repair)
    _add_event_types(repair)
    add_composition(commands, chat)
    add_store_commands(commands, chat, sessions, show)
    add_worker_command(commands)
    return parser


def _add_event_types(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--event-type",
        dest="event_types",
        action="append",
        metavar="TYPE",
        type=_event_type,
        help="an event type your application writes in its logs (repeatable): "
        'events of TYPE load without "ignorable": true',
    )


def _event_type(text: str) -> str:
    if not text or text != text.strip() or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(
            f"TYPE must be an event type such as billing/charge (no spaces), "
            f"got {text!r:.60}"
        )
    return text


def _seq(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"SEQ must be a non-negative integer, got {text!r}"
        )
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dsh-trio`` command line; returns the exit status.

    Blocks until the command finishes (``chat`` runs until end of input, ``/exit`` or
    Ctrl-C while idle).

    Example::

        main(["sessions", "--session-dir", "/tmp/sessions"])

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        ``0`` on success, ``1`` when the command failed (unknown session, a failed
        last turn), ``2`` for a usage error, ``130`` when interrupted.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    for name in getattr(args, "event_types", None) or ():
        register_event_type(name)  # for this process, before any log is read
    try:
        commands: dict[str, Callable[[argparse.Namespace], int]] = {
            "chat": _chat,
            "models": _models,
            "sessions": _sessions,
            "show": _show,
            "repair": _repair,
            "worker": run_worker,
            **store_commands(args),
        }
        return (commands.get(args.command) or args.run)(args)
    except (UsageError, ProfileError) as exc:
        print(f"dsh-trio {args.command}: {_said(exc)}", file=sys.stderr)
        return 2
    except SessionIdError as exc:
        print(f"dsh-trio {args.command}: {_said(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ndsh-trio: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        inner = _innermost(exc)
        if isinstance(inner, (UsageError, ProfileError)):  # a nursery wrapped it
            print(f"dsh-trio {args.command}: {_said(inner)}", file=sys.stderr)
            return 2
        print(f"dsh-trio {args.command}: {redact(_one_line(exc))}", file=sys.stderr)
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        else:
            print(f"(set {DEBUG_ENV}=1 to see the traceback)", file=sys.stderr)
        return 1


def _said(exc: BaseException) -> str:
    """An error's message on one line, without the secrets of connection strings."""
    return redact(" ".join(str(exc).split()))


def _innermost(exc: BaseException) -> BaseException:
    """``exc`` with groups of one unwrapped to their member."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _one_line(exc: BaseException) -> str:
    """The failure in one line; a group of one is unwrapped to its member."""
    exc = _innermost(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):
        return False


def _chat(args: argparse.Namespace) -> int:
    stdin, stdout, stderr = sys.stdin, sys.stdout, sys.stderr
    one_shot: str | None = args.prompt
    if one_shot is not None:
        text = one_shot_text(one_shot, stdin)
        stdin = io.StringIO(one_shot + "\n") if text == one_shot else OneShotInput(text)
    terminal_in = _isatty(stdin)
    interactive = terminal_in and _isatty(stdout)
    if args.resume is not None and args.continue_:
        raise UsageError("--resume and --continue cannot be combined")
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    check_session_dir(session_dir)
    flags = Route(
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        thinking=args.thinking,
    )
    resume: str | None = None
    stored: Route | None = None
    if args.resume is not None or args.continue_:
        try:
            header = trio.run(find_session, session_dir, args.resume, store_of(args))
        except LookupError as exc:
            print(f"dsh-trio chat: {exc}", file=stderr)
            return 1
        resume = header.id
        stored = Route.from_origin(header.origin)
    route, effort = default_route(flags.over(stored), session_dir)
    choice = resolve_model(
        provider=route.provider,
        model=route.model,
        base_url=route.base_url,
        api_key_env=route.api_key_env,
        environ=os.environ,
        chunk_delay=INTERACTIVE_CHUNK_DELAY if interactive and not args.fast else 0.0,
        thinking=route.thinking,
    )
    hint = location_flags(args, session_dir)
    system = DEFAULT_SYSTEM_PROMPT if args.system is None else (args.system or None)
    return trio.run(
        lambda: run_chat(
            choice,
            session_dir=session_dir,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            resume=resume,
            system_prompt=system,
            interactive=interactive,
            sequential=not terminal_in,
            handle_signals=threading.current_thread() is threading.main_thread(),
            resume_hint=hint,
            show_usage=not args.quiet,
            line_editing=interactive,
            opener=with_store(args, chat_opener(args, session_dir, choice, effort)),
            one_shot=one_shot is not None,
        )
    )


def _models(args: argparse.Namespace) -> int:
    del args
    rows = [("PROVIDER", "DEFAULT MODEL", "ENDPOINT", "KEY VARIABLE")]
    rows.append((OFFLINE_PROVIDER, OFFLINE_MODEL, "(built in, no network)", "-"))
    for name in sorted(PRESETS):
        preset = PRESETS[name]
        key = preset.api_key_env or "-"
        if preset.api_key_env:
            key += " (set)" if os.environ.get(preset.api_key_env) else " (not set)"
        rows.append((name, preset.default_model or "(--model)", preset.base_url, key))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
        )
    for name in sorted(PRESETS):
        models = PRESETS[name].models
        if not models:
            continue
        width = max(len(model) for model, _ in models)
        print(f"models of {name} (--provider {name} --model M):")
        for model, note in models:
            print(f"  {model.ljust(width)}  {note}")
        for note in PRESETS[name].notes:
            print(f"  {note}")
    print(
        "any other OpenAI-compatible server: --base-url URL --model NAME "
        f"(key from --api-key-env VAR, default {DEFAULT_API_KEY_ENV})"
    )
    return 0


def _sessions(args: argparse.Namespace) -> int:
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    check_sessions_readable(session_dir)
    summaries = trio.run(list_sessions, JsonlPersistence(session_dir))
    if not summaries:
        print(f"no sessions in {session_dir}")
        return 0
    print(render_listing(summaries))
    return 0


def _show(args: argparse.Namespace) -> int:
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    check_sessions_readable(session_dir)
    session_id: str = args.id

    async def load() -> str | None:
        path = await find_log(JsonlPersistence(session_dir), session_id)
        if path is None:
            return None
        log = await trio.to_thread.run_sync(read_log, path)
        return render_transcript(log)

    try:
        text = trio.run(load)
    except (OSError, DshError) as exc:
        print(
            f"dsh-trio show: cannot read session {session_id!r}: {_one_line(exc)}",
            file=sys.stderr,
        )
        return 1
    if text is None:
        print(
            f"dsh-trio show: no session {session_id!r} in {session_dir}",
            file=sys.stderr,
        )
        return 1
    print(text)
    return 0


def _repair(args: argparse.Namespace) -> int:
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    session_id: str = args.id
    seq: int | None = args.truncate_at
    hint = location_flags(args, session_dir)
    check_sessions_readable(session_dir)

    async def repair() -> list[str]:
        nonlocal session_id
        persistence = JsonlPersistence(session_dir)
        # A log whose header the listing cannot read is still repaired by its id.
        ids = [h.id for h in await persistence.list()]
        if session_id not in ids and any(i.startswith(session_id) for i in ids):
            session_id = resolve_id(ids, session_id, session_dir)
        report: list[str] = []
        if seq is not None:
            cut = await truncate_log(persistence, session_id, seq)
            if cut is None:
                report.append(f"the log has no event {seq}: nothing was cut")
            else:
                report.append(
                    f"moved {cut.size} bytes (line {cut.line} to the end, events from "
                    f"seq {seq} on) into {cut.path}"
                )
        restored = await restore_session(persistence, session_id)
        try:
            # What a resume does next: the agent replays the inbox's splices, and
            # refuses the log if they do not fit together.
            await trio.to_thread.run_sync(Inbox, restored.session)
        except SessionCorruptError as exc:
            line = exc.seq + 2 if exc.seq is not None else None
            at = f", line {line}" if line is not None else ""
            raise SessionCorruptError(
                f"session log {restored.writer.header.id!r}{at}: {exc}; resume "
                "refuses it too",
                seq=exc.seq,
                line=line,
            ) from exc
        finally:
            with trio.CancelScope(shield=True):
                await restored.writer.close()  # noqa: ASYNC102  # closing a file is bounded
        if restored.salvaged is not None:
            report.append(restored.salvaged.describe())
        if restored.closers:
            report.append(
                f"closed turn {restored.session.last_turn}, which a stop left open, "
                f"as interrupted ({len(restored.closers)} events written)"
            )
        report.append(
            f"session {session_id} loads: {restored.session.next_seq} events; "
            f"continue it with: dsh-trio chat --resume {shlex.quote(session_id)}{hint}"
        )
        return report

    try:
        lines = trio.run(repair)
    except SessionNotFoundError:
        print(
            f"dsh-trio repair: no session {session_id!r} in {session_dir}",
            file=sys.stderr,
        )
        return 1
    except SessionCorruptError as exc:
        print(
            f"dsh-trio repair: session {session_id!r} is refused: {_one_line(exc)}",
            file=sys.stderr,
        )
        if isinstance(exc, UnknownEventTypeError):
            print(
                f"if your application writes {exc.event_type!r} events, declare the "
                f"type: dsh-trio repair {shlex.quote(session_id)} --event-type "
                f"{shlex.quote(exc.event_type)}{hint}",
                file=sys.stderr,
            )
        elif exc.seq is not None:
            print(
                f"to cut the log from seq {exc.seq} on (the cut lines are kept in a side "
                f"file beside it), run: dsh-trio repair {shlex.quote(session_id)} "
                f"--truncate-at {exc.seq}{hint}",
                file=sys.stderr,
            )
        return 1
    for line in lines:
        print(line)
    return 0
