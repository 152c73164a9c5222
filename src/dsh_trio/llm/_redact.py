"""Text from a model server, made safe to show and store: no API key, valid Unicode.

Everything a server or its transport sends (error messages, codes, headers, the text of
an event, streamed content, the text of any exception) passes through here before it
reaches an error, the log or the session. :func:`redact` is the one place the API key is
removed (also a key cut off at the end of a string), and with it every secret-looking
value of the adapter's own headers (:func:`header_secrets`); :func:`repair_unicode` replaces what
UTF-8 cannot encode (lone surrogates, as JSON's ``"\\ud800"`` decodes). :class:`StreamText`
applies both to text that arrives in fragments, so a key or an emoji's surrogate pair
split across two events is handled as if it had come whole. :func:`shown_url` is a URL
as messages show it, and :func:`guard_logs` keeps the key out of the records the HTTP
stack logs itself (httpx, httpcore, hpack), which no adapter code formats.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

from ..values import utf8_ok

__all__ = [
    "KEY_PREFIX",
    "REDACTED",
    "SHORTEST_HEADER_SECRET",
    "SHORT_SECRET",
    "Secret",
    "StreamText",
    "GUARDED_LOGGERS",
    "LogGuard",
    "clean",
    "cut_key_at_end",
    "guard_logs",
    "header_secrets",
    "redact",
    "redact_all",
    "redact_live_secrets",
    "repair_unicode",
    "secrets_of",
    "shown_url",
    "url_password",
]

#: What a secret is replaced with.
REDACTED: Final = "***"
#: Keys shorter than this are redacted only as whole tokens (see :func:`redact`).
SHORT_SECRET: Final = 8
#: The shortest start of a key that is redacted where it ends a string (see :func:`redact`).
KEY_PREFIX: Final = 8
#: What :func:`repair_unicode` puts in place of a code point UTF-8 cannot encode.
REPLACEMENT: Final = "\ufffd"

#: What is redacted: one secret (the usual case, the API key alone), several
#: (longest first, as :func:`secrets_of` orders them), or none.
Secret: TypeAlias = str | tuple[str, ...] | None

#: Header names that carry a secret: a name containing one of these words (any case).
_SECRET_HEADER: Final = re.compile(
    r"key|token|secret|auth|cookie|passw|passphrase|credential|signature",
    re.IGNORECASE,
)
#: ``<scheme> <credentials>`` of an ``Authorization``-like value.
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*\s+(?P<rest>\S.*)")
#: Header values shorter than this are no secret worth the name: redacting them would
#: turn every ``1`` or ``yes`` of a message into ``***``.
SHORTEST_HEADER_SECRET: Final = 4


def secrets_of(*values: str | None) -> Secret:
    """The secrets among ``values`` as the redaction functions take them.

    Empty strings and ``None`` are dropped, duplicates kept once; one secret is
    returned as itself, several as a tuple, longest first (a secret that holds
    another is redacted whole), none as ``None``.

    >>> secrets_of("sk-a", None, "Bearer sk-a", "sk-a")
    ('Bearer sk-a', 'sk-a')
    >>> secrets_of("sk-a", "")
    'sk-a'
    """
    kept = sorted({value for value in values if value}, key=lambda v: (-len(v), v))
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else tuple(kept)


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secret-looking values of ``headers``, as a transport could echo them.

    A header is secret when its name contains ``key``, ``token``, ``secret``,
    ``auth``, ``cookie``, ``passw``, ``passphrase``, ``credential`` or
    ``signature`` (any case: ``X-Api-Key``, ``Authorization``,
    ``Proxy-Authorization``, ``Cookie``, ``X-Auth-Token``). Its whole value is a
    secret (when it has :data:`SHORTEST_HEADER_SECRET` characters or more), and so
    are the parts a server may quote alone, when they have :data:`SHORT_SECRET`
    characters or more: the credentials of a ``<scheme> <credentials>`` value
    (``Bearer sk-...``) and the value of each ``name=value`` pair of a cookie.
    Never blocks.

    >>> header_secrets({"X-Api-Key": "k-123", "Accept": "text/plain", "X-Auth": "1"})
    ('k-123',)
    >>> header_secrets({"Authorization": "Bearer t-123456789", "Cookie": "a=1; b=s3cret-42"})
    ('Bearer t-123456789', 't-123456789', 'a=1; b=s3cret-42', 's3cret-42')
    """
    found: list[str] = []
    for name, raw in headers.items():
        value = raw.strip()
        if len(value) < SHORTEST_HEADER_SECRET or not _SECRET_HEADER.search(name):
            continue
        found.append(value)
        parts: list[str] = []
        scheme = _SCHEME.fullmatch(value)
        if scheme is not None:
            parts.append(scheme["rest"].strip())
        if "cookie" in name.lower():
            for pair in value.split(";"):
                _, equals, part = pair.partition("=")
                if equals:
                    parts.append(part.strip())
        found.extend(part for part in parts if len(part) >= SHORT_SECRET)
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=8)
def _pattern(secret: str) -> re.Pattern[str]:
    escaped = re.escape(secret)
    if len(secret) >= SHORT_SECRET:
        return re.compile(escaped)
    # A token is a run of word characters and hyphens (as keys are written), so a
    # short key is not found inside a longer word or key.
    return re.compile(rf"(?<![\w-]){escaped}(?![\w-])")


