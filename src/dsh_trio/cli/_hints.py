"""The flags a printed ``dsh-trio`` command repeats, so that it works when pasted.

The resume line at the end of a chat (and the commands ``repair`` suggests) repeat the
flags that say where the session is and how its runtime was composed: the session
directory, the shared store, the runtime config and the application's declared event
types, with paths made absolute (the
command may be pasted in another directory) and every word shell-quoted. The model
route is added by the chat itself (it is recorded in the session).
"""

from __future__ import annotations

import argparse
import os
import shlex

from ._store import store_hint

__all__ = ["location_flags"]


def location_flags(args: argparse.Namespace, session_dir: str) -> str:
    """`` --session-dir DIR --store URL --config FILE --event-type T`` as far as
    ``args`` gave them.

    ``session_dir`` is the resolved (absolute) session directory; it is repeated only
    when ``--session-dir`` named it (``$DSH_TRIO_SESSION_DIR`` still names it when the
    command is pasted). ``--store`` is repeated without its password (see
    :func:`~._store.store_hint`); ``--config`` as an absolute path; each
    ``--event-type`` as given. Never blocks.

    >>> location_flags(argparse.Namespace(session_dir="s", config="/etc/my rt.yml"), "/w/s")
    " --session-dir /w/s --config '/etc/my rt.yml'"
    """
    flags = ""
    if getattr(args, "session_dir", None):
        flags += f" --session-dir {shlex.quote(session_dir)}"
    flags += store_hint(args)
    config = getattr(args, "config", None)
    if config:
        path = os.path.abspath(os.path.expanduser(config))
        flags += f" --config {shlex.quote(path)}"
    for name in getattr(args, "event_types", None) or ():
        flags += f" --event-type {shlex.quote(name)}"
    return flags
