"""Testing support: a scripted model adapter and its script helpers."""

from ._scripted import (
    Gate as Gate,
    Script as Script,
    ScriptedModel as ScriptedModel,
    chunks as chunks,
    custom as custom,
    fail as fail,
    gate as gate,
    hang as hang,
    max_tokens as max_tokens,
    reply as reply,
    tool_calls as tool_calls,
)

__all__ = [
    "ScriptedModel",
    "Script",
    "Gate",
    "reply",
    "tool_calls",
    "max_tokens",
    "fail",
    "hang",
    "gate",
    "chunks",
    "custom",
]
