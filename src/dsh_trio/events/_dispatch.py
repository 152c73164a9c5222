"""The listener policy of an emit: call each listener, report one that fails, go on.

Every emit path calls :func:`dispatch`: :meth:`EventBus.emit`, :meth:`EmitTarget.emit`
and the live frames of a model attempt (which call it once per chunk, with the
listeners an :class:`EmitTarget` resolved).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["dispatch", "misfired"]

_logger = logging.getLogger("dsh_trio")


def dispatch(
    name: str, listeners: Iterable[Callable[..., Any]], payload: object
) -> None:
    """Call each of ``listeners`` with ``payload``, in order: the emit of ``name``.

    Synchronous; never blocks. A listener that raises an ``Exception`` is logged on
    the ``dsh_trio`` logger (``listener of event "<name>" raised``, with the
    traceback) and the remaining listeners still run; a listener that returns an
    awaitable has it closed and is reported (:func:`misfired`); the caller sees
    neither. Exceptions outside ``Exception`` (``KeyboardInterrupt``) propagate.

    Example::

        dispatch("agent/status", (print,), payload)  # print(payload)
    """
    for listener in listeners:
        try:
            result = listener(payload)
        except Exception:
            _logger.exception('listener of event "%s" raised', name)
            continue
        if result is not None:
            misfired(name, listener, result)


def misfired(name: str, listener: Callable[..., Any], result: object) -> None:
    """An emit listener returned ``result`` (not ``None``): close an awaitable and say why."""
    if not inspect.isawaitable(result):
        return
    # An async callable registered for an emit event: nothing would ever await it.
    # Close it so it does not warn later, and say why.
    close = getattr(result, "close", None)
    if close is not None:
        close()
    _logger.error(
        'listener of emit event "%s" returned an awaitable; emit listeners '
        "must be plain callables (%r)",
        name,
        listener,
    )
