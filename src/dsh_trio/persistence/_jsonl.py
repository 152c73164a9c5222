"""The embedded persistence backend: one JSON Lines file per session.

Layout and format are the reference's generation 3, so a log written by either
implementation loads in the other. The parts: where a log lives
(:mod:`._jsonl_paths`), its lines (:mod:`._jsonl_lines`), reading it and cutting a
torn tail on open (:mod:`._jsonl_load`), one writer per log (:mod:`._jsonl_lock`) and
the writer (:mod:`._jsonl_writer`). This module is the backend that ties them
together.

All disk work runs in worker threads, one hop per operation.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs
import trio

from .._files import check_real_dirs, make_dirs
from ..errors import (
    SessionCorruptError,
    SessionExistsError,
    SessionFormatError,
    SessionNotFoundError,
)
from ..values import FORMAT_VERSION, SessionEvent, SessionHeader
from ._damage import SalvagedTail, clear_first_writes, has_first_write
from ._jsonl_lines import encode_header
from ._jsonl_load import Scan, open_log, read_header
from ._jsonl_lock import acquire_lock, claim, new_token, release, write_lease
from ._jsonl_paths import (
    LOCK_FILE_NAME,
    LOG_FILE_NAME,
    check_id,
    encode_session_id,
    session_dir_for,
)
from ._jsonl_writer import JsonlWriter, WriterState, stamp

if TYPE_CHECKING:
    from ._persistence import Durability

_logger = logging.getLogger("dsh_trio")

__all__ = ["JsonlPersistence", "LOG_FILE_NAME"]

_DURABILITIES: Final = ("turn", "always", "none")


def _normalise_root(root: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(root)))


@attrs.define(eq=False)
class JsonlPersistence:
    """Session logs as JSON Lines files under ``root`` (format version 3).

    Construction touches no file. ``durability`` is the policy a
    :class:`SessionRecorder` applies when it writes: ``"turn"`` (the default) fsyncs
    every batch that ends a turn and on flush/close, ``"always"`` every batch,
    ``"none"`` leaves it to the operating system.

    A session log holds a conversation, so what this backend creates is private to
    its user: files (logs, lock files, the side files of cut bytes) are created
    ``0600`` and directories (the root, project and session directories) ``0700``.
    The umask applies on top (``mode & ~umask``): a stricter umask makes them
    stricter still, and nothing is ever made more open. Files it finds in a
    session directory are opened only if they are regular files: a symbolic link
    where a log or lock file belongs is refused (never followed), and so is a
    FIFO, socket, device or directory, with
    :class:`~dsh_trio.errors.UnusableFileError`. The same holds one level up: a
    project or session directory below the root that is a symbolic link is
    refused when a session is created, opened or repaired there (and skipped by
    :meth:`list`), since writing through it would put the session's files
    wherever it points. The root itself may be a link: it is the directory the
    user chose.

    Example::

        persistence = JsonlPersistence("~/.dsh/sessions")
        writer = await persistence.create(session.header)

    Args:
        root: the directory holding the sessions (``~`` is expanded); created on the
            first write.
        durability: the fsync policy.

    Raises:
        ValueError: ``durability`` is not one of the three policies.
    """

    _root: str = attrs.field(converter=_normalise_root)
    durability: Durability = attrs.field(default="turn", kw_only=True)
    _dirs: dict[str, str] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.durability not in _DURABILITIES:
            raise ValueError(
                f"durability must be one of {_DURABILITIES}, got {self.durability!r}"
            )

    @property
    def root(self) -> str:
        """The absolute root directory."""
        return self._root

    def path_for(self, header: SessionHeader) -> str:
        """The log file a session with ``header`` is stored in (pure; touches no file).

        Raises:
            InvalidSessionIdError: the id is empty, not a string, or too long to be a
                file name once encoded.
        """
        return os.path.join(session_dir_for(self._root, header), LOG_FILE_NAME)

    async def create(self, header: SessionHeader) -> JsonlWriter:
        """Claim a new session; the log file appears with the first append.

        Blocks while a worker thread checks that no log with this id exists anywhere
        under the root and takes the session's lease (its directory and lock file
        are made now, so a second owner of the id fails here, not at its first
        write). Cancelling releases the claim.

        Raises:
            InvalidSessionIdError: the id is empty, not a string, or too long, or
                the header holds a lone surrogate (not encodable as UTF-8).
            SessionFormatError: ``header.version`` is not 3.
            SessionExistsError: a log with this id is already stored.
            SessionLockedError: another writer (in this or another process) holds
                the id.
            UnusableFileError: the session's lock file path holds a link, a
                directory, a FIFO, ..., or its project or session directory is a
                symbolic link (nothing is made through it).
            OSError: the session's directory cannot be made under the root.
        """
        session_dir = session_dir_for(self._root, header)
        # Refuse an unwritable header now rather than at the first append.
        encode_header(header)
        if header.version != FORMAT_VERSION:
            raise SessionFormatError(
                f"cannot write format version {header.version}; this library writes "
                f"version {FORMAT_VERSION}",
                version=header.version,
            )
        key = (self._root, header.id)
        claim(key)
        token = new_token()
        try:
            created_root = await trio.to_thread.run_sync(
                self._create_sync, header.id, session_dir, token
            )
        except BaseException:
            release(key)
            raise
        return JsonlWriter(
            owner=self,
            header=header,
            session_dir=session_dir,
            durable_seq=0,
            claim=key,
            token=token,
            created_root=created_root,
        )

    async def open(
        self, session_id: str
    ) -> tuple[JsonlWriter, builtins.list[SessionEvent]]:
        """Claim a stored session, read it and cut off a torn tail (kept, durably).

        :meth:`open_salvaging` without the report of what was cut, and with the
        events decoded into a list (on a worker thread).
        """
        writer, events, _ = await self.open_salvaging(session_id)
        try:
            decoded = await trio.to_thread.run_sync(builtins.list, events)
        except BaseException:
            with trio.CancelScope(shield=True):
                await writer.close()
            raise
        return writer, decoded

    async def open_salvaging(
        self, session_id: str
    ) -> tuple[JsonlWriter, Sequence[SessionEvent], SalvagedTail | None]:
        """Claim a stored session, read it and cut off a damaged tail (kept, durably).

        Blocks on a worker thread for the read. Exclusive ownership is taken before
        anything is read; an interrupted first write is completed then. Only a
        damaged tail a crash can leave is cut, after its bytes are copied to a side
        file beside the log (``session.v3.jsonl.damaged-<time>``); other damage is
        refused and the file left as it is. Cancelling releases the claim.

        Returns:
            The writer, the intact events in order, and the cut tail (``None`` if
            nothing was cut).

        Raises:
            InvalidSessionIdError: the id is empty or not a string.
            SessionNotFoundError: nothing is stored under the id.
            SessionLockedError: another writer (in this or another process) holds it.
            SessionFormatError: the header names a foreign format version (the file
                is left as it is).
            SessionCorruptError: the header is damaged, a well-formed line is not a
                valid event, or damage is followed by a line that parses (``seq``
                and ``line`` name the damaged line; the file is left as it is).
            UnusableFileError: the log or the lock file is a link, a directory,
                a FIFO, ... (it is not opened), or the session's directory or its
                project directory is a symbolic link (not followed).
            OSError: a damaged tail could not be kept and cut.
        """
        check_id(session_id)
        key = (self._root, session_id)
        claim(key)
        token = new_token()
        try:
            session_dir, ident, scan = await trio.to_thread.run_sync(
                self._open_sync, session_id, token
            )
        except BaseException:
            release(key)
            raise
        writer = JsonlWriter(
            owner=self,
            header=scan.header,
            session_dir=session_dir,
            durable_seq=len(scan.events),
            claim=key,
            token=token,
            state=WriterState.SYNCED,
            size=scan.good_end,
            ident=ident,
        )
        return writer, scan.events, scan.salvaged

    async def exists(self, session_id: str) -> bool:
        """Whether a log is stored under ``session_id`` (a worker thread looks).

        Raises:
            InvalidSessionIdError: the id is empty or not a string.
        """
        check_id(session_id)
        return await trio.to_thread.run_sync(self._locate, session_id) is not None

    async def list(self) -> builtins.list[SessionHeader]:
        """The headers of every readable session under the root, oldest first.

        Files whose header is damaged or of a foreign version are skipped, and so
        is whatever is not a regular file, and a project or session directory that
        is a symbolic link (never opened, never followed: a warning on the
        ``dsh_trio`` logger names it). Blocks on a worker thread.
        """
        return await trio.to_thread.run_sync(self._list_sync)

    # ---- worker-thread side

    def _locate(self, session_id: str) -> str | None:
        """The directory of the stored session ``session_id``, or ``None``.

        A log whose first write was interrupted (a temporary file holding its
        header) is stored too: opening it completes it.
        """
        cached = self._dirs.get(session_id)
        if cached is not None and os.path.lexists(os.path.join(cached, LOG_FILE_NAME)):
            return cached
        encoded = encode_session_id(session_id)
        found: list[str] = []
        for project in _subdirs(self._root):
            candidate = os.path.join(project, encoded)
            # Whatever is at the log's path: opening refuses what is not a
            # regular file, with an error that says so.
            if os.path.lexists(
                os.path.join(candidate, LOG_FILE_NAME)
            ) or has_first_write(candidate, session_id):
                found.append(candidate)
        if not found:
            self._dirs.pop(session_id, None)
            return None
        if len(found) > 1:
            raise SessionCorruptError(
                f'session "{session_id}" is stored more than once: {sorted(found)}'
            )
        self._dirs[session_id] = found[0]
        return found[0]

    def _create_sync(self, session_id: str, session_dir: str, token: str) -> bool:
        """Check the id is free, make its directory and take its lease.

        Returns whether the root directory was made here.
        """
        existing = self._locate(session_id)
        if existing is not None:
            raise SessionExistsError(session_id, os.path.join(existing, LOG_FILE_NAME))
        created_root = not os.path.isdir(self._root)
        made_dir = not os.path.isdir(session_dir)
        lock_fd = -1
        # Nothing is made through a link at the project or session directory.
        check_real_dirs(os.path.dirname(session_dir), session_dir, missing_ok=True)
        for attempt in range(3):
            make_dirs(session_dir)
            try:
                lock_fd = acquire_lock(session_dir, session_id)
                break
            except FileNotFoundError:
                # Another writer's close removed the empty directories just now.
                if attempt == 2:
                    raise
        try:
            path = os.path.join(session_dir, LOG_FILE_NAME)
            if os.path.lexists(path):  # stored while we looked
                raise SessionExistsError(session_id, path)
            write_lease(lock_fd, token)
        except BaseException:
            if made_dir:
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(session_dir, LOCK_FILE_NAME))
                    os.rmdir(session_dir)
            raise
        finally:
            os.close(lock_fd)
        return created_root

    def _open_sync(
        self, session_id: str, token: str
    ) -> tuple[str, tuple[int, int, int], Scan]:
        session_dir = self._locate(session_id)
        if session_dir is None and clear_first_writes(self._root, session_id):
            session_dir = self._locate(session_id)
        if session_dir is None:
            raise SessionNotFoundError(session_id)
        lock_fd, fd, scan = open_log(session_dir, session_id)
        # The writer opens the log for each append: keep no file open.
        try:
            st = os.fstat(fd)
            write_lease(lock_fd, token)
        finally:
            os.close(fd)
            os.close(lock_fd)
        return session_dir, stamp(st), scan

    def _list_sync(self) -> builtins.list[SessionHeader]:
        headers: builtins.list[SessionHeader] = []
        for project in _subdirs(self._root, follow=False):
            for session_dir in _subdirs(project, follow=False):
                header = read_header(os.path.join(session_dir, LOG_FILE_NAME))
                if header is None:
                    continue
                if encode_session_id(header.id) != os.path.basename(session_dir):
                    continue  # not where this id belongs: not ours to list
                headers.append(header)
                self._dirs.setdefault(header.id, session_dir)
        headers.sort(key=lambda h: (h.created_at, h.id))
        return headers


def _subdirs(path: str, *, follow: bool = True) -> builtins.list[str]:
    """The directories directly inside ``path`` (none if it does not exist).

    Without ``follow``, a symbolic link to a directory is left out, and a warning
    names it.
    """
    try:
        with os.scandir(path) as entries:
            found = [e for e in entries if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    if follow:
        return [e.path for e in found]
    for entry in found:
        if entry.is_symlink():
            _logger.warning(
                "%s is a symbolic link (not followed): only the store's root may "
                "be a link; it is skipped",
                entry.path,
            )
    return [e.path for e in found if not e.is_symlink()]
