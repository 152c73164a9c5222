"""The ``dsh-trio`` command: ``chat``, ``sessions``, ``show`` and ``repair``."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Final

from .. import __version__
from ..errors import ProfileError
from ..session import register_event_type
from ._browse_cmd import (
    add_sessions_command,
    add_show_command,
    run_sessions,
    run_show,
)
from ._chat_cmd import add_chat_command, run_chat_command
from ._config import DEFAULT_SESSION_DIR, SESSION_DIR_ENV, UsageError
from ._exit import innermost, one_line
from ._ids import SessionIdError
from ._model_cmd import add_models_command, run_models
from ._presets import add_composition
from ._redact import redact
from ._repair_cmd import add_repair_command, run_repair
from ._store import add_store_commands, store_commands
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

    chat = add_chat_command(commands)
    add_models_command(commands)
    sessions = add_sessions_command(commands)
    show = add_show_command(commands)
    add_repair_command(commands)
    add_composition(commands, chat)
    add_store_commands(commands, chat, sessions, show)
    add_worker_command(commands)
    return parser


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
            "chat": run_chat_command,
            "models": run_models,
            "sessions": run_sessions,
            "show": run_show,
            "repair": run_repair,
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
        inner = innermost(exc)
        if isinstance(inner, (UsageError, ProfileError)):  # a nursery wrapped it
            print(f"dsh-trio {args.command}: {_said(inner)}", file=sys.stderr)
            return 2
        print(f"dsh-trio {args.command}: {redact(one_line(exc))}", file=sys.stderr)
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
        else:
            print(f"(set {DEBUG_ENV}=1 to see the traceback)", file=sys.stderr)
        return 1


def _said(exc: BaseException) -> str:
    """An error's message on one line, without the secrets of connection strings."""
    return redact(" ".join(str(exc).split()))
