"""``dsh-trio chat PROMPT``: one turn, with piped input joined to the prompt.

``git diff | dsh-trio chat "review this"`` sends one message: the piped text first,
then a blank line, then the prompt (as ``llm`` does, stdin first; ``llm`` joins the
two with a space, the blank line keeps the prompt apart from the text it is about).
"""

from __future__ import annotations

import io
from typing import TextIO

__all__ = ["OneShotInput", "one_shot_text"]


def one_shot_text(prompt: str, stdin: TextIO | None) -> str:
    """The one message of ``dsh-trio chat PROMPT``: piped stdin, a blank line, ``PROMPT``.

    ``stdin`` is read to its end unless it is a terminal (then ``PROMPT`` alone is the
    message). Its trailing line ends are dropped, nothing else: indentation and inner
    blank lines are kept. Empty or blank input, and input that cannot be read (no
    stdin, a closed one), leave ``PROMPT`` alone. Blocks until stdin ends.

    >>> one_shot_text("summarize this", io.StringIO("line 1\\n  line 2\\n"))
    'line 1\\n  line 2\\n\\nsummarize this'
    """
    if stdin is None:
        return prompt
    try:
        if stdin.isatty():
            return prompt
        piped = stdin.read()
    except (OSError, ValueError):  # closed, or not readable (a test's stand-in)
        return prompt
    if not piped.strip():
        return prompt
    return piped.rstrip("\r\n") + "\n\n" + prompt


class OneShotInput(io.StringIO):
    """The chat's input for one message: ``readline`` returns the whole text at once.

    The chat reads its input line by line; this makes a message of several lines one
    line to it, so it becomes one turn. A message that starts with ``/`` is sent as a
    message, not run as a chat command (it is escaped as ``//``); a bare ``PROMPT``
    keeps the commands (``dsh-trio chat /help``), so only pass joined text here.
    Never blocks.
    """

    def __init__(self, text: str) -> None:
        body = text.lstrip()
        # The chat runs "/word" as a command and sends "//..." as "/...".
        super().__init__(("/" + body if body.startswith("/") else text) + "\n")

    def readline(self, size: int | None = -1, /) -> str:  # type: ignore[override]  # typeshed: _IOBase.readline is bytes
        """The whole remaining text (``""`` at the end), whatever ``size`` says."""
        return self.read()
