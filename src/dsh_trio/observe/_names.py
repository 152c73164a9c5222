"""The names the spans and metrics carry, and the words their values take.

OpenTelemetry GenAI semantic conventions (1.37 to 1.41), and the library's own
``dsh.*`` attributes.
"""

from __future__ import annotations

from typing import Final

from ..values import Aborted, Blocked, Completed, Errored, Interrupted, MaxTokens

__all__ = [
    "AGENT_ID",
    "AGENT_NAME",
    "ATTEMPT",
    "CANCEL_CAUSE",
    "DURATION_BUCKETS",
    "END_REASON",
    "END_REASONS",
    "ERROR_TYPE",
    "FINISH_REASONS",
    "FINISH_WORDS",
    "INPUT_MESSAGES",
    "INPUT_TOKENS",
    "OPERATION",
    "OUTPUT_MESSAGES",
    "OUTPUT_TOKENS",
    "PROVIDER",
    "REQUEST_MODEL",
    "TOKEN_BUCKETS",
    "TOKEN_TYPE",
    "TOOL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_NAME",
    "TOOL_RESULT",
    "TOOL_TYPE",
    "TURN",
]

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
AGENT_ID: Final = "gen_ai.agent.id"
AGENT_NAME: Final = "gen_ai.agent.name"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_RESULT: Final = "gen_ai.tool.call.result"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
TOKEN_TYPE: Final = "gen_ai.token.type"
ERROR_TYPE: Final = "error.type"
TURN: Final = "dsh.turn"
END_REASON: Final = "dsh.turn.end_reason"
CANCEL_CAUSE: Final = "dsh.cancel.cause"
ATTEMPT: Final = "dsh.attempt"

#: ``dsh.turn.end_reason`` of each ``turn/end`` reason class.
END_REASONS: Final[dict[type, str]] = {
    Completed: "completed",
    MaxTokens: "max_tokens",
    Blocked: "blocked",
    Aborted: "aborted",
    Errored: "errored",
    Interrupted: "interrupted",
}
#: ``gen_ai.response.finish_reasons`` of each finish kind (the conventions' words).
FINISH_WORDS: Final[dict[str, tuple[str, ...]]] = {
    "stop": ("stop",),
    "tool-calls": ("tool_call",),
    "max-tokens": ("length",),
    "error": ("error",),
    "aborted": ("error",),
}
#: The bucket boundaries the conventions advise for the two histograms.
TOKEN_BUCKETS: Final = tuple(float(4**k) for k in range(14))
DURATION_BUCKETS: Final = tuple(0.01 * 2**k for k in range(14))
