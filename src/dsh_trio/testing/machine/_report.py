"""How the machine reports: its exceptions, its deliberate failures and its hypothesis statistics."""

from __future__ import annotations

import logging

from hypothesis import event as hypothesis_event
from hypothesis.control import currently_in_test_context

from ...values import SessionEvent

__all__ = [
    "DeliberateFailures",
    "InvariantViolation",
    "ListenerFailure",
    "MaintenanceFailure",
    "note",
    "violation_at",
]


class InvariantViolation(AssertionError):
    """The agent under test broke one of the machine's invariants (the message says which)."""


class MaintenanceFailure(Exception):
    """What a maintenance task of the machine raises when told to fail."""


class ListenerFailure(Exception):
    """What the machine's raising listeners raise."""


class DeliberateFailures(logging.Filter):
    """Keeps the machine's own deliberate failures off the ``dsh_trio`` logger.

    The runtime logs every exception a listener raises, with its traceback; the
    machine's raising listeners raise on purpose, hundreds of times a run, and a
    failing test's report would show each traceback above the shrunk program.
    While installed, a record whose exception is one of ``kinds`` is dropped and
    its message kept in :attr:`seen`; every other record (a real failure) passes.

    Example::

        quiet = DeliberateFailures((ListenerFailure,))
        quiet.install()
        try:
            ...  # run the example
        finally:
            quiet.uninstall()
    """

    def __init__(self, kinds: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.kinds = kinds
        #: ``"<message>: <exception>"`` of each record dropped, in order.
        self.seen: list[str] = []
        self._logger = logging.getLogger("dsh_trio")

    def filter(self, record: logging.LogRecord) -> bool:
        """Drop (``False``) a record of a deliberate failure, keeping its message."""
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, self.kinds):
            self.seen.append(f"{record.getMessage()}: {error!r}")
            return False
        return True

    def install(self) -> None:
        """Start filtering the ``dsh_trio`` logger."""
        self._logger.addFilter(self)

    def uninstall(self) -> None:
        """Stop filtering (idempotent)."""
        self._logger.removeFilter(self)


def violation_at(event: SessionEvent, what: str) -> InvariantViolation:
    """An :class:`InvariantViolation` located at one session event."""
    return InvariantViolation(f"session event #{event.seq} ({event.type}): {what}")


def note(label: str) -> None:
    """Count ``label`` in hypothesis's statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        hypothesis_event(label)