def redact(text: str, secret: Secret) -> str:
    """``text`` with the API key ``secret`` replaced by ``***``.

    ``secret`` may also be a tuple of secrets (see :func:`secrets_of`), each
    redacted in turn, longest first.

    A key of :data:`SHORT_SECRET` (8) characters or more is replaced wherever it
    occurs, and so is a cut-off key at the end of ``text``: a prefix of the key of
    at least :data:`KEY_PREFIX` (8) characters that ends the string (a server that
    truncates what it echoes, a stream cut short). A prefix elsewhere is left: it is
    no key, and a common start such as ``sk-proj-`` is no secret. A shorter key is
    replaced only where it stands as a whole token (not next to a letter, digit,
    ``_`` or ``-``), so redacting ``"abc"`` leaves ``"abcdef"`` and ordinary words
    alone. Matching is case-sensitive: redact before changing case. ``text`` itself
    is returned when nothing was replaced. Never blocks.

    Example::

        >>> redact("key sk-0123456789abcdef, again sk-0123456789", "sk-0123456789abcdef")
        'key ***, again ***'
    """
    if not secret:
        return text
    if isinstance(secret, tuple):
        for one in secret:
            text = redact(text, one)
        return text
    if len(secret) < SHORT_SECRET:
        if secret not in text:
            return text
        return _pattern(secret).sub(REDACTED, text)
    if secret in text:
        # ``split`` cuts where ``replace`` would: left to right, without overlaps.
        pieces = text.split(secret)
        last = pieces[-1]
        cut = cut_key_at_end(last, secret)
        if cut is not None:
            pieces[-1] = last[:cut] + REDACTED
        return REDACTED.join(pieces)
    cut = cut_key_at_end(text, secret)
    return text if cut is None else text[:cut] + REDACTED


def cut_key_at_end(text: str, secret: str) -> int | None:
    """Where a cut-off key that ends ``text`` starts, or ``None``.

    A cut-off key is a proper prefix of ``secret`` of at least :data:`KEY_PREFIX`
    characters; the longest one that ends ``text`` counts. Never blocks.
    """
    longest = len(secret) - 1
    if longest < KEY_PREFIX:
        return None
    head = secret[:KEY_PREFIX]
    if head not in text:  # the usual string: no start of the key at all
        return None
    last = len(text) - KEY_PREFIX
    at = text.find(head, max(0, len(text) - longest))
    while at != -1 and at <= last:
        if secret.startswith(text[at:]):
            return at
        at = text.find(head, at + 1)
    return None


