"""How an adapter's exception is told: its rendered cause chain, and its failure.

:func:`error_chain` renders an exception and its explicit causes as one line;
:func:`failure_of` is the :class:`~dsh_trio.values.LlmFailure` an exception that left an
adapter stands for. The runtime and the OpenAI-compatible adapter's error mapping both
tell exceptions this way.
"""

from __future__ import annotations

from ..errors import LlmError
from ..values import LlmFailure

__all__ = ["error_chain", "failure_of"]


def _render(exc: BaseException) -> str:
    try:
        text = str(exc.message) if isinstance(exc, BaseExceptionGroup) else str(exc)
    except Exception:  # a hostile __str__ must not break the rendering
        return "<unrenderable value>"
    return text or type(exc).__name__


def _chain(exc: BaseException, seen: set[int]) -> str:
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None:
        if id(current) in seen:
            parts.append("<circular cause>")
            break
        seen.add(id(current))
        text = _render(current)
        if isinstance(current, BaseExceptionGroup):
            members = "; ".join(_chain(member, seen) for member in current.exceptions)
            text = f"{text} [{members}]"
        parts.append(text)
        current = current.__cause__
    return ": ".join(parts)


def error_chain(exc: BaseException) -> str:
    """Render ``exc`` and its explicit causes as ``message: cause: ...``.

    Exception-group members are listed in brackets after the group's message. An
    exception with an empty message shows its type name; one whose ``str`` fails shows
    ``<unrenderable value>``; a cause seen before ends the text with
    ``<circular cause>``.

    Example::

        >>> try:
        ...     raise RuntimeError("request failed") from OSError("connection reset")
        ... except RuntimeError as exc:
        ...     error_chain(exc)
        'request failed: connection reset'
    """
    return _chain(exc, set())


def failure_of(exc: Exception) -> LlmFailure:
    """The :class:`LlmFailure` an adapter exception stands for.

    An :class:`LlmError` keeps its own failure; any other exception becomes an
    ``UNKNOWN`` failure whose message is :func:`error_chain` of it.
    """
    if isinstance(exc, LlmError):
        return exc.failure
    return LlmFailure(error_chain(exc), "UNKNOWN")
