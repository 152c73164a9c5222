"""Mail to sessions on the shared store: the mailbox table, claims, and notifications.

Mail is a row of ``dsh_trio.mailbox`` (see :mod:`._pg_schema`). Posting one is one
transaction: the insert and a ``NOTIFY`` on :data:`MAIL_CHANNEL` with the session
id, sent when it commits. The holder of the session's lease deletes the row in the
transaction that writes the inbox splice the mail caused (the writer's
``ack_mail``), so a mail is delivered exactly once: its splice and its deletion
commit together or not at all. Every batch holding a ``turn/end`` notifies
:data:`TURN_CHANNEL` with the session id, for whoever waits on a turn.

:func:`claim_sessions` hands a worker sessions with mail whose lease is free or
expired: it locks their oldest mail rows (``FOR UPDATE SKIP LOCKED``, so workers
claiming at once get different sessions) and takes their leases in the same
transaction.

The functions here block; call them from a worker thread. :class:`Listener` is the
trio side: one ``LISTEN`` connection per store, shared by every subscriber.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import trio

from ..errors import SessionExistsError, SessionLeaseError, SessionNotFoundError
from ._pg_lease import Heartbeat, Lease, take_lease
from ._pg_pool import Conn, Pool, describe_dsn, fetch_one

__all__ = [
    "MAIL_CHANNEL",
    "TURN_CHANNEL",
    "Listener",
    "Mail",
    "claim_sessions",
    "delete_mail",
    "post_mail",
    "read_mail",
    "sessions_with_mail",
]

_logger = logging.getLogger("dsh_trio")

#: Notified with a session id when mail to it is posted.
MAIL_CHANNEL: Final = "dsh_trio_mail"
#: Notified with a session id when a batch holding a ``turn/end`` of it commits.
TURN_CHANNEL: Final = "dsh_trio_turns"

_LIVE_LEASE: Final = """
SELECT 1 FROM dsh_trio.leases l
JOIN dsh_trio.owners o ON o.owner = l.owner AND o.epoch = l.epoch
WHERE l.session_id = m.session_id AND o.expires_at > clock_timestamp()
"""


@attrs.frozen
class Mail:
    """One undelivered mail: its row id, kind (``followup``/``steer``/``cancel``) and JSON body."""

    id: int
    session_id: str
    kind: str
    body: str


def post_mail(
    pool: Pool,
    conn: Conn,
    session_id: str,
    kind: str,
    body: str,
    message_id: str | None,
) -> int:
    """Insert one mail and notify :data:`MAIL_CHANNEL` (one transaction); its row id."""
    with conn.transaction():
        row = fetch_one(
            pool.execute(
                conn,
                "mail",
                "INSERT INTO dsh_trio.mailbox (session_id, kind, body, message_id)"
                " VALUES (%s, %s, %s, %s) RETURNING id",
                (session_id, kind, body, message_id),
            )
        )
        pool.execute(
            conn, "mail", "SELECT pg_notify(%s, %s)", (MAIL_CHANNEL, session_id)
        )
    assert row is not None
    return int(row[0])


def read_mail(pool: Pool, conn: Conn, session_id: str, after: int) -> list[Mail]:
    """The undelivered mail of ``session_id`` with a row id above ``after``, oldest first."""
    cursor = pool.execute(
        conn,
        "mail",
        "SELECT id, kind, body FROM dsh_trio.mailbox"
        " WHERE session_id = %s AND id > %s ORDER BY id",
        (session_id, after),
    )
    return [Mail(int(i), session_id, str(k), str(b)) for i, k, b in cursor]


def sessions_with_mail(pool: Pool, conn: Conn, session_ids: Sequence[str]) -> set[str]:
    """Which of ``session_ids`` have undelivered mail."""
    if not session_ids:
        return set()
    cursor = pool.execute(
        conn,
        "mail",
        "SELECT DISTINCT session_id FROM dsh_trio.mailbox WHERE session_id = ANY(%s)",
        (list(session_ids),),
    )
    return {str(row[0]) for row in cursor}


def delete_mail(pool: Pool, conn: Conn, ids: Sequence[int], *, session_id: str) -> None:
    """Delete the mail rows ``ids`` of ``session_id`` (inside the caller's transaction).

    Raises:
        SessionLeaseError: a row is gone: another writer delivered it (the caller's
            transaction must roll back).
    """
    cursor = pool.execute(
        conn,
        "mail",
        "DELETE FROM dsh_trio.mailbox WHERE id = ANY(%s) AND session_id = %s",
        (list(ids), session_id),
    )
    if cursor.rowcount != len(ids):
        raise SessionLeaseError(
            f'session "{session_id}": mail {sorted(ids)} was already delivered by '
            "another writer; nothing of the batch was written",
            session_id=session_id,
        )


def claim_sessions(
    pool: Pool,
    heartbeat: Heartbeat,
    conn: Conn,
    limit: int,
    *,
    skip: Sequence[str] = (),
) -> dict[str, Lease]:
    """Take the leases of up to ``limit`` sessions with mail and no live lease (one transaction).

    The oldest mail first; rows other claimers hold locked are skipped. A session
    raced for and lost is left out. Returns the leases by session id; a lease of a
    session not stored yet has ``header=None``.
    """
    taken: dict[str, Lease] = {}
    with conn.transaction():
        cursor = pool.execute(
            conn,
            "claim",
            f"SELECT m.session_id FROM dsh_trio.mailbox m"
            f" WHERE NOT EXISTS ({_LIVE_LEASE}) AND NOT (m.session_id = ANY(%s))"
            " ORDER BY m.id LIMIT %s FOR UPDATE OF m SKIP LOCKED",
            (list(skip), limit * 4),
        )
        candidates: list[str] = []
        for (sid,) in cursor.fetchall():
            if sid not in candidates:
                candidates.append(str(sid))
        for sid in candidates[:limit]:
            try:
                with conn.transaction():  # a savepoint: a lost race undoes itself only
                    taken[sid] = take_any_lease(pool, heartbeat, conn, sid)
            except SessionLeaseError:
                continue
    return taken


def take_any_lease(pool: Pool, heartbeat: Heartbeat, conn: Conn, sid: str) -> Lease:
    """Take the lease of ``sid`` whether or not it is stored yet."""
    try:
        return take_lease(pool, heartbeat, conn, sid, new=False)
    except SessionNotFoundError:
        pass
    try:
        return take_lease(pool, heartbeat, conn, sid, new=True)
    except SessionExistsError:  # pragma: no cover - stored between the two
        return take_lease(pool, heartbeat, conn, sid, new=False)


Callback = Callable[[str, str], None]


@attrs.define(eq=False)
class Listener:
    """One ``LISTEN`` connection per store, shared by every subscriber in the process.

    :meth:`subscribe` registers a synchronous ``callback(channel, session_id)``,
    called on the trio thread for every notification on :data:`MAIL_CHANNEL` and
    :data:`TURN_CHANNEL`. The connection runs as a trio system task from the first
    subscription to the last unsubscription; a lost connection is logged and
    reopened after ``retry_s``. Notifications are hints: subscribers poll too, so a
    lost one only delays them.
    """

    pool: Pool
    retry_s: float
    _callbacks: dict[int, Callback] = attrs.field(init=False, factory=dict)
    _next: int = attrs.field(init=False, default=0)
    _scope: trio.CancelScope | None = attrs.field(init=False, default=None)
    _ready: trio.Event | None = attrs.field(init=False, default=None)

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """Register ``callback``; returns the function that unregisters it."""
        key = self._next
        self._next += 1
        self._callbacks[key] = callback
        if self._scope is None:
            scope = self._scope = trio.CancelScope()
            self._ready = trio.Event()
            trio.lowlevel.spawn_system_task(
                self._run, scope, self._ready, name="dsh_trio mail listener"
            )

        def unsubscribe() -> None:
            self._callbacks.pop(key, None)
            if not self._callbacks and self._scope is not None:
                self._scope.cancel()
                self._scope = None
                self._ready = None

        return unsubscribe

    async def ready(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the ``LISTEN`` is in place."""
        ready = self._ready
        if ready is None:
            await trio.lowlevel.checkpoint()
            return
        with trio.move_on_after(timeout_s):
            await ready.wait()

    async def _run(self, scope: trio.CancelScope, ready: trio.Event) -> None:
        with scope:
            while True:
                conn: Any = None
                try:
                    conn = await trio.to_thread.run_sync(self._connect)
                    ready.set()
                    while True:
                        await trio.lowlevel.wait_readable(conn.fileno())
                        for note in conn.notifies(timeout=0):
                            self._dispatch(note.channel, note.payload)
                except Exception as exc:  # a system task must not raise: report, retry
                    _logger.warning(
                        "listening for session mail on %s failed (retried in %.3g s;"
                        " mail is polled meanwhile): %s",
                        describe_dsn(self.pool.dsn),
                        self.retry_s,
                        exc,
                    )
                finally:
                    if conn is not None:
                        trio.lowlevel.notify_closing(conn.fileno())
                        conn.close()
                ready.set()  # nobody waits for a connection that failed
                await trio.sleep(self.retry_s)

    def _connect(self) -> Conn:
        conn = self.pool.connect()
        try:
            for channel in (MAIL_CHANNEL, TURN_CHANNEL):
                self.pool.execute(conn, "listen", f"LISTEN {channel}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _dispatch(self, channel: str, payload: str) -> None:
        for callback in list(self._callbacks.values()):
            try:
                callback(channel, payload)
            except Exception:  # pragma: no cover - subscribers are the runtime's
                _logger.exception("a session mail subscriber failed")