def redact_all(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` redacted (:func:`redact`), longest first.

    A secret of 8 characters or more is replaced wherever it occurs (and where a
    cut-off start of it ends ``text``); a shorter one only where it stands as a
    whole token. Never blocks.

    Example::

        >>> redact_all("refused Bearer tok-0123456789", ["Bearer tok-0123456789"])
        'refused ***'
    """
    return redact(text, secrets_of(*secrets))


def _userinfo(url: str) -> tuple[int, int, int] | None:
    """``(start, colon, end)`` of a URL's ``user:password`` part, or ``None``."""
    scheme = url.find("://")
    if scheme == -1:
        return None
    start = scheme + 3
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found != -1:
            end = min(end, found)
    at = url.rfind("@", start, end)
    colon = url.find(":", start, at) if at != -1 else -1
    return None if colon == -1 else (start, colon, at)


def url_password(url: str) -> str | None:
    """The password written in ``url`` (``scheme://user:password@host``), or ``None``.

    >>> url_password("https://me:pw@llm.test/v1")
    'pw'
    """
    found = _userinfo(url)
    if found is None:
        return None
    _, colon, at = found
    return url[colon + 1 : at] or None


def shown_url(url: str, secret: Secret) -> str:
    """``url`` as messages show it: its password as ``***``, the key redacted.

    >>> shown_url("https://me:pw@llm.test/v1?key=sk-0123456789abcdef", "sk-0123456789abcdef")
    'https://me:***@llm.test/v1?key=***'
    """
    found = _userinfo(url)
    if found is not None:
        _, colon, at = found
        url = f"{url[: colon + 1]}{REDACTED}{url[at:]}"
    return redact(url, secret)


def repair_unicode(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode replaced by U+FFFD.

    Surrogate pairs are joined into the character they encode first (an emoji whose
    two halves were decoded apart comes back whole); a lone surrogate becomes
    ``"\\ufffd"``. Valid text is returned as is. Never blocks.
    """
    if text.isascii() or utf8_ok(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean(text: str, secret: Secret) -> str:
    """A server string made safe: :func:`repair_unicode`, then :func:`redact`."""
    return redact(repair_unicode(text), secret)


def _is_high_surrogate(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


class StreamText:
    """One block of server text that arrives in fragments, made safe to show and store.

    :meth:`push` takes the next fragment and returns what can be shown now; a tail
    that may still turn into the API key, or a high surrogate whose low half may
    start the next fragment, is held back until :meth:`push` or :meth:`flush` can
    decide it. Without a key, valid text passes through unchanged and nothing is held
    but a trailing high surrogate.

    Several secrets (a tuple, longest first) are redacted one after the other: the
    text one secret lets through is pushed on to the next.

    Args:
        secret: the API key to redact (:func:`redact` rules), several secrets,
            or ``None``.
    """

    __slots__ = ("_before", "_next", "_pending", "_secret", "_short", "repaired")

    def __init__(self, secret: Secret) -> None:
        self._next: StreamText | None = None
        if isinstance(secret, tuple):
            if len(secret) > 1:
                self._next = StreamText(secret[1:] if len(secret) > 2 else secret[1])
            secret = secret[0] if secret else None
        self._secret = secret or None
        self._short = secret is not None and len(secret) < SHORT_SECRET
        self._pending = ""
        # The last character shown (before redaction): a short key's left boundary.
        self._before = ""
        #: How many code points were replaced by U+FFFD so far.
        self.repaired = 0

    def push(self, fragment: str) -> str:
        """Take the next fragment; return the text that is safe to show now."""
        text = self._pending + fragment if self._pending else fragment
        if self._secret is None and text.isascii():
            self._pending = ""
            return text
        tail = ""
        if text and _is_high_surrogate(text[-1]):
            text, tail = text[:-1], text[-1]
        text = self._repair(text)
        if self._secret is None:
            self._pending = tail
            return text
        shown, held = self._scrub(text, final=False)
        self._pending = held + tail
        return shown if self._next is None else self._next.push(shown)

    def flush(self) -> str:
        """The text still held back, decided as the end of the block.

        A cut-off key that ends the block is redacted here, as :func:`redact` does
        at the end of a string.
        """
        text = self._repair(self._pending)
        self._pending = ""
        if self._secret is not None and text:
            text = self._scrub(text, final=True)[0]
        if self._next is None:
            return text
        return self._next.push(text) + self._next.flush()

    def _repair(self, text: str) -> str:
        fixed = repair_unicode(text)
        if fixed is not text:
            self.repaired += fixed.count(REPLACEMENT) - text.count(REPLACEMENT)
        return fixed

    def _scrub(self, text: str, *, final: bool) -> tuple[str, str]:
        """``(shown, held)``: ``text`` redacted up to the tail that must wait."""
        secret = self._secret
        assert secret is not None
        size = len(text)
        if secret[0] not in text:  # the usual fragment: no key, no start of one
            if size:
                self._before = text[-1]
            return text, ""
        cut = size
        if not final:
            # The longest tail that more text could still turn into the key (for a
            # short key also the whole key: the next character decides the token).
            longest = len(secret) if self._short else len(secret) - 1
            at = text.find(secret[0], max(0, size - longest))
            while at != -1:
                if secret.startswith(text[at:]):
                    cut = at
                    break
                at = text.find(secret[0], at + 1)
        if cut == size and secret not in text:  # the usual fragment: nothing to do
            if final:
                # The end of the block: a cut-off key there is redacted.
                ends = cut_key_at_end(text, secret)
                if ends is not None:
                    return text[:ends] + REDACTED, ""
            if size:
                self._before = text[-1]
            return text, ""
        before = self._before if self._short else ""
        offset = len(before)
        pieces: list[str] = []
        position = 0
        if secret in before + text:
            for match in _pattern(secret).finditer(before + text):
                start, end = max(match.start() - offset, 0), match.end() - offset
                if end > cut:
                    cut = min(cut, start)
                    break
                pieces.append(text[position:start])
                pieces.append(REDACTED)
                position = end
        rest = text[position:cut]
        if final:
            ends = cut_key_at_end(rest, secret)
            if ends is not None:
                rest = rest[:ends] + REDACTED
        pieces.append(rest)
        if cut > 0:
            self._before = text[cut - 1]
        return "".join(pieces), text[cut:]


# ------------------------------------------------------------------ third-party logs

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


#: The live guards, by ``id``: weak references whose callback marks ``_live`` stale.
_guards: dict[int, weakref.ref[LogGuard]] = {}
_guards_lock = threading.Lock()
#: The secrets of the live guards, read without the lock while ``_stale`` is false.
_live: tuple[str, ...] = ()
#: Set when a guard is added or dies: the next read rebuilds ``_live``. The weakref
#: callback only sets it (it may run inside any code, the lock's holder included).
_stale = False


def _guard_died(ref: weakref.ref[LogGuard]) -> None:
    global _stale
    _stale = True


def _live_secrets() -> tuple[str, ...]:
    """The secrets of the live guards (rebuilt only after a guard came or went)."""
    global _live, _stale
    if not _stale:
        return _live
    with _guards_lock:
        _stale = False  # a guard dying from here on marks it stale again
        live: list[str] = []
        for key, ref in list(_guards.items()):
            guard = ref()
            if guard is None:
                del _guards[key]
            else:
                live.extend(guard.secrets)
        _live = tuple(live)
        return _live


def redact_live_secrets(text: str) -> str:
    """``text`` with the secret of every live model adapter redacted (:func:`redact` rules).

    The secrets are those :func:`guard_logs` holds for as long as their adapter lives
    (an adapter's API key and the password of its base URL), so a string built from
    anything a request or its route carries can be shown without them. ``text`` itself
    is returned when no secret is live or none occurs in it. Never blocks.

    Example::

        >>> from dsh_trio.llm._redact import guard_logs, redact_live_secrets
        >>> guard = guard_logs("sk-0123456789abcdef")  # an adapter with this key lives
        >>> redact_live_secrets("model m-sk-0123456789abcdef")
        'model m-***'
    """
    secrets = _live_secrets()
    if not secrets:
        return text
    return redact_all(text, secrets)


class _SecretFilter(logging.Filter):
    """Redacts the live secrets from a record's message, traceback and stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _live_secrets()
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
    its traceback and its stack (:func:`redact` rules) before any handler sees it.
    The loggers' levels are left as configured. Returns ``None`` when no secret is
    given. Never blocks.

    Example::

        >>> guard = guard_logs("sk-0123456789abcdef")
        >>> record = logging.makeLogRecord(
        ...     {"name": "httpx", "msg": "GET %s", "args": ("/?k=sk-0123456789abcdef",)}
        ... )
        >>> logging.getLogger("httpx").filter(record) and record.getMessage()
        'GET /?k=***'
    """
    global _stale
    kept = tuple(secret for secret in secrets if secret)
    if not kept:
        return None
    guard = LogGuard(kept)
    with _guards_lock:
        _guards[id(guard)] = weakref.ref(guard, _guard_died)
        _stale = True
    for name in GUARDED_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)  # idempotent
    return guard
