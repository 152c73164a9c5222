"""Tools: the ``@tool`` decorator, tool values and the registry that runs calls."""

from ._registry import ToolRegistry as ToolRegistry
from ._tool import (
    Tool as Tool,
    ToolContext as ToolContext,
    ToolResult as ToolResult,
    tool as tool,
)

__all__ = ["tool", "Tool", "ToolContext", "ToolResult", "ToolRegistry"]
