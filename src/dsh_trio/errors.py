"""Every exception dsh_trio raises on purpose.

All of them derive from :class:`DshError`. Each carries the structured facts a caller
needs (``SessionCorruptError.seq``, ``AgentCancelled.cause``) as attributes, and a
message that says what was wrong and where.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .values import CancelCause, LlmFailure, Message, TurnEndReason, Usage

__all__ = [
    "DshError",
    "AgentBusyError",
    "AgentDisposedError",
    "AgentReentrancyError",
    "AgentCancelled",
    "DuplicateMessageError",
    "InvalidSpliceError",
    "NoInitiatorError",
    "SessionNotFoundError",
    "SessionCorruptError",
    "InvalidEventError",
    "SessionReentrancyError",
    "SessionFormatError",
    "UnknownEventTypeError",
    "SessionLockedError",
    "SessionLeaseError",
    "InvalidSessionIdError",
    "PersistenceNotConfiguredError",
    "PersistenceError",
    "UnusableFileError",
    "LlmError",
    "ToolArgumentsError",
    "DuplicateProviderError",
    "ForkBoundaryError",
    "InvalidStreamChunkError",
    "PersistenceSeqError",
    "SessionExistsError",
    "ToolDefinitionError",
    "TurnFailedError",
    "PresetError",
    "PresetNotFoundError",
    "PresetLockedError",
    "AgentStartError",
    "ProfileError",
    "McpError",
]


class DshError(Exception):
    """Base class of every error dsh_trio raises deliberately."""


class AgentBusyError(DshError):
    """The agent already has active work (a turn or a maintenance task)."""


class AgentDisposedError(DshError):
    """The agent was disposed; it accepts no more input."""


class AgentReentrancyError(DshError, RuntimeError):
    """``run()`` or ``stream()`` was called from inside the agent's own activity.

    A tool or hook of an agent (code running in the agent's turn, or in a task that
    turn started) awaited that same agent's ``run()`` or entered its ``stream()``: the
    turn it would wait for cannot start before the current one ends, so the call
    raises at once instead of waiting forever. Nothing was queued. Queue the message
    with ``agent.followup()`` instead (it runs as the next turn), or await the agent
    from a task outside its turn.
    """


class AgentCancelled(DshError):
    """An activity was cancelled through :meth:`Agent.cancel`.

    Attributes:
        cause: the first :class:`CancelCause` given for the activity.
    """

    def __init__(self, cause: CancelCause) -> None:
        super().__init__(f"agent activity cancelled ({cause.kind})")
        self.cause = cause


class DuplicateMessageError(DshError, ValueError):
    """A message id is already pending in the inbox."""

    def __init__(self, message_id: str) -> None:
        super().__init__(f'message "{message_id}" is already pending')
        self.message_id = message_id


class InvalidSpliceError(DshError, ValueError):
    """An inbox splice does not fit the current inbox (bad target or coordinates)."""


class NoInitiatorError(DshError, LookupError):
    """No initiating agent is active in this context."""

    def __init__(self) -> None:
        super().__init__("no initiating agent is active")


class SessionNotFoundError(DshError, LookupError):
    """No persisted session exists under the given id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f'session "{session_id}" was not found')
        self.session_id = session_id


class SessionCorruptError(DshError, ValueError):
    """The session history is malformed.

    Attributes:
        seq: the sequence number of the first bad event, or ``None`` when the damage
            is not tied to one event (a bad header line, say).
        line: the line of the stored log holding the damage (1 is the header line),
            or ``None`` when the history did not come from a file.
    """

    def __init__(
        self, message: str, *, seq: int | None = None, line: int | None = None
    ) -> None:
        super().__init__(message)
        self.seq = seq
        self.line = line


class InvalidEventError(SessionCorruptError):
    """``Session.append`` refused an event that would make the history malformed.

    Raised for non-JSON data, surface-rule violations and badly shaped data of known
    event types. Nothing was appended. ``seq`` is the seq the event would have had.
    """

    def __init__(
        self, message: str, *, seq: int | None = None, type: str | None = None
    ) -> None:
        super().__init__(message, seq=seq)
        self.type = type


class SessionReentrancyError(DshError, RuntimeError):
    """A ``session/event`` listener tried to append to the same session synchronously."""


class SessionFormatError(DshError, ValueError):
    """A persisted session uses a format version this library does not read."""

    def __init__(self, message: str, *, version: object = None) -> None:
        super().__init__(message)
        self.version = version


