"""A parent agent that delegates to child agents through a tool.

The ``delegate`` tool opens a child agent owned by the calling agent
(``parent=ctx.agent``), runs one turn on it and returns the child's answer as the tool
result. The calls are parallel-safe, so two delegations of one step run at once, each
child in the runtime's nursery; cancelling the parent's turn cancels the children's
turns with it (the tool body sees ``trio.Cancelled``), and a child is disposed when its
``async with`` block ends.
"""

from __future__ import annotations

import trio

import dsh_trio as dsh
from dsh_trio.testing import ScriptedModel, custom, reply, tool_calls


def make_delegate(runtime: dsh.Runtime) -> dsh.Tool:
    @dsh.tool(parallel_safe=True)
    async def delegate(ctx: dsh.ToolContext, task: str) -> str:
        """Hand a self-contained task to a helper agent and return its answer."""
        options = dsh.AgentOptions(provider="worker", model="worker")
        async with runtime.agents.open(parent=ctx.agent, options=options) as child:
            result = await child.run(dsh.user_message(task))
        return result.text

    return delegate


async def worker_answer(request: dsh.ModelRequest):  # type: ignore[no-untyped-def]
    """The workers' offline model: it answers with the task it was given."""
    task = dsh.text_of(request.messages[-1])
    text = f"done: {task}"
    yield dsh.BlockStart(0, "text")
    yield dsh.TextDelta(0, text)
    yield dsh.BlockEnd(0, dsh.TextBlock(text))
    yield dsh.Finish(dsh.FinishReason("stop"))


async def main() -> str:
    planner = ScriptedModel(
        tool_calls(
            ("c1", "delegate", '{"task": "summarise chapter 1"}'),
            ("c2", "delegate", '{"task": "summarise chapter 2"}'),
        ),
        reply("Both chapters are summarised."),
    )
    workers = ScriptedModel(default=custom(worker_answer))
    async with dsh.open_runtime(
        models={"planner": planner, "worker": workers}
    ) as runtime:
        runtime.tools.register(make_delegate(runtime))
        options = dsh.AgentOptions(provider="planner", model="planner")
        async with runtime.agents.open(options=options) as agent:
            result = await agent.run(dsh.user_message("Summarise the book."))
    # The planner's second request carries both tool results, in call order.
    results = [
        "".join(part.text for part in block.content if isinstance(part, dsh.TextBlock))
        for message in planner.requests[1].messages
        for block in message.content
        if isinstance(block, dsh.ToolResultBlock)
    ]
    print(f"{len(workers.requests)} child turns: {results}")  # noqa: T201
    return result.text


if __name__ == "__main__":
    print(trio.run(main))  # noqa: T201
