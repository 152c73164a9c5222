"""Write leases on the shared store: fencing tokens and one heartbeat per process.

A process registers one row in ``dsh_trio.owners`` (its owner id, an epoch and an
expiry) the first time it takes a lease, and a :class:`Heartbeat` task renews that
one row once per period (``lease_s / 3``) while the process holds any lease: one
statement per period however many sessions it writes. A session's lease row names
its owner, the owner's epoch when it was taken and a fencing token drawn from a
sequence, so tokens only ever grow. The lease is live while its owner's row has the
same epoch and has not expired. An owner whose row expired (the process stalled or
died) has lost every lease it held: its row is not renewed again, and its next
registration starts a new epoch, so the old leases never come back to life.

Taking a lease (:func:`take_lease`) runs under a transaction-scoped advisory lock on
the session id, so two processes racing for one session are served one after the
other and the second finds the first's live lease. The functions here block; call
them from a worker thread.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any, Final

import attrs
import trio

from ..errors import SessionExistsError, SessionLeaseError, SessionNotFoundError
from ._pg_pool import Conn, Pool, describe_dsn, fetch_one

__all__ = ["Heartbeat", "Lease", "release_lease", "take_lease"]

_logger = logging.getLogger("dsh_trio")

_REGISTER: Final = """
INSERT INTO dsh_trio.owners (owner, epoch, host, pid, expires_at)
VALUES (%(owner)s, 1, %(host)s, %(pid)s,
        clock_timestamp() + make_interval(secs => %(lease_s)s))
ON CONFLICT (owner) DO UPDATE SET
    epoch = CASE WHEN dsh_trio.owners.expires_at > clock_timestamp()
                 THEN dsh_trio.owners.epoch ELSE dsh_trio.owners.epoch + 1 END,
    expires_at = EXCLUDED.expires_at
RETURNING epoch
"""

_RENEW: Final = """
UPDATE dsh_trio.owners
SET expires_at = clock_timestamp() + make_interval(secs => %s)
WHERE owner = %s AND expires_at > clock_timestamp()
RETURNING epoch
"""

_HOLDER: Final = """
SELECT l.token, o.host, o.pid, o.expires_at
FROM dsh_trio.leases l
JOIN dsh_trio.owners o ON o.owner = l.owner AND o.epoch = l.epoch
WHERE l.session_id = %s AND o.expires_at > clock_timestamp()
"""

_TAKE: Final = """
INSERT INTO dsh_trio.leases (session_id, owner, epoch, token)
VALUES (%s, %s, %s, nextval('dsh_trio.lease_tokens'))
ON CONFLICT (session_id) DO UPDATE SET
    owner = EXCLUDED.owner, epoch = EXCLUDED.epoch, token = EXCLUDED.token,
    taken_at = now()
