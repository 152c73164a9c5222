"""The shared session store on the command line: ``--store``, ``export`` and ``import``.

``--store postgresql://...`` (or ``$DSH_TRIO_STORE``) points ``chat``, ``sessions``
and ``show`` at a :class:`PostgresPersistence` instead of the JSONL directory.
``dsh-trio export ID --to DIR`` writes a stored session as a JSONL log under DIR;
``dsh-trio import FILE`` stores a JSONL log file; both copy the event lines exactly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import trio

from ..errors import SessionNotFoundError
from ..nursery import Runtime
from ..persistence import JsonlPersistence
from ..persistence.postgres import (
    PostgresPersistence,
    export_session,
    import_session,
    mask_conninfo,
)
from ..values import SessionHeader
from ._checks import check_export_root, check_import_file
from ._config import UsageError
from ._flags import Commands
from ._ids import resolve_id
from ._listing import render_listing, summarize
from ._presets import RuntimeOpener
from ._transcript import StoredLog, render_transcript

__all__ = [
    "STORE_ENV",
    "add_store_commands",
    "find_session",
    "log_location",
    "store_commands",
    "store_hint",
    "store_of",
    "with_store",
]

#: The environment variable naming the shared store (a ``postgresql://`` URI).
STORE_ENV: Final = "DSH_TRIO_STORE"

_SCHEMES: Final = ("postgresql://", "postgres://")


def _add_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help=f"a shared PostgreSQL store, postgresql://... (default: ${STORE_ENV}; "
        "without one, the session directory)",
    )


def add_store_commands(
    commands: Commands, *with_store_option: argparse.ArgumentParser
) -> None:
    """Add ``--store`` to the given subcommands, and the ``export`` and ``import`` commands."""
    for parser in with_store_option:
        _add_store(parser)
    export = commands.add_parser(
        "export",
        help="write a session of the shared store as a JSONL log under DIR",
        description="Write session ID of the shared store (--store or $DSH_TRIO_STORE) "
        "as a JSONL log under DIR, line for line. Reads without taking its lease.",
    )
    export.add_argument("id", metavar="ID", help="the session id")
    export.add_argument("--to", metavar="DIR", required=True, help="the JSONL root")
    _add_store(export)
    imp = commands.add_parser(
        "import",
        help="store a JSONL session log in the shared store",
        description="Store the JSONL session log FILE in the shared store (--store or "
        "$DSH_TRIO_STORE), line for line. A torn tail a crash left is not imported.",
    )
    imp.add_argument("file", metavar="FILE", help="a session.v3.jsonl log file")
    _add_store(imp)


def store_of(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The shared store's DSN from ``--store`` or ``$DSH_TRIO_STORE``, or ``None``.

    Raises:
        UsageError: it is not a ``postgresql://`` URI.
    """
    flag = getattr(args, "store", None)
    dsn = flag or environ.get(STORE_ENV) or None
    if dsn is not None and not dsn.startswith(_SCHEMES):
        # Shown with its password masked, in whatever form libpq reads it (main's
        # redact() is a second net for every message).
        what = "--store" if flag else f"${STORE_ENV}"
        raise UsageError(
            f"{what} must be a postgresql:// URI, got {mask_conninfo(dsn)!r}"
        )
    return dsn


def store_hint(args: argparse.Namespace) -> str:
    """What the resume hint adds for a store named by ``--store``: `` --store URL``.

    A store from ``$DSH_TRIO_STORE`` adds nothing (the environment still names it);
    a password in the URL (``user:secret@`` or ``password=secret``) is shown as
    ``***``, so the hint never prints a secret: put it back, or set the variable.

    >>> store_hint(argparse.Namespace(store="postgresql://me:pw@db/app"))
    " --store 'postgresql://me:***@db/app'"
    """
    dsn = getattr(args, "store", None)
    if not dsn:
        return ""
    return f" --store {shlex.quote(mask_conninfo(dsn))}"


def log_location(store: object, header: SessionHeader) -> str | None:
    """Where the session's log is kept, for ``/session`` and the farewell line.

    The file of a JSONL store; for the shared store, the session's row set
    (``postgres: host=... dbname=... session ID``, never the password); ``None``
    when the runtime stores nothing.
    """
    if isinstance(store, JsonlPersistence):
        return str(store.path_for(header))
    if isinstance(store, PostgresPersistence):
        return f"postgres: {store.location} session {header.id}"
    return None


