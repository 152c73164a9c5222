"""The writer of one session on the shared store: the only code that appends its rows.

Each batch is one transaction: lock the session's lease row, check this writer's
fencing token and the lease's life, check the stored ``next_seq`` is where this
writer left it, insert the events (``COPY``) and move ``next_seq`` on. Nothing of a
refused or failed batch is kept. Mail the batch delivered (:meth:`PostgresWriter.ack_mail`)
is deleted in the same transaction, and a batch holding a ``turn/end`` notifies
the turn channel when it commits. Durability maps onto ``synchronous_commit``: a
synced batch commits only once its WAL is flushed; an unsynced one returns first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..errors import PersistenceSeqError, SessionExistsError, SessionLeaseError
from ..session import LineChunks
from ..values import SessionEvent, SessionHeader
from ._jsonl_lines import encode_events, encode_header
from ._pg_lease import check_lease_sync, release_lease
from ._pg_mail import TURN_CHANNEL, delete_mail
from ._pg_pool import Conn, describe_dsn, fetch_one

if TYPE_CHECKING:
    from .postgres import PostgresPersistence

__all__ = ["PostgresWriter", "event_lines"]

_COPY: Final = "COPY dsh_trio.events (session_id, seq, line) FROM STDIN"


def event_lines(events: Sequence[SessionEvent]) -> list[str]:
    """The v3 JSON lines of ``events`` (no line ends), exactly as a JSONL log holds them.

    Raises:
        InvalidEventError: an event holds a lone surrogate.
    """
    return _split(encode_events(events))


def _split(data: bytes) -> list[str]:
    """The lines of ``data`` (lines each ending in ``\\n``), without their ends."""
    if not data:
        return []
    return data[:-1].decode("utf-8").split("\n")


@attrs.define(eq=False)
class PostgresWriter:
    """The write claim on one session of a :class:`PostgresPersistence` (a :class:`SessionWriter`).

    Holds the session's lease (``token``) until :meth:`close`, and no connection
    between operations.
    """

    _owner: PostgresPersistence
    _header: SessionHeader
    _durable_seq: int
    _token: int = attrs.field(kw_only=True)
    _stored: bool = attrs.field(kw_only=True)
    _unsynced: bool = attrs.field(init=False, default=False)
    _closed: bool = attrs.field(init=False, default=False)
    _lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    # Mail to delete with the batch that writes a seq: (seq, mail row id).
    _acks: list[tuple[int, int]] = attrs.field(init=False, factory=list)
    #: The lines written, gathered and compressed for the live session.
    _chunks: LineChunks = attrs.field(init=False, factory=LineChunks)

    def take_lines(self) -> list[tuple[int, int, bytes]]:
        """The chunks of written lines compressed since the last call (see
        :class:`~dsh_trio.session.LineChunks`): what the session's recorder hands
        to the live session, which keeps its settled events as these lines."""
        return self._chunks.take()

    @property
    def header(self) -> SessionHeader:
        """The header of the stored session."""
        return self._header

    @property
    def durable_seq(self) -> int:
        """The seq the next written event must have."""
        return self._durable_seq

    @property
    def token(self) -> int:
        """This writer's fencing token (strictly greater than every earlier one)."""
        return self._token

    def ack_mail(self, seq: int, mail_id: int) -> None:
        """Delete mail row ``mail_id`` in the transaction that writes event ``seq``.

        The event is the inbox splice the mail caused: the two commit together or
        not at all, so the mail is delivered exactly once. Synchronous.
        """
        self._acks.append((seq, mail_id))

    async def settle_mail(self, mail_ids: Sequence[int]) -> None:
        """Delete mail rows that caused no event, in one transaction under this lease.

        Raises:
            SessionLeaseError: the lease was taken over or expired (nothing deleted).
            ConnectionError: the server failed.
        """
        ids = list(mail_ids)
        sid = self._header.id
        pool = self._owner._pool

        def settle(conn: Conn) -> None:
            with conn.transaction():
                check_lease_sync(pool, conn, sid, self._token, sync=False)
                delete_mail(pool, conn, ids, session_id=sid)

        await pool.run(settle)

    @property
    def _materialised(self) -> bool:
        # Whether the session is stored. The persistence state machine of the
        # property tests (tests/properties/persistence_machine.py) reads this name.
        return self._stored

    async def append(self, events: Sequence[SessionEvent], *, sync: bool) -> None:
        """Write ``events`` after the stored ones in one transaction; with ``sync``, durably.

        Blocks on a worker thread; a cancellation arriving meanwhile is delivered
        after the transaction ends.

        Raises:
            PersistenceSeqError: the batch does not continue the written log.
            trio.ClosedResourceError: the writer was closed.
            SessionLeaseError: the lease was taken over or expired (nothing written).
            SessionExistsError: another owner stored a session under the id first.
            ConnectionError: the server failed; nothing of the batch was kept.
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
            ended = any(ev.type == "turn/end" for ev in events)
            data = encode_events(events)
            await self.append_lines(_split(data), sync=sync, ended=ended, encoded=data)

    async def append_lines(
        self,
        lines: Sequence[str],
        *,
        sync: bool,
        ended: bool = False,
        encoded: bytes | None = None,
    ) -> None:
        """Write already encoded v3 lines (the caller holds the lock or the only reference).

        ``ended``: the lines hold a ``turn/end`` (the commit notifies the turn channel).
        ``encoded``: the lines as UTF-8, each ending in ``\\n``, when the caller has
        them (gathered for the live session once written).
        """
        if not lines and not self._stored:
            await trio.lowlevel.checkpoint()
            return
        end = self._durable_seq + len(lines)
        due = [mail for seq, mail in self._acks if seq < end]
        await self._owner._pool.run(
            lambda conn: self.write_sync(
                conn, lines, sync, mail=due, ended=ended, encoded=encoded
            )
        )
        if due:
            self._acks = [(seq, mail) for seq, mail in self._acks if seq >= end]

    async def close(self) -> None:
        """Commit what is unsynced durably (unless durability is ``"none"``), release the lease.

        Idempotent; waits for an append in progress; shielded from cancellation.

        Raises:
            SessionLeaseError, ConnectionError: the final durable commit failed (the
                lease is released all the same).
        """
        with trio.CancelScope(shield=True):
            async with self._lock:
                if self._closed:
                    return
                self._closed = True
                flush = (
                    self._unsynced and self._owner.durability != "none" and self._stored
                )
                try:
                    await self._owner._pool.run(
                        self._close_sync if flush else self._release_sync
                    )
                finally:
                    self._owner._heartbeat.release()

    # ---- worker-thread side

    def write_sync(
        self,
        conn: Conn,
        lines: Sequence[str],
        sync: bool,
        *,
        mail: Sequence[int] = (),
        ended: bool = False,
        encoded: bytes | None = None,
    ) -> None:
        """Write ``lines`` in one transaction on ``conn`` and move the writer on (blocking).

        ``mail``: mail rows the lines deliver, deleted in the same transaction;
        ``ended``: the lines hold a ``turn/end`` (the commit notifies it).
        """
        header = None
        if not self._stored:
            header = encode_header(self._header)[:-1].decode("utf-8")
        self._append_sync(conn, lines, header, sync, mail=mail, ended=ended)
        self._stored = True
        first = self._durable_seq
        self._durable_seq += len(lines)
        self._unsynced = not sync
        if encoded:
            self._chunks.add(first, encoded, len(lines))

    def _append_sync(
        self,
        conn: Conn,
        lines: Sequence[str],
        header: str | None,
        sync: bool,
        *,
        mail: Sequence[int] = (),
        ended: bool = False,
    ) -> None:
        pool = self._owner._pool
        sid = self._header.id
        with conn.transaction():
            next_seq = check_lease_sync(pool, conn, sid, self._token, sync=sync)
            if header is not None:
                inserted = fetch_one(
                    pool.execute(
                        conn,
                        "append",
                        "INSERT INTO dsh_trio.sessions (id, header, created_at, next_seq)"
                        " VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
                        " RETURNING 1",
                        (sid, header, self._header.created_at, len(lines)),
                    )
                )
                if inserted is None:
                    raise SessionExistsError(
                        sid,
                        f"the PostgreSQL session store ({describe_dsn(pool.dsn)})",
                    )
            else:
                if next_seq != self._durable_seq:
                    raise SessionLeaseError(
                        f'session "{sid}": the store holds {next_seq} events, this '
                        f"writer wrote {self._durable_seq}; another writer changed "
                        "it, so nothing more is written",
                        session_id=sid,
                    )
                pool.execute(
                    conn,
                    "append",
                    "UPDATE dsh_trio.sessions SET next_seq = %s WHERE id = %s",
                    (self._durable_seq + len(lines), sid),
                )
            if lines:
                pool.count("append")
                first = self._durable_seq
                with conn.cursor() as cursor, cursor.copy(_COPY) as copy:
                    for i, line in enumerate(lines):
                        copy.write_row((sid, first + i, line))
            if mail:
                delete_mail(pool, conn, mail, session_id=sid)
            if ended:
                pool.execute(
                    conn, "mail", "SELECT pg_notify(%s, %s)", (TURN_CHANNEL, sid)
                )

    def _close_sync(self, conn: Conn) -> None:
        try:
            self._append_sync(conn, (), None, True)
        finally:
            self._release_sync(conn)

    def _release_sync(self, conn: Conn) -> None:
        release_lease(self._owner._pool, conn, self._header.id, self._token)
