"""Text from a model server, made safe to show and store: no API key, valid Unicode.

Everything a server or its transport sends (error messages, codes, headers, the text of
an event, streamed content) passes through here before it reaches an error, the log or
the session. :func:`redact` is the one place the API key is removed; :func:`repair_unicode`
replaces what UTF-8 cannot encode (lone surrogates, as JSON's ``"\\ud800"`` decodes).
:class:`StreamText` applies both to text that arrives in fragments, so a key or an
emoji's surrogate pair split across two events is handled as if it had come whole.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from ..values import utf8_ok

__all__ = [
    "REDACTED",
    "SHORT_SECRET",
    "StreamText",
    "clean",
    "redact",
    "repair_unicode",
]

#: What a secret is replaced with.
REDACTED: Final = "***"
#: Keys shorter than this are redacted only as whole tokens (see :func:`redact`).
SHORT_SECRET: Final = 8
#: What :func:`repair_unicode` puts in place of a code point UTF-8 cannot encode.
REPLACEMENT: Final = "\ufffd"


@functools.lru_cache(maxsize=8)
def _pattern(secret: str) -> re.Pattern[str]:
    escaped = re.escape(secret)
    if len(secret) >= SHORT_SECRET:
        return re.compile(escaped)
    # A token is a run of word characters and hyphens (as keys are written), so a
    # short key is not found inside a longer word or key.
    return re.compile(rf"(?<![\w-]){escaped}(?![\w-])")


def redact(text: str, secret: str | None) -> str:
    """``text`` with the API key ``secret`` replaced by ``***``.

    A key of :data:`SHORT_SECRET` (8) characters or more is replaced wherever it
    occurs; a shorter one only where it stands as a whole token (not next to a
    letter, digit, ``_`` or ``-``), so redacting ``"abc"`` leaves ``"abcdef"`` and
    ordinary words alone. Matching is case-sensitive: redact before changing case.
    Never blocks.
    """
    if not secret or secret not in text:
        return text
    if len(secret) >= SHORT_SECRET:
        return text.replace(secret, REDACTED)
    return _pattern(secret).sub(REDACTED, text)


def repair_unicode(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode replaced by U+FFFD.

    Surrogate pairs are joined into the character they encode first (an emoji whose
    two halves were decoded apart comes back whole); a lone surrogate becomes
    ``"\\ufffd"``. Valid text is returned as is. Never blocks.
    """
    if text.isascii() or utf8_ok(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean(text: str, secret: str | None) -> str:
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

    Args:
        secret: the API key to redact (:func:`redact` rules), or ``None``.
    """

    __slots__ = ("_before", "_pending", "_secret", "_short", "repaired")

    def __init__(self, secret: str | None) -> None:
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
        return shown

    def flush(self) -> str:
        """The text still held back, decided as the end of the block."""
        text = self._repair(self._pending)
        self._pending = ""
        if self._secret is None or not text:
            return text
        return self._scrub(text, final=True)[0]

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
        pieces.append(text[position:cut])
        if cut > 0:
            self._before = text[cut - 1]
        return "".join(pieces), text[cut:]
