"""Text from a model server, made safe to show and store: no API key, valid Unicode.

Everything a server or its transport sends (error messages, codes, headers, the text of
an event, streamed content, the text of any exception) passes through here before it
reaches an error, the log or the session. :func:`redact` is the one place the API key is
removed (also a key cut off at the end of a string), and with it every secret-looking
value of the adapter's own headers (:func:`header_secrets`); :func:`repair_unicode` replaces what
UTF-8 cannot encode (lone surrogates, as JSON's ``"\\ud800"`` decodes). :func:`shown_url`
is a URL as messages show it. Text that arrives in fragments is made safe by
:class:`~._stream_text.StreamText` with the same rules, and the records the HTTP stack
logs itself by :func:`~._log_guard.guard_logs`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias

from ..values import utf8_ok

__all__ = [
    "KEY_PREFIX",
    "REDACTED",
    "REPLACEMENT",
    "SHORTEST_HEADER_SECRET",
    "SHORT_SECRET",
    "Secret",
    "clean",
    "cut_key_at_end",
    "header_secrets",
    "redact",
    "redact_all",
    "repair_unicode",
    "secret_pattern",
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
def secret_pattern(secret: str) -> re.Pattern[str]:
    """The pattern that finds ``secret`` where :func:`redact` replaces it (cached)."""
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
        return secret_pattern(secret).sub(REDACTED, text)
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
