"""The flags several ``dsh-trio`` commands share: where sessions are, the event types.

:func:`~._hints.location_flags` repeats them in the commands ``dsh-trio`` prints.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

from ._config import DEFAULT_SESSION_DIR, SESSION_DIR_ENV

__all__ = ["Commands", "add_event_types", "add_session_dir"]

#: The subcommands of the ``dsh-trio`` parser, as each command module adds its own. A
#: string: argparse's class is generic only in its type stubs, not when subscripted.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_session_dir(parser: argparse.ArgumentParser) -> None:
    """Add ``--session-dir DIR``, where sessions are stored, to ``parser``."""
    parser.add_argument(
        "--session-dir",
        metavar="DIR",
        help=f"where sessions are stored (default: ${SESSION_DIR_ENV} or {DEFAULT_SESSION_DIR})",
    )


def add_event_types(parser: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--event-type TYPE`` (``args.event_types``) to ``parser``."""
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
