"""Chat with any OpenAI-compatible endpoint, one turn per line of standard input.

    DEEPSEEK_API_KEY=... python examples/chat_endpoint.py \\
        --base-url https://api.deepseek.com --model deepseek-flash

Each reply streams to standard output as it arrives (``agent.stream``); a turn that
fails or is cancelled prints one line saying how it ended and the chat goes on.
Reading a line blocks a worker thread, never the trio loop.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable

import trio

import dsh_trio as dsh

ReadLine = Callable[[], Awaitable[str | None]]
Write = Callable[[str], None]


async def chat(
    adapter: dsh.ModelAdapter, model: str, read_line: ReadLine, write: Write
) -> int:
    """Run turns until ``read_line`` returns ``None``; return how many completed."""
    completed = 0
    async with dsh.open_runtime(
        models={"endpoint": adapter}, system_prompt="Be brief."
    ) as runtime:
        options = dsh.AgentOptions(provider="endpoint", model=model)
        async with runtime.agents.open(options=options) as agent:
            while (line := await read_line()) is not None:
                if not line.strip():
                    continue
                try:
                    async with agent.stream(dsh.user_message(line)) as turn:
                        async for delta in turn.text():
                            write(delta)
                        result = await turn.result()
                except dsh.TurnFailedError as failed:
                    result = failed.result
                write("\n")
                if isinstance(result.reason, dsh.Completed):
                    completed += 1
                else:
                    write(f"[turn {result.turn} ended: {result.reason}]\n")
    return completed


async def _stdin_line() -> str | None:
    line = await trio.to_thread.run_sync(sys.stdin.readline)
    return line.rstrip("\n") if line else None


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key-env", default="DEEPSEEK_API_KEY")
    args = parser.parse_args(argv)
    adapter = dsh.OpenAICompatibleAdapter(
        args.base_url, api_key=os.environ.get(args.api_key_env)
    )
    trio.run(chat, adapter, args.model, _stdin_line, _write)


if __name__ == "__main__":
    main()
