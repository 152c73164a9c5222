"""``dsh-trio sessions`` and ``dsh-trio show``: the saved sessions of a directory, listed and read.

With a shared store set, :func:`~._store.store_commands` serves both from the store instead.
"""

from __future__ import annotations

import argparse
import os
import sys

import trio

from ..errors import DshError
from ..persistence import JsonlPersistence
from ._checks import check_sessions_readable
from ._config import resolve_session_dir
from ._exit import one_line
from ._flags import Commands, add_session_dir
from ._listing import list_sessions, render_listing
from ._transcript import find_log, read_log, render_transcript

__all__ = ["add_sessions_command", "add_show_command", "run_sessions", "run_show"]


def add_sessions_command(commands: Commands) -> argparse.ArgumentParser:
    """Add ``sessions`` to ``commands``; returns its parser."""
    sessions = commands.add_parser(
        "sessions",
        help="list saved sessions, newest first",
        description="List saved sessions, newest first: id, creation time, number of turns and the last prompt.",
    )
    add_session_dir(sessions)
    return sessions


def add_show_command(commands: Commands) -> argparse.ArgumentParser:
    """Add ``show ID`` to ``commands``; returns its parser."""
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
    add_session_dir(show)
    return show


def run_sessions(args: argparse.Namespace) -> int:
    """List the sessions of the session directory, newest first."""
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    check_sessions_readable(session_dir)
    summaries = trio.run(list_sessions, JsonlPersistence(session_dir))
    if not summaries:
        print(f"no sessions in {session_dir}")
        return 0
    print(render_listing(summaries))
    return 0


def run_show(args: argparse.Namespace) -> int:
    """Print session ``args.id`` of the session directory as a transcript."""
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
            f"dsh-trio show: cannot read session {session_id!r}: {one_line(exc)}",
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
