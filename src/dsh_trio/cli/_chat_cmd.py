"""``dsh-trio chat``: its flags, and the chat they choose (model, session, terminal or pipe)."""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
from typing import Final

import trio

from ._chat_run import DEFAULT_SYSTEM_PROMPT, run_chat
from ._config import (
    INTERACTIVE_CHUNK_DELAY,
    PRESETS,
    Route,
    UsageError,
    check_session_dir,
    resolve_model,
    resolve_session_dir,
)
from ._flags import Commands, add_event_types, add_session_dir
from ._hints import location_flags
from ._model_cmd import default_route
from ._oneshot import OneShotInput, one_shot_text
from ._presets import chat_opener
from ._store import find_session, store_of, with_store

__all__ = ["add_chat_command", "is_terminal", "run_chat_command"]

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


def add_chat_command(commands: Commands) -> argparse.ArgumentParser:
    """Add ``chat`` to ``commands``; returns its parser (other modules add flags to it)."""
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
    add_session_dir(chat)
    add_event_types(chat)
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
    return chat


def is_terminal(stream: object) -> bool:
    """Whether ``stream`` is a terminal (``False`` for one that cannot tell)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):
        return False


def run_chat_command(args: argparse.Namespace) -> int:
    """Run ``dsh-trio chat`` as ``args`` say; returns the exit status."""
    stdin, stdout, stderr = sys.stdin, sys.stdout, sys.stderr
    one_shot: str | None = args.prompt
    if one_shot is not None:
        text = one_shot_text(one_shot, stdin)
        stdin = io.StringIO(one_shot + "\n") if text == one_shot else OneShotInput(text)
    terminal_in = is_terminal(stdin)
    interactive = terminal_in and is_terminal(stdout)
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
