"""``dsh-trio repair``: load a damaged session as a resume would, or cut its log at a seq."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Final

import trio

from ..errors import SessionCorruptError, SessionNotFoundError, UnknownEventTypeError
from ..loop import Inbox
from ..persistence import JsonlPersistence, restore_session, truncate_log
from ._checks import check_sessions_readable
from ._config import resolve_session_dir
from ._exit import one_line
from ._flags import Commands, add_event_types, add_session_dir
from ._hints import location_flags
from ._ids import resolve_id

__all__ = ["add_repair_command", "run_repair"]

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


def add_repair_command(commands: Commands) -> None:
    """Add ``repair ID [--truncate-at SEQ]`` to ``commands``."""
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
    add_session_dir(repair)
    add_event_types(repair)


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


def run_repair(args: argparse.Namespace) -> int:
    """Repair session ``args.id`` (or cut its log at ``args.truncate_at``) and report."""
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
            f"dsh-trio repair: session {session_id!r} is refused: {one_line(exc)}",
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
