"""How the machine reports: its exceptions and its hypothesis statistics."""

from __future__ import annotations

from hypothesis import event as hypothesis_event
from hypothesis.control import currently_in_test_context

from ...values import SessionEvent

__all__ = ["InvariantViolation", "MaintenanceFailure", "note", "violation_at"]


class InvariantViolation(AssertionError):
    """The agent under test broke one of the machine's invariants (the message says which)."""


class MaintenanceFailure(Exception):
    """What a maintenance task of the machine raises when told to fail."""


def violation_at(event: SessionEvent, what: str) -> InvariantViolation:
    """An :class:`InvariantViolation` located at one session event."""
    return InvariantViolation(f"session event #{event.seq} ({event.type}): {what}")


def note(label: str) -> None:
    """Count ``label`` in hypothesis's statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        hypothesis_event(label)
