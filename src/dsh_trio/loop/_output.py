"""Typed output: the ``final_result`` tool of one turn, and the value it produced.

``agent.run(message, output_type=T)`` (and ``stream``) attach a :class:`TurnOutput` to
the message they follow. When a turn claims that message, its driver offers the model
the runtime's tools plus ``final_result`` (whose arguments schema is ``T``'s, see
:mod:`._output_schema`) for every step of that turn, and runs each step's tool calls
through the :class:`TurnOutput`: ``final_result`` calls are answered here, every other
call by the runtime's tool executor, in model order. A call whose arguments structure
and validate gets a success result and concludes the turn after its tool round; an
invalid one gets the validation problems as its error result. A reply that calls no
tool at all gets a reminder (a next-step user message) instead. Once the model has
failed ``output_retries + 1`` times, the turn ends ``Errored`` with code
``OUTPUT_INVALID``.

What the session log keeps: the ``final_result`` calls and their results are ordinary
``tool/call`` / ``tool/result`` events (the tool's schema is in the request header of
the turn's requests, as any tool's), and a reminder is an ordinary ``user/message``
(its source ``PluginSource("dsh_trio.output")``), so a resumed session's history is
coherent. The output type itself, the retry budget and the structured value are not
persisted: a resumed agent's turns offer no ``final_result`` unless asked again, and the
value of a past turn can be re-read from its call's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import trio

from ..errors import LlmError, ToolDefinitionError
from ..values import (
    InboxTarget,
    JsonValue,
    LlmFailure,
    PluginSource,
    TextBlock,
    ToolCallBlock,
    ToolCallData,
    ToolErrorInfo,
    ToolResultBlock,
    ToolResultData,
    ToolSource,
    UserMessage,
    utf8_ok,
)
from ._ids import new_message_id
from ._output_schema import OutputSchema, output_schema, read_output

if TYPE_CHECKING:
    from ..session import Session
    from ._agent import Agent
    from ._services import ToolExecutor
    from ._signal import CancelSignal

__all__ = [
    "FINAL_RESULT",
    "OUTPUT_INVALID",
    "OUTPUT_PLUGIN",
    "TurnOutput",
    "typed_output",
]

#: The name of the tool a typed-output turn offers.
FINAL_RESULT: Final = "final_result"
#: The failure code of a turn whose model gave no valid final result.
OUTPUT_INVALID: Final = "OUTPUT_INVALID"
#: The plugin of the reminder sent after a reply that called no tool.
OUTPUT_PLUGIN: Final = "dsh_trio.output"

_INVALID_ARGS: Final = ToolErrorInfo("ToolArgumentsError", "INVALID_ARGS")
_ACCEPTED: Final = "Final result accepted."
_ALREADY: Final = (
    "A final result was already accepted in this turn; this call changed nothing."
)
_REMINDER: Final = (
    "Your reply did not call the final_result tool. Give the final result of this "
    "turn by calling final_result with arguments that match its schema."
)


def _tool_name(schema: JsonValue) -> str:
    name = schema.get("name") if isinstance(schema, dict) else None
    return name if isinstance(name, str) else ""


def _loggable(text: str) -> str:
    if utf8_ok(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _refuse_clash(schemas: Sequence[JsonValue], agent: Agent, what: str) -> None:
    for schema in schemas:
        if _tool_name(schema) == FINAL_RESULT:
            raise ToolDefinitionError(
                f'agent "{agent.id}" offers a tool named "{FINAL_RESULT}", and typed '
                f"output (output_type={what}) offers its own tool of that name: "
                "rename or unregister that tool"
            )


class TurnOutput:
    """The typed output one ``run``/``stream`` message asks of the turn that claims it.

    Runtime use only. Made at the call (:func:`typed_output`), armed on the turn's
    driver when a turn claims the message, and used by that turn as its tool executor
    (a :class:`ToolExecutor`): the runtime's tools plus ``final_result``.
    """

    __slots__ = (
        "_base",
        "_below",
        "_merged",
        "misses",
        "problems",
        "retries",
        "schema",
        "settled",
        "turn",
        "value",
    )

    def __init__(self, schema: OutputSchema, retries: int, base: ToolExecutor) -> None:
        self.schema = schema
        self.retries = retries
        self._base = base
        #: The turn that claimed the message (set on the claim).
        self.turn: int | None = None
        #: The structured value of the accepted call (``None`` until then).
        self.value: object = None
        #: Whether a call was accepted.
        self.settled = False
        #: Failed tries so far: invalid calls and replies that called no tool.
        self.misses = 0
        #: The problems of the last failed try.
        self.problems: Sequence[str] = ()
        self._below: tuple[JsonValue, ...] | None = None
        self._merged: tuple[JsonValue, ...] = ()

    # ------------------------------------------------------------------ the executor

    def schemas(self, agent: Agent) -> tuple[JsonValue, ...]:
        """The runtime's tool schemas for ``agent`` and ``final_result``'s, by name.

        Raises:
            ToolDefinitionError: a tool named ``final_result`` was registered since
                the call (the turn ends ``Errored``).
        """
        below = self._base.schemas(agent)
        if below is not self._below:
            _refuse_clash(below, agent, self.schema.type_name)
            tool: JsonValue = {
                "name": FINAL_RESULT,
                "description": self.schema.description,
                "parameters": self.schema.parameters,
            }
            self._merged = tuple(sorted((*below, tool), key=_tool_name))
            self._below = below
        return self._merged

    async def execute(
        self,
        agent: Agent,
        *,
        turn: int,
        step: int,
        calls: Sequence[ToolCallBlock],
        signal: CancelSignal,
    ) -> bool:
        """Run one assistant message's calls: ``final_result`` here, the rest as usual.

        Calls are answered in model order; each run of other calls goes to the
        runtime's executor as one batch. Returns whether the turn is concluded (a
        final result was accepted, or another tool concluded it).

        Raises:
            LlmError: code ``OUTPUT_INVALID``, after the round in which the model
                used up its tries (every call of the message has its result).
            trio.Cancelled: the turn was cancelled (calls not yet answered are
                answered by the driver).
        """
        concluded = False
        i, n = 0, len(calls)
        while i < n:
            block = calls[i]
            if block.name == FINAL_RESULT:
                if signal.cause is not None:
                    break  # the checkpoint below raises; the driver answers the rest
                concluded = self._answer(agent.session, turn, step, block) or concluded
                i += 1
                continue
            j = i + 1
            while j < n and calls[j].name != FINAL_RESULT:
                j += 1
            batch = calls[i:j]
            if await self._base.execute(
                agent, turn=turn, step=step, calls=batch, signal=signal
            ):
                concluded = True
            i = j
        await trio.lowlevel.checkpoint()
        if not self.settled and self.misses > self.retries:
            raise self._failure()
        return concluded

    def _answer(
        self, session: Session, turn: int, step: int, block: ToolCallBlock
    ) -> bool:
        """Append one ``final_result`` call and its result; whether it was accepted."""
        call = session.append(
            "tool/call",
            ToolCallData(
                turn=turn,
                step=step,
                call_id=block.id,
                name=block.name,
                arguments=_loggable(block.arguments),
            ),
        )
        error: ToolErrorInfo | None = None
        if self.settled:
            text = _ALREADY
        else:
            value, problems = read_output(self.schema, block.arguments)
            if problems:
                self.misses += 1
                self.problems = problems
                text = self._problem_text(problems)
                error = _INVALID_ARGS
            else:
                self.value = value
                self.settled = True
                text = _ACCEPTED
        session.append(
            "tool/result",
            ToolResultData(
                turn=turn,
                step=step,
                message=UserMessage(
                    id=new_message_id(),
                    content=(
                        ToolResultBlock(
                            block.id, (TextBlock(text),), is_error=error is not None
                        ),
                    ),
                    source=ToolSource(block.id),
                ),
                error=error,
            ),
            surface_op="append",
            source_event_seqs=(call.seq,),
        )
        return error is None

    def _problem_text(self, problems: Sequence[str]) -> str:
        lines = "\n".join(f"- {p}" for p in problems)
        left = self.retries + 1 - self.misses
        then = (
            f"Call {FINAL_RESULT} again with corrected arguments."
            if left > 0
            else "No tries are left."
        )
        return (
            f"Error: invalid arguments for tool {FINAL_RESULT!r} (output type "
            f"{self.schema.type_name}):\n{lines}\n{then}"
        )

    # ------------------------------------------------------------------ the driver's

    def missed(self, agent: Agent) -> None:
        """A step's reply called no tool: a failed try, unless a result was accepted.

        With tries left, queues the reminder on next-step (so the turn takes another
        step); otherwise raises.

        Raises:
            LlmError: code ``OUTPUT_INVALID``: no tries are left.
        """
        if self.settled:
            return
        self.misses += 1
        self.problems = (f"the reply did not call {FINAL_RESULT}",)
        if self.misses > self.retries:
            raise self._failure()
        reminder = UserMessage(
            id=new_message_id(),
            content=(TextBlock(_REMINDER),),
            source=PluginSource(OUTPUT_PLUGIN, form="reminder"),
        )
        agent.inbox.append(InboxTarget.NEXT_STEP, reminder)

    def _failure(self) -> LlmError:
        tries = self.misses
        problems = self.problems
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        return LlmError(
            LlmFailure(
                message=(
                    f"the model gave no valid {self.schema.type_name} final result in "
                    f"{tries} {'try' if tries == 1 else 'tries'}: "
                    f"{problems[0] if problems else 'no final_result call'}{more}"
                ),
                code=OUTPUT_INVALID,
            )
        )


def typed_output(
    agent: Agent, tools: ToolExecutor, output_type: object, output_retries: int
) -> TurnOutput:
    """The :class:`TurnOutput` of a ``run``/``stream`` call (checked at the call).

    Raises:
        ToolDefinitionError: ``output_type`` cannot be described or structured, or
            ``agent`` already offers a tool named ``final_result``.
        TypeError: ``output_retries`` is not an int.
        ValueError: ``output_retries`` is negative.
    """
    retries: object = output_retries
    if retries.__class__ is not int:
        raise TypeError(
            f"output_retries must be an int (how many more tries after an invalid "
            f"final result), got {output_retries!r}"
        )
    if output_retries < 0:
        raise ValueError(f"output_retries must be 0 or more, got {output_retries!r}")
    schema = output_schema(output_type)
    _refuse_clash(tools.schemas(agent), agent, schema.type_name)
    return TurnOutput(schema, output_retries, tools)
