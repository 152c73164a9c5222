"""How ``dsh-trio`` ends: a chat's exit status from its last turn, a failure's one line."""

from __future__ import annotations

from ..values import Completed, Errored, MaxTokens, TurnEndReason

__all__ = ["exit_status", "innermost", "one_line"]


def exit_status(last: TurnEndReason | None, *, one_shot: bool) -> int:
    """``0``, or ``1`` when the chat's last turn failed.

    A chat read from a terminal or a pipe fails only when its last turn ended
    ``Errored``. A one-shot chat (``dsh-trio chat PROMPT``) is run for its reply, so
    any turn that did not complete fails it: ``Blocked`` (a hook refused it),
    ``Aborted`` (Ctrl-C, a signal) and ``Errored``. A turn cut at the output-token
    limit (``MaxTokens``) printed its reply and passes, as does a chat that ran no
    turn (``/help``). Pure; never blocks.

    >>> from dsh_trio.values import Blocked
    >>> exit_status(Blocked(), one_shot=True), exit_status(Blocked(), one_shot=False)
    (1, 0)
    """
    if isinstance(last, Errored):
        return 1
    if one_shot and last is not None and not isinstance(last, (Completed, MaxTokens)):
        return 1
    return 0


def innermost(exc: BaseException) -> BaseException:
    """``exc`` with groups of one unwrapped to their member."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def one_line(exc: BaseException) -> str:
    """The failure in one line; a group of one is unwrapped to its member."""
    exc = innermost(exc)
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