class UnknownEventTypeError(SessionFormatError, SessionCorruptError):
    """A stored event's type is unknown to this reader, and the event is not ignorable.

    A log may hold events of types this build does not know (a newer version's, an
    application's own) only when they are marked ``"ignorable": true``; an event
    without the marker (or with ``"ignorable": false``) may change what the log
    means, so the log is refused, as the reference refuses it: a format this reader
    does not read (a :class:`SessionFormatError`), and, since it stops a load at one
    line, a :class:`SessionCorruptError` too (``except`` either). The log is left
    unchanged. An application declares its own types with
    :func:`dsh_trio.session.register_event_type` (or ``dsh-trio repair
    --event-type``) before loading.

    Example::

        try:
            session, writer = await load_session(persistence, "s1")
        except UnknownEventTypeError as exc:
            print(exc.event_type, exc.line)  # "app/charge" 22

    Attributes:
        event_type: the unknown type.
        seq: the event's sequence number.
        line: the line of the stored log holding it (1 is the header line), or
            ``None`` when the event did not come from a file.
        version: always ``None`` (the log's format version is this library's).
    """

    def __init__(
        self,
        message: str,
        *,
        event_type: str,
        seq: int | None = None,
        line: int | None = None,
    ) -> None:
        super().__init__(message)
        self.event_type = event_type
        self.seq = seq
        self.line = line


class SessionLockedError(DshError, RuntimeError):
    """Another owner holds the session file open for writing."""


