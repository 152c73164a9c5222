"""A session store on PostgreSQL that many processes on many machines share.

:class:`PostgresPersistence` implements the same :class:`SessionPersistence`
protocol as :class:`~dsh_trio.persistence.JsonlPersistence`. Events are rows keyed
by ``(session_id, seq)`` holding the byte-identical v3 JSON of a JSONL line, so
sessions move between the two losslessly (:func:`export_session`,
:func:`import_session`). One writer per session across the cluster: opening for
writing takes a lease with a strictly increasing fencing token, every batch is one
transaction that checks it, and one heartbeat row per process keeps the leases of
all its sessions alive. Needs the ``dsh-trio[postgres]`` extra (psycopg 3); psycopg
is imported on first use, so this module imports without it.
"""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..errors import SessionCorruptError, SessionFormatError
from ..values import FORMAT_VERSION, SessionEvent, SessionHeader
from ._conninfo import mask_conninfo
from ._jsonl_lines import encode_header, parse_header
from ._jsonl_paths import check_new_id
from ._pg_lease import Heartbeat, Lease, release_lease, take_lease
from ._pg_mail import (
    MAIL_CHANNEL,
    TURN_CHANNEL,
    Listener,
    Mail,
    claim_sessions,
    post_mail,
    read_mail,
    sessions_with_mail,
)
from ._pg_pool import Conn, Pool, describe_dsn, fetch_one
from ._pg_read import check_stored_id, decode_rows, read_rows, read_tail
from ._pg_transfer import export_session, import_session
from ._pg_writer import PostgresWriter

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._persistence import Durability

__all__ = [
    "MAIL_CHANNEL",
    "TURN_CHANNEL",
    "Mail",
    "PostgresPersistence",
    "PostgresWriter",
    "export_session",
    "import_session",
    "mask_conninfo",
]

_DURABILITIES: Final = ("turn", "always", "none")


