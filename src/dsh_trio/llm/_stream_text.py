"""Server text that arrives in fragments, made safe as if it had come whole.

:class:`StreamText` applies the rules of :func:`~._redact.redact` and
:func:`~._redact.repair_unicode` to a block of streamed text, so a key or an emoji's
surrogate pair split across two events is handled as if it had come whole.
"""

from __future__ import annotations

from ._redact import (
    REDACTED,
    REPLACEMENT,
    SHORT_SECRET,
    Secret,
    cut_key_at_end,
    repair_unicode,
    secret_pattern,
)

__all__ = ["StreamText"]


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
        secret: the API key to redact (:func:`~._redact.redact` rules), several secrets,
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

        A cut-off key that ends the block is redacted here, as :func:`~._redact.redact` does
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
            for match in secret_pattern(secret).finditer(before + text):
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