RETURNING token
"""


@attrs.frozen
class Lease:
    """A lease taken on one session, and what the store held when it was taken."""

    token: int
    header: str | None  # the stored header line, None for a new session
    next_seq: int


@attrs.define(eq=False)
class Heartbeat:
    """The one heartbeat row of this process, renewed while any lease is held.

    :meth:`hold` and :meth:`release` count the writers holding a lease; the renewal
    task runs from the first hold to the last release. It runs as a trio system
    task, so it outlives no trio run and never keeps a nursery open.
    """

    pool: Pool
    lease_s: float
    owner: uuid.UUID = attrs.field(factory=uuid.uuid4)
    _holds: int = attrs.field(init=False, default=0)
    _scope: trio.CancelScope | None = attrs.field(init=False, default=None)
    #: Completed renewal periods (one renewal statement each).
    periods: int = attrs.field(init=False, default=0)

    @property
    def period(self) -> float:
        """Seconds between renewals: a third of the lease."""
        return self.lease_s / 3

    @property
    def holds(self) -> int:
        """How many writers of this process hold a lease."""
        return self._holds

    def register_sync(self, conn: Conn) -> int:
        """Register or renew this process's row (inside the caller's transaction).

        Returns the epoch leases taken now belong to.
        """
        row = fetch_one(
            self.pool.execute(
                conn,
                "register",
                _REGISTER,
                {
                    "owner": self.owner,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "lease_s": self.lease_s,
                },
            )
        )
        assert row is not None
        return int(row[0])

    def hold(self) -> None:
        """One more writer holds a lease; starts the renewal task if none runs."""
        self._holds += 1
        if self._scope is None:
            scope = self._scope = trio.CancelScope()
            trio.lowlevel.spawn_system_task(
                self._run, scope, name=f"dsh_trio lease heartbeat {self.owner}"
            )

    def release(self) -> None:
        """A writer released its lease; the last release stops the renewal task."""
        self._holds -= 1
        if self._holds <= 0 and self._scope is not None:
            self._holds = 0
            self._scope.cancel()
            self._scope = None

    async def _run(self, scope: trio.CancelScope) -> None:
        box: list[Any] = [None]
        try:
            with scope:
                while True:
                    await trio.sleep(self.period)
                    await self._renew(box)
        finally:
            conn = box[0]
            if conn is not None:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(conn.close)

    async def _renew(self, box: list[Any]) -> None:
        try:
            alive = await trio.to_thread.run_sync(self._renew_sync, box)
        except Exception as exc:  # a system task must not raise: report, retry
            _logger.warning(
                "renewing the session leases of this process on %s failed (retried "
                "in %.3g s): %s",
                describe_dsn(self.pool.dsn),
                self.period,
                exc,
            )
            return  # noqa: ASYNC910  # private: its caller sleeps each period
        if not alive:
            _logger.error(
                "the session leases of this process (owner %s) expired before they "
                "were renewed; its writers can no longer append (SessionLeaseError)",
                self.owner,
            )

    def _renew_sync(self, box: list[Any]) -> bool:
        conn = box[0]
        if conn is None or conn.closed:
            conn = box[0] = self.pool.connect()
        try:
            cursor = self.pool.execute(
                conn, "renew", _RENEW, (self.lease_s, self.owner)
            )
            self.periods += 1  # with the statement, so the two counts always agree
            return fetch_one(cursor) is not None
        except Exception:
            conn.close()
            raise


def take_lease(
    pool: Pool, heartbeat: Heartbeat, conn: Conn, session_id: str, *, new: bool
) -> Lease:
    """Take the write lease of ``session_id`` with a new fencing token (one transaction).

    Raises:
        SessionExistsError: ``new`` and a session is stored under the id.
        SessionNotFoundError: not ``new`` and nothing is stored under the id.
        SessionLeaseError: a live owner holds the lease (this process included).
    """
    with conn.transaction():
        pool.execute(
            conn,
            "lease",
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (session_id,),
        )
        stored = fetch_one(
            pool.execute(
                conn,
                "lease",
                "SELECT header, next_seq FROM dsh_trio.sessions WHERE id = %s",
                (session_id,),
            )
        )
        if new and stored is not None:
            raise SessionExistsError(
                session_id, f"the PostgreSQL session store ({describe_dsn(pool.dsn)})"
            )
        if not new and stored is None:
            raise SessionNotFoundError(session_id)
        holder = fetch_one(pool.execute(conn, "lease", _HOLDER, (session_id,)))
        if holder is not None:
            token, host, pid, expires = holder
            raise SessionLeaseError(
                f'session "{session_id}" is being written by another writer (process '
                f"{pid} on {host}, lease token {token}, live until "
                f"{expires.isoformat(timespec='seconds')}); it can be opened once "
                "that writer closes or its "
                "lease expires",
                session_id=session_id,
            )
        epoch = heartbeat.register_sync(conn)
        row = fetch_one(
            pool.execute(conn, "lease", _TAKE, (session_id, heartbeat.owner, epoch))
        )
        assert row is not None
    if stored is None:
        return Lease(token=int(row[0]), header=None, next_seq=0)
    return Lease(token=int(row[0]), header=str(stored[0]), next_seq=int(stored[1]))


def release_lease(pool: Pool, conn: Conn, session_id: str, token: int) -> None:
    """Drop the lease of ``session_id`` if it still carries ``token`` (one statement)."""
    pool.execute(
        conn,
        "release",
        "DELETE FROM dsh_trio.leases WHERE session_id = %s AND token = %s",
        (session_id, token),
    )


def check_lease_sync(
    pool: Pool, conn: Conn, session_id: str, token: int, *, sync: bool
) -> int | None:
    """Lock the lease row, check it still carries ``token`` and is live (in a transaction).

    Also sets the transaction's ``synchronous_commit`` (``sync``). Returns the
    stored ``next_seq`` (``None`` before the first append).

    Raises:
        SessionLeaseError: the lease was taken over, released, or has expired.
    """
    row = fetch_one(
        pool.execute(
            conn,
            "append",
            """
            SELECT set_config('synchronous_commit', %s, true), l.token,
                   coalesce(l.epoch = o.epoch AND o.expires_at > clock_timestamp(),
                            false),
                   s.next_seq
            FROM dsh_trio.leases l
            LEFT JOIN dsh_trio.owners o ON o.owner = l.owner
            LEFT JOIN dsh_trio.sessions s ON s.id = l.session_id
            WHERE l.session_id = %s
            FOR UPDATE OF l
            """,
            ("on" if sync else "off", session_id),
        )
    )
    if row is None or int(row[1]) != token:
        now = "released" if row is None else f"held with token {row[1]}"
        raise SessionLeaseError(
            f'session "{session_id}": this writer\'s lease (token {token}) was taken '
            f"over (the lease is now {now}); nothing of the batch was written",
            session_id=session_id,
        )
    if not row[2]:
        raise SessionLeaseError(
            f'session "{session_id}": this writer\'s lease (token {token}) expired '
            "before it was renewed; nothing of the batch was written",
            session_id=session_id,
        )
    return None if row[3] is None else int(row[3])