@attrs.define(eq=False)
class PostgresPersistence:
    """Session logs in a PostgreSQL database (schema ``dsh_trio``), shared by processes.

    Construction connects to nothing; the first operation connects and creates or
    migrates the schema. Each operation runs on a worker thread with a connection
    from a small pool (``pool_size``), so the trio loop never waits on the server;
    a cancellation that arrives while a statement runs is delivered after it.

    ``durability`` maps onto ``synchronous_commit``: ``"turn"`` (the default)
    commits durably every batch that ends a turn and on flush/close, ``"always"``
    every batch, ``"none"`` never waits for the WAL flush. A writer's lease lives
    ``lease_s`` seconds past the last renewal of its process's heartbeat (renewed
    every ``lease_s / 3``); a process that dies loses its leases after at most
    ``lease_s``.

    Mail to sessions (``runtime.sessions.followup`` and its kin, ``runtime.serve``)
    is a table of the same schema; waiting processes ``LISTEN`` for notifications
    (``listen``, one connection per store) and look again every ``poll_s``
    seconds whatever they heard, so a lost notification only delays them. Turn
    ``listen`` off where notifications cannot reach a client (a pooler in
    transaction mode): then they poll only.

    Example::

        persistence = PostgresPersistence("postgresql://app@db/agents")
        async with dsh.open_runtime(persistence=persistence) as runtime:
            handle = await runtime.agents.resume("s1")

    Args:
        dsn: a libpq connection string or URI.
        durability: the commit policy.
        lease_s: how long a lease outlives its process's last heartbeat.
        pool_size: the most connections (and worker threads) used at once.
        poll_s: how often mail and turn waits look again without a notification.
        listen: whether to ``LISTEN`` for notifications (else poll only).

    Raises:
        ValueError: ``durability`` is not one of the three policies, or
            ``lease_s``, ``pool_size`` or ``poll_s`` is not positive.
    """

    dsn: str
    durability: Durability = attrs.field(default="turn", kw_only=True)
    lease_s: float = attrs.field(default=30.0, kw_only=True)
    pool_size: int = attrs.field(default=4, kw_only=True)
    poll_s: float = attrs.field(default=1.0, kw_only=True)
    listen: bool = attrs.field(default=True, kw_only=True)
    _pool: Pool = attrs.field(init=False)
    _heartbeat: Heartbeat = attrs.field(init=False)
    _listener: Listener = attrs.field(init=False)
    # Leases taken by claim_mail and not yet opened, by session id.
    _reserved: dict[str, Lease] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self.durability not in _DURABILITIES:
            raise ValueError(
                f"durability must be one of {_DURABILITIES}, got {self.durability!r}"
            )
        lease_s: object = self.lease_s
        if not (isinstance(lease_s, (int, float)) and lease_s > 0):
            raise ValueError(f"lease_s must be a positive number, got {self.lease_s!r}")
        poll_s: object = self.poll_s
        if not (isinstance(poll_s, (int, float)) and poll_s > 0):
            raise ValueError(f"poll_s must be a positive number, got {self.poll_s!r}")
        self._pool = Pool(self.dsn, self.pool_size)
        self._heartbeat = Heartbeat(self._pool, float(self.lease_s))
        self._listener = Listener(self._pool, float(self.poll_s))

    def __repr__(self) -> str:
        return f"PostgresPersistence({self.location!r}, durability={self.durability!r})"

    @property
    def location(self) -> str:
        """The database as messages show it: host, port, dbname and user, never the password."""
        return describe_dsn(self.dsn)

    @property
    def statements(self) -> Mapping[str, int]:
        """How many SQL statements this store sent, by kind (``"renew"``, ``"append"``, ...)."""
        return self._pool.statements

    @property
    def renewals(self) -> int:
        """How many heartbeat periods completed (one ``"renew"`` statement each)."""
        return self._heartbeat.periods

    async def create(self, header: SessionHeader) -> PostgresWriter:
        """Claim a new session id: take its lease; the session is stored with the first append.

        Blocks on a worker thread for one transaction.

        Raises:
            InvalidSessionIdError: the id is empty, not a string, too long to be
                exported as a file name (the rule of
                :class:`~dsh_trio.persistence.JsonlPersistence`), holds a NUL
                (PostgreSQL text cannot), or the header holds a lone surrogate.
            SessionFormatError: ``header.version`` is not 3.
            SessionExistsError: a session with this id is already stored.
            SessionLeaseError: another live writer holds the id.
            ConnectionError: the server cannot be reached.
        """
        check_new_id(header.id)  # the JSONL rule: any stored session exports
        check_stored_id(header.id)
        encode_header(header)
        if header.version != FORMAT_VERSION:
            raise SessionFormatError(
                f"cannot write format version {header.version}; this library writes "
                f"version {FORMAT_VERSION}",
                version=header.version,
            )
        reserved = self._reserved.pop(header.id, None)
        if reserved is not None and reserved.header is None:
            await trio.lowlevel.checkpoint()
            lease = reserved
        else:
            if reserved is not None:  # stored meanwhile: let it go, fail as ever
                await self._release(header.id, reserved.token)
            lease = await self._pool.run(
                lambda conn: take_lease(
                    self._pool, self._heartbeat, conn, header.id, new=True
                )
            )
        self._heartbeat.hold()
        return PostgresWriter(self, header, 0, token=lease.token, stored=False)

    async def open(
        self, session_id: str
    ) -> tuple[PostgresWriter, Sequence[SessionEvent]]:
        """Take the lease of a stored session and read it.

        Blocks on a worker thread. The lease is taken before anything is read, so
        what is read is the whole log (a transaction never leaves half a batch).

        Raises:
            InvalidSessionIdError: the id is empty, not a string, or holds a NUL
                or a lone surrogate (which PostgreSQL text cannot store).
            SessionNotFoundError: nothing is stored under the id.
            SessionLeaseError: another live writer holds the session.
            SessionFormatError: the header names a foreign format version.
            SessionCorruptError: a stored row is not a valid event, or rows are
                missing (``seq`` names the first bad one).
            ConnectionError: the server cannot be reached.
        """
        check_stored_id(session_id)
        reserved = self._reserved.pop(session_id, None)
        header, events, token = await self._pool.run(
            lambda conn: self._open_sync(conn, session_id, reserved)
        )
        self._heartbeat.hold()
        writer = PostgresWriter(self, header, len(events), token=token, stored=True)
        return writer, events

    async def exists(self, session_id: str) -> bool:
        """Whether a session is stored under ``session_id`` (takes no lease).

        Raises:
            InvalidSessionIdError: the id is empty, not a string, or holds a NUL
                or a lone surrogate (which PostgreSQL text cannot store).
        """
        check_stored_id(session_id)
        row = await self._pool.run(
            lambda conn: fetch_one(
                self._pool.execute(
                    conn,
                    "read",
                    "SELECT 1 FROM dsh_trio.sessions WHERE id = %s",
                    (session_id,),
                )
            )
        )
        return row is not None

    async def list(self) -> builtins.list[SessionHeader]:
        """The headers of every readable stored session, oldest first (takes no lease).

        Sessions whose header is damaged or of a foreign version are skipped.
        """
        return await self._pool.run(self._list_sync)

    async def read(
        self, session_id: str
    ) -> tuple[SessionHeader, Sequence[SessionEvent]]:
        """The stored header and events of ``session_id``, without taking the lease.

        Reads one consistent snapshot; never blocks a writer.

        Raises:
            InvalidSessionIdError: as :meth:`open`.
            SessionNotFoundError, SessionFormatError, SessionCorruptError: as :meth:`open`.
        """
        check_stored_id(session_id)
        header, lines = await self._pool.run(
            lambda conn: read_rows(self._pool, conn, session_id)
        )
        return header, await trio.to_thread.run_sync(
            decode_rows, header, lines, session_id
        )

    # ---- mail (runtime.sessions and runtime.serve use these)

    async def post_mail(
        self, session_id: str, kind: str, body: str, message_id: str | None = None
    ) -> int:
        """Store one mail to ``session_id`` and notify it (one transaction); its row id.

        ``kind`` is ``"followup"``, ``"steer"`` or ``"cancel"``; ``body`` its JSON.

        Raises:
            InvalidSessionIdError: as :meth:`open`.
            ConnectionError: the server cannot be reached.
        """
        check_stored_id(session_id)
        return await self._pool.run(
            lambda conn: post_mail(self._pool, conn, session_id, kind, body, message_id)
        )

    async def read_mail(self, session_id: str, after: int = 0) -> builtins.list[Mail]:
        """The undelivered mail of ``session_id`` above row id ``after``, oldest first."""
        return await self._pool.run(
            lambda conn: read_mail(self._pool, conn, session_id, after)
        )

    async def sessions_with_mail(self, session_ids: Sequence[str]) -> set[str]:
        """Which of ``session_ids`` have undelivered mail."""
        ids = builtins.list(session_ids)
        return await self._pool.run(
            lambda conn: sessions_with_mail(self._pool, conn, ids)
        )

    async def claim_mail(
        self, limit: int, *, skip: Sequence[str] = ()
    ) -> builtins.list[tuple[str, bool]]:
        """Take the leases of up to ``limit`` sessions with mail whose lease is free or expired.

        Returns ``(session_id, stored)`` pairs. The leases are held for this
        process: the next :meth:`open` (``stored``) or :meth:`create` (not
        ``stored``) of each id uses its lease; :meth:`release_claim` lets one go.
        ``skip`` names sessions not to claim.
        """
        skipped = builtins.list(skip)
        taken = await self._pool.run(
            lambda conn: claim_sessions(
                self._pool, self._heartbeat, conn, limit, skip=skipped
            )
        )
        claimed: builtins.list[tuple[str, bool]] = []
        for sid, lease in taken.items():
            old = self._reserved.pop(sid, None)
            if old is not None:  # pragma: no cover - a claim left unopened
                await self._release(sid, old.token)
            self._reserved[sid] = lease
            claimed.append((sid, lease.header is not None))
        return claimed

    async def release_claim(self, session_id: str) -> None:
        """Let go of a lease :meth:`claim_mail` took and nothing opened (shielded)."""
        lease = self._reserved.pop(session_id, None)
        if lease is None:
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(shield=True):
            await self._release(session_id, lease.token)

    async def _release(self, session_id: str, token: int) -> None:
        await self._pool.run(
            lambda conn: release_lease(self._pool, conn, session_id, token)
        )

    async def read_from(self, session_id: str, seq: int) -> builtins.list[SessionEvent]:
        """The stored events of ``session_id`` from ``seq`` on (no lease; ``[]`` if absent)."""
        check_stored_id(session_id)
        return await self._pool.run(
            lambda conn: read_tail(self._pool, conn, session_id, seq)
        )

    def subscribe(self, callback: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``callback(channel, session_id)`` on every mail and turn-end notification.

        Returns the unsubscriber. Synchronous; without ``listen`` nothing is ever
        heard (subscribers poll).
        """
        if not self.listen:
            return _nothing
        return self._listener.subscribe(callback)

    async def listening(self) -> None:
        """Wait until the notifications of :meth:`subscribe` flow (at most ``poll_s``)."""
        await self._listener.ready(self.poll_s)

    async def aclose(self) -> None:
        """Close the pooled connections (open writers keep working; new ones reconnect)."""
        await trio.to_thread.run_sync(self._pool.close_sync)

    # ---- worker-thread side

    def _open_sync(
        self, conn: Conn, session_id: str, reserved: Lease | None = None
    ) -> tuple[SessionHeader, Sequence[SessionEvent], int]:
        if reserved is not None and reserved.header is not None:
            lease = reserved
        else:
            if reserved is not None:  # reserved while not stored: take it afresh
                release_lease(self._pool, conn, session_id, reserved.token)
            lease = take_lease(self._pool, self._heartbeat, conn, session_id, new=False)
        try:
            header, lines = read_rows(self._pool, conn, session_id)
            if len(lines) != lease.next_seq:
                raise SessionCorruptError(
                    f'stored session "{session_id}" records {lease.next_seq} events '
                    f"but holds {len(lines)}; the store is left unchanged",
                    seq=min(len(lines), lease.next_seq),
                )
            events = decode_rows(header, lines, session_id)
        except BaseException:
            release_lease(self._pool, conn, session_id, lease.token)
            raise
        return header, events, lease.token

    def _list_sync(self, conn: Conn) -> builtins.list[SessionHeader]:
        cursor = self._pool.execute(
            conn,
            "read",
            "SELECT id, header FROM dsh_trio.sessions ORDER BY created_at, id",
        )
        headers: builtins.list[SessionHeader] = []
        for sid, line in cursor:
            try:
                headers.append(parse_header(line.encode("utf-8"), _where(sid), sid))
            except (SessionCorruptError, SessionFormatError):
                continue
        return headers


def _nothing() -> None:
    return None


def _where(session_id: str) -> str:
    return f'stored session "{session_id}"'