def with_store(args: argparse.Namespace, opener: RuntimeOpener) -> RuntimeOpener:
    """``opener`` with the shared store as the runtime's persistence, when one is set."""
    dsn = store_of(args)
    if dsn is None:
        return opener

    @contextlib.asynccontextmanager
    async def opened(**kwargs: Any) -> AsyncIterator[Runtime]:
        store = PostgresPersistence(dsn)
        try:
            async with opener(**{**kwargs, "persistence": store}) as runtime:
                yield runtime
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()

    return opened


async def find_session(
    session_dir: str, wanted: str | None, dsn: str | None = None
) -> SessionHeader:
    """The stored header of session ``wanted`` (an id or a unique prefix of one), or
    of the newest session when ``wanted`` is ``None``; in the shared store ``dsn``
    when given, else under ``session_dir``.

    Raises:
        LookupError: no session matches, or a prefix matches several (the message
            says which).
    """
    if dsn is None:
        headers, where = await JsonlPersistence(session_dir).list(), session_dir
    else:
        store = PostgresPersistence(dsn)
        try:
            headers, where = await store.list(), "the shared store"
        finally:
            await store.aclose()
    if wanted is None:
        if not headers:
            raise LookupError(f"no sessions in {where} to continue")
        return max(headers, key=lambda h: (h.created_at, h.id))
    try:
        found = resolve_id((h.id for h in headers), wanted, where)
    except LookupError as exc:
        raise LookupError(f"cannot resume session {wanted!r}: {exc}") from None
    return next(h for h in headers if h.id == found)


def store_commands(
    args: argparse.Namespace,
) -> dict[str, Callable[[argparse.Namespace], int]]:
    """The command handlers this module adds or replaces for ``args``.

    ``export`` and ``import`` always; ``sessions`` and ``show`` when a shared store
    is set.
    """
    handlers: dict[str, Callable[[argparse.Namespace], int]] = {
        "export": _export,
        "import": _import,
    }
    if getattr(args, "command", None) in ("sessions", "show") and store_of(args):
        handlers.update(sessions=_sessions, show=_show)
    return handlers


def _required_store(args: argparse.Namespace) -> str:
    dsn = store_of(args)
    if dsn is None:
        raise UsageError(f"name the shared store with --store URL or ${STORE_ENV}")
    return dsn


async def _with_store(dsn: str, fn: Callable[[PostgresPersistence], Any]) -> Any:
    store = PostgresPersistence(dsn)
    try:
        return await fn(store)
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


async def _stored_id(store: PostgresPersistence, wanted: str) -> str:
    """The id ``wanted`` (an id or a unique prefix) names in the shared store."""
    headers = await store.list()
    return resolve_id((h.id for h in headers), wanted, "the shared store")


def _stored_log(
    store: PostgresPersistence, header: SessionHeader, events: Any
) -> StoredLog:
    return StoredLog(
        path=f"{store!r}, session {header.id}", header=header, events=tuple(events)
    )


def _sessions(args: argparse.Namespace) -> int:
    dsn = _required_store(args)

    async def summaries(store: PostgresPersistence) -> list[Any]:
        out = []
        for header in await store.list():
            with contextlib.suppress(SessionNotFoundError):
                read_header, events = await store.read(header.id)
                out.append(summarize(_stored_log(store, read_header, events)))
        out.sort(key=lambda s: (s.created_at, s.id), reverse=True)
        return out

    rows = trio.run(_with_store, dsn, summaries)
    print(render_listing(rows) if rows else "no sessions in the shared store")
    return 0


def _show(args: argparse.Namespace) -> int:
    dsn = _required_store(args)

    async def load(store: PostgresPersistence) -> str:
        wanted = await _stored_id(store, args.id)
        header, events = await store.read(wanted)
        return render_transcript(_stored_log(store, header, events))

    try:
        text = trio.run(_with_store, dsn, load)
    except SessionNotFoundError:
        print(
            f"dsh-trio show: no session {args.id!r} in the shared store",
            file=sys.stderr,
        )
        return 1
    print(text)
    return 0


def _export(args: argparse.Namespace) -> int:
    dsn = _required_store(args)
    check_export_root(args.to)

    async def export(store: PostgresPersistence) -> tuple[str, Any]:
        wanted = await _stored_id(store, args.id)
        return wanted, await export_session(store, wanted, args.to)

    wanted, path = trio.run(_with_store, dsn, export)
    print(f"exported session {wanted} to {path}")
    return 0


def _import(args: argparse.Namespace) -> int:
    dsn = _required_store(args)
    check_import_file(args.file)
    header = trio.run(_with_store, dsn, lambda store: import_session(store, args.file))
    print(f"imported session {header.id} into the shared store")
    return 0
