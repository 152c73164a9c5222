"""Agent handles and disposal records, and the start of a session's recording."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Self

import attrs
import trio

from ..persistence import SessionRecorder

if TYPE_CHECKING:
    from ..loop import Agent, AgentWork
    from ..persistence import SessionPersistence as _Persistence, SessionWriter
    from ._registry import AgentRegistry

__all__ = ["AgentHandle", "dispose_on_exit", "disposing", "start_recording"]


@attrs.define(eq=False)
class _Disposal:
    """One agent's teardown, as every ``dispose()`` caller sees it."""

    done: trio.Event = attrs.field(factory=trio.Event)
    errors: list[Exception] = attrs.field(factory=list)


class AgentHandle:
    """The owner's handle on an agent: ``.agent`` and :meth:`dispose`.

    Usable as ``async with handle:`` (disposes on exit).
    """

    __slots__ = ("__weakref__", "_disposal", "_registry", "_work")

    def __init__(self, work: AgentWork, registry: AgentRegistry) -> None:
        self._work = work
        self._registry = registry
        self._disposal: _Disposal | None = None

    @property
    def agent(self) -> Agent:
        """The agent."""
        return self._work.agent

    async def dispose(self) -> None:
        """Dispose the agent: children first, cancel, drain, unwind, flush, unregister.

        Idempotent: concurrent and later callers wait for the same teardown and see
        the same outcome. The teardown runs in the runtime's nursery, shielded, so
        cancelling a caller only stops that caller's wait.

        Raises:
            Exception: the single failure collected during teardown, or an
                :class:`ExceptionGroup` of several; cleanup still completed.
        """
        if self._disposal is None:
            self._disposal = self._registry.dispose_soon(self._work)
        disposal = self._disposal
        await disposal.done.wait()
        errors = disposal.errors
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise ExceptionGroup(
                f'agent "{self._work.session.id}" disposal failed', errors
            )

    async def __aenter__(self) -> Self:
        await trio.lowlevel.checkpoint()
        return self

    async def __aexit__(
        self, exc_type: object, exc: BaseException | None, tb: object
    ) -> None:
        """Dispose the agent; if the block raised and disposal fails too, both are
        raised together (see :func:`dispose_on_exit`)."""
        await dispose_on_exit(self, exc)  # noqa: ASYNC102  # dispose_on_exit shields the disposal, which ends once every activity is cancelled


async def dispose_on_exit(handle: AgentHandle, exc: BaseException | None) -> None:
    """Dispose ``handle``'s agent as a block that owns it exits; never mask ``exc``.

    Runs shielded: disposal cancels every activity first, so it ends, and it must end
    before the block is left. When the block raised ``exc`` and disposal fails too,
    ``exc`` and the disposal failures are raised together in one
    :class:`BaseExceptionGroup`, so ``except*`` on either matches (as
    ``open_runtime`` does); without ``exc`` the disposal failure is raised as is.
    """
    with trio.CancelScope(shield=True):
        try:
            await handle.dispose()  # noqa: ASYNC102  # disposal cancels every activity first, so it ends; it must end before we leave
        except Exception as failed:
            if exc is None or isinstance(exc, GeneratorExit):
                raise
            failures = (
                list(failed.exceptions)
                if isinstance(failed, ExceptionGroup)
                else [failed]
            )
            raise BaseExceptionGroup(  # noqa: ASYNC104  # exc (Cancelled too) is re-raised inside the group
                "the block raised, and disposing its agent failed", [exc, *failures]
            ) from None


@asynccontextmanager
async def disposing(handle: AgentHandle) -> AsyncIterator[Agent]:
    """A block that owns ``handle``'s agent: yields it, disposes it on exit.

    If the block raises and the disposal fails too, both are raised together (see
    :func:`dispose_on_exit`).
    """
    try:
        yield handle.agent
    except BaseException as exc:
        # Disposal failures and the block's exception come out together.
        await dispose_on_exit(handle, exc)  # noqa: ASYNC102  # dispose_on_exit shields the disposal, which ends once every activity is cancelled
        raise
    await dispose_on_exit(handle, None)


async def start_recording(  # private; a resumed writer may have nothing left to write
    persistence: _Persistence,
    work: AgentWork,
    writer: SessionWriter | None,
    spawn: Callable[..., None],
) -> SessionRecorder:
    session = work.session
    if writer is None:
        writer = await persistence.create(session.header)
    try:
        while writer.durable_seq < session.next_seq:
            await writer.append(session.events[writer.durable_seq :], sync=True)
    except BaseException:
        with trio.CancelScope(shield=True):
            await writer.close()
        raise
    # No checkpoint between the check above and subscribing: nothing can slip past.
    return SessionRecorder(  # noqa: ASYNC910
        session,
        writer,
        durability=persistence.durability,
        spawn=spawn,
        on_fault=work.persistence_failed,
    )
