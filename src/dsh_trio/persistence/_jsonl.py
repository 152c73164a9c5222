"""The embedded persistence backend: one JSON Lines file per session.

Layout and format are the reference's generation 3, so a log written by either
implementation loads in the other::

    <root>/<projectDir>/<encodedId>/session.v3.jsonl
    <root>/<projectDir>/<encodedId>/session.lock

``projectDir`` is ``_no-cwd`` or ``--<slug>--`` (from the header's ``cwd``);
``encodedId`` is the session id with every code unit outside ``[A-Za-z0-9._-]`` (and
``~``) written as ``~XXXX`` (its UTF-16 code unit in hex), ``.`` as ``~002E`` and
``..`` as ``~002E~002E``, so no id can name a path outside its directory. Line 1 is
the header, then one event per line, each line compact JSON ending in ``\\n``.

The first append writes header and batch to a temporary file, fsyncs it and links
it into place (never replacing an existing file); later appends go to the end of
the file and, on any failure, cut the file back to its previous size. A reader keeps
every complete, valid line up to the first damaged one; the damaged tail is dropped
(and cut off when a writer opens the log) unless a later line ends a turn, in which
case committed data follows the damage and the log is refused as corrupt.

All disk work runs in worker threads, one hop per operation.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..errors import (
    InvalidEventError,
    InvalidSessionIdError,
    PersistenceSeqError,
    SessionCorruptError,
    SessionExistsError,
    SessionFormatError,
    SessionLockedError,
    SessionNotFoundError,
)
from ..values import (
    FORMAT_VERSION,
    SessionEvent,
    SessionHeader,
    event_from_json,
    event_to_json,
    header_from_json,
    header_to_json,
)

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from ._persistence import Durability

__all__ = ["JsonlPersistence", "LOG_FILE_NAME"]

#: The log file's name inside its session directory.
LOG_FILE_NAME: Final = f"session.v{FORMAT_VERSION}.jsonl"
_LOCK_FILE_NAME: Final = "session.lock"
_NO_CWD: Final = "_no-cwd"
_NAME_MAX: Final = 255
_DURABILITIES: Final = ("turn", "always", "none")

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")

# --------------------------------------------------------------------------- path encoding


def _code_units(ch: str) -> tuple[int, ...]:
    cp = ord(ch)
    if cp > 0xFFFF:
        cp -= 0x10000
        return (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))
    return (cp,)


def encode_session_id(session_id: str) -> str:
    """The session id as one safe path segment (reversible, no traversal possible).

    Raises:
        InvalidSessionIdError: the id is empty or not a string.
    """
    _check_id(session_id)
    if session_id == ".":
        return "~002E"
    if session_id == "..":
        return "~002E~002E"
    out: list[str] = []
    for ch in session_id:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"~{unit:04X}" for unit in _code_units(ch))
    return "".join(out)


def project_dir_name(cwd: str | None) -> str:
    """The project directory a session with working directory ``cwd`` is stored under.

    Separators (``/``, ``\\``, ``:``) collapse to one ``-``; other unsafe code units
    become ``~XXXX``; leading dashes are dropped and the slug is cut to 251 characters.
    """
    if cwd is None:
        return _NO_CWD
    out: list[str] = []
    separator_run = False
    for ch in cwd:
        if ch in "/\\:":
            if not separator_run:
                out.append("-")
            separator_run = True
            continue
        separator_run = False
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"~{unit:04X}" for unit in _code_units(ch))
    slug = "".join(out).lstrip("-") or "root"
    return f"--{slug[:251]}--"


def _check_id(session_id: object) -> None:
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"a session id must be a string, got {type(session_id).__name__}"
        )
    if not session_id:
        raise InvalidSessionIdError("a session id must not be empty")


# --------------------------------------------------------------------------- encoding

_ENCODER: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False
)


def encode_events(events: Sequence[SessionEvent]) -> bytes:
    """The lines of ``events``, each compact JSON ending in ``\\n``.

    JSON escapes every control character, so no string can break a line.

    Raises:
        InvalidEventError: an event holds a lone surrogate, which UTF-8 cannot
            encode (nothing of the batch is encoded).
    """
    lines = [_ENCODER.encode(event_to_json(ev)) for ev in events]
    lines.append("")
    try:
        return "\n".join(lines).encode("utf-8")
    except UnicodeEncodeError:
        for ev, line in zip(events, lines, strict=False):
            try:
                line.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidEventError(
                    f'session event "{ev.type}" at seq {ev.seq} holds a lone '
                    f"surrogate ({exc.object[exc.start : exc.end]!r}), which UTF-8 "
                    "cannot encode; nothing was written",
                    seq=ev.seq,
                    type=ev.type,
                ) from None
        raise  # pragma: no cover - some line failed above


# The reference writes the header keys in this order.
_HEADER_KEY_ORDER: Final = (
    "type",
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "isSeeded",
    "origin",
    "delegationDepth",
    "agentPreset",
)


def encode_header(header: SessionHeader) -> bytes:
    """The header line of a log, ending in ``\\n``.

    Raises:
        InvalidSessionIdError: a header field holds a lone surrogate.
    """
    obj = header_to_json(header)
    ordered: dict[str, object] = {k: obj[k] for k in _HEADER_KEY_ORDER if k in obj}
    ordered.update(obj)  # keys this list does not know keep their place at the end
    try:
        return (_ENCODER.encode(ordered) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidSessionIdError(
            f"session header of {header.id!r} holds a lone surrogate, which UTF-8 "
            "cannot encode"
        ) from None


# --------------------------------------------------------------------------- decoding


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_constant=_refuse_constant)


def _parse(line: bytes) -> object:
    """Parse one line; raises ``ValueError`` (or ``RecursionError``) if it is not JSON."""
    return _DECODER.decode(line.decode("utf-8"))


@attrs.frozen
class _Scan:
    header: SessionHeader
    events: list[SessionEvent]
    good_end: int  # bytes up to and including the last intact line
    size: int


def _scan_log(data: bytes, path: str, session_id: str | None) -> _Scan:
    """Read a whole log: the header, the intact event prefix and where it ends.

    Raises:
        SessionFormatError: the header names a foreign format version.
        SessionCorruptError: the header is damaged, names another id, or a line
            ending a turn follows damaged lines.
    """
    header_end = data.find(b"\n")
    if header_end < 0:
        raise SessionCorruptError(
            f"session log {path} has no complete header line ({len(data)} bytes)"
        )
    try:
        raw_header = _parse(data[:header_end])
    except (ValueError, RecursionError) as exc:
        raise SessionCorruptError(
            f"session log {path}: the header line is not JSON ({exc})"
        ) from exc
    if isinstance(raw_header, dict):
        version = raw_header.get("version")
        if (
            isinstance(version, (int, float))
            and not isinstance(version, bool)
            and version != FORMAT_VERSION
        ):
            raise SessionFormatError(
                f"session log {path} uses format version {version}; this library "
                f"reads version {FORMAT_VERSION} only",
                version=version,
            )
    try:
        header = header_from_json(raw_header)
    except SessionCorruptError as exc:
        raise SessionCorruptError(f"session log {path}: {exc}") from exc
    if session_id is not None and header.id != session_id:
        raise SessionCorruptError(
            f'session log {path} holds session "{header.id}", not "{session_id}"'
        )

    events: list[SessionEvent] = []
    good_end = header_end + 1
    damage: tuple[int, int, str] | None = None  # (seq, line number, what)
    start = good_end
    line_no = 1
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            break  # a final line without newline is a torn tail
        line = data[start:end]
        line_no += 1
        if damage is None:
            expected = len(events)
            obj: object = None
            try:
                obj = _parse(line)
                events.append(event_from_json(obj, expected_seq=expected))
                good_end = end + 1
            except (ValueError, RecursionError) as exc:
                # SessionCorruptError is a ValueError: a bad event or a seq gap.
                damage = (expected, line_no, str(exc))
                if isinstance(obj, dict) and obj.get("type") == "turn/end":
                    _refuse_damage(path, damage, line_no)
        else:
            # Parse what can be parsed: damaged logs are rare, so no shortcut here.
            try:
                obj = _parse(line)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict) and obj.get("type") == "turn/end":
                _refuse_damage(path, damage, line_no)
        start = end + 1
    return _Scan(header=header, events=events, good_end=good_end, size=len(data))


def _refuse_damage(path: str, damage: tuple[int, int, str], turn_end_line: int) -> None:
    seq, line_no, what = damage
    raise SessionCorruptError(
        f"session log {path} is damaged at seq {seq} (line {line_no}: {what}), and "
        f"line {turn_end_line} after it ends a turn: committed data follows the damage",
        seq=seq,
    )


# --------------------------------------------------------------------------- disk helpers


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (the one place appends touch the disk)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _sync_data(fd: int) -> None:
    if sys.platform == "linux":
        os.fdatasync(fd)
    else:
        os.fsync(fd)


def _sync_dir(path: str) -> None:
    if sys.platform == "win32":
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, max(size - offset, 1 << 16), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _acquire_lock(session_dir: str, session_id: str) -> int:
    """Open and exclusively lock the session's lock file; returns the fd holding it."""
    fd = os.open(
        os.path.join(session_dir, _LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT, 0o644
    )
    if sys.platform != "win32":
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise SessionLockedError(
                f'session "{session_id}" is open for writing in another process '
                f"({session_dir})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
    return fd


# In-process write claims, keyed by (root, session id); flock covers other processes.
_claims: set[tuple[str, str]] = set()
_claims_lock = threading.Lock()


def _claim(key: tuple[str, str]) -> None:
    with _claims_lock:
        if key in _claims:
            raise SessionLockedError(
                f'session "{key[1]}" is already open for writing (under {key[0]})'
            )
        _claims.add(key)


def _release(key: tuple[str, str]) -> None:
    with _claims_lock:
        _claims.discard(key)


# --------------------------------------------------------------------------- backend


def _normalise_root(root: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.path.expanduser(os.fspath(root)))


@attrs.define(eq=False)
class JsonlPersistence:
    """Session logs as JSON Lines files under ``root`` (format version 3).

    Construction touches no file. ``durability`` is the policy a
    :class:`SessionRecorder` applies when it writes: ``"turn"`` (the default) fsyncs
    every batch that ends a turn and on flush/close, ``"always"`` every batch,
    ``"none"`` leaves it to the operating system.

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
        return os.path.join(self._session_dir_for(header), LOG_FILE_NAME)

    def _session_dir_for(self, header: SessionHeader) -> str:
        encoded = encode_session_id(header.id)
        if len(encoded) > _NAME_MAX:
            raise InvalidSessionIdError(
                f"session id is too long to be a file name ({len(encoded)} characters "
                f"encoded, at most {_NAME_MAX}): {header.id[:40]!r}..."
            )
        return os.path.join(self._root, project_dir_name(header.cwd), encoded)

    async def create(self, header: SessionHeader) -> _JsonlWriter:
        """Claim a new session; the log file appears with the first append.

        Blocks while it checks (in a worker thread) that no log with this id exists
        anywhere under the root. Cancelling releases the claim.

        Raises:
            InvalidSessionIdError: the id is empty, not a string, or too long, or
                the header holds a lone surrogate (not encodable as UTF-8).
            SessionFormatError: ``header.version`` is not 3.
            SessionExistsError: a log with this id is already stored.
            SessionLockedError: another writer in this process holds the id.
        """
        session_dir = self._session_dir_for(header)
        # Refuse an unwritable header now rather than at the first append.
        encode_header(header)
        if header.version != FORMAT_VERSION:
            raise SessionFormatError(
                f"cannot write format version {header.version}; this library writes "
                f"version {FORMAT_VERSION}",
                version=header.version,
            )
        key = (self._root, header.id)
        _claim(key)
        try:
            existing = await trio.to_thread.run_sync(self._locate, header.id)
            if existing is not None:
                raise SessionExistsError(
                    header.id, os.path.join(existing, LOG_FILE_NAME)
                )
        except BaseException:
            _release(key)
            raise
        return _JsonlWriter(
            owner=self,
            header=header,
            session_dir=session_dir,
            durable_seq=0,
            claim=key,
        )

    async def open(
        self, session_id: str
    ) -> tuple[_JsonlWriter, builtins.list[SessionEvent]]:
        """Claim a stored session, read it and cut off a torn tail (durably).

        Blocks on a worker thread for the read. Exclusive ownership is taken before
        anything is read. Cancelling releases the claim.

        Returns:
            The writer and the intact events, in order.

        Raises:
            InvalidSessionIdError: the id is empty or not a string.
            SessionNotFoundError: nothing is stored under the id.
            SessionLockedError: another writer (in this or another process) holds it.
            SessionFormatError: the header names a foreign format version (the file
                is left as it is).
            SessionCorruptError: the header is damaged, or a line ending a turn
                follows damaged lines (``seq`` names the damaged position).
        """
        _check_id(session_id)
        key = (self._root, session_id)
        _claim(key)
        try:
            session_dir, lock_fd, fd, scan = await trio.to_thread.run_sync(
                self._open_sync, session_id
            )
        except BaseException:
            _release(key)
            raise
        writer = _JsonlWriter(
            owner=self,
            header=scan.header,
            session_dir=session_dir,
            durable_seq=len(scan.events),
            claim=key,
        )
        writer._attach(fd, lock_fd, scan.good_end)
        return writer, scan.events

    async def exists(self, session_id: str) -> bool:
        """Whether a log is stored under ``session_id`` (a worker thread looks).

        Raises:
            InvalidSessionIdError: the id is empty or not a string.
        """
        _check_id(session_id)
        return await trio.to_thread.run_sync(self._locate, session_id) is not None

    async def list(self) -> builtins.list[SessionHeader]:
        """The headers of every readable session under the root, oldest first.

        Files whose header is damaged or of a foreign version are skipped. Blocks on a
        worker thread.
        """
        return await trio.to_thread.run_sync(self._list_sync)

    # ---- worker-thread side

    def _locate(self, session_id: str) -> str | None:
        """The directory of the stored session ``session_id``, or ``None``."""
        cached = self._dirs.get(session_id)
        if cached is not None and os.path.isfile(os.path.join(cached, LOG_FILE_NAME)):
            return cached
        encoded = encode_session_id(session_id)
        found: list[str] = []
        for project in _subdirs(self._root):
            candidate = os.path.join(project, encoded)
            if os.path.isfile(os.path.join(candidate, LOG_FILE_NAME)):
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

    def _open_sync(self, session_id: str) -> tuple[str, int, int, _Scan]:
        session_dir = self._locate(session_id)
        if session_dir is None:
            raise SessionNotFoundError(session_id)
        path = os.path.join(session_dir, LOG_FILE_NAME)
        lock_fd = _acquire_lock(session_dir, session_id)
        try:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                raise SessionNotFoundError(session_id) from None
            try:
                scan = _scan_log(_read_all(fd), path, session_id)
                if scan.good_end < scan.size:
                    os.ftruncate(fd, scan.good_end)
                    os.fsync(fd)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            os.close(lock_fd)
            raise
        return session_dir, lock_fd, fd, scan

    def _list_sync(self) -> builtins.list[SessionHeader]:
        headers: builtins.list[SessionHeader] = []
        for project in _subdirs(self._root):
            for session_dir in _subdirs(project):
                header = _read_header(os.path.join(session_dir, LOG_FILE_NAME))
                if header is None:
                    continue
                if encode_session_id(header.id) != os.path.basename(session_dir):
                    continue  # not where this id belongs: not ours to list
                headers.append(header)
                self._dirs.setdefault(header.id, session_dir)
        headers.sort(key=lambda h: (h.created_at, h.id))
        return headers


def _subdirs(path: str) -> builtins.list[str]:
    """The directories directly inside ``path`` (none if it does not exist)."""
    try:
        with os.scandir(path) as entries:
            return [e.path for e in entries if e.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _read_header(path: str) -> SessionHeader | None:
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        return _scan_log(line, path, None).header
    except (SessionCorruptError, SessionFormatError):
        return None


# --------------------------------------------------------------------------- writer


@attrs.define(eq=False)
class _JsonlWriter:
    """The write claim on one session's JSONL log (a :class:`SessionWriter`)."""

    _owner: JsonlPersistence
    _header: SessionHeader
    _session_dir: str
    _durable_seq: int
    _claim: tuple[str, str]
    _fd: int | None = attrs.field(init=False, default=None)
    _lock_fd: int | None = attrs.field(init=False, default=None)
    _size: int = attrs.field(init=False, default=0)
    _materialised: bool = attrs.field(init=False, default=False)
    _unsynced: bool = attrs.field(init=False, default=False)
    _dirty: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)

    def _attach(self, fd: int, lock_fd: int, size: int) -> None:
        self._fd, self._lock_fd, self._size = fd, lock_fd, size
        self._materialised = True

    @property
    def header(self) -> SessionHeader:
        """The header of the log."""
        return self._header

    @property
    def durable_seq(self) -> int:
        """The seq the next written event must have."""
        return self._durable_seq

    @property
    def path(self) -> str:
        """The log file."""
        return os.path.join(self._session_dir, LOG_FILE_NAME)

    async def append(self, events: Sequence[SessionEvent], *, sync: bool) -> None:
        """Write ``events`` at the end of the log; with ``sync``, fsync them.

        The first append creates the file (header and batch written to a temporary
        file, fsynced, then linked into place). Blocks on a worker thread; a
        cancellation arriving meanwhile is delivered after the batch is written.

        Raises:
            PersistenceSeqError: the batch does not continue the written log.
            trio.ClosedResourceError: the writer was closed.
            SessionExistsError: another owner stored a log under the id first.
            SessionLockedError: another process holds the id.
            OSError: the disk refused the write; the file is as it was.
        """
        async with self._lock:
            if self._closed:
                raise trio.ClosedResourceError(
                    f'the writer of session "{self._header.id}" is closed'
                )
            expected = self._durable_seq
            for i, ev in enumerate(events):
                if ev.seq != expected + i:
                    raise PersistenceSeqError(
                        f'session "{self._header.id}": append seq mismatch at batch '
                        f"position {i}: got seq {ev.seq}, expected {expected + i}",
                        expected=expected + i,
                        got=ev.seq,
                    )
            if not events and not (sync and self._unsynced):
                await trio.lowlevel.checkpoint()
                return
            await trio.to_thread.run_sync(self._append_sync, tuple(events), sync)

    async def close(self) -> None:
        """Fsync what is unsynced (unless durability is ``"none"``) and release the claim.

        Idempotent; waits for an append in progress; shielded from cancellation.

        Raises:
            OSError: the final fsync failed (the claim is released all the same).
        """
        with trio.CancelScope(shield=True):
            async with self._lock:
                if self._closed:
                    return
                self._closed = True
                try:
                    await trio.to_thread.run_sync(self._close_sync)
                finally:
                    _release(self._claim)

    # ---- worker-thread side

    def _append_sync(self, events: tuple[SessionEvent, ...], sync: bool) -> None:
        data = encode_events(events)
        if not self._materialised:
            if events:
                self._materialise(data, len(events))
            return
        fd = self._fd
        assert fd is not None
        if self._dirty:
            os.ftruncate(fd, self._size)
            self._dirty = False
        try:
            if data:
                _write_all(fd, data)
            if sync:
                _sync_data(fd)
        except BaseException:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                self._dirty = True
            raise
        self._size += len(data)
        self._durable_seq += len(events)
        self._unsynced = not sync

    def _materialise(self, batch: bytes, count: int) -> None:
        data = encode_header(self._header) + batch
        session_dir = self._session_dir
        created_root = not os.path.isdir(self._owner.root)
        os.makedirs(session_dir, exist_ok=True)
        locked_here = self._lock_fd is None
        if locked_here:
            self._lock_fd = _acquire_lock(session_dir, self._header.id)
        try:
            self._link_new_log(data)
        except BaseException:
            if locked_here and self._lock_fd is not None:
                # Do not keep someone else's session locked over a failed create.
                os.close(self._lock_fd)
                self._lock_fd = None
            raise
        try:
            _sync_dir(session_dir)
            _sync_dir(os.path.dirname(session_dir))
            _sync_dir(self._owner.root)
            if created_root:
                _sync_dir(os.path.dirname(self._owner.root))
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except BaseException:
            # Keep the promise that a failed append leaves nothing behind.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._materialised = True
        self._size = len(data)
        self._durable_seq += count
        self._unsynced = False
        self._owner._dirs[self._header.id] = session_dir

    def _link_new_log(self, data: bytes) -> None:
        """Write ``data`` to a temporary file, fsync it, link it to the log path."""
        path = self.path
        tmp = os.path.join(
            self._session_dir, f".{LOG_FILE_NAME}.{uuid.uuid4().hex}.tmp"
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # fails if the path exists: never replaces a log
            except FileExistsError:
                raise SessionExistsError(self._header.id, path) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _close_sync(self) -> None:
        fd, lock_fd = self._fd, self._lock_fd
        self._fd = self._lock_fd = None
        try:
            if fd is not None and self._unsynced and self._owner.durability != "none":
                _sync_data(fd)
                self._unsynced = False
        finally:
            if fd is not None:
                os.close(fd)
            if lock_fd is not None:
                os.close(lock_fd)
