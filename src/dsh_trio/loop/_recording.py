"""Whether an agent's session log is written: the recorder gate of one agent.

An agent whose session is recorded waits for its log before a turn reports success
(:meth:`RecordingGate.wait_written`), and takes no waking input while the log's writes
fail (:meth:`RecordingGate.refusal`). :class:`RecordingGate` owns the recorder that
answers both; the agent's :class:`~._work.AgentWork` holds one and asks it.
"""

from __future__ import annotations

from typing import Protocol

import trio

from ..errors import PersistenceError

__all__ = ["RecordingGate", "SessionRecording"]


class SessionRecording(Protocol):
    """What an agent needs of the recorder that writes its session's log."""

    @property
    def fault(self) -> PersistenceError | None:
        """The failure of the last write while writes fail, else ``None``."""
        ...

    async def flush(self) -> None:
        """Write and fsync everything queued; raise :class:`PersistenceError`."""
        ...

    async def wait_written(self) -> None:
        """Write everything queued; raise :class:`PersistenceError`."""
        ...


class RecordingGate:
    """The recorder writing one agent's session log, once it records; runtime use only.

    Before :meth:`attach` (an agent whose session is not persisted) nothing is ever
    refused and there is nothing to wait for. Synchronous methods never block.

    Example::

        gate = RecordingGate("agent-1")
        assert gate.refusal() is None  # no recorder: nothing refused
        gate.attach(recorder)  # the runtime, once the session records
    """

    __slots__ = ("_recorder", "_session_id")

    def __init__(self, session_id: str) -> None:
        self._session_id = session_id
        self._recorder: SessionRecording | None = None

    def attach(self, recorder: SessionRecording) -> None:
        """Wait on ``recorder`` from now on (set once, when the session records)."""
        self._recorder = recorder

    def refusal(self) -> PersistenceError | None:
        """The error refusing waking input while the log cannot be written, else ``None``."""
        recorder = self._recorder
        if recorder is None or (fault := recorder.fault) is None:
            return None
        agent_id = self._session_id
        error = PersistenceError(
            f'agent "{agent_id}" takes no waking input while its session log cannot '
            f"be written ({fault}); await agent.flush() to retry the writes",
            session_id=agent_id,
            cause=fault.__cause__,
        )
        error.__cause__ = fault.__cause__ or fault
        return error

    @property
    def failing(self) -> bool:
        """Whether the log's writes fail now (a waking input would be refused)."""
        recorder = self._recorder
        return recorder is not None and recorder.fault is not None

    async def flush(self) -> None:
        """``Agent.flush``: write and fsync what the session appended (see there)."""
        recorder = self._recorder
        if recorder is None:
            await trio.lowlevel.checkpoint()
            return
        await recorder.flush()

    async def wait_written(self) -> None:  # noqa: ASYNC910  # with no recorder there is nothing to wait for
        """Wait until the turn's events so far are written (before its ``turn/end``).

        A turn reports no success on a log that is not written.

        Raises:
            PersistenceError: they could not be written.
        """
        recorder = self._recorder
        if recorder is not None:
            await recorder.wait_written()
