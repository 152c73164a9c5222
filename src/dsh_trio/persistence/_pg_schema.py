"""The PostgreSQL schema of the shared session store, and its versioned migrations.

Everything lives in the ``dsh_trio`` schema. ``migrations`` records each applied
version; :func:`migrate` applies the missing ones under a transaction-scoped advisory
lock, so processes starting together migrate once. Blocking: call from a worker
thread.

Tables:

- ``sessions(id, header, created_at, next_seq)``: the header line (the v3 JSON, no
  line end) and the seq the next event must have.
- ``events(session_id, seq, line)``: one row per event, ``line`` the byte-identical
  v3 JSON of the JSONL line (no line end).
- ``owners(owner, epoch, host, pid, expires_at)``: one heartbeat row per process; its
  ``expires_at`` is the expiry of every lease the process holds.
- ``leases(session_id, owner, epoch, token, taken_at)``: the write lease of a
  session; live while its owner's row has the same epoch and has not expired.
- ``lease_tokens``: the sequence fencing tokens are drawn from (strictly increasing).
- ``mailbox(id, session_id, kind, body, message_id, posted_at)`` (version 2): mail
  to a session not yet delivered into its inbox; ``kind`` is ``followup``,
  ``steer`` or ``cancel``, ``body`` the JSON of the message or of the cancel. The
  holder of the session's lease deletes a row in the transaction that writes the
  inbox splice it caused.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["SCHEMA_VERSION", "migrate"]

#: A fixed key for the advisory lock that serialises migrations.
_MIGRATION_LOCK: Final = 0x647368_7472696F

_MIGRATIONS: Final[tuple[tuple[int, tuple[str, ...]], ...]] = (
    (
        1,
        (
            """CREATE TABLE dsh_trio.sessions (
                id text PRIMARY KEY,
                header text NOT NULL,
                created_at bigint NOT NULL,
                next_seq bigint NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE dsh_trio.events (
                session_id text NOT NULL
                    REFERENCES dsh_trio.sessions (id) ON DELETE CASCADE,
                seq bigint NOT NULL,
                line text NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE dsh_trio.owners (
                owner uuid PRIMARY KEY,
                epoch bigint NOT NULL,
                host text NOT NULL,
                pid integer NOT NULL,
                expires_at timestamptz NOT NULL
            )""",
            """CREATE TABLE dsh_trio.leases (
                session_id text PRIMARY KEY,
                owner uuid NOT NULL,
                epoch bigint NOT NULL,
                token bigint NOT NULL,
                taken_at timestamptz NOT NULL DEFAULT now()
            )""",
            "CREATE SEQUENCE dsh_trio.lease_tokens",
        ),
    ),
    (
        2,
        (
            """CREATE TABLE dsh_trio.mailbox (
                id bigserial PRIMARY KEY,
                session_id text NOT NULL,
                kind text NOT NULL CHECK (kind IN ('followup', 'steer', 'cancel')),
                body text NOT NULL,
                message_id text,
                posted_at timestamptz NOT NULL DEFAULT clock_timestamp()
            )""",
            "CREATE INDEX mailbox_session ON dsh_trio.mailbox (session_id, id)",
        ),
    ),
)

#: The schema version this library writes.
SCHEMA_VERSION: Final = _MIGRATIONS[-1][0]


def migrate(conn: Any) -> int:
    """Create the schema or bring it up to :data:`SCHEMA_VERSION`; returns the version.

    Raises:
        RuntimeError: the database holds a newer schema than this library knows.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE SCHEMA IF NOT EXISTS dsh_trio")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS dsh_trio.migrations ("
            " version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute(
            "SELECT coalesce(max(version), 0) FROM dsh_trio.migrations"
        ).fetchone()
        current = int(row[0]) if row is not None else 0
        if current > SCHEMA_VERSION:
            raise RuntimeError(
                f"the dsh_trio schema in this database is version {current}; this "
                f"library knows versions up to {SCHEMA_VERSION} (upgrade dsh-trio)"
            )
        for version, statements in _MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO dsh_trio.migrations (version) VALUES (%s)", (version,)
            )
    return SCHEMA_VERSION
