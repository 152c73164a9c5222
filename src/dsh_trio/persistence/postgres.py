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
from ._pg_lease import Heartbeat, release_lease, take_lease
from ._pg_pool import Conn, Pool, describe_dsn, fetch_one
from ._pg_read import check_stored_id, decode_rows, read_rows
from ._pg_transfer import export_session, import_session
from ._pg_writer import PostgresWriter

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._persistence import Durability

__all__ = ["PostgresPersistence", "export_session", "import_session", "mask_conninfo"]

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

    Example::

        persistence = PostgresPersistence("postgresql://app@db/agents")
        async with dsh.open_runtime(persistence=persistence) as runtime:
            handle = await runtime.agents.resume("s1")

    Args:
        dsn: a libpq connection string or URI.
        durability: the commit policy.
        lease_s: how long a lease outlives its process's last heartbeat.
        pool_size: the most connections (and worker threads) used at once.

    Raises:
        ValueError: ``durability`` is not one of the three policies, or
            ``lease_s`` or ``pool_size`` is not positive.
    """

    dsn: str
    durability: Durability = attrs.field(default="turn", kw_only=True)
    lease_s: float = attrs.field(default=30.0, kw_only=True)
    pool_size: int = attrs.field(default=4, kw_only=True)
    _pool: Pool = attrs.field(init=False)
    _heartbeat: Heartbeat = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if self.durability not in _DURABILITIES:
            raise ValueError(
                f"durability must be one of {_DURABILITIES}, got {self.durability!r}"
            )
        lease_s: object = self.lease_s
        if not (isinstance(lease_s, (int, float)) and lease_s > 0):
            raise ValueError(f"lease_s must be a positive number, got {self.lease_s!r}")
        self._pool = Pool(self.dsn, self.pool_size)
        self._heartbeat = Heartbeat(self._pool, float(self.lease_s))

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
        header, events, token = await self._pool.run(
            lambda conn: self._open_sync(conn, session_id)
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

    async def aclose(self) -> None:
        """Close the pooled connections (open writers keep working; new ones reconnect)."""
        await trio.to_thread.run_sync(self._pool.close_sync)

    # ---- worker-thread side

    def _open_sync(
        self, conn: Conn, session_id: str
    ) -> tuple[SessionHeader, Sequence[SessionEvent], int]:
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


def _where(session_id: str) -> str:
    return f'stored session "{session_id}"'
