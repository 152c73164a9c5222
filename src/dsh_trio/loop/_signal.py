"""The per-activity cancellation handle."""

from __future__ import annotations

import attrs
import trio

from ..errors import AgentCancelled
from ..values import CancelCause, HookCancel

__all__ = ["CancelSignal"]


def _describe(cause: CancelCause) -> str:
    if isinstance(cause, HookCancel):
        return f"agent cancelled by a hook: {cause.reason}"
    return f"agent cancelled ({cause.kind})"


@attrs.define(eq=False)
class CancelSignal:
    """The cancellation state of one activity (one turn, or one maintenance task).

    It owns the activity's :class:`trio.CancelScope`, created before the task that
    enters it, so a cancel issued before the activity reaches its first checkpoint is
    still honoured there. The first cause given wins; later causes change nothing.

    Hooks, tools and adapters receive it to read *why* they are being cancelled;
    they do not need to poll it: whatever they await raises :class:`trio.Cancelled`
    at its next checkpoint once the activity is cancelled.

    Attributes:
        cause: the first cause given, or ``None``. Read it; never assign it (a cancel
            goes through :meth:`Agent.cancel`, which records it here).
    """

    _scope: trio.CancelScope = attrs.field(factory=trio.CancelScope, alias="_scope")
    # A plain slot, not a property: the turn reads it between every two chunks.
    cause: CancelCause | None = attrs.field(default=None, init=False)
    _event: trio.Event | None = attrs.field(default=None, init=False)

    @property
    def cancelled(self) -> bool:
        """Whether the activity was cancelled."""
        return self.cause is not None

    @property
    def scope(self) -> trio.CancelScope:
        """The activity's cancel scope (entered by the activity's task)."""
        return self._scope

    def raise_if_cancelled(self) -> None:
        """Raise :class:`AgentCancelled` with the first cause if the activity was cancelled."""
        if self.cause is not None:
            raise AgentCancelled(self.cause)

    async def wait(self) -> None:
        """Return once the activity is cancelled (at once if it already is).

        This waits outside the activity's own scope semantics: a task awaiting it
        from inside the cancelled activity sees :class:`trio.Cancelled` instead.
        """
        if self.cause is not None:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def cancel(self, cause: CancelCause) -> bool:
        """Record ``cause`` if none is recorded yet and cancel the scope; True if it won.

        Runtime use only: the agent cancels its activity through here
        (:meth:`Agent.cancel`, a disposal, an abandoned turn wait). Never blocks.
        """
        if self.cause is not None:
            return False
        self.cause = cause
        self._scope.cancel(reason=_describe(cause))
        if self._event is not None:
            self._event.set()
        return True
