"""The API key kept out of the records the HTTP stack logs itself (httpx, httpcore, hpack).

No adapter code formats those records, so :func:`guard_logs` puts a filter on their
loggers that redacts the secrets of every live adapter (:func:`~._redact.redact`
rules); :func:`redact_live_secrets` applies the same secrets to any other text.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Final

from ._redact import redact_all

__all__ = ["GUARDED_LOGGERS", "LogGuard", "guard_logs", "redact_live_secrets"]

#: The loggers of the HTTP stack whose records :func:`guard_logs` redacts: httpx logs
#: every request's URL, status and reason phrase at INFO; httpcore (and hpack, for
#: HTTP/2) log response lines and headers at DEBUG. A filter on a logger does not see
#: its children's records, so each is named.
GUARDED_LOGGERS: Final = (
    "httpx",
    "httpcore",
    "httpcore.connection",
    "httpcore.http11",
    "httpcore.http2",
    "httpcore.proxy",
    "httpcore.socks",
    "hpack",
    "hpack.hpack",
    "hpack.table",
)


class LogGuard:
    """Secrets the filter of :func:`guard_logs` redacts for as long as this object lives."""

    __slots__ = ("__weakref__", "secrets")

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets

    def __repr__(self) -> str:
        return f"LogGuard({len(self.secrets)} secret(s))"


class _LiveGuards:
    """The live :class:`LogGuard` objects of the process and the secrets they hold.

    Logging may happen in any thread, so adding a guard takes a lock; reading the
    secrets does not while nothing changed (the usual record).
    """

    __slots__ = ("_guards", "_lock", "_secrets", "_stale")

    def __init__(self) -> None:
        #: The live guards, by ``id``: weak references whose callback marks
        #: ``_secrets`` stale.
        self._guards: dict[int, weakref.ref[LogGuard]] = {}
        self._lock = threading.Lock()
        #: The secrets of the live guards, read without the lock while ``_stale`` is
        #: false.
        self._secrets: tuple[str, ...] = ()
        #: Set when a guard is added or dies: the next read rebuilds ``_secrets``. The
        #: weakref callback only sets it (it may run inside any code, the lock's holder
        #: included).
        self._stale = False

    def add(self, guard: LogGuard) -> None:
        """Hold ``guard``'s secrets for as long as it lives."""
        with self._lock:
            self._guards[id(guard)] = weakref.ref(guard, self._died)
            self._stale = True

    def _died(self, ref: weakref.ref[LogGuard]) -> None:
        self._stale = True

    def secrets(self) -> tuple[str, ...]:
        """The secrets of the live guards (rebuilt only after a guard came or went)."""
        if not self._stale:
            return self._secrets
        with self._lock:
            self._stale = False  # a guard dying from here on marks it stale again
            live: list[str] = []
            for key, ref in list(self._guards.items()):
                guard = ref()
                if guard is None:
                    del self._guards[key]
                else:
                    live.extend(guard.secrets)
            self._secrets = tuple(live)
            return self._secrets


_LIVE: Final = _LiveGuards()


def redact_live_secrets(text: str) -> str:
    """``text`` with the secret of every live model adapter redacted (:func:`redact_all` rules).

    The secrets are those :func:`guard_logs` holds for as long as their adapter lives
    (an adapter's API key and the password of its base URL), so a string built from
    anything a request or its route carries can be shown without them. ``text`` itself
    is returned when no secret is live or none occurs in it. Never blocks.

    Example::

        >>> from dsh_trio.llm._log_guard import guard_logs, redact_live_secrets
        >>> guard = guard_logs("sk-0123456789abcdef")  # an adapter with this key lives
        >>> redact_live_secrets("model m-sk-0123456789abcdef")
        'model m-***'
    """
    secrets = _LIVE.secrets()
    if not secrets:
        return text
    return redact_all(text, secrets)


class _SecretFilter(logging.Filter):
    """Redacts the live secrets from a record's message, traceback and stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _LIVE.secrets()
        if secrets:
            _scrub_record(record, secrets)
        return True


def _scrub_record(record: logging.LogRecord, secrets: tuple[str, ...]) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record that cannot be formatted: its parts, never its args
        record.msg = redact_all(f"{record.msg!s} (arguments not shown)", secrets)
        record.args = ()
    else:
        safe = redact_all(message, secrets)
        if safe != message:
            # Formatted once, here: no handler formats the arguments again.
            record.msg, record.args = safe, ()
    if record.exc_text:
        record.exc_text = redact_all(record.exc_text, secrets)
    elif record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        safe = redact_all(text, secrets)
        if safe != text:
            # Formatters show exc_text when it is set, instead of formatting again.
            record.exc_text = safe
    if record.stack_info:
        record.stack_info = redact_all(record.stack_info, secrets)


_FILTER: Final = _SecretFilter()


def guard_logs(*secrets: str | None) -> LogGuard | None:
    """Redact ``secrets`` from the records of :data:`GUARDED_LOGGERS` while the guard lives.

    Adds one filter to each of those loggers (once: calling again adds none), which
    redacts every secret of every live :class:`LogGuard` from a record's message,
    its traceback and its stack (:func:`~._redact.redact` rules) before any handler
    sees it. The loggers' levels are left as configured. Returns ``None`` when no
    secret is given. Never blocks.

    Example::

        >>> import logging
        >>> guard = guard_logs("sk-0123456789abcdef")
        >>> record = logging.makeLogRecord(
        ...     {"name": "httpx", "msg": "GET %s", "args": ("/?k=sk-0123456789abcdef",)}
        ... )
        >>> logging.getLogger("httpx").filter(record) and record.getMessage()
        'GET /?k=***'
    """
    kept = tuple(secret for secret in secrets if secret)
    if not kept:
        return None
    guard = LogGuard(kept)
    _LIVE.add(guard)
    for name in GUARDED_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)  # idempotent
    return guard
