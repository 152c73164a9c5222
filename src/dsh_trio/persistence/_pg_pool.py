"""A small bounded pool of blocking psycopg connections, used from worker threads.

psycopg's async API runs on asyncio only, so the store uses its blocking API in
worker threads: :meth:`Pool.run` takes a slot of a :class:`trio.CapacityLimiter`,
hands an idle connection (or a new one) to a worker thread that runs one operation
(one transaction), and puts the connection back. The thread is never abandoned: a
cancellation that arrives while it runs is delivered after the operation, at the
caller's next checkpoint, as the JSONL writer does.

Every statement goes through :meth:`Pool.execute`, which counts it by kind
(:attr:`Pool.statements`), so tests and benchmarks can see what the store costs.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from ._conninfo import mask_conninfo, mask_in
from ._pg_schema import migrate

if TYPE_CHECKING:
    import psycopg

__all__ = ["Conn", "Pool", "describe_dsn", "import_psycopg"]

T = TypeVar("T")
Conn = Any  # psycopg.Connection[tuple[Any, ...]] once psycopg is imported


def import_psycopg() -> Any:
    """The ``psycopg`` module, or an ``ImportError`` saying which extra installs it."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError(
            "PostgresPersistence needs psycopg 3: pip install 'psycopg[binary]>=3.2' (the postgres extra)"
        ) from exc
    return psycopg


def describe_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    psycopg = import_psycopg()
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    shown = {k: v for k, v in parts.items() if k in ("host", "port", "dbname", "user")}
    # A dbname may itself be a connection string with a password in it.
    return mask_conninfo(" ".join(f"{k}={v}" for k, v in shown.items())) or (
        "<default DSN>"
    )


@attrs.define(eq=False)
class Pool:
    """At most ``size`` connections to ``dsn``, each used by one worker thread at a time."""

    dsn: str = attrs.field(repr=lambda dsn: repr(mask_conninfo(dsn)))
    size: int = 4
    _limiter: trio.CapacityLimiter = attrs.field(init=False)
    _idle: list[Conn] = attrs.field(init=False, factory=list)
    _migrated: bool = attrs.field(init=False, default=False)
    _migrate_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)
    _counts: collections.Counter[str] = attrs.field(
        init=False, factory=collections.Counter
    )
    _count_lock: threading.Lock = attrs.field(init=False, factory=threading.Lock)

    def __attrs_post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"the pool size must be at least 1, got {self.size}")
        self._limiter = trio.CapacityLimiter(self.size)

    @property
    def statements(self) -> Mapping[str, int]:
        """How many statements were sent, by kind (a snapshot)."""
        with self._count_lock:
            return dict(self._counts)

    def execute(
        self,
        conn: Conn,
        kind: str,
        query: Any,
        params: Iterable[object] | Mapping[str, object] | None = None,
    ) -> Any:
        """Send one statement (counted under ``kind``); returns the cursor."""
        with self._count_lock:
            self._counts[kind] += 1
        return conn.execute(query, params)

    def count(self, kind: str, n: int = 1) -> None:
        """Count ``n`` statements of ``kind`` sent by other means (a COPY)."""
        with self._count_lock:
            self._counts[kind] += n

    def connect(self) -> Conn:
        """A new connection in autocommit mode, the schema migrated (blocking).

        Raises:
            ConnectionError: the server cannot be reached.
            psycopg.ProgrammingError: libpq cannot read the connection string (the
                message shows it with its password masked).
        """
        conn = self._open()
        if not self._migrated:
            with self._migrate_lock:
                if not self._migrated:
                    try:
                        migrate(conn)
                    except BaseException:
                        conn.close()
                        raise
                    self._migrated = True
        return conn

    def _open(self) -> Conn:
        psycopg = import_psycopg()
        try:
            return psycopg.connect(self.dsn, autocommit=True)
        except psycopg.OperationalError as exc:
            raise ConnectionError(
                f"cannot connect to the PostgreSQL session store "
                f"({describe_dsn(self.dsn)}): {mask_in(str(exc).strip(), self.dsn)}"
            ) from exc
        except psycopg.ProgrammingError as exc:
            # libpq could not read the string, and its message may quote it whole.
            refused = mask_in(str(exc).strip(), self.dsn)
        # Raised outside the handler: the unmasked error is not its context.
        raise psycopg.ProgrammingError(
            f"the PostgreSQL session store's connection string "
            f"{mask_conninfo(self.dsn)!r} is not valid: {refused}"
        )

    async def run(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn(connection)`` in a worker thread with a pooled connection.

        Blocks until a slot is free (cancellable while waiting) and then until
        ``fn`` returns (a cancellation meanwhile is delivered afterwards). A
        connection that broke is dropped, not pooled.

        Raises:
            ConnectionError: the server cannot be reached.
            whatever ``fn`` raises.
        """
        async with self._limiter:
            conn = self._idle.pop() if self._idle else None
            box: list[Conn] = [conn]
            try:
                return await trio.to_thread.run_sync(self._call, box, fn)
            finally:
                kept = box[0]
                if kept is not None:
                    if kept.closed or kept.broken or len(self._idle) >= self.size:
                        kept.close()
                    else:
                        self._idle.append(kept)

    def _call(self, box: list[Conn], fn: Callable[[Conn], T]) -> T:
        conn = box[0]
        if conn is None or conn.closed:
            conn = box[0] = self.connect()
        psycopg = import_psycopg()
        try:
            return fn(conn)
        except psycopg.OperationalError as exc:
            conn.close()
            raise ConnectionError(
                f"the PostgreSQL session store ({describe_dsn(self.dsn)}) failed: "
                f"{mask_in(str(exc).strip(), self.dsn)}"
            ) from exc

    def close_sync(self) -> None:
        """Close every idle connection (blocking; the pool stays usable)."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def fetch_one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...] | None:
    """The next row of ``cursor`` as a tuple, or ``None``."""
    row = cursor.fetchone()
    return None if row is None else tuple(row)
