"""What ``dsh-trio chat`` prints as a session runs: streamed replies and notices.

:class:`_ChatView` holds the :class:`~._chat.ChatApp` listeners that render the
``agent/assistant-stream`` frames (a retried attempt's text is not repeated) and
report turn outcomes, retries, tool calls and results, and token usage. The
greeting and the farewell (with the resume hint) are here too.
"""

from __future__ import annotations

import contextlib
from typing import TextIO

from ..events import (
    AssistantStream,
    SessionEventAppended,
    StreamChunkFrame,
    StreamEndFrame,
    StreamStartFrame,
)
from ..loop import Agent
from ..values import (
    Aborted,
    AssistantMessageData,
    BlockEnd,
    Completed,
    Errored,
    ReasoningDelta,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolResultBlock,
    ToolResultData,
    TurnEnd,
    TurnEndReason,
    UserCancel,
)
from ._terminal import Console
from ._transcript import describe_reason

__all__: list[str] = []


class _ChatView:
    """The output half of :class:`~._chat.ChatApp`: its stream and event listeners.

    The state it reads and writes has its slots here; ``ChatApp`` defines it (as
    attrs fields, which reuse these slots).
    """

    __slots__ = (
        "_attempt",
        "_attempt_text",
        "_console",
        "_interactive",
        "_last_reason",
        "_printed",
        "_retry_pending",
        "_show_usage",
        "_skip",
        "_tool_names",
        "_total_usage",
        "_turn_usage",
    )

    _console: Console
    _interactive: bool
    _show_usage: bool
    _last_reason: TurnEndReason | None
    _attempt: tuple[str, int] | None
    _printed: tuple[str, int] | None
    _attempt_text: str
    _retry_pending: bool
    _skip: str | None
    _tool_names: dict[str, str]
    _turn_usage: list[int]
    _total_usage: list[int]

    def _on_frame(self, payload: AssistantStream) -> None:
        frame = payload.frame
        if isinstance(frame, StreamChunkFrame):
            chunk = frame.chunk
            if isinstance(chunk, TextDelta):
                self._on_text(chunk.text)
            elif isinstance(chunk, ReasoningDelta):
                if self._interactive:
                    self._console.write(chunk.text, dim=True)
            elif isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock):
                self._tool_names[chunk.block.id] = chunk.block.name
                self._console.notice(
                    f"[tool call {chunk.block.name}({chunk.block.arguments})]"
                )
        elif isinstance(frame, StreamStartFrame):
            previous = self._attempt
            self._attempt = (frame.attempt_id, frame.turn)
            if (
                self._retry_pending
                and previous is not None
                and previous[1] == frame.turn
                and self._printed == previous
            ):
                # A retry of the attempt on screen: its partial text is not repeated.
                self._skip = self._attempt_text
                self._printed = self._attempt
            else:
                self._skip = None
            self._retry_pending = False
            self._attempt_text = ""
        elif isinstance(frame, StreamEndFrame):
            self._console.end_line()

    def _on_text(self, text: str) -> None:
        self._attempt_text += text
        skip = self._skip
        if skip is not None:
            if skip.startswith(text):
                self._skip = skip[len(text) :]
                return
            self._skip = None
            if text.startswith(skip):
                text = text[len(skip) :]
            else:
                self._console.notice("[the retried reply differs; here it is in full]")
                text = self._attempt_text
        self._console.end_dimmed()
        self._separate_replies()
        self._console.write(text)

    def _separate_replies(self) -> None:
        # A blank line tells one reply from the next: between the steps of a turn
        # (steering), and between turns when no prompt separates them.
        previous, current = self._printed, self._attempt
        if current is None or previous == current:
            return
        if previous is not None and (
            not self._interactive or previous[1] == current[1]
        ):
            self._console.blank_line()
        self._printed = current

    def _on_session_event(self, payload: SessionEventAppended) -> None:
        event = payload.event
        data = event.data
        if isinstance(data, TurnEnd):
            self._last_reason = data.reason
            self._report_turn_end(data.reason)
            self._report_usage()
        elif isinstance(data, AssistantMessageData):
            if data.usage is not None:
                for i, n in enumerate(
                    (data.usage.input_tokens, data.usage.output_tokens)
                ):
                    self._turn_usage[i] += n
                    self._total_usage[i] += n
        elif isinstance(data, ToolResultData):
            self._report_tool_result(data)
        elif event.type == "llm/retry" and isinstance(data, dict):
            failure = data.get("failure")
            message, code = (
                (failure.get("message"), failure.get("code"))
                if isinstance(failure, dict)
                else (None, None)
            )
            delay = data.get("delayMs")
            wait = (
                f"{delay / 1000:.1f} s"
                if isinstance(delay, (int, float))
                else "a moment"
            )
            retry = f"{data.get('retry')}/{data.get('maxRetries')}"
            kept = (
                "; the partial reply above is not repeated"
                if self._attempt_text and self._printed == self._attempt
                else ""
            )
            self._retry_pending = True
            self._console.notice(
                f"[request failed: {message} [{code}]; retry {retry} in {wait}{kept}]"
            )

    def _report_usage(self) -> None:
        tokens_in, tokens_out = self._turn_usage
        self._turn_usage[:] = [0, 0]
        if self._show_usage and (tokens_in or tokens_out):
            total_in, total_out = self._total_usage
            self._console.notice(
                f"[tokens: {tokens_in} in, {tokens_out} out; session: {total_in} in, "
                f"{total_out} out]"
            )

    def _report_tool_result(self, data: ToolResultData) -> None:
        for block in data.message.content:
            if not isinstance(block, ToolResultBlock):
                continue
            name = self._tool_names.get(block.tool_call_id, "tool")
            text = "".join(b.text for b in block.content if isinstance(b, TextBlock))
            status = " (error)" if block.is_error else ""
            self._console.notice(f"[{name} result{status}: {_snippet(text, 200)}]")

    def _report_turn_end(self, reason: TurnEndReason) -> None:
        if isinstance(reason, Completed):
            return
        if isinstance(reason, Aborted) and isinstance(reason.reason, UserCancel):
            self._console.notice("[cancelled]")
        elif isinstance(reason, Errored):
            self._console.notice(f"error: {reason.error.message} [{reason.error.code}]")
        else:
            self._console.notice(f"[turn {describe_reason(reason)}]")


def _snippet(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def _greet(
    agent: Agent, label: str, *, resumed: bool, interactive: bool, stderr: TextIO
) -> None:
    turns = agent.session.last_turn
    so_far = f"{turns} turn{'' if turns == 1 else 's'} so far"
    what = (
        f"resumed session {agent.id} ({so_far})" if resumed else f"session {agent.id}"
    )
    print(f"{what} with {label}", file=stderr)
    if interactive:
        print(
            "Type a message and press Enter; /help lists the commands. "
            "Ctrl-C cancels a reply; Ctrl-D or /exit quits.",
            file=stderr,
        )


def _farewell(
    agent: Agent, log_path: str | None, resume_hint: str, stderr: TextIO
) -> None:
    if agent.session.next_seq == 0:
        text = f"session {agent.id} is empty; nothing was saved"
    else:
        text = (
            f"session {agent.id} saved in {log_path or '(not stored)'}\n"
            f"resume with: dsh-trio chat --resume {agent.id}{resume_hint}"
        )
    with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
        print(text, file=stderr, flush=True)