class SessionLeaseError(SessionLockedError):
    """Another owner holds the session's write lease, or this writer lost it.

    Raised by a shared store (:class:`~dsh_trio.persistence.postgres.PostgresPersistence`)
    when opening a session another live process writes, and by a writer whose
    lease was taken over or expired: its fencing token no longer matches, so
    nothing of its batch was written.

    Attributes:
        session_id: the session whose lease was refused or lost.
    """

    def __init__(self, message: str, *, session_id: str | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id


class InvalidSessionIdError(DshError, ValueError):
    """A session id is not usable (empty, not a string, or unsafe as a file name)."""


class PersistenceNotConfiguredError(DshError, RuntimeError):
    """The operation needs session persistence, and the runtime has none."""


class PersistenceError(DshError, OSError):
    """A session's log could not be written; the unwritten events stay queued.

    :meth:`Agent.flush` raises it for a failed write, and so do the waking input
    methods (``send(..., wakeup=True)``, ``followup``, ``steer``) of an agent whose
    log is failing, until a flush succeeds. It is an :class:`OSError`: ``errno`` is
    the writer's when the writer raised an :class:`OSError`, and ``__cause__`` is
    what the writer raised.

    Attributes:
        session_id: the session whose log failed.
    """

    def __init__(
        self, message: str, *, session_id: str, cause: BaseException | None = None
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        if isinstance(cause, OSError):
            # errno only: setting strerror too would make str() drop the message.
            self.errno = cause.errno


class UnusableFileError(DshError, OSError):
    """A path holds something dsh_trio must not read or write as a file.

    Raised before anything is read or written through it:

    * a symbolic link where a session's lock file, log or side file belongs (it is
      never followed: a planted link could point at any file of the user's), or
      where a store keeps a session's directory or its project directory (the
      store's root itself may be a link);
    * a directory, FIFO, socket or device where a regular file must be (reading a
      FIFO or a device could wait forever, or never end);
    * a document larger than its limit (a preset file, a runtime config or a
      profile: 1 MiB).

    It is an :class:`OSError` (``errno`` is ``ELOOP`` for a link, ``EISDIR`` for a
    directory, ``ENOTDIR`` for a file where a directory belongs, ``EFBIG`` for a
    file over its limit, else ``None``).

    Attributes:
        path: the path.
        problem: what is there, in words (``"is a FIFO, not a regular file"``).
    """

    def __init__(self, path: str, problem: str, *, errno: int | None = None) -> None:
        super().__init__(f"{path} {problem}")
        self.path = path
        self.problem = problem
        # errno only: setting strerror too would make str() drop the message.
        self.errno = errno


class LlmError(DshError):
    """A model call failed; ``failure`` carries the facts (message, code, status, ...)."""

    def __init__(self, failure: LlmFailure) -> None:
        super().__init__(f"{failure.message} ({failure.code})")
        self.failure = failure


class ToolArgumentsError(DshError, ValueError):
    """Tool arguments do not match the tool's schema."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


class DuplicateProviderError(DshError, ValueError):
    """A model adapter is already registered for the provider."""

    def __init__(self, provider: str) -> None:
        super().__init__(
            f'a model adapter is already registered for provider "{provider}"'
        )
        self.provider = provider


class PersistenceSeqError(DshError, ValueError):
    """A batch handed to a session writer does not continue the written log.

    Attributes:
        expected: the seq the next written event must have.
        got: the seq the offending event has.
    """

    def __init__(self, message: str, *, expected: int, got: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.got = got


class SessionExistsError(DshError, FileExistsError):
    """A new session was requested under an id that is already persisted."""

    def __init__(self, session_id: str, where: str) -> None:
        super().__init__(f'session "{session_id}" already exists at {where}')
        self.session_id = session_id


class ForkBoundaryError(DshError, ValueError):
    """A fork boundary is not a valid cut of the session log.

    The boundary must name an existing event, and the prefix it ends must not stop
    inside an open turn.

    Attributes:
        boundary: the requested boundary seq.
    """

    def __init__(self, message: str, *, boundary: object) -> None:
        super().__init__(message)
        self.boundary = boundary


class InvalidStreamChunkError(DshError, TypeError):
    """A stream chunk (or its receive time) cannot be recorded losslessly."""


class ToolDefinitionError(DshError, TypeError):
    """A tool cannot be defined or registered as given.

    Raised at decoration time for a signature the schema cannot describe (an
    unsupported annotation, ``*args``, a synchronous body), at registration for a
    duplicate name or a value that is not a tool, and by ``Agent.run`` /
    ``Agent.stream`` for an ``output_type`` whose ``final_result`` tool cannot be
    described, or an agent that already offers a tool named ``final_result``.
    """


class _TurnOutcome(Protocol):
    """What :class:`TurnFailedError` carries: a ``dsh_trio.TurnResult``."""

    @property
    def turn(self) -> int | None: ...
    @property
    def reason(self) -> TurnEndReason: ...
    @property
    def text(self) -> str: ...
    @property
    def messages(self) -> tuple[Message, ...]: ...
    @property
    def usage(self) -> Usage | None: ...
    @property
    def failed(self) -> bool: ...
    @property
    def output(self) -> object: ...


class TurnFailedError(DshError):
    """A turn awaited through ``Agent.run`` / ``TurnStream.result`` errored or was aborted.

    Attributes:
        result: the turn's ``TurnResult``. ``result.reason`` is ``Errored(failure)``
            (the :class:`~dsh_trio.LlmFailure`: message, code, status, ...) or
            ``Aborted(cause)`` (the first :class:`CancelCause`); ``result.messages``
            and ``result.text`` hold what the turn wrote before it ended.
        agent_id: the agent whose turn it was, when known.
    """

    def __init__(self, result: _TurnOutcome, *, agent_id: str | None = None) -> None:
        where = "a turn" if result.turn is None else f"turn {result.turn}"
        if agent_id is not None:
            where += f' of agent "{agent_id}"'
        reason = result.reason
        failure = getattr(reason, "error", None)
        cause = getattr(reason, "reason", None)
        if failure is not None:
            what = f"errored: {failure.message} ({failure.code})"
        elif cause is not None:
            detail = getattr(cause, "reason", None)
            what = f"was aborted ({cause.kind}{': ' + detail if detail else ''})"
            if result.turn is None:
                what += (
                    ": its message was removed from the inbox before a turn claimed it"
                )
        else:
            what = f"ended {reason!r}"
        super().__init__(f"{where} {what}")
        self.result = result
        self.agent_id = agent_id


# --------------------------------------------------------------------------- composition


class PresetError(DshError, ValueError):
    """A preset cannot be registered, mounted or selected as asked.

    The message names the preset and, for a broken one, the plugin row that failed.
    """


class PresetNotFoundError(PresetError, LookupError):
    """No preset is registered under the id; the message lists the available ids.

    Attributes:
        preset_id: the id that was asked for.
        available: the registered ids, sorted.
    """

    def __init__(self, preset_id: str, available: tuple[str, ...]) -> None:
        listed = ", ".join(f'"{a}"' for a in available) or "none"
        super().__init__(f'no preset "{preset_id}" is registered (available: {listed})')
        self.preset_id = preset_id
        self.available = available


class PresetLockedError(PresetError):
    """An agent's preset can no longer change: it has an open or a finished turn."""


class AgentStartError(DshError, RuntimeError):
    """A declared agent (``open_runtime(config=...)``) failed to start.

    Attributes:
        session_id: the declared agent's id.
        error: the exception its start raised.
    """

    def __init__(self, session_id: str, error: BaseException) -> None:
        super().__init__(f'declared agent "{session_id}" failed to start: {error!r}')
        self.session_id = session_id
        self.error = error


class ProfileError(DshError, ValueError):
    """The default-model profile (a TOML file) cannot be read or holds a bad selection.

    Attributes:
        path: the profile file.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"profile {path}: {problem}")
        self.path = path


class McpError(DshError):
    """An MCP server could not be started, reached or listed, or a call to it failed.

    Raised by ``dsh_trio.mcp.open_stdio`` / ``open_http`` when the server cannot be
    started, the connection or the handshake fails, or its tool list cannot be read.
    A tool call that fails this way becomes an error result, with ``code`` as its
    error code. The message never holds the values of the headers given to the
    connection, nor a URL's password.

    Attributes:
        code: ``MCP_UNAVAILABLE`` (not started or not reached), ``MCP_DISCONNECTED``
            (the connection closed, e.g. the server process exited), ``MCP_CLOSED``
            (its ``async with`` block has ended), ``MCP_ERROR`` (the server answered
            with a JSON-RPC error, or with something that is not a valid result).
    """

    def __init__(self, message: str, *, code: str = "MCP_ERROR") -> None:
        super().__init__(message)
        self.code = code
