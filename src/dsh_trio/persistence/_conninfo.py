"""PostgreSQL connection strings as messages show them: every password masked.

libpq takes a connection string in two forms, and :func:`mask_conninfo` masks the
password in both, in every spelling libpq accepts:

* a URI, ``postgresql://`` or ``postgres://``: the password of ``user:password@``
  (before the last ``@``: an unencoded ``@``, ``/``, ``?`` or ``:`` in a password
  is still masked), and ``password`` / ``sslpassword`` query parameters, their names
  matched case-insensitively and percent-decoded (``?p%61ssword=`` is libpq's
  ``password``). Any other ``scheme://`` is read the same way, and also as keywords
  (which is how libpq reads it), so a mistyped scheme does not show its password.
* ``keyword = value`` pairs separated by whitespace: the values of ``password`` and
  ``sslpassword``, unquoted (a backslash escapes the next character, a space too) or
  single-quoted (``\\'`` and ``\\\\`` escapes; an unterminated quote masks to the
  end). A password keyword without its ``=`` (``password secret``) masks the next
  word, and a word that starts with one (``password:secret``) masks its rest.

A ``dbname`` value that is itself a connection string (libpq expands one) is masked
the same way. Where a string is ambiguous, more is masked rather than less. Parsing
needs no driver: the command line masks a string before anything connects.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Final

__all__ = ["MASK", "mask_conninfo", "mask_in"]

#: What a password is shown as.
MASK: Final = "***"
#: The keywords whose values are secrets (compared in lower case).
_SECRETS: Final = ("password", "sslpassword")
#: A URI's start: a scheme and ``://`` (leading blanks allowed).
_URI: Final = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
#: The blanks between pairs: the C locale's ``isspace``, as libpq reads the string.
#: A blank libpq would not split at (a no-break space) makes a value longer here,
#: so more is masked, never less.
_BLANKS: Final = frozenset(" \t\n\v\f\r")


def mask_conninfo(conninfo: str) -> str:
    """``conninfo`` with every password in it shown as ``***``.

    Everything else is shown as written. Never raises on a malformed string.

    Example::

        >>> mask_conninfo("postgresql://app:s3cret@db:5432/agents?sslmode=require")
        'postgresql://app:***@db:5432/agents?sslmode=require'
        >>> mask_conninfo("host=db user=app password = 'se cr\\\\'et' dbname=agents")
        'host=db user=app password = *** dbname=agents'
    """
    return _scan(conninfo)[0]


def mask_in(text: str, conninfo: str) -> str:
    """``text`` (a driver's message about ``conninfo``) with its passwords masked.

    libpq quotes the whole string, or the token it could not read, in some of its
    errors: both the string and each password found in it (as written and
    percent-decoded) are masked wherever ``text`` holds them.

    Example::

        >>> mask_in('invalid percent-encoded token: "s%zz"', "postgresql://u:s%zz@db/x")
        'invalid percent-encoded token: "***"'
    """
    masked, secrets = _scan(conninfo)
    if conninfo and conninfo in text:
        text = text.replace(conninfo, masked)
    found = {s for secret in secrets for s in (secret, _unquote(secret)) if s}
    for secret in sorted(found, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, MASK)
        else:  # a short password: only where it stands alone, not inside words
            text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", MASK, text)
    return text


def _unquote(text: str) -> str:
    return urllib.parse.unquote(text, errors="replace")


def _scan(conninfo: str) -> tuple[str, list[str]]:
    """The masked string and the secrets it held (as written)."""
    match = _URI.match(conninfo)
    if match is None:
        return _scan_keywords(conninfo)
    masked, secrets = _scan_uri(conninfo, match.end())
    # libpq reads a string with another scheme (or blanks before it) as keywords.
    masked, more = _scan_keywords(masked)
    return masked, secrets + more


def _scan_uri(uri: str, start: int) -> tuple[str, list[str]]:
    secrets: list[str] = []
    rest = uri[start:]
    # Query parameters: every ``name=value`` after a ``?`` or ``&``.
    pieces = re.split(r"([?&])", rest)
    for i in range(2, len(pieces), 2):
        name, equals, value = pieces[i].partition("=")
        if not equals:
            continue
        key = _unquote(name).strip().lower()
        if key in _SECRETS:
            secrets.append(value)
            pieces[i] = f"{name}={MASK}"
        elif key == "dbname":
            inner, found = _scan(_unquote(value))
            if found:
                secrets.extend(found)
                pieces[i] = f"{name}={urllib.parse.quote(inner, safe='*')}"
    rest = "".join(pieces)
    # The user information ends at the last ``@``: a password may hold any character.
    at = rest.rfind("@")
    if at != -1:
        user, colon, password = rest[:at].partition(":")
        if colon:
            secrets.append(password)
            rest = f"{user}:{MASK}{rest[at:]}"
    return uri[:start] + rest, secrets


def _scan_keywords(conninfo: str) -> tuple[str, list[str]]:
    """``keyword = value`` pairs, read as libpq's ``conninfo_parse`` reads them."""
    text, size = conninfo, len(conninfo)
    out: list[str] = []
    secrets: list[str] = []
    i = 0
    while i < size:
        start = i
        while i < size and text[i] in _BLANKS:
            i += 1
        if i == size:
            out.append(text[start:])
            break
        keyword_at = i
        while i < size and text[i] != "=" and text[i] not in _BLANKS:
            i += 1
        keyword, after_keyword = text[keyword_at:i], i
        key = keyword.lower()
        while i < size and text[i] in _BLANKS:
            i += 1
        if i < size and text[i] == "=":
            i += 1
            while i < size and text[i] in _BLANKS:
                i += 1
        elif key not in _SECRETS:
            # A word without ``=`` (libpq refuses it). ``password:secret`` is one
            # word: what follows the keyword is masked.
            word = next((w for w in _SECRETS[::-1] if key.startswith(w)), None)
            if word is not None and len(keyword) > len(word):
                secrets.append(keyword[len(word) :])
                out.append(text[start : keyword_at + len(word)] + MASK)
            else:
                out.append(text[start:after_keyword])
            i = after_keyword
            continue
        # else ``password secret``: libpq refuses it, and the next word is the value.
        value_at = i
        i = _value_end(text, i)
        value = text[value_at:i]
        if key in _SECRETS and value:
            secrets.append(value)
            out.append(text[start:value_at] + MASK)
            continue
        if key == "dbname" and value:
            inner, found = _scan(_decode_value(value))
            if found:
                secrets.extend(found)
                quoted = inner.replace("\\", "\\\\").replace("'", "\\'")
                out.append(f"{text[start:value_at]}'{quoted}'")
                continue
        out.append(text[start:i])
    return "".join(out), secrets


def _value_end(text: str, i: int) -> int:
    """Where the value that starts at ``i`` ends (an unterminated quote: the end)."""
    size = len(text)
    if i < size and text[i] == "'":
        i += 1
        while i < size:
            if text[i] == "\\":
                i += 2
            elif text[i] == "'":
                return i + 1
            else:
                i += 1
        return size
    while i < size and text[i] not in _BLANKS:
        i += 2 if text[i] == "\\" else 1
    return min(i, size)


def _decode_value(value: str) -> str:
    """A value as libpq reads it: quotes removed, backslash escapes resolved."""
    if value.startswith("'"):
        value = value[1:-1] if value.endswith("'") and len(value) > 1 else value[1:]
    return re.sub(r"\\(.)", r"\1", value, flags=re.DOTALL)
