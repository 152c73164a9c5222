"""The live sessions of a runtime, and mail to any session.

:class:`SessionStore` (``runtime.sessions``) owns the read view of the session table
the agent registry keeps, and the mail room that sends mail to a session wherever
its agent lives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..loop import TurnResult, user_message
from ..values import CancelCause, SessionId, UserCancel, UserMessage, to_json
from ._mail import MailRoom, encode_cancel, pg_store

if TYPE_CHECKING:
    from ..session import Session
    from ._runtime import Runtime

__all__ = ["SessionStore"]


class SessionStore:
    """The live sessions of a runtime (one per live agent), and mail to any session.

    :meth:`get` and :meth:`list` are a read view of the table the agent registry
    keeps as agents come and go. With the PostgreSQL store
    (:class:`~dsh_trio.persistence.postgres.PostgresPersistence`), :meth:`followup`,
    :meth:`steer` and :meth:`cancel` send mail to a session wherever its agent
    lives, and :meth:`wait` follows a mailed message to the end of its turn.
    """

    def __init__(
        self,
        sessions: Mapping[SessionId, Session],
        runtime: Runtime | None = None,
    ) -> None:
        self._sessions = sessions
        self._runtime = runtime
        self._room: MailRoom | None = None

    def _mail(self, what: str) -> MailRoom:
        runtime = self._runtime
        store = pg_store(None if runtime is None else runtime.persistence, what)
        if self._room is None or self._room.store is not store:
            assert runtime is not None
            room = self._room = MailRoom(runtime.agents, store)
            runtime.events.on(
                "agent/disposed", lambda payload: room.forget(payload.agent.id)
            )
        return self._room

    async def followup(self, session_id: str, message: UserMessage | str) -> str:
        """Mail ``message`` to ``session_id`` as a follow-up (next turn); its message id.

        Returns once the mail is durable (a row of the store's mailbox, notified).
        The process holding the session's lease delivers it into the inbox exactly
        once, in one transaction with the inbox splice, whether or not it runs
        :meth:`Runtime.serve` (a runtime delivers the mail of every agent it holds
        on notification and polls every ``poll_s``); when the session's agent is
        live in this runtime that happens before this returns. A session not
        stored yet is created on its first mail by a worker (:meth:`Runtime.serve`).
        A string is sent as ``user_message(text)``.

        Example::

            mid = await runtime.sessions.followup("support-42", "hello")
            result = await runtime.sessions.wait("support-42", mid)

        Raises:
            PersistenceNotConfiguredError: the runtime's store is not the
                PostgreSQL one (names it).
            InvalidSessionIdError: the id cannot be stored.
            TypeError: ``message`` is neither a :class:`UserMessage` nor a str.
            ConnectionError: the server cannot be reached.
        """
        return await self._post(session_id, message, "followup")

    async def steer(self, session_id: str, message: UserMessage | str) -> str:
        """Mail ``message`` to ``session_id`` as steering input (next step); its message id.

        As :meth:`followup`, delivered with ``agent.steer``.

        Raises:
            PersistenceNotConfiguredError: as :meth:`followup`.
            InvalidSessionIdError: as :meth:`followup`.
            TypeError: as :meth:`followup`.
            ConnectionError: as :meth:`followup`.
        """
        return await self._post(session_id, message, "steer")

    async def cancel(
        self,
        session_id: str,
        cause: CancelCause | None = None,
        *,
        keep_inbox: bool = False,
    ) -> None:
        """Mail a cancel to ``session_id``: its running turn ends ``Aborted(cause)``.

        As :meth:`followup`, delivered with ``agent.cancel(cause,
        keep_inbox=keep_inbox)`` by whichever process holds the session (the
        default cause is :class:`UserCancel`). Mail is delivered in the order it
        was posted, so a cancel never overtakes the messages mailed before it.

        Example::

            await runtime.sessions.cancel("support-42", dsh.HookCancel("timeout"))

        Raises:
            PersistenceNotConfiguredError: as :meth:`followup`.
            InvalidSessionIdError: as :meth:`followup`.
            TypeError: ``cause`` is not a :class:`CancelCause`.
            ConnectionError: as :meth:`followup`.
        """
        room = self._mail("runtime.sessions.cancel()")
        chosen = UserCancel() if cause is None else cause
        if not isinstance(chosen, CancelCause):
            raise TypeError(f"cause must be a CancelCause, got {type(chosen).__name__}")
        await room.store.post_mail(
            session_id, "cancel", encode_cancel(chosen, keep_inbox)
        )
        await room.deliver(session_id)

    async def wait(
        self, session_id: str, message_id: str, *, check: bool = True
    ) -> TurnResult:
        """Wait for the turn that claimed ``message_id`` in ``session_id`` to end; its result.

        Works from any process: it reads the session's stored log as it grows,
        woken by the store's turn-end notifications and polling every
        ``poll_s`` (a lost notification only delays it). Returns once that
        turn's ``turn/end`` is stored, with the :class:`TurnResult` ``Agent.run``
        gives. A message removed from the inbox before any turn claimed it (a
        cancel that clears the inbox) gives ``turn=None`` and
        ``Aborted(UserCancel())``. Cancelling the wait changes nothing.

        Example::

            result = await runtime.sessions.wait("support-42", mid, check=False)

        Raises:
            TurnFailedError: ``check`` and the turn errored or was aborted.
            PersistenceNotConfiguredError: as :meth:`followup`.
            SessionCorruptError: a stored row is not a valid event.
            ConnectionError: the server cannot be reached.
        """
        room = self._mail("runtime.sessions.wait()")
        return await room.wait(session_id, message_id, check=check)

    async def _post(
        self, session_id: str, message: UserMessage | str, kind: str
    ) -> str:
        room = self._mail(f"runtime.sessions.{kind}()")
        if isinstance(message, str):
            message = user_message(message)
        given: object = message
        if not isinstance(given, UserMessage):
            raise TypeError(
                f"{kind}() takes a UserMessage or a str, got {type(given).__name__}"
            )
        body = json.dumps(to_json(message))
        await room.store.post_mail(session_id, kind, body, message.id)
        await room.deliver(session_id)
        return message.id

    def get(self, session_id: str) -> Session | None:
        """The live session ``session_id``, or ``None``."""
        return self._sessions.get(SessionId(session_id))

    def list(self) -> list[Session]:
        """Live sessions in creation order."""
        return list(self._sessions.values())
