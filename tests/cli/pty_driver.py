"""``dsh-trio`` for the terminal tests, with a fake OpenAI-compatible server.

Run as a script: the arguments are ``dsh-trio``'s. ``--base-url`` routes reach a
fake adapter that replies ``reply from MODEL via URL``, so no network is used. With
``DSH_TEST_FAIL_ONCE`` set, the first request streams ``Alpha `` and then fails
(retryable); the retry replies ``Alpha beta gamma``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncGenerator

import trio

from dsh_trio.cli import _config, main
from dsh_trio.errors import LlmError
from dsh_trio.llm import ModelRequest
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    StreamChunk,
    TextBlock,
    TextDelta,
    Usage,
)


class FakeServer:
    requests = 0

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        self.url = url

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        FakeServer.requests += 1
        await trio.lowlevel.checkpoint()
        if os.environ.get("DSH_TEST_FAIL_ONCE"):
            yield BlockStart(0, "text")
            yield TextDelta(0, "Alpha ")
            if FakeServer.requests == 1:
                raise LlmError(LlmFailure("connection reset", "SERVER"))
            yield TextDelta(0, "beta gamma")
            text = "Alpha beta gamma"
        else:
            text = f"reply from {request.model} via {self.url}"
            yield BlockStart(0, "text")
            yield TextDelta(0, text)
        yield BlockEnd(0, TextBlock(text))
        yield Usage(3, 4)
        yield Finish(FinishReason("stop"))


setattr(_config, "OpenAICompatibleAdapter", FakeServer)  # noqa: B010

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
